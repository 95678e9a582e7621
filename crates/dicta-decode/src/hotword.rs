//! Hotwords: words whose appearance (or partial appearance) in a beam earns a bonus, as in
//! pyctcdecode's `HotwordScorer`.

/// A hotword and its weight (bonus in natural-log score units per occurrence).
#[derive(Debug, Clone, PartialEq)]
pub struct Hotword {
    /// The word (a phrase is split into words, each a hotword of the same weight).
    pub word: String,
    /// Bonus per occurrence.
    pub weight: f32,
}

/// pyctcdecode's default hotword weight.
pub const DEFAULT_HOTWORD_WEIGHT: f32 = 10.0;

/// Hotword unigrams with their weights; answers full-word and partial-word bonuses.
#[derive(Debug, Clone, Default)]
pub struct HotwordScorer {
    /// (word, weight, length in chars), sorted by length (stable), as pyctcdecode's trie.
    words: Vec<(String, f64, usize)>,
}

impl HotwordScorer {
    /// Builds the scorer; phrases are split on whitespace and empty entries dropped.
    pub fn new(hotwords: &[Hotword]) -> Self {
        let mut words: Vec<(String, f64, usize)> = Vec::new();
        for h in hotwords {
            for w in h.word.split_whitespace() {
                words.push((w.to_string(), f64::from(h.weight), w.chars().count()));
            }
        }
        words.sort_by_key(|w| w.2);
        Self { words }
    }

    /// True without hotwords.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Bonus for one complete word (0 when it is not a hotword).
    pub fn word_bonus(&self, word: &str) -> f64 {
        self.words.iter().find(|w| w.0 == word).map_or(0.0, |w| w.1)
    }

    /// Whether `partial` is a prefix of (or equal to) some hotword.
    pub fn has_prefix(&self, partial: &str) -> bool {
        self.words.iter().any(|w| w.0.starts_with(partial))
    }

    /// Partial-word bonus: `weight * len(partial) / len(shortest hotword starting with it)`,
    /// 0 when no hotword starts with `partial`.
    pub fn partial_bonus(&self, partial: &str) -> f64 {
        match self.words.iter().find(|w| w.0.starts_with(partial)) {
            Some((_, weight, len)) => weight * partial.chars().count() as f64 / *len as f64,
            None => 0.0,
        }
    }
}
