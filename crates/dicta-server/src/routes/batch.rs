//! Dicta's own routes: `POST /transcribe` (JSON batch, base64 audio) and
//! `POST /v1/transcriptions/raw` (one raw PCM body).

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::{Extension, Json};
use dicta_audio::decode::PcmEncoding;
use dicta_core::{Error, Result, Stats};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{rejection, RequestId, Shared};
use crate::audio::{AudioFormat, Payload, RawInput};
use crate::backend::{RequestOptions, Task, Temperature};
use crate::error::ApiError;
use crate::pipeline::{TranscribeOutcome, TranscribeRequest};

/// `POST /transcribe` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchRequest {
    /// Recordings, answered in this order.
    pub inputs: Vec<BatchInput>,
    /// Options shared by every input.
    #[serde(default)]
    pub parameters: RequestOptions,
    /// The resident model to use (default: the first `--model`).
    #[serde(default)]
    pub model: Option<String>,
}

/// One recording of a `/transcribe` request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchInput {
    /// The caller's id (string or number); defaults to the input's index. Ids need not be
    /// unique, within a request or across requests.
    pub id: Option<Value>,
    /// The file bytes (any supported container), or raw PCM when `encoding` is set; base64.
    pub audio_base64: String,
    /// `"i16_le"` or `"f32_le"` for headerless PCM.
    pub encoding: Option<String>,
    /// Rate of headerless PCM (default 16000).
    pub sample_rate: Option<u32>,
}

/// Answer of `/transcribe` and `/v1/transcriptions/raw`.
#[derive(Debug, Serialize)]
pub(crate) struct BatchResponse {
    /// The server's id for the request (also the `x-request-id` header).
    pub request_id: String,
    /// The model that answered.
    pub model: String,
    /// One entry per input, in input order: a transcript, or `{"id", "error"}`.
    pub results: Vec<Value>,
    /// Seconds from admission to answer.
    pub request_seconds: f64,
    /// Seconds waiting for the batcher.
    pub queue_seconds: f64,
    /// Requests that shared the backend call.
    pub group_requests: usize,
    /// Inputs in the backend call.
    pub group_inputs: usize,
    /// Statistics of the shared backend call.
    pub group: Stats,
}

/// `POST /transcribe`.
pub(crate) async fn transcribe(
    State(s): State<Shared>,
    Extension(id): Extension<RequestId>,
    body: std::result::Result<Json<BatchRequest>, JsonRejection>,
) -> std::result::Result<Json<BatchResponse>, ApiError> {
    let Json(body) = body.map_err(|r| rejection(&s.cfg, r.status(), r.body_text()))?;
    let mut ids = Vec::with_capacity(body.inputs.len());
    let mut inputs = Vec::with_capacity(body.inputs.len());
    for (i, input) in body.inputs.into_iter().enumerate() {
        let raw = batch_input(i, input)?;
        ids.push(raw.id.clone());
        inputs.push(raw);
    }
    let outcome = s
        .pipeline
        .run(TranscribeRequest {
            request_id: id.0.clone(),
            inputs,
            options: body.parameters,
            model: body.model,
            segments: None,
        })
        .await?;
    Ok(Json(respond(id.0, ids, outcome)))
}

fn batch_input(index: usize, input: BatchInput) -> Result<RawInput> {
    let id = match input.id {
        None => index.to_string(),
        Some(Value::String(s)) => s,
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => {
            return Err(Error::invalid_input(format!(
                "inputs[{index}].id must be a string or a number, got {other}"
            )))
        }
    };
    let format = pcm_format(input.encoding.as_deref(), input.sample_rate)
        .map_err(|e| e.context(format!("inputs[{index}]")))?;
    Ok(RawInput {
        id,
        payload: Payload::Base64(input.audio_base64),
        format,
    })
}

fn pcm_format(encoding: Option<&str>, sample_rate: Option<u32>) -> Result<AudioFormat> {
    match (encoding, sample_rate) {
        (None, None) => Ok(AudioFormat::Encoded),
        (None, Some(_)) => Err(Error::invalid_input(
            "sample_rate applies only to raw PCM: set encoding to \"i16_le\" or \"f32_le\"",
        )),
        (Some(e), rate) => Ok(AudioFormat::Pcm {
            encoding: e
                .parse::<PcmEncoding>()
                .map_err(|e| Error::invalid_input(e.message))?,
            sample_rate: rate.unwrap_or(dicta_audio::SAMPLE_RATE),
        }),
    }
}

