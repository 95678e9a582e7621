//! Word n-gram language models (ARPA back-off models) scored exactly as KenLM scores them.
//!
//! Storage is compact: unigrams are two `f32` arrays indexed by word id, and every higher order
//! is a sorted array of `u64` keys `(index of the (n-1)-gram prefix) << 32 | word id` with
//! parallel `f32` probability and back-off arrays, searched by binary search. No per-n-gram
//! allocation, no strings beyond the vocabulary.

mod arpa;
mod sphinx_bin;

use std::path::Path;

use dicta_core::{Error, Result};
use rustc_hash::FxHashMap;

pub use arpa::parse_arpa;
pub use sphinx_bin::parse_sphinx_bin;

/// Largest n-gram order supported (the state keeps `MAX_ORDER - 1` context words inline).
pub const MAX_ORDER: usize = 8;

/// log10 probability KenLM substitutes when an ARPA file has no `<unk>` unigram.
pub const MISSING_UNK_LOG10: f32 = -100.0;

/// One order (>= 2) of n-grams: keys sorted ascending, with parallel value arrays.
#[derive(Debug, Default)]
pub(crate) struct NgramTable {
    /// `prefix_index << 32 | word_id`, sorted, unique.
    pub(crate) keys: Vec<u64>,
    /// log10 probabilities.
    pub(crate) probs: Vec<f32>,
    /// log10 back-offs (empty for the highest order).
    pub(crate) backoffs: Vec<f32>,
}

impl NgramTable {
    #[inline]
    pub(crate) fn find(&self, prefix: u32, word: u32) -> Option<u32> {
        let key = (u64::from(prefix) << 32) | u64::from(word);
        self.keys.binary_search(&key).ok().map(|i| i as u32)
    }
}

/// A back-off n-gram language model over words, with log10 scores.
#[derive(Debug)]
pub struct NgramLm {
    pub(crate) order: usize,
    pub(crate) words: Vec<Box<str>>,
    pub(crate) index: FxHashMap<Box<str>, u32>,
    pub(crate) unk: u32,
    pub(crate) bos: u32,
    pub(crate) eos: u32,
    pub(crate) uni_prob: Vec<f32>,
    pub(crate) uni_backoff: Vec<f32>,
    /// `tables[k]` holds the n-grams of order `k + 2`.
    pub(crate) tables: Vec<NgramTable>,
}

/// The context an n-gram model conditions on: up to `order - 1` most recent words, most recent
/// first, stored as the indices of the context n-grams plus their back-offs (as KenLM's `State`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LmState {
    len: u8,
    /// `ctx[i]` is the index of the (i+1)-gram made of the i+1 most recent words.
    ctx: [u32; MAX_ORDER - 1],
    /// Back-off of `ctx[i]`.
    backoff: [f32; MAX_ORDER - 1],
}

impl LmState {
    /// The empty context (KenLM's `NullContextWrite`).
    pub fn null() -> Self {
        Self {
            len: 0,
            ctx: [0; MAX_ORDER - 1],
            backoff: [0.0; MAX_ORDER - 1],
        }
    }

