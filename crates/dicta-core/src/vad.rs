//! Options of voice activity detection, shared by the engine, the CLI and the server's
//! request parameters (faster-whisper's `VadOptions`: same names, meanings and defaults).

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Options of speech detection, named and defaulted as faster-whisper's `VadOptions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VadOptions {
    /// A window with probability at or above this is speech.
    pub threshold: f64,
    /// Speech ends only below this (default `max(threshold − 0.15, 0.01)`); between the two,
    /// a window continues whatever came before.
    pub neg_threshold: Option<f64>,
    /// Speech chunks this short or shorter are dropped.
    pub min_speech_duration_ms: u32,
    /// Chunks longer than this are split at the last silence over 98 ms, or hard before it.
    /// No limit is infinity (faster-whisper's `float("inf")`), which JSON writes as `null`.
    #[serde(deserialize_with = "null_is_infinity")]
    pub max_speech_duration_s: f64,
    /// Silence this long ends a chunk.
    pub min_silence_duration_ms: u32,
    /// Chunks are padded by this much on each side (halving shorter gaps between them).
    pub speech_pad_ms: u32,
}

/// A number, or `null` for infinity: what serde_json writes for a non-finite number, so that
/// the default options round-trip through JSON.
fn null_is_infinity<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

impl Default for VadOptions {
    fn default() -> Self {
        Self {
            threshold: 0.5,
            neg_threshold: None,
            min_speech_duration_ms: 0,
            max_speech_duration_s: f64::INFINITY,
            min_silence_duration_ms: 2000,
            speech_pad_ms: 400,
        }
    }
}

impl VadOptions {
    /// Checks ranges; messages name the option and the value given.
    pub fn validate(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.threshold) {
            return Err(Error::invalid_input(format!(
                "vad threshold must be in [0, 1], got {}",
                self.threshold
            )));
        }
        if let Some(n) = self.neg_threshold {
            if !(0.0..=1.0).contains(&n) {
                return Err(Error::invalid_input(format!(
                    "vad neg_threshold must be in [0, 1], got {n}"
                )));
            }
        }
        if self.max_speech_duration_s.is_nan() || self.max_speech_duration_s <= 0.0 {
            return Err(Error::invalid_input(format!(
                "vad max_speech_duration_s must be > 0, got {}",
                self.max_speech_duration_s
            )));
        }
        Ok(())
    }

    /// `neg_threshold`, or its default `max(threshold − 0.15, 0.01)`.
    pub fn effective_neg_threshold(&self) -> f64 {
        self.neg_threshold
            .unwrap_or_else(|| (self.threshold - 0.15).max(0.01))
    }
}
