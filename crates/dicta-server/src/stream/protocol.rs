//! The WebSocket protocol's messages and per-stream settings, without any I/O.

use std::str::FromStr;

use dicta_audio::decode::{decode_raw_pcm, PcmEncoding};
use dicta_audio::SAMPLE_RATE;
use dicta_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::backend::StreamOptions;
use crate::pipeline::validate_stream_options;

/// How the client's binary frames are to be read, and the session options.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StreamSettings {
    /// Sample encoding of binary frames.
    pub encoding: PcmEncoding,
    /// Sample rate of binary frames (resampled to 16 kHz when different).
    pub sample_rate: u32,
    /// Options handed to the backend when the session opens.
    pub options: StreamOptions,
}

impl Default for StreamSettings {
    fn default() -> Self {
        Self {
            encoding: PcmEncoding::I16Le,
            sample_rate: SAMPLE_RATE,
            options: StreamOptions::default(),
        }
    }
}

/// Settings a client may change: the query string of `GET /v1/stream` and the `config`
/// message carry the same fields. Unknown fields are refused (a typo must not pass silently).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConfigFields {
    /// `"i16_le"` (default) or `"f32_le"`.
    pub encoding: Option<String>,
    /// Rate of the binary frames in Hz (default 16000).
    pub sample_rate: Option<u32>,
    /// Language code, e.g. `"en"`.
    pub language: Option<String>,
    /// The resident model, e.g. `"moonshine-tiny"` (default: the server's first).
    pub model: Option<String>,
    /// `"transcribe"` or `"translate"` (multilingual Whisper); `""` clears it.
    pub task: Option<String>,
    /// Previous-text context for the stream's decodes (Whisper); `""` clears it.
    pub prompt: Option<String>,
    /// Words to bias the stream's decodes towards (Whisper); `""` clears them.
    pub hotwords: Option<String>,
    /// End utterances where the voice activity detector hears silence (Whisper and Moonshine;
    /// default: the server's `--stream-vad`).
    pub vad: Option<bool>,
    /// The detector's options: a JSON object of faster-whisper's VAD option names (in a query
    /// string, that object as text); unset names keep the endpointing defaults; `{}` or `""`
    /// restores them all.
    pub vad_parameters: Option<serde_json::Value>,
}

impl StreamSettings {
    /// These settings with `fields` applied; nothing changes when a field is invalid.
    pub fn with(&self, fields: ConfigFields) -> Result<Self> {
        let mut next = self.clone();
        if let Some(e) = fields.encoding {
            next.encoding =
                PcmEncoding::from_str(e.trim()).map_err(|err| Error::invalid_input(err.message))?;
        }
        if let Some(rate) = fields.sample_rate {
            // Checked when the resampler is built; kept here so the error names the field.
            super::resample::StreamResampler::new(rate)?;
            next.sample_rate = rate;
        }
        // Blank text clears a field; the result is checked as a request's would be, below.
        let text = |t: String| Some(t.trim().to_string()).filter(|t| !t.is_empty());
        if let Some(lang) = fields.language {
            next.options.language = text(lang.to_ascii_lowercase());
        }
        if let Some(p) = fields.prompt {
            next.options.prompt = text(p);
        }
        if let Some(h) = fields.hotwords {
            next.options.hotwords = text(h);
        }
        if let Some(t) = fields.task {
            next.options.task = match t.trim() {
                "" => None,
                t => Some(t.parse()?),
            };
        }
        if let Some(v) = fields.vad {
            next.options.vad = Some(v);
        }
        if let Some(p) = fields.vad_parameters {
            next.options.vad_parameters = stream_vad_parameters(&p)?;
        }
        if let Some(model) = fields.model {
            let model = model.trim().to_string();
            next.options.model = (!model.is_empty()).then_some(model);
        }
        validate_stream_options(&next.options)?;
        Ok(next)
    }
}

