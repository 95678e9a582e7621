//! Streaming recognition: live audio arrives a block at a time; many sessions share one loaded
//! model and the engine batches their chunks into one model call.
//!
//! - [`chunker`]: chunk geometry (from the model) and the per-session buffer → whole chunks.
//! - [`queue`]: the batching rule (plain struct); [`worker`]: the thread around it and the
//!   [`StreamModel`] trait a batched model implements.
//! - [`ctc`]: CTC chunked inference with left context; [`whisper`] + [`agreement`]: Whisper
//!   re-decoding with LocalAgreement-2; [`moonshine`]: the same over Moonshine.
//! - [`session`]: [`StreamEngine`] and [`Session`] (`feed`/`end`, sync and async).

pub mod agreement;
pub mod chunker;
pub mod ctc;
pub mod moonshine;
mod placement;
pub mod queue;
pub mod session;
pub mod whisper;
pub mod worker;

use dicta_core::Word;
use serde::Serialize;

pub use chunker::{Chunk, ChunkGeometry, Chunker};
pub use ctc::{ChunkLogProbs, CtcChunkModel, CtcStreamDecoder};
pub use moonshine::MoonshineChunkModel;
pub use session::{Honours, Session, SessionOptions, StreamConfig, StreamEngine};
pub use whisper::{BufferDecode, WhisperChunkModel, WhisperGeometry};
pub use worker::{StreamModel, WorkerConfig, WorkerStats};

/// Sample rate of every stream (16 kHz mono).
pub const SAMPLE_RATE: usize = 16_000;

/// Whether an event's text may still change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// The current best guess of text not final yet; the next partial or final replaces it.
    Partial,
    /// Text that will not change.
    Final,
}

/// A recognition event. Serialises as
/// `{"type":"partial"|"final","text":…,"start":…,"end":…,"words":[…]}`; times are seconds from
/// the start of the stream (since the last `end`/`reset`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Partial or final.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// The text (words joined by single spaces).
    pub text: String,
    /// Start of the first word (seconds).
    pub start: f64,
    /// End of the last word (seconds).
    pub end: f64,
    /// The words with times.
    pub words: Vec<Word>,
}

/// When a CTC utterance is finalised before the end of the stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EndpointOptions {
    /// Seconds of trailing silence (frames after the last word) that end an utterance; `None`:
    /// never on silence.
    pub min_trailing_silence: Option<f32>,
    /// Utterances are cut at this length (seconds); `None`: no limit.
    pub max_utterance: Option<f32>,
}

impl Default for EndpointOptions {
    fn default() -> Self {
        Self {
            min_trailing_silence: Some(0.8),
            max_utterance: Some(20.0),
        }
    }
}

impl EndpointOptions {
    /// No endpointing: one final at `end()`.
    pub fn none() -> Self {
        Self {
            min_trailing_silence: None,
            max_utterance: None,
        }
    }

    /// Checks that the durations are positive.
    pub fn validate(&self) -> dicta_core::Result<()> {
        for (name, v) in [
            ("min_trailing_silence", self.min_trailing_silence),
            ("max_utterance", self.max_utterance),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v > 0.0) {
                    return Err(dicta_core::Error::invalid_input(format!(
                        "{name} must be > 0 seconds, got {v}"
                    )));
                }
            }
        }
        Ok(())
    }
}
