//! Whisper decoding policy: greedy / beam search / sampling with CTranslate2's logit rules,
//! temperature fallback, segments from timestamps, and long-form transcription (sequential
//! seeking as faster-whisper does, or the same seek loop over lanes of a recording, batched).
//!
//! The model (`dicta_models::whisper::Whisper`) only does the math; all per-request state
//! (decoder caches, beams, prompts, seek positions) lives here.

pub mod beam;
pub mod fallback;
pub mod final_window;
pub mod greedy;
mod hallucination;
pub mod lanes;
mod language;
pub mod logits;
mod lookup;
pub mod options;
mod prompt;
mod seek_state;
pub mod segments;
pub mod speculative;
mod transcriber;
mod window;
pub mod words;

pub use final_window::FinalWindow;
pub use language::{check_english_only, check_language_task};
pub use lookup::LOOKUP_DRAFT_TOKENS;
pub use options::{DecodeOptions, InputOptions, LongFormMode, Task};
pub use speculative::{Assistant, DEFAULT_DRAFT_TOKENS};
pub use transcriber::{TranscribeOutput, WhisperTranscriber};
