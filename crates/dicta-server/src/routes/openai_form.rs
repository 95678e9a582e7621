//! The multipart form of the OpenAI routes: reading its fields (bounded, whatever their size)
//! and the helpers that turn OpenAI's and faster-whisper's fields into [`RequestOptions`]
//! (`parse` in the parent module puts them together).

use axum::extract::multipart::MultipartError;
use axum::extract::Multipart;
use dicta_core::text::PROMPT_TAIL_BYTES;
use dicta_core::{Error, Result, VadOptions};

use crate::backend::RequestOptions;

/// The form fields Dicta reads; others are accepted and ignored. `model` picks a resident
/// model (`whisper-1` or none: the default one).
#[derive(Debug, Default, Clone)]
pub(super) struct Form {
    pub(super) model: Option<String>,
    pub(super) file: Option<(String, Vec<u8>)>,
    pub(super) language: Option<String>,
    pub(super) prompt: Option<String>,
    pub(super) response_format: Option<String>,
    pub(super) temperature: Option<String>,
    pub(super) granularities: Vec<String>,
    /// `include[]` values (OpenAI's: `logprobs`).
    pub(super) include: Vec<String>,
    /// OpenAI's `chunking_strategy`: `("", "auto")` or a JSON object as one field, or the
    /// SDK's `chunking_strategy[key]` fields as `(key, value)`.
    pub(super) chunking: Vec<(String, String)>,
    pub(super) stream: Option<String>,
    pub(super) vad_filter: Option<String>,
    pub(super) vad_parameters: Option<String>,
    pub(super) diarize: Option<String>,
    pub(super) num_speakers: Option<String>,
    pub(super) min_speakers: Option<String>,
    pub(super) max_speakers: Option<String>,
    pub(super) channels: Option<String>,
    /// faster-whisper's `hotwords` (plain text).
    pub(super) hotwords: Option<String>,
    /// faster-whisper's `prefix` (plain text).
    pub(super) prefix: Option<String>,
    /// faster-whisper's decoding options ([`DECODING_FIELDS`]: what the OpenAI SDK sends for
    /// `extra_body={"beam_size": 1, …}`), name and text as sent.
    pub(super) decoding: Vec<(String, String)>,
    /// OpenAI's `known_speaker_names[]` / `known_speaker_references[]` were sent (refused: the
    /// speakers are labelled A, B, … by clustering, not matched to references).
    pub(super) known_speakers: bool,
}

/// Form fields beyond OpenAI's that set [`RequestOptions`]' decoding options of the same name.
const DECODING_FIELDS: &[&str] = &[
    "beam_size",
    "best_of",
    "patience",
    "length_penalty",
    "compression_ratio_threshold",
    "log_prob_threshold",
    "no_speech_threshold",
    "condition_on_previous_text",
    "prompt_reset_on_temperature",
    "without_timestamps",
    "suppress_blank",
    "suppress_tokens",
    "max_initial_timestamp",
    "max_new_tokens",
    "repetition_penalty",
    "no_repeat_ngram_size",
    "clip_timestamps",
    "hallucination_silence_threshold",
    "language_detection_threshold",
    "language_detection_segments",
    "multilingual",
];

/// `options` with the decoding fields of the form set: each value is read as JSON (`5`,
/// `0.5`, `true`, `[-1, 262]`) and checked as the same field of a `/transcribe` body is.
pub(super) fn with_decoding(
    options: RequestOptions,
    fields: &[(String, String)],
) -> Result<RequestOptions> {
    if fields.is_empty() {
        return Ok(options);
    }
    let mut object = serde_json::Map::new();
    for (name, text) in fields {
        let value: serde_json::Value = match serde_json::from_str(text.trim()) {
            Ok(v) => v,
            // faster-whisper's text form ("0,10.5,20").
            Err(_) if name == "clip_timestamps" => serde_json::Value::String(text.clone()),
            Err(_) => {
                return Err(Error::invalid_input(format!(
                    "{name} must be a JSON value, got {text:?}"
                )))
            }
        };
        // A list comes as one field per element named `name[]` from the SDKs (as
        // `timestamp_granularities[]`), or whole as JSON under `name`.
        match name.strip_suffix("[]") {
            Some(list) => match object
                .entry(list)
                .or_insert_with(|| serde_json::Value::Array(Vec::new()))
            {
                serde_json::Value::Array(items) => items.push(value),
                _ => {
                    return Err(Error::invalid_input(format!(
                        "{list} is given both whole and as {list}[] fields"
                    )))
                }
            },
            None => {
                if object.insert(name.clone(), value).is_some() {
                    return Err(Error::invalid_input(format!(
                        "{name} is given more than once"
                    )));
                }
            }
        }
    }
    options.overlaid(object, "decoding options")
}

