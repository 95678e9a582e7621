//! A realtime session's settings: the `session` object of `session.created` /
//! `session.updated`, and `session.update`'s changes to it (OpenAI's field names).

use dicta_core::{Error, Result, VadOptions};
use serde_json::{json, Value};

use crate::routes::Shared;

/// Samples per second of everything after the resampler.
pub(super) const RATE: u64 = 16_000;
/// Longest item (seconds): longer speech is committed in items of this length, and a buffer
/// committed by hand may not grow past it (so a session holds at most this much audio).
pub(super) const MAX_ITEM_SECONDS: f64 = 600.0;
/// OpenAI's names of its transcription models, which pick the server's default model.
const OPENAI_MODELS: &[&str] = &["gpt-4o-transcribe", "gpt-4o-mini-transcribe", "whisper-1"];
/// The `include` value that adds `logprobs`.
const LOGPROBS: &str = "item.input_audio_transcription.logprobs";

/// How appended audio is coded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    /// 16-bit little-endian PCM at 24 kHz.
    Pcm,
    /// G.711 μ-law at 8 kHz.
    Pcmu,
    /// G.711 A-law at 8 kHz.
    Pcma,
}

impl Format {
    pub(super) fn rate(self) -> u32 {
        match self {
            Self::Pcm => 24_000,
            Self::Pcmu | Self::Pcma => 8_000,
        }
    }

    pub(super) fn json(self) -> Value {
        match self {
            Self::Pcm => json!({"type": "audio/pcm", "rate": 24000}),
            Self::Pcmu => json!({"type": "audio/pcmu"}),
            Self::Pcma => json!({"type": "audio/pcma"}),
        }
    }

    /// Samples in [-1, 1) of `bytes`.
    pub(super) fn decode(self, bytes: &[u8]) -> Result<Vec<f32>> {
        Ok(match self {
            Self::Pcm => {
                if !bytes.len().is_multiple_of(2) {
                    return Err(Error::invalid_input(format!(
                        "audio/pcm is 16-bit samples, but the audio has an odd {} bytes",
                        bytes.len()
                    )));
                }
                bytes
                    .chunks_exact(2)
                    .map(|b| f32::from(i16::from_le_bytes([b[0], b[1]])) / 32768.0)
                    .collect()
            }
            Self::Pcmu => bytes
                .iter()
                .map(|&b| f32::from(crate::grpc::mulaw(b)) / 32768.0)
                .collect(),
            Self::Pcma => bytes
                .iter()
                .map(|&b| f32::from(crate::grpc::alaw(b)) / 32768.0)
                .collect(),
        })
    }
}

/// `server_vad` turn detection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ServerVad {
    pub(crate) threshold: f64,
    pub(crate) prefix_padding_ms: u32,
    pub(crate) silence_duration_ms: u32,
}

impl Default for ServerVad {
    fn default() -> Self {
        Self {
            threshold: 0.5,
            prefix_padding_ms: 300,
            silence_duration_ms: 500,
        }
    }
}

impl ServerVad {
    pub(super) fn options(self) -> VadOptions {
        VadOptions {
            threshold: self.threshold,
            min_silence_duration_ms: self.silence_duration_ms,
            speech_pad_ms: 0,
            max_speech_duration_s: MAX_ITEM_SECONDS,
            ..VadOptions::default()
        }
    }

    pub(super) fn pad(self) -> u64 {
        RATE * u64::from(self.prefix_padding_ms) / 1000
    }
}

/// The session's settings.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Settings {
    pub(super) format: Format,
    /// As the client named it (echoed back); OpenAI's names pick the default model.
    pub(super) model: String,
    pub(super) language: Option<String>,
    pub(super) prompt: String,
    pub(super) turn_detection: Option<ServerVad>,
    /// `noise_reduction`: `near_field` or `far_field` (both run RNNoise; the name is echoed).
    pub(super) noise_reduction: Option<NoiseReduction>,
    pub(super) logprobs: bool,
}

/// `audio.input.noise_reduction.type`. OpenAI tunes its filter to the microphone; Dicta runs one
/// noise suppressor (RNNoise) for both and echoes the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoiseReduction {
    NearField,
    FarField,
}

impl NoiseReduction {
    fn name(self) -> &'static str {
        match self {
            Self::NearField => "near_field",
            Self::FarField => "far_field",
        }
    }
}

