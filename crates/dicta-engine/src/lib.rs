//! The Dicta engine: decoding policies, offline batching and streaming.
//!
//! - [`engine`]: the facade — load a model once, transcribe many inputs in input order.
//! - [`offline`]: the window planner and batch scheduler shared by all inputs.
//! - [`whisper`]: Whisper decoding policy (greedy/beam, timestamps, fallback, long-form).
//! - [`vad`]: speech segments from a voice activity detector, and speech-only transcription.
//! - [`progress`]: a caller's callback told how far a call is and which segments are final.

pub mod diarize;
pub mod engine;
pub mod moonshine;
pub mod offline;
pub mod progress;
pub mod stream;
pub mod vad;
pub mod whisper;

pub use engine::{
    AudioSource, CtcDecoderKind, CtcOptions, Engine, EngineConfig, EngineOutput, Input, ModelFamily,
};
pub use progress::{Progress, ProgressEvent};
