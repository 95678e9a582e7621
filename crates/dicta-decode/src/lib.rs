//! CTC decoders and word n-gram language models, independent of any acoustic model.
//!
//! - [`greedy_decode`]: best path (merge repeats, drop blanks, delimiter → space).
//! - [`BeamDecoder`]: prefix beam search with optional n-gram LM fusion ([`LmFusion`]) and
//!   hotwords, matching pyctcdecode 0.5's decoding step for step.
//! - [`NgramLm`]: back-off n-gram model from ARPA (plain or `.gz`) or a Sphinx binary trie
//!   (`.lm.bin`), held in sorted arrays and scored as KenLM does.
//! - [`job`]: the `dicta decode` command's logic (decode saved `[T, V]` log-prob `.npy` files).
//!
//! All inputs are `[T, V]` row-major float32 matrices ([`LogProbs`]); outputs are
//! [`Hypothesis`] values with per-word frame spans.

pub mod beam;
pub mod greedy;
pub mod hotword;
pub mod hypothesis;
pub mod job;
pub mod lm;
pub mod logprobs;
pub mod vocab;

pub use beam::{BeamConfig, BeamDecoder, LmFusion, LmWeights, Unigrams};
pub use greedy::greedy_decode;
pub use hotword::{Hotword, HotwordScorer, DEFAULT_HOTWORD_WEIGHT};
pub use hypothesis::{Hypothesis, WordSpan};
pub use lm::{LmState, NgramLm};
pub use logprobs::LogProbs;
pub use vocab::{VocabKind, Vocabulary};
