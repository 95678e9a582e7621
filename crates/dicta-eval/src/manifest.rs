//! Manifest-driven evaluation: read a JSONL manifest of audio items with reference texts and
//! score hypotheses against them after normalization.
//!
//! The manifest format is the one of `shared/data/manifest.jsonl`: one JSON object per line with
//! at least `id` and `audio`; `text` (the reference) and `language` are optional. Unknown fields
//! are ignored.

use std::path::Path;

use dicta_core::{Error, Result};
use serde::Deserialize;

use crate::{char_errors, word_errors, BasicTextNormalizer, EnglishTextNormalizer, ErrorCounts};

/// One manifest line.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ManifestItem {
    /// Stable item id.
    pub id: String,
    /// Audio path relative to the manifest's folder.
    pub audio: String,
    /// 16 kHz WAV conversion, relative to the manifest's folder, when present.
    #[serde(default)]
    pub audio_16k_wav: Option<String>,
    /// Reference transcript, when the item has one.
    #[serde(default)]
    pub text: Option<String>,
    /// Language code ("en", "fr", ...; mixed items use e.g. "en+de").
    #[serde(default)]
    pub language: Option<String>,
    /// Category such as "short_utterance" or "long_form".
    #[serde(default)]
    pub category: Option<String>,
    /// Duration in seconds.
    #[serde(default)]
    pub duration_s: Option<f64>,
}

/// Parses JSONL manifest text; blank lines are skipped. Errors name the 1-based line.
pub fn parse_manifest(text: &str) -> Result<Vec<ManifestItem>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| Error::invalid_input(format!("manifest line {}: {e}", i + 1)))
        })
        .collect()
}

/// Reads and parses a JSONL manifest file.
pub fn load_manifest(path: &Path) -> Result<Vec<ManifestItem>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::from(e).context(path.display()))?;
    parse_manifest(&text).map_err(|e| e.context(path.display()))
}

/// Corpus word and character counts over normalized (reference, hypothesis) pairs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EvalSummary {
    /// Number of scored pairs.
    pub items: usize,
    /// Summed word-level counts.
    pub words: ErrorCounts,
    /// Summed character-level counts.
    pub chars: ErrorCounts,
}

impl EvalSummary {
    /// Corpus WER: total word errors / total reference words.
    pub fn wer(&self) -> f64 {
        self.words.rate()
    }

    /// Corpus CER: total character errors / total reference characters.
    pub fn cer(&self) -> f64 {
        self.chars.rate()
    }
}

/// Normalizers chosen per item language: Whisper's English normalizer for English, the basic
/// one (diacritics removed, as Whisper's evaluation does) for everything else.
pub struct Scorer {
    english: EnglishTextNormalizer,
    basic: BasicTextNormalizer,
    summary: EvalSummary,
}

impl Scorer {
    /// A scorer with empty totals.
    pub fn new() -> Self {
        Self {
            english: EnglishTextNormalizer::new(),
            basic: BasicTextNormalizer::new(true, false),
            summary: EvalSummary::default(),
        }
    }

    /// Normalizes `text` for `language` ("en" or a code starting with "en" uses the English rules).
    pub fn normalize(&self, text: &str, language: Option<&str>) -> String {
        match language {
            Some(l) if l == "en" || l.starts_with("en-") || l.starts_with("en_") => {
                self.english.normalize(text)
            }
            _ => self.basic.normalize(text),
        }
    }

    /// Scores one pair after normalization, adds it to the totals and returns its counts
    /// (words, chars).
    pub fn add(
        &mut self,
        reference: &str,
        hypothesis: &str,
        language: Option<&str>,
    ) -> (ErrorCounts, ErrorCounts) {
        let r = self.normalize(reference, language);
        let h = self.normalize(hypothesis, language);
        let w = word_errors(&r, &h);
        let c = char_errors(&r, &h);
        self.summary.items += 1;
        self.summary.words.add(&w);
        self.summary.chars.add(&c);
        (w, c)
    }

    /// Totals so far.
    pub fn summary(&self) -> EvalSummary {
        self.summary
    }
}

impl Default for Scorer {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_and_reports_bad_ones() {
        let items = parse_manifest(
            "{\"id\":\"a\",\"audio\":\"a.wav\",\"text\":\"Hi\",\"language\":\"en\",\"x\":1}\n\n\
             {\"id\":\"b\",\"audio\":\"b.wav\"}\n",
        )
        .unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].text.as_deref(), Some("Hi"));
        assert_eq!(items[1].text, None);
        let err = parse_manifest("{\"id\":\"a\",\"audio\":\"a\"}\nnot json").unwrap_err();
        assert_eq!(err.kind, dicta_core::ErrorKind::InvalidInput);
        assert!(err.message.contains("line 2"), "{}", err.message);
    }

    #[test]
    fn scorer_normalizes_before_counting() {
        let mut s = Scorer::new();
        let (w, _) = s.add(
            "Mr. Smith paid twenty dollars.",
            "mister smith paid $20",
            Some("en"),
        );
        assert_eq!(w.errors(), 0);
        let (w, _) = s.add("Ça va?", "ca va", Some("fr"));
        assert_eq!(w.errors(), 0);
        let (w, _) = s.add("a b c d", "a x c", Some("en"));
        assert_eq!((w.substitutions, w.deletions), (1, 1));
        assert_eq!(s.summary().items, 3);
        assert!((s.summary().wer() - 2.0 / 10.0).abs() < 1e-12);
    }
}