fn respond(request_id: String, ids: Vec<String>, outcome: TranscribeOutcome) -> BatchResponse {
    let results = outcome
        .results
        .into_iter()
        .zip(ids)
        .map(|(r, id)| match r {
            Ok(t) => serde_json::to_value(t).unwrap_or_else(
                |e| json!({"id": id, "error": {"type": "internal", "message": e.to_string()}}),
            ),
            Err(e) => json!({"id": id, "error": {"type": e.kind.as_str(), "message": e.message}}),
        })
        .collect();
    BatchResponse {
        request_id,
        model: outcome.model.clone(),
        results,
        request_seconds: outcome.request_seconds,
        queue_seconds: outcome.queue_seconds,
        group_requests: outcome.group_requests,
        group_inputs: outcome.group_inputs,
        group: Stats::clone(&outcome.stats),
    }
}

/// `POST /v1/transcriptions/raw` query string.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQuery {
    /// `i16_le` or `f32_le` (required: guessing would turn floats into noise).
    pub encoding: String,
    /// Samples per second (default 16000).
    pub sample_rate: Option<u32>,
    /// The caller's id for the recording (default `"raw"`).
    pub id: Option<String>,
    pub language: Option<String>,
    pub prompt: Option<String>,
    pub temperature: Option<f32>,
    #[serde(default)]
    pub word_timestamps: bool,
    #[serde(default)]
    pub task: Task,
    /// The resident model to use (default: the first).
    pub model: Option<String>,
    /// Transcribe only detected speech (default VAD options).
    #[serde(default)]
    pub vad_filter: bool,
}