/// A stream's `vad_parameters`: a JSON object (or its text, from a query string) over the
/// endpointing defaults; empty text or `{}` gives `None` (the defaults).
fn stream_vad_parameters(value: &serde_json::Value) -> Result<Option<dicta_core::VadOptions>> {
    let parsed;
    let object = match value {
        serde_json::Value::String(t) if t.trim().is_empty() => return Ok(None),
        serde_json::Value::String(t) => {
            parsed = serde_json::from_str::<serde_json::Value>(t).map_err(|e| {
                Error::invalid_input(format!(
                    "vad_parameters must be a JSON object of VAD options: {e}"
                ))
            })?;
            &parsed
        }
        v => v,
    };
    if object.as_object().is_some_and(|o| o.is_empty()) {
        return Ok(None);
    }
    dicta_core::VadOptions::endpointing()
        .overlaid(object)
        .map(Some)
        .map_err(|e| Error::invalid_input(format!("vad_parameters: {}", e.message)))
}

/// A text message from the client.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ClientMessage {
    /// Changes the settings; allowed before the first audio frame of an utterance.
    Config(ConfigFields),
    /// Ends the utterance: the server flushes, sends the final events, then `done`.
    End,
}

impl ClientMessage {
    /// Parses a text frame; the error says what was expected.
    pub fn parse(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| {
            Error::invalid_input(format!(
                "bad control message ({e}); expected {{\"type\":\"config\",…}} or {{\"type\":\"end\"}}"
            ))
        })
    }
}

/// A control message from the server (events are sent as [`crate::StreamEvent`]s).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ServerMessage {
    /// Sent once the socket is open, with the settings in force.
    Ready {
        /// The server's id for this stream (also in its log lines).
        id: String,
        /// The resident model.
        model: String,
        /// Encoding of binary frames.
        encoding: &'static str,
        /// Rate of binary frames.
        sample_rate: u32,
        /// The server's `max_stream_seconds`.
        max_stream_seconds: f64,
    },
    /// Acknowledges a `config` message with the settings now in force.
    Config {
        encoding: &'static str,
        sample_rate: u32,
        language: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        task: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        hotwords: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        vad: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        vad_parameters: Option<dicta_core::VadOptions>,
    },
    /// Every event of the ended utterance has been sent.
    Done,
    /// The stream is behind real time: its oldest audio not yet transcribed is `seconds` old
    /// (sent while that passes `stream_admit_lag_s`, at most every 2 s). Past
    /// `max_lag_seconds` the stream may be ended with an `overloaded` error.
    Lag { seconds: f64, max_lag_seconds: f64 },
    /// Something went wrong; `error.type` is the stable kind (as in HTTP error bodies).
    Error { error: ErrorBody },
}

/// The `error` object, the same as in HTTP error bodies.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ErrorBody {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
}

impl ServerMessage {
    /// The `error` message for `e`.
    pub fn error(e: &Error) -> Self {
        ServerMessage::Error {
            error: ErrorBody {
                kind: e.kind.as_str(),
                message: e.message.clone(),
            },
        }
    }

    /// The `config` acknowledgement of `s`.
    pub fn config(s: &StreamSettings) -> Self {
        ServerMessage::Config {
            encoding: s.encoding.as_str(),
            sample_rate: s.sample_rate,
            language: s.options.language.clone(),
            model: s.options.model.clone(),
            task: s.options.task.map(|t| t.as_str()),
            prompt: s.options.prompt.clone(),
            hotwords: s.options.hotwords.clone(),
            vad: s.options.vad,
            vad_parameters: s.options.vad_parameters.clone(),
        }
    }
}