    /// Number of context words that still matter for scoring.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// True for the empty context.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl NgramLm {
    /// Loads an ARPA file (plain text, or gzip when the name ends in `.gz`).
    pub fn from_arpa_path(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|e| Error::from(e).context(path.display()))?;
        let gz = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
        let result = if gz {
            parse_arpa(std::io::BufReader::with_capacity(
                1 << 20,
                flate2::read::MultiGzDecoder::new(file),
            ))
        } else {
            parse_arpa(std::io::BufReader::with_capacity(1 << 20, file))
        };
        result.map_err(|e| e.context(path.display()))
    }

    /// Loads a CMU Sphinx binary trie LM (`*.lm.bin`, "Trie Language Model"), e.g. the
    /// `en-us.lm.bin` that PyPI `pocketsphinx` ships.
    pub fn from_sphinx_bin_path(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| Error::from(e).context(path.display()))?;
        parse_sphinx_bin(&bytes).map_err(|e| e.context(path.display()))
    }

    /// Loads either format, by content: a Sphinx binary trie, else ARPA (plain or `.gz`).
    pub fn from_path(path: &Path) -> Result<Self> {
        let mut head = [0u8; 19];
        let is_bin = std::fs::File::open(path)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
            .is_ok()
            && &head == sphinx_bin::MAGIC;
        if is_bin {
            Self::from_sphinx_bin_path(path)
        } else {
            Self::from_arpa_path(path)
        }
    }

    /// Assembles a model from its parts, adding `<unk>` when missing (as KenLM does).
    pub(crate) fn from_parts(
        order: usize,
        mut words: Vec<Box<str>>,
        mut index: FxHashMap<Box<str>, u32>,
        mut uni_prob: Vec<f32>,
        mut uni_backoff: Vec<f32>,
        tables: Vec<NgramTable>,
    ) -> Result<Self> {
        let unk = match index.get("<unk>") {
            Some(&id) => id,
            None => {
                tracing::warn!(
                    "the LM has no <unk>; using log10 probability {MISSING_UNK_LOG10} as KenLM does"
                );
                let id = words.len() as u32;
                words.push("<unk>".into());
                index.insert("<unk>".into(), id);
                uni_prob.push(MISSING_UNK_LOG10);
                uni_backoff.push(0.0);
                id
            }
        };
        let need = |w: &str| {
            index.get(w).copied().ok_or_else(|| {
                Error::new(
                    dicta_core::ErrorKind::CorruptInput,
                    format!("the LM's 1-grams have no {w}"),
                )
            })
        };
        let bos = need("<s>")?;
        let eos = need("</s>")?;
        Ok(Self {
            order,
            words,
            index,
            unk,
            bos,
            eos,
            uni_prob,
            uni_backoff,
            tables,
        })
    }

    /// Number of n-grams of order `n` (1-based; 1-grams include an added `<unk>`).
    pub fn ngram_count(&self, n: usize) -> usize {
        match n {
            1 => self.words.len(),
            n if n >= 2 && n <= self.order => self.tables[n - 2].keys.len(),
            _ => 0,
        }
    }

    /// The n-gram order (3 for a trigram model).
    pub fn order(&self) -> usize {
        self.order
    }

    /// Number of words, including `<unk>` (added when the file lacks it, as KenLM does).
    pub fn vocab_size(&self) -> usize {
        self.words.len()
    }

    /// Word id of `word`, or `None` when it is not in the vocabulary.
    pub fn word_id(&self, word: &str) -> Option<u32> {
        self.index.get(word).copied()
    }

    /// Word id used for out-of-vocabulary words (`<unk>`).
    pub fn unk_id(&self) -> u32 {
        self.unk
    }

    /// Word id of `</s>`.
    pub fn eos_id(&self) -> u32 {
        self.eos
    }

    /// The word with id `id`.
    pub fn word(&self, id: u32) -> &str {
        &self.words[id as usize]
    }

    /// Whether `word` is a known word other than `<unk>` (KenLM's `word in model`).
    pub fn contains(&self, word: &str) -> bool {
        self.word_id(word).is_some_and(|id| id != self.unk)
    }

    /// All vocabulary words in id order.
    pub fn words(&self) -> impl Iterator<Item = &str> {
        self.words.iter().map(|w| &**w)
    }

    /// The sentence-start context `<s>` (KenLM's `BeginSentenceWrite`).
    pub fn begin_sentence(&self) -> LmState {
        let mut s = LmState::null();
        if self.order > 1 {
            s.len = 1;
            s.ctx[0] = self.bos;
            s.backoff[0] = self.uni_backoff[self.bos as usize];
        }
        s
    }

    /// log10 P(word | state), with back-off exactly as KenLM computes it (f32 sums in the same
    /// order), and the state after `word`. Out-of-vocabulary words use the `<unk>` id.
    pub fn score(&self, state: &LmState, word: u32, out: &mut LmState) -> f32 {
        let w = word as usize;
        let mut prob = self.uni_prob[w];
        let mut found = [0u32; MAX_ORDER - 1];
        let mut matched = 0usize;
        for (i, (&ctx, slot)) in state.ctx[..state.len()].iter().zip(&mut found).enumerate() {
            match self.tables[i].find(ctx, word) {
                Some(j) => {
                    prob = self.tables[i].probs[j as usize];
                    *slot = j;
                    matched = i + 1;
                }
                None => break,
            }
        }
        for bo in &state.backoff[matched..state.len()] {
            prob += *bo;
        }
        let keep = (matched + 1).min(self.order - 1);
        out.len = keep as u8;
        if keep > 0 {
            out.ctx[0] = word;
            out.backoff[0] = self.uni_backoff[w];
        }
        for j in 1..keep {
            let idx = found[j - 1];
            out.ctx[j] = idx;
            out.backoff[j] = self.tables[j - 1].backoffs[idx as usize];
        }
        prob
    }

    /// log10 probability of a whole sentence with `<s>`/`</s>` (KenLM's `model.score(s)`);
    /// words are split on whitespace. Used to check the model against references.
    pub fn sentence_log10(&self, sentence: &str, bos: bool, eos: bool) -> f32 {
        let mut state = if bos {
            self.begin_sentence()
        } else {
            LmState::null()
        };
        let mut next = LmState::null();
        let mut total = 0.0f32;
        for w in sentence.split_whitespace() {
            let id = self.word_id(w).unwrap_or(self.unk);
            total += self.score(&state, id, &mut next);
            state = next;
        }
        if eos {
            total += self.score(&state, self.eos, &mut next);
        }
        total
    }
}