/// `POST /v1/transcriptions/raw`: the body is headerless mono PCM. Answers like
/// `/transcribe` with one result; a failed transcription answers with its error status.
pub(crate) async fn raw(
    State(s): State<Shared>,
    Extension(id): Extension<RequestId>,
    query: std::result::Result<Query<RawQuery>, QueryRejection>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> std::result::Result<Json<BatchResponse>, ApiError> {
    let Query(q) = query.map_err(|r| rejection(&s.cfg, r.status(), r.body_text()))?;
    let body = body.map_err(|r| rejection(&s.cfg, r.status(), r.body_text()))?;
    let input_id = q.id.unwrap_or_else(|| "raw".to_string());
    let format = pcm_format(Some(&q.encoding), q.sample_rate)?;
    let options = RequestOptions {
        language: q.language,
        prompt: q.prompt,
        temperature: q.temperature.map(Temperature::One),
        word_timestamps: q.word_timestamps,
        task: q.task,
        vad_filter: q.vad_filter,
        vad_parameters: None,
        diarize: false,
        num_speakers: None,
        min_speakers: None,
        max_speakers: None,
        // Raw PCM is one channel.
        channels: Default::default(),
        ..RequestOptions::default()
    };
    let mut outcome = s
        .pipeline
        .run(TranscribeRequest {
            request_id: id.0.clone(),
            inputs: vec![RawInput {
                id: input_id.clone(),
                payload: Payload::Bytes(body.into()),
                format,
            }],
            options,
            model: q.model,
            segments: None,
        })
        .await?;
    if let Some(Err(e)) = outcome.results.first() {
        return Err(e.clone().into());
    }
    outcome.results.truncate(1);
    Ok(Json(respond(id.0, vec![input_id], outcome)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_default_to_index_and_accept_numbers() {
        let input = |id| BatchInput {
            id,
            audio_base64: String::new(),
            encoding: None,
            sample_rate: None,
        };
        assert_eq!(batch_input(3, input(None)).unwrap().id, "3");
        assert_eq!(batch_input(0, input(Some(json!(42)))).unwrap().id, "42");
        assert_eq!(batch_input(0, input(Some(json!("x")))).unwrap().id, "x");
        assert!(batch_input(5, input(Some(json!([1]))))
            .unwrap_err()
            .message
            .contains("inputs[5].id"));
    }

    #[test]
    fn pcm_format_needs_an_encoding_for_a_rate() {
        assert_eq!(pcm_format(None, None).unwrap(), AudioFormat::Encoded);
        assert!(pcm_format(None, Some(8000)).is_err());
        assert_eq!(
            pcm_format(Some("f32_le"), None).unwrap(),
            AudioFormat::Pcm {
                encoding: PcmEncoding::F32Le,
                sample_rate: 16_000
            }
        );
        assert!(pcm_format(Some("u8"), None)
            .unwrap_err()
            .message
            .contains("\"u8\""));
    }

    #[test]
    fn request_rejects_unknown_fields() {
        let r: std::result::Result<BatchRequest, _> =
            serde_json::from_value(json!({"inputs": [], "parameters": {"beam": 5}}));
        assert!(r.is_err());
        let r: BatchRequest = serde_json::from_value(json!({
            "inputs": [{"id": "a", "audio_base64": "AAA="}],
            "parameters": {"language": "en", "word_timestamps": true, "task": "translate"}
        }))
        .unwrap();
        assert_eq!(r.parameters.task, Task::Translate);
        assert!(r.parameters.word_timestamps);
    }

    #[test]
    fn decoding_parameters_use_faster_whisper_names_and_temperature_takes_a_number_or_a_list() {
        let r: BatchRequest = serde_json::from_value(json!({
            "inputs": [],
            "parameters": {"beam_size": 1, "temperature": [0.0, 0.4], "patience": 2.0,
                "initial_prompt": "Hi.", "suppress_tokens": [-1, 7], "max_new_tokens": 9,
                "condition_on_previous_text": false, "no_speech_threshold": 0.5}
        }))
        .unwrap();
        let p = &r.parameters;
        assert_eq!(p.beam_size, Some(1));
        assert_eq!(p.temperature, Some(Temperature::Schedule(vec![0.0, 0.4])));
        assert_eq!(p.prompt.as_deref(), Some("Hi."));
        assert_eq!(p.suppress_tokens, Some(vec![-1, 7]));
        assert_eq!(p.max_new_tokens, Some(9));
        assert_eq!(p.condition_on_previous_text, Some(false));
        assert_eq!((p.patience, p.no_speech_threshold), (Some(2.0), Some(0.5)));
        let one: BatchRequest =
            serde_json::from_value(json!({"inputs": [], "parameters": {"temperature": 0.3}}))
                .unwrap();
        assert_eq!(one.parameters.temperature, Some(Temperature::One(0.3)));
        crate::pipeline::validate_options(&r.parameters, false).unwrap();
    }

    /// Fuzzing (see the `dicta-fuzz` crate) of what a client controls on `/transcribe` and
    /// `/v1/stream` before any audio is decoded: the JSON batch body (parsed, then each input's
    /// id and PCM format checked), stream text messages, and binary frames in both encodings.
    /// Run with `cargo test --release -p dicta-server -- --ignored fuzz_`.
    #[test]
    #[ignore = "fuzzing: run with --ignored"]
    fn fuzz_request_bodies_and_stream_messages() {
        use crate::stream::protocol::{decode_frame, ClientMessage};
        let seeds: Vec<Vec<u8>> = [
            r#"{"inputs":[{"id":"a","audio_base64":"UklGRiQAAABXQVZF"}],"parameters":{"beam_size":5,"language":"en","word_timestamps":true,"temperature":[0.0,0.2]}}"#,
            r#"{"inputs":[{"id":7,"audio_base64":"AAAA","encoding":"i16_le","sample_rate":16000}],"model":"tiny.en"}"#,
            r#"{"inputs":[{"audio_base64":"","encoding":"f32_le"}],"parameters":{"diarize":true,"num_speakers":2,"vad_filter":true}}"#,
            r#"{"type":"config","encoding":"f32_le","sample_rate":48000,"language":"en","model":"moonshine-tiny"}"#,
            r#"{"type":"end"}"#,
            r#"["\u0000", "\ud800", 1e999, -0]"#,
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        dicta_fuzz::fuzz("request_bodies", &seeds, |bytes| {
            if let Ok(body) = serde_json::from_slice::<BatchRequest>(bytes) {
                for (i, input) in body.inputs.into_iter().enumerate() {
                    let _ = batch_input(i, input);
                }
                let _ = body.parameters.diarize_options();
            }
            if let Ok(text) = std::str::from_utf8(bytes) {
                let _ = ClientMessage::parse(text);
            }
            for enc in [PcmEncoding::I16Le, PcmEncoding::F32Le] {
                if let Ok(samples) = decode_frame(bytes, enc) {
                    assert!(samples.iter().all(|s| s.is_finite()));
                }
            }
        });
    }
}
