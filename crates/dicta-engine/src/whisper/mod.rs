//! Whisper decoding policy: greedy / beam search / sampling with CTranslate2's logit rules,
//! temperature fallback, segments from timestamps, and long-form transcription (sequential
//! seeking as faster-whisper does, or fixed overlapping windows decoded in batches and merged).
//!
//! The model (`dicta_models::whisper::Whisper`) only does the math; all per-request state
//! (decoder caches, beams, prompts, seek positions) lives here.

pub mod beam;
pub mod fallback;
pub mod greedy;
pub mod logits;
pub mod longform;
pub mod options;
pub mod segments;
mod transcriber;
mod window;
pub mod words;

pub use options::{DecodeOptions, LongFormMode, Task};
pub use transcriber::{TranscribeOutput, WhisperTranscriber};
