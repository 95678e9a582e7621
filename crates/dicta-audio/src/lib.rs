//! Audio input and feature front ends for Dicta (no tensor library here).
//!
//! - [`decode`]: files/bytes (WAV, FLAC, MP3, OGG/Vorbis) and raw PCM → mono f32.
//! - [`resample`]: resampling to 16 kHz exactly as FFmpeg's libswresample does (the reference
//!   pipelines of Whisper users), plus a higher-quality sinc resampler.
//! - [`mel`]: Whisper's log-mel spectrogram.
//! - [`fbank`]: SpeechBrain's log-mel filterbanks (speaker embeddings).

pub mod decode;
pub mod fbank;
pub mod mel;
pub mod noise;
pub mod resample;

/// The sample rate every model in Dicta consumes.
pub const SAMPLE_RATE: u32 = 16_000;

/// Highest input sample rate accepted (768 kHz, twice the fastest common converters): a
/// header past it is damaged, and resampling from gigahertz rates would take minutes per
/// block (found by fuzzing).
pub const MAX_SAMPLE_RATE: u32 = 768_000;
