//! Decoder output: text plus per-word frame spans.

use serde::{Deserialize, Serialize};

/// One decoded word and the frames its tokens cover: `start_frame` is the first frame of its
/// first token, `end_frame` one past the last frame of its last token (a half-open range).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WordSpan {
    /// The word text.
    pub word: String,
    /// First frame (inclusive).
    pub start_frame: i64,
    /// Last frame + 1 (exclusive).
    pub end_frame: i64,
}

/// The best hypothesis of a decoder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hypothesis {
    /// Words joined by single spaces.
    pub text: String,
    /// Word spans in order (empty words never appear).
    pub words: Vec<WordSpan>,
    /// Sum of the chosen path's token log-probs (natural log; for beams, the merged prefix score).
    #[serde(skip)]
    pub logit_score: f64,
    /// `logit_score` plus LM, word-bonus and hotword terms (equals `logit_score` without them).
    #[serde(skip)]
    pub score: f64,
}
