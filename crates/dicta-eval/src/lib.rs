//! Accuracy tools: Whisper's text normalizers and jiwer-compatible WER/CER.
//!
//! - [`EnglishTextNormalizer`] / [`BasicTextNormalizer`]: ports of Whisper's normalizers that
//!   produce the same strings as PyPI `whisper-normalizer` 0.1.15 (parity fixtures in
//!   `tests/fixtures`).
//! - [`word_errors`] / [`char_errors`]: substitution/deletion/insertion/hit counts with the same
//!   alignment as jiwer 4 (RapidFuzz opcodes); [`corpus_wer`] sums counts over a set before
//!   dividing, as jiwer does for lists.
//! - [`load_manifest`] / [`Scorer`]: manifest-driven scoring with per-language normalization.

mod basic;
mod english;
mod english_number;
mod errors;
mod manifest;
mod pyre;

pub use basic::{remove_symbols, remove_symbols_and_diacritics, BasicTextNormalizer};
pub use english::EnglishTextNormalizer;
pub use errors::{
    align_counts, char_errors, corpus_cer, corpus_counts, corpus_wer, word_errors, ErrorCounts,
};
pub use manifest::{load_manifest, parse_manifest, EvalSummary, ManifestItem, Scorer};
