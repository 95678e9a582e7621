//! Core types shared by every Dicta crate: transcripts, statistics and typed errors.
//!
//! This crate has no heavy dependencies so that every other crate (and every transport)
//! can speak the same vocabulary.

pub mod cancel;
pub mod channels;
pub mod clips;
pub mod decoding;
pub mod diarize;
pub mod error;
pub mod format;
pub mod task;
pub mod text;
pub mod transcript;
pub mod vad;

pub use cancel::Cancel;
pub use channels::ChannelMode;
pub use clips::ClipTimestamps;
pub use diarize::DiarizeOptions;
pub use error::{Error, ErrorKind, Result};
pub use task::Task;
pub use transcript::{Segment, SpeakerTurn, Stats, TokenLogprob, Transcript, Word};
pub use vad::VadOptions;
