//! Voice activity detection models. [`silero`]: Silero VAD v6, 512-sample windows at 16 kHz.
//! The policy that turns probabilities into speech segments lives in `dicta-engine` (`vad`).

pub mod silero;

pub use silero::{SileroState, SileroVad};

/// File name of the Silero VAD model inside a fetched folder (as faster-whisper ships it).
pub const SILERO_FILE: &str = "silero_vad_v6.onnx";