impl Settings {
    pub(super) fn json(&self, id: &str) -> Value {
        let turn = self.turn_detection.map_or(Value::Null, |t| {
            json!({"type": "server_vad", "threshold": t.threshold,
                   "prefix_padding_ms": t.prefix_padding_ms,
                   "silence_duration_ms": t.silence_duration_ms})
        });
        json!({
            "type": "transcription",
            "object": "realtime.transcription_session",
            "id": id,
            "audio": {"input": {
                "format": self.format.json(),
                "transcription": {"model": self.model, "language": self.language,
                                  "prompt": self.prompt},
                "turn_detection": turn,
                "noise_reduction": self.noise_reduction.map(|n| json!({"type": n.name()})),
            }},
            "include": if self.logprobs { json!([LOGPROBS]) } else { json!([]) },
        })
    }

    /// The resident model the session's items go to (`None`: the default).
    pub(super) fn resident_model(&self) -> Option<String> {
        (!OPENAI_MODELS.contains(&self.model.as_str())).then(|| self.model.clone())
    }

    /// These settings with a `session.update`'s `session` object over them.
    pub(super) fn updated(&self, session: &Value, s: &Shared) -> Result<Settings> {
        let mut next = self.clone();
        let obj = object(session, "session")?;
        for (key, value) in obj {
            match key.as_str() {
                "type" if value == "transcription" => {}
                "type" => {
                    return Err(Error::invalid_input(format!(
                        "session.type must be \"transcription\" (Dicta serves transcription \
                         sessions), got {value}"
                    )))
                }
                "include" => {
                    let items = value
                        .as_array()
                        .ok_or_else(|| Error::invalid_input("session.include must be a list"))?;
                    next.logprobs = false;
                    for item in items {
                        match item.as_str() {
                            Some(LOGPROBS) => next.logprobs = true,
                            _ => {
                                return Err(Error::invalid_input(format!(
                                    "session.include may hold \"{LOGPROBS}\", got {item}"
                                )))
                            }
                        }
                    }
                }
                "audio" => {
                    for (key, value) in object(value, "session.audio")? {
                        match key.as_str() {
                            "input" => next.input(value, s)?,
                            other => {
                                return Err(Error::invalid_input(format!(
                                    "session.audio.{other} is not supported (transcription \
                                     sessions have input audio only)"
                                )))
                            }
                        }
                    }
                }
                other => {
                    return Err(Error::invalid_input(format!(
                        "session.{other} is not supported in a transcription session"
                    )))
                }
            }
        }
        Ok(next)
    }

    /// `session.audio.input`.
    fn input(&mut self, input: &Value, s: &Shared) -> Result<()> {
        for (key, value) in object(input, "session.audio.input")? {
            match key.as_str() {
                "format" => {
                    self.format = match value.get("type").and_then(Value::as_str) {
                        Some("audio/pcm") => {
                            match value.get("rate") {
                                None | Some(Value::Null) => {}
                                Some(r) if r.as_u64() == Some(24000) => {}
                                Some(r) => {
                                    return Err(Error::invalid_input(format!(
                                        "audio/pcm is 24 kHz (rate 24000), got rate {r}"
                                    )))
                                }
                            }
                            Format::Pcm
                        }
                        Some("audio/pcmu") => Format::Pcmu,
                        Some("audio/pcma") => Format::Pcma,
                        _ => {
                            return Err(Error::invalid_input(format!(
                                "session.audio.input.format.type must be audio/pcm, audio/pcmu \
                                 or audio/pcma, got {value}"
                            )))
                        }
                    }
                }
                "transcription" if value.is_null() => {}
                "transcription" => {
                    for (key, v) in object(value, "session.audio.input.transcription")? {
                        match key.as_str() {
                            "model" => {
                                let name = v.as_str().unwrap_or_default().trim().to_string();
                                if !OPENAI_MODELS.contains(&name.as_str()) {
                                    s.model(Some(&name))?;
                                }
                                self.model = name;
                            }
                            "language" => {
                                self.language = v
                                    .as_str()
                                    .map(|l| l.trim().to_ascii_lowercase())
                                    .filter(|l| !l.is_empty())
                            }
                            "prompt" => self.prompt = v.as_str().unwrap_or_default().to_string(),
                            other => {
                                return Err(Error::invalid_input(format!(
                                    "session.audio.input.transcription.{other} is not supported \
                                     (model, language, prompt)"
                                )))
                            }
                        }
                    }
                }
                "turn_detection" if value.is_null() => self.turn_detection = None,
                "turn_detection" => {
                    self.turn_detection =
                        Some(server_vad(value, ServerVad::default(), "turn_detection")?)
                }
                "noise_reduction" if value.is_null() => self.noise_reduction = None,
                "noise_reduction" => {
                    self.noise_reduction = match value.get("type").and_then(Value::as_str) {
                        Some("near_field") => Some(NoiseReduction::NearField),
                        Some("far_field") => Some(NoiseReduction::FarField),
                        _ => {
                            return Err(Error::invalid_input(format!(
                                "session.audio.input.noise_reduction.type must be near_field \
                                 or far_field (or noise_reduction null), got {value}"
                            )))
                        }
                    }
                }
                other => {
                    return Err(Error::invalid_input(format!(
                        "session.audio.input.{other} is not supported"
                    )))
                }
            }
        }
        Ok(())
    }
}