/// Reads one binary frame: whole little-endian samples of `encoding` (`f32_le` must be finite).
/// An empty frame is no audio.
pub(crate) fn decode_frame(bytes: &[u8], encoding: PcmEncoding) -> Result<Vec<f32>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    // The rate does not matter here: no resampling happens in `decode_raw_pcm`.
    Ok(decode_raw_pcm(bytes, encoding, SAMPLE_RATE, "audio frame")?.samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dicta_core::ErrorKind;

    #[test]
    fn config_and_end_messages_parse_and_unknown_ones_are_refused() {
        let m = ClientMessage::parse(
            r#"{"type":"config","encoding":"f32_le","sample_rate":48000,"language":"EN"}"#,
        )
        .unwrap();
        let ClientMessage::Config(fields) = m else {
            panic!("{m:?}")
        };
        let s = StreamSettings::default().with(fields).unwrap();
        assert_eq!(s.encoding, PcmEncoding::F32Le);
        assert_eq!(s.sample_rate, 48_000);
        assert_eq!(s.options.language.as_deref(), Some("en"));
        assert_eq!(
            ClientMessage::parse(r#"{"type":"end"}"#).unwrap(),
            ClientMessage::End
        );
        for bad in [
            "not json",
            r#"{"type":"start"}"#,
            r#"{"type":"config","sample_rat":8000}"#,
        ] {
            let e = ClientMessage::parse(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidInput, "{bad}");
        }
    }

    #[test]
    fn prompt_and_hotwords_are_kept_echoed_and_cleared_by_blank_text() {
        let parse = |text: &str| match ClientMessage::parse(text).unwrap() {
            ClientMessage::Config(f) => f,
            m => panic!("{m:?}"),
        };
        let s = StreamSettings::default()
            .with(parse(
                r#"{"type":"config","prompt":" Dr. Quilter. ","hotwords":"MFA"}"#,
            ))
            .unwrap();
        assert_eq!(s.options.prompt.as_deref(), Some("Dr. Quilter."));
        assert_eq!(s.options.hotwords.as_deref(), Some("MFA"));
        let ack = serde_json::to_value(ServerMessage::config(&s)).unwrap();
        assert_eq!(ack["prompt"], "Dr. Quilter.");
        assert_eq!(ack["hotwords"], "MFA");
        // A later config changes only what it names; blank text clears a field.
        let s = s
            .with(parse(
                r#"{"type":"config","hotwords":"  ","task":"Translate"}"#,
            ))
            .unwrap();
        assert_eq!(s.options.task, Some(crate::backend::Task::Translate));
        let e = s.with(parse(r#"{"type":"config","task":"transcode"}"#));
        assert!(e.unwrap_err().message.contains("transcode"));
        assert_eq!(s.options.prompt.as_deref(), Some("Dr. Quilter."));
        assert_eq!(s.options.hotwords, None);
        let ack = serde_json::to_value(ServerMessage::config(&s)).unwrap();
        assert!(ack.get("hotwords").is_none(), "{ack}");
    }

    #[test]
    fn invalid_settings_change_nothing_and_name_the_value() {
        let s = StreamSettings::default();
        let bad = [
            ConfigFields {
                encoding: Some("mulaw".into()),
                ..Default::default()
            },
            ConfigFields {
                sample_rate: Some(44_101),
                ..Default::default()
            },
            ConfigFields {
                language: Some("en; drop".into()),
                ..Default::default()
            },
        ];
        for fields in bad {
            let e = s.with(fields.clone()).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidInput);
            let value = fields
                .encoding
                .or(fields.sample_rate.map(|r| r.to_string()))
                .or(fields.language)
                .unwrap();
            assert!(e.message.contains(&value), "{}", e.message);
        }
    }

    #[test]
    fn frames_decode_whole_samples_only() {
        let i16s: Vec<u8> = [16384i16, -32768]
            .iter()
            .flat_map(|s| s.to_le_bytes())
            .collect();
        assert_eq!(
            decode_frame(&i16s, PcmEncoding::I16Le).unwrap(),
            vec![0.5, -1.0]
        );
        assert!(decode_frame(&[], PcmEncoding::I16Le).unwrap().is_empty());
        let odd = decode_frame(&i16s[..3], PcmEncoding::I16Le).unwrap_err();
        assert_eq!(odd.kind, ErrorKind::CorruptInput);
        let nan = f32::NAN.to_le_bytes();
        assert!(decode_frame(&nan, PcmEncoding::F32Le).is_err());
    }

    #[test]
    fn server_messages_have_the_documented_shape() {
        let e = Error::limit("max_stream_seconds", "10 s", "10.5 s");
        let v = serde_json::to_value(ServerMessage::error(&e)).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "limit_exceeded");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_stream_seconds"));
        assert_eq!(
            serde_json::to_value(ServerMessage::Done).unwrap(),
            serde_json::json!({"type": "done"})
        );
    }
}