pub(super) async fn read_form(mut mp: Multipart) -> std::result::Result<Form, MultipartError> {
    let mut form = Form::default();
    while let Some(field) = mp.next_field().await? {
        let name = field.name().unwrap_or_default().to_string();
        match name.as_str() {
            "file" => {
                let file_name = field.file_name().unwrap_or("upload").to_string();
                form.file = Some((file_name, field.bytes().await?.into()));
            }
            "language" => form.language = Some(small_text(field).await?),
            "model" => form.model = Some(small_text(field).await?),
            // Only the tail Whisper uses is kept; the rest is read and dropped as it arrives,
            // so a huge prompt costs neither memory nor tokenizer time.
            "prompt" => form.prompt = Some(tail_text(field, PROMPT_TAIL_BYTES).await?),
            // Whisper keeps the first 223 tokens of the hotwords: the head that holds them.
            "hotwords" => form.hotwords = Some(head_text(field, PROMPT_TAIL_BYTES).await?),
            // The same for the prefix's first 223 tokens.
            "prefix" => form.prefix = Some(head_text(field, PROMPT_TAIL_BYTES).await?),
            "response_format" => form.response_format = Some(small_text(field).await?),
            "temperature" => form.temperature = Some(small_text(field).await?),
            "timestamp_granularities[]" | "timestamp_granularities" => {
                form.granularities.push(small_text(field).await?)
            }
            "include[]" | "include" => form.include.push(small_text(field).await?),
            "chunking_strategy" => form
                .chunking
                .push((String::new(), small_text(field).await?)),
            other if other.starts_with("chunking_strategy[") && other.ends_with(']') => {
                let key = other["chunking_strategy[".len()..other.len() - 1].to_string();
                form.chunking.push((key, small_text(field).await?))
            }
            "stream" => form.stream = Some(small_text(field).await?),
            "vad_filter" => form.vad_filter = Some(small_text(field).await?),
            "vad_parameters" => form.vad_parameters = Some(small_text(field).await?),
            "diarize" => form.diarize = Some(small_text(field).await?),
            "num_speakers" => form.num_speakers = Some(small_text(field).await?),
            "min_speakers" => form.min_speakers = Some(small_text(field).await?),
            "max_speakers" => form.max_speakers = Some(small_text(field).await?),
            "channels" => form.channels = Some(small_text(field).await?),
            "known_speaker_names[]"
            | "known_speaker_names"
            | "known_speaker_references[]"
            | "known_speaker_references" => form.known_speakers = true,
            other if DECODING_FIELDS.contains(&other.strip_suffix("[]").unwrap_or(other)) => {
                form.decoding.push((name, small_text(field).await?))
            }
            // Skipped fields are drained by `next_field`.
            _ => {}
        }
    }
    Ok(form)
}

/// Bytes kept of a short option field (a language code, a format name, a number).
pub(super) const MAX_OPTION_BYTES: usize = 256;

