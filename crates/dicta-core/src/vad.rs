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

    /// The defaults of stream endpointing (a live stream that ends utterances on silence):
    /// faster-whisper's options with 600 ms of silence to end an utterance (its 2 s suit cutting
    /// a recording, not answering a speaker) and 300 ms of padding.
    pub fn endpointing() -> Self {
        Self {
            min_silence_duration_ms: 600,
            speech_pad_ms: 300,
            ..Self::default()
        }
    }

    /// These options with the fields of a JSON object set (faster-whisper's names; `null`
    /// `max_speech_duration_s` is no limit), checked. Errors name an unknown field or a value
    /// of the wrong type or range.
    pub fn overlaid(&self, fields: &serde_json::Value) -> Result<Self> {
        let serde_json::Value::Object(given) = fields else {
            return Err(Error::invalid_input(format!(
                "VAD options must be a JSON object, got {fields}"
            )));
        };
        let mut merged = match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => return Err(Error::internal("VAD options do not serialise to an object")),
        };
        for (k, v) in given {
            merged.insert(k.clone(), v.clone());
        }
        let o: Self = serde_json::from_value(serde_json::Value::Object(merged))
            .map_err(|e| Error::invalid_input(format!("bad VAD options: {e}")))?;
        o.validate()?;
        Ok(o)
    }

    /// [`VadOptions::overlaid`] with the fields of a JSON object given as text (a command
    /// line's or a `custom_configuration` value). Errors also name text that is not JSON.
    pub fn overlaid_json(&self, text: &str) -> Result<Self> {
        let fields: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            Error::invalid_input(format!("must be a JSON object of VAD options: {e}"))
        })?;
        self.overlaid(&fields)
    }
}

#[cfg(test)]
mod overlay_tests {
    use super::*;

    #[test]
    fn fields_override_the_base_and_bad_ones_are_refused() {
        let base = VadOptions::endpointing();
        let o = base
            .overlaid(&serde_json::json!({"min_silence_duration_ms": 300, "threshold": 0.6}))
            .unwrap();
        assert_eq!(o.min_silence_duration_ms, 300);
        assert_eq!(o.threshold, 0.6);
        assert_eq!(o.speech_pad_ms, base.speech_pad_ms);
        let o = base
            .overlaid(&serde_json::json!({"max_speech_duration_s": 20}))
            .unwrap();
        assert_eq!(o.max_speech_duration_s, 20.0);
        assert_eq!(base.overlaid(&serde_json::json!({})).unwrap(), base);
        assert_eq!(
            base.overlaid_json(r#"{"threshold": 0.6}"#)
                .unwrap()
                .threshold,
            0.6
        );
        let e = base.overlaid_json("{threshold").unwrap_err();
        assert!(e.message.contains("JSON object"), "{e}");
        for bad in [
            serde_json::json!({"min_silence": 3}),
            serde_json::json!({"threshold": 2.0}),
            serde_json::json!({"speech_pad_ms": "x"}),
            serde_json::json!([1]),
        ] {
            let e = base.overlaid(&bad).unwrap_err();
            assert_eq!(e.kind, crate::ErrorKind::InvalidInput, "{bad}");
        }
    }
}
