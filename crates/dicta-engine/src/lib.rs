//! The Dicta engine: decoding policies, offline batching and streaming.
//!
//! - [`offline`]: the window planner and batch scheduler shared by all inputs.
//! - [`whisper`]: Whisper decoding policy (greedy/beam, timestamps, fallback, long-form).

pub mod offline;
pub mod whisper;