/// OpenAI's `server_vad` object, as a transcription session's `turn_detection` and the
/// transcription route's `chunking_strategy` both take it: `threshold`, `prefix_padding_ms` and
/// `silence_duration_ms` over `defaults` (OpenAI's differ between the two); `what` names the
/// field in errors. `create_response` and `interrupt_response` (about a conversation's
/// responses) are taken and mean nothing here.
pub(crate) fn server_vad(value: &Value, defaults: ServerVad, what: &str) -> Result<ServerVad> {
    let mut t = defaults;
    let ms = |key: &str, v: &Value| {
        v.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                Error::invalid_input(format!(
                    "{what}.{key} must be a whole number of milliseconds, got {v}"
                ))
            })
    };
    match value.get("type").and_then(Value::as_str) {
        Some("server_vad") => {}
        Some("semantic_vad") => {
            return Err(Error::invalid_input(format!(
                "{what} semantic_vad is not supported; use server_vad"
            )))
        }
        other => {
            return Err(Error::invalid_input(format!(
                "{what}.type must be \"server_vad\", got {}",
                other.map_or_else(|| "none".to_string(), |t| format!("{t:?}"))
            )))
        }
    }
    for (key, v) in object(value, what)? {
        match key.as_str() {
            "type" | "create_response" | "interrupt_response" => {}
            "threshold" => {
                t.threshold = v
                    .as_f64()
                    .filter(|x| (0.0..=1.0).contains(x))
                    .ok_or_else(|| {
                        Error::invalid_input(format!(
                            "{what}.threshold must be a number in [0, 1], got {v}"
                        ))
                    })?
            }
            "prefix_padding_ms" => t.prefix_padding_ms = ms(key, v)?,
            "silence_duration_ms" => t.silence_duration_ms = ms(key, v)?,
            other => {
                return Err(Error::invalid_input(format!(
                    "{what}.{other} is not supported (type, threshold, prefix_padding_ms, \
                     silence_duration_ms)"
                )))
            }
        }
    }
    Ok(t)
}

fn object<'a>(v: &'a Value, name: &str) -> Result<&'a serde_json::Map<String, Value>> {
    v.as_object()
        .ok_or_else(|| Error::invalid_input(format!("{name} must be an object, got {v}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_vad_takes_openais_fields_and_defaults() {
        let vad = |v: Value| server_vad(&v, ServerVad::default(), "turn_detection");
        let t = vad(json!({"type": "server_vad", "silence_duration_ms": 800})).unwrap();
        assert_eq!(
            (t.threshold, t.prefix_padding_ms, t.silence_duration_ms),
            (0.5, 300, 800)
        );
        assert_eq!(t.pad(), 4800);
        let o = t.options();
        assert_eq!((o.min_silence_duration_ms, o.speech_pad_ms), (800, 0));
        // About a conversation's responses: accepted, nothing to do.
        assert!(vad(json!({"type": "server_vad", "create_response": true})).is_ok());
        for (bad, needle) in [
            (json!({"type": "semantic_vad"}), "semantic_vad"),
            (json!({"threshold": 0.5}), "server_vad"),
            (json!({"type": "server_vad", "threshold": 1.5}), "threshold"),
            (
                json!({"type": "server_vad", "silence_duration_ms": -1}),
                "silence_duration_ms",
            ),
            (
                json!({"type": "server_vad", "idle_timeout_ms": 5000}),
                "idle_timeout_ms",
            ),
        ] {
            let e = vad(bad.clone()).unwrap_err();
            assert!(e.message.contains(needle), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn formats_decode_pcm16_and_g711() {
        let pcm = Format::Pcm.decode(&[0x00, 0x40, 0x00, 0xc0]).unwrap();
        assert_eq!(pcm, [0.5, -0.5]);
        assert!(Format::Pcm.decode(&[1, 2, 3]).is_err());
        // G.711's silence codes.
        assert_eq!(Format::Pcmu.decode(&[0xff]).unwrap(), [0.0]);
        assert!(Format::Pcma.decode(&[0xd5]).unwrap()[0].abs() < 0.001);
        assert_eq!((Format::Pcm.rate(), Format::Pcmu.rate()), (24_000, 8_000));
    }
}