/// A short option field; anything past [`MAX_OPTION_BYTES`] is dropped (and so fails the
/// option's own validation) without being held.
async fn small_text(field: axum::extract::multipart::Field<'_>) -> Result<String, MultipartError> {
    let mut field = field;
    let mut buf = Vec::new();
    while let Some(chunk) = field.chunk().await? {
        let room = (MAX_OPTION_BYTES + 1).saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// The last `max` bytes of a text field (cut at a word start, see
/// [`dicta_core::text::prompt_tail`]), reading the rest without keeping it.
async fn tail_text(
    field: axum::extract::multipart::Field<'_>,
    max: usize,
) -> Result<String, MultipartError> {
    let mut field = field;
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = field.chunk().await? {
        buf.extend_from_slice(&chunk);
        if buf.len() > 2 * max + 8 {
            // Keep a few bytes more than `max` so the cut can find a character boundary.
            let cut = buf.len() - (max + 8);
            buf.drain(..cut);
        }
    }
    let text = String::from_utf8_lossy(&buf);
    Ok(dicta_core::text::prompt_tail(&text, max).to_string())
}

/// The first `max` bytes of a text field (ending before a word, see
/// [`dicta_core::text::prompt_head`]), reading the rest without keeping it.
async fn head_text(
    field: axum::extract::multipart::Field<'_>,
    max: usize,
) -> Result<String, MultipartError> {
    let mut field = field;
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = field.chunk().await? {
        // A few bytes more than `max`, so the cut can see whether a word goes on.
        let room = (max + 8).saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }
    let text = String::from_utf8_lossy(&buf);
    Ok(dicta_core::text::prompt_head(&text, max).to_string())
}

/// A `true` / `false` form field (absent: false).
pub(super) fn flag(name: &str, v: Option<String>) -> Result<bool> {
    match non_empty(v).as_deref() {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(Error::invalid_input(format!(
            "{name} must be true or false, got {other:?}"
        ))),
    }
}

pub(super) fn non_empty(s: Option<String>) -> Option<String> {
    s.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// OpenAI's `chunking_strategy`, as the voice activity detection it asks for: `None` when not
/// given; `Some(None)` for `"auto"` (the detector's defaults, faster-whisper's); `Some(Some(o))`
/// for a `server_vad` object, whose `threshold`, `silence_duration_ms` and `prefix_padding_ms`
/// (OpenAI's defaults 0.5, 200 and 300) are the detector's `threshold`,
/// `min_silence_duration_ms` and `speech_pad_ms`. The object comes as the SDK's
/// `chunking_strategy[key]` fields or as JSON in one field.
pub(super) fn chunking_strategy(fields: &[(String, String)]) -> Result<Option<Option<VadOptions>>> {
    let mut keys: Vec<(String, serde_json::Value)> = Vec::new();
    for (key, text) in fields {
        let text = text.trim();
        if key.is_empty() {
            if text == "auto" {
                if fields.len() > 1 {
                    return Err(Error::invalid_input(
                        "chunking_strategy is \"auto\" or a server_vad object, not both",
                    ));
                }
                return Ok(Some(None));
            }
            match serde_json::from_str::<serde_json::Value>(text) {
                Ok(serde_json::Value::Object(o)) => keys.extend(o),
                _ => {
                    return Err(Error::invalid_input(format!(
                        "chunking_strategy must be \"auto\" or a server_vad object, got {text:?}"
                    )))
                }
            }
        } else {
            // The SDK's fields are text; numbers read as JSON, `type` as it is.
            let value = serde_json::from_str(text)
                .unwrap_or_else(|_| serde_json::Value::String(text.to_string()));
            keys.push((key.clone(), value));
        }
    }
    if keys.is_empty() {
        return Ok(None);
    }
    let defaults = crate::realtime::ServerVad {
        threshold: 0.5,
        prefix_padding_ms: 300,
        silence_duration_ms: 200,
    };
    let object = serde_json::Value::Object(keys.into_iter().collect());
    let t = crate::realtime::server_vad(&object, defaults, "chunking_strategy")?;
    let o = VadOptions {
        threshold: t.threshold,
        min_silence_duration_ms: t.silence_duration_ms,
        speech_pad_ms: t.prefix_padding_ms,
        ..VadOptions::default()
    };
    o.validate()?;
    Ok(Some(Some(o)))
}
