//! OpenAI-compatible audio routes: `POST /v1/audio/transcriptions`,
//! `POST /v1/audio/translations` (multipart forms) and `GET /v1/models`.

use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, State};
use axum::response::Response;
use axum::{Extension, Json};
use dicta_core::{Error, Result};
use serde_json::json;

use super::openai_form::{chunking_strategy, flag, non_empty, read_form, with_decoding, Form};
use super::{rejection, RequestId, Shared};
use crate::audio::{AudioFormat, Payload, RawInput};
use crate::backend::{RequestOptions, Task};
use crate::error::ApiError;
use crate::format::{render, Granularity, ResponseFormat};
use crate::pipeline::TranscribeRequest;

/// `POST /v1/audio/transcriptions`.
pub(crate) async fn transcriptions(
    State(s): State<Shared>,
    Extension(id): Extension<RequestId>,
    form: std::result::Result<Multipart, MultipartRejection>,
) -> std::result::Result<Response, ApiError> {
    handle(s, id, form, Task::Transcribe).await
}

/// `POST /v1/audio/translations` (to English; multilingual models only).
pub(crate) async fn translations(
    State(s): State<Shared>,
    Extension(id): Extension<RequestId>,
    form: std::result::Result<Multipart, MultipartRejection>,
) -> std::result::Result<Response, ApiError> {
    handle(s, id, form, Task::Translate).await
}

/// `GET /v1/models`: the one resident model, in OpenAI's list shape.
pub(crate) async fn models(State(s): State<Shared>) -> Json<serde_json::Value> {
    Json(json!({
        "object": "list",
        "data": s.models.iter().map(|(name, _)| {
            json!({ "id": name, "object": "model", "created": 0, "owned_by": "dicta" })
        }).collect::<Vec<_>>(),
    }))
}

async fn handle(
    s: Shared,
    id: RequestId,
    form: std::result::Result<Multipart, MultipartRejection>,
    task: Task,
) -> std::result::Result<Response, ApiError> {
    let form = form.map_err(|r| rejection(&s.cfg, r.status(), r.body_text()))?;
    let form = read_form(form)
        .await
        .map_err(|e| rejection(&s.cfg, e.status(), e.body_text()))?;
    let model = form.model.clone();
    let parsed = parse(form, task)?;
    if parsed.stream {
        let diarized = parsed.format == ResponseFormat::DiarizedJson;
        return super::openai_stream::events(s, id, parsed.input, parsed.options, model, diarized)
            .await;
    }
    let logprobs = parsed.options.token_logprobs;
    let outcome = s
        .pipeline
        .run(TranscribeRequest {
            request_id: id.0,
            inputs: vec![parsed.input],
            options: parsed.options,
            model,
            segments: None,
        })
        .await?;
    let transcript = outcome
        .results
        .into_iter()
        .next()
        .ok_or_else(|| Error::internal("the backend returned no result"))??;
    Ok(render(
        parsed.format,
        &transcript,
        task,
        parsed.granularity,
        logprobs,
    ))
}

struct Parsed {
    input: RawInput,
    options: RequestOptions,
    format: ResponseFormat,
    granularity: Granularity,
    /// `stream=true`: server-sent events ([`super::openai_stream`]).
    stream: bool,
}

fn parse(form: Form, task: Task) -> Result<Parsed> {
    let (file_name, bytes) = form.file.ok_or_else(|| {
        Error::invalid_input("the form has no `file` field (the audio to transcribe)")
    })?;
    let stream = flag("stream", form.stream)?;
    if stream && task == Task::Translate {
        return Err(Error::invalid_input(
            "stream=true is for /v1/audio/transcriptions (OpenAI's translations do not stream)",
        ));
    }
    let format = match non_empty(form.response_format) {
        Some(f) => f.parse()?,
        None => ResponseFormat::default(),
    };
    let temperature = non_empty(form.temperature)
        .map(|t| {
            t.parse::<f32>().map_err(|_| {
                Error::invalid_input(format!("temperature must be a number, got {t:?}"))
            })
        })
        .transpose()?;
    let granularity = if form.granularities.is_empty() {
        Granularity::default()
    } else {
        let mut g = Granularity {
            segment: false,
            word: false,
        };
        for value in &form.granularities {
            match value.trim() {
                "segment" => g.segment = true,
                "word" => g.word = true,
                other => {
                    return Err(Error::invalid_input(format!(
                        "timestamp_granularities[] must be \"segment\" or \"word\", got {other:?}"
                    )))
                }
            }
        }
        g
    };
    let mut logprobs = false;
    for value in &form.include {
        match value.trim() {
            "logprobs" => logprobs = true,
            other => {
                return Err(Error::invalid_input(format!(
                    "include[] may hold \"logprobs\", got {other:?}"
                )))
            }
        }
    }
    if logprobs && format != ResponseFormat::Json {
        return Err(Error::invalid_input(
            "include[]=logprobs needs response_format json (as OpenAI's)",
        ));
    }
    let chunking = chunking_strategy(&form.chunking)?;
    if chunking.is_some() && (form.vad_filter.is_some() || form.vad_parameters.is_some()) {
        return Err(Error::invalid_input(
            "chunking_strategy and vad_filter / vad_parameters both choose the voice activity \
             detection; give one",
        ));
    }
    let vad_filter = flag("vad_filter", form.vad_filter)? || chunking.is_some();
    // `diarized_json` is OpenAI's diarizing model's answer: it asks for diarization.
    let diarized = format == ResponseFormat::DiarizedJson;
    if diarized && task == Task::Translate {
        return Err(Error::invalid_input(
            "response_format diarized_json is for /v1/audio/transcriptions",
        ));
    }
    if form.known_speakers {
        return Err(Error::invalid_input(
            "known_speaker_names / known_speaker_references are not supported: speakers are \
             found by clustering and labelled A, B, … (diarized_json) or SPEAKER_00, … \
             (verbose_json with diarize=true)",
        ));
    }
    let diarize = flag("diarize", form.diarize)? || diarized;
    let count = |name: &str, v: Option<String>| -> Result<Option<usize>> {
        non_empty(v)
            .map(|v| {
                v.parse::<usize>().map_err(|_| {
                    Error::invalid_input(format!("{name} must be a whole number, got {v:?}"))
                })
            })
            .transpose()
    };
    let num_speakers = count("num_speakers", form.num_speakers)?;
    let min_speakers = count("min_speakers", form.min_speakers)?;
    let max_speakers = count("max_speakers", form.max_speakers)?;
    // faster-whisper's `vad_parameters` dict, as a JSON object in one form field.
    let vad_parameters = non_empty(form.vad_parameters)
        .map(|v| {
            serde_json::from_str::<dicta_core::VadOptions>(&v).map_err(|e| {
                Error::invalid_input(format!(
                    "vad_parameters must be a JSON object of VAD options: {e}"
                ))
            })
        })
        .transpose()?
        .or(chunking.flatten());
    let channels = non_empty(form.channels)
        .map(|v| dicta_core::ChannelMode::parse(&v))
        .transpose()?
        .unwrap_or_default();
    let options = RequestOptions {
        channels,
        language: non_empty(form.language).map(|l| l.to_ascii_lowercase()),
        prompt: non_empty(form.prompt),
        temperature: temperature.map(crate::backend::Temperature::One),
        word_timestamps: granularity.word,
        token_logprobs: logprobs,
        task,
        vad_filter,
        vad_parameters,
        diarize,
        num_speakers,
        min_speakers,
        max_speakers,
        ..RequestOptions::default()
    };
    let mut options = with_decoding(options, &form.decoding)?;
    options.hotwords = non_empty(form.hotwords);
    options.prefix = non_empty(form.prefix);
    Ok(Parsed {
        input: RawInput {
            id: file_name,
            payload: Payload::Bytes(bytes),
            format: AudioFormat::Encoded,
        },
        options,
        format,
        granularity,
        stream,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::openai_form::MAX_OPTION_BYTES;
    use dicta_core::text::PROMPT_TAIL_BYTES;

    fn form() -> Form {
        Form {
            file: Some(("a.wav".into(), vec![1, 2, 3])),
            ..Default::default()
        }
    }

    #[test]
    fn vad_fields_are_parsed_and_checked() {
        let p = parse(
            Form {
                vad_filter: Some("true".into()),
                vad_parameters: Some(
                    r#"{"min_silence_duration_ms": 500, "threshold": 0.4}"#.into(),
                ),
                ..form()
            },
            Task::Transcribe,
        )
        .unwrap();
        assert!(p.options.vad_filter);
        let v = p.options.vad_parameters.unwrap();
        assert_eq!(
            (v.min_silence_duration_ms, v.threshold, v.speech_pad_ms),
            (500, 0.4, 400)
        );
        for (filter, params) in [
            ("yes", None),
            ("true", Some(r#"{"threshold": "high"}"#)),
            ("true", Some(r#"{"tresh": 1}"#)),
        ] {
            let e = parse(
                Form {
                    vad_filter: Some(filter.into()),
                    vad_parameters: params.map(String::from),
                    ..form()
                },
                Task::Transcribe,
            )
            .err()
            .unwrap();
            assert!(e.message.contains("vad_"), "{}", e.message);
        }
    }

    #[test]
    fn defaults_follow_openai() {
        let p = parse(form(), Task::Transcribe).unwrap();
        assert_eq!(p.format, ResponseFormat::Json);
        assert_eq!(p.granularity, Granularity::default());
        assert_eq!(p.options, RequestOptions::default());
        assert_eq!(p.input.id, "a.wav");
    }

    #[test]
    fn include_logprobs_asks_for_token_logprobs_with_json_only() {
        let with = |include: &[&str], format: Option<&str>| {
            parse(
                Form {
                    include: include.iter().map(|s| s.to_string()).collect(),
                    response_format: format.map(String::from),
                    ..form()
                },
                Task::Transcribe,
            )
        };
        assert!(with(&["logprobs"], None).unwrap().options.token_logprobs);
        assert!(
            with(&[" logprobs "], Some("json"))
                .unwrap()
                .options
                .token_logprobs
        );
        assert!(!with(&[], None).unwrap().options.token_logprobs);
        for (include, format, needle) in [
            (
                &["logprobs"][..],
                Some("verbose_json"),
                "response_format json",
            ),
            (&["logprobs"][..], Some("text"), "response_format json"),
            (&["tokens"][..], None, "\"tokens\""),
        ] {
            let e = with(include, format).err().unwrap();
            assert!(e.message.contains(needle), "{}", e.message);
        }
    }

    #[test]
    fn chunking_strategy_is_voice_activity_detection() {
        let with = |fields: &[(&str, &str)], vad_filter: Option<&str>| {
            parse(
                Form {
                    chunking: fields
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                    vad_filter: vad_filter.map(String::from),
                    ..form()
                },
                Task::Transcribe,
            )
        };
        let auto = with(&[("", "auto")], None).unwrap().options;
        assert!(auto.vad_filter && auto.vad_parameters.is_none());
        // The SDK's bracketed fields, OpenAI's defaults for the rest.
        let sdk = with(&[("type", "server_vad"), ("threshold", "0.6")], None)
            .unwrap()
            .options;
        let v = sdk.vad_parameters.unwrap();
        assert!(sdk.vad_filter);
        assert_eq!(
            (v.threshold, v.min_silence_duration_ms, v.speech_pad_ms),
            (0.6, 200, 300)
        );
        let json =
            r#"{"type": "server_vad", "silence_duration_ms": 500, "prefix_padding_ms": 100}"#;
        let v = with(&[("", json)], None)
            .unwrap()
            .options
            .vad_parameters
            .unwrap();
        assert_eq!(
            (v.threshold, v.min_silence_duration_ms, v.speech_pad_ms),
            (0.5, 500, 100)
        );
        assert!(!with(&[], None).unwrap().options.vad_filter);
        for (fields, vad, needle) in [
            (&[("", "sometimes")][..], None, "\"auto\" or a server_vad"),
            (&[("type", "semantic_vad")][..], None, "server_vad"),
            (&[("threshold", "0.4")][..], None, "type must be"),
            (
                &[("type", "server_vad"), ("threshold", "2")][..],
                None,
                "threshold",
            ),
            (
                &[("type", "server_vad"), ("silence_duration_ms", "-5")][..],
                None,
                "silence_duration_ms",
            ),
            (
                &[("type", "server_vad"), ("eagerness", "low")][..],
                None,
                "eagerness",
            ),
            (&[("", "auto")][..], Some("true"), "give one"),
        ] {
            let e = with(fields, vad).err().unwrap();
            assert!(e.message.contains(needle), "{fields:?}: {}", e.message);
        }
    }

    #[test]
    fn word_granularity_turns_on_word_timestamps() {
        let f = Form {
            granularities: vec!["word".into(), "segment".into()],
            language: Some(" EN ".into()),
            temperature: Some("0.2".into()),
            response_format: Some("verbose_json".into()),
            ..form()
        };
        let p = parse(f, Task::Translate).unwrap();
        assert!(p.options.word_timestamps && p.granularity.segment && p.granularity.word);
        assert_eq!(p.options.language.as_deref(), Some("en"));
        assert_eq!(
            p.options.temperature,
            Some(crate::backend::Temperature::One(0.2))
        );
        assert_eq!(p.options.task, Task::Translate);
    }

    #[test]
    fn bad_fields_are_named() {
        let missing = Form::default();
        assert!(parse(missing, Task::Transcribe)
            .err()
            .unwrap()
            .message
            .contains("`file`"));
        let f = Form {
            temperature: Some("warm".into()),
            ..form()
        };
        assert!(parse(f, Task::Transcribe)
            .err()
            .unwrap()
            .message
            .contains("\"warm\""));
        let f = Form {
            granularities: vec!["char".into()],
            ..form()
        };
        assert!(parse(f, Task::Transcribe).is_err());
    }

    /// Fuzzing (see the `dicta-fuzz` crate) of the OpenAI routes' multipart forms as they
    /// arrive: the body under a fixed boundary goes through axum's multipart reader and
    /// [`read_form`], then [`parse`] for both tasks. A malformed form must be an error, never a
    /// panic, and a field never holds more than its cap. Run with
    /// `cargo test --release -p dicta-server -- --ignored fuzz_`.
    #[test]
    #[ignore = "fuzzing: run with --ignored"]
    fn fuzz_multipart_forms() {
        use axum::extract::FromRequest;
        const BOUNDARY: &str = "dictaFuzzBoundary7MA4YWxk";
        let part = |name: &str, value: &[u8], file: bool| {
            let mut p = format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"");
            if file {
                p.push_str("; filename=\"a.wav\"\r\nContent-Type: audio/wav");
            }
            p.push_str("\r\n\r\n");
            let mut b = p.into_bytes();
            b.extend_from_slice(value);
            b.extend_from_slice(b"\r\n");
            b
        };
        let end = format!("--{BOUNDARY}--\r\n").into_bytes();
        let seeds: Vec<Vec<u8>> = vec![
            [
                part("file", b"RIFF\x24\x00\x00\x00WAVEfmt ", true),
                part("model", b"whisper-1", false),
                part("response_format", b"verbose_json", false),
                part("timestamp_granularities[]", b"word", false),
                part("temperature", b"0.2", false),
                part("prompt", "the quick brown fox \u{e9}".as_bytes(), false),
                end.clone(),
            ]
            .concat(),
            [
                part("file", &[0u8; 64], true),
                part("vad_filter", b"true", false),
                part(
                    "vad_parameters",
                    br#"{"threshold": 0.4, "min_silence_duration_ms": 500}"#,
                    false,
                ),
                part("diarize", b"true", false),
                part("num_speakers", b"2", false),
                part("language", b"en", false),
                part("channels", b"split", false),
                end.clone(),
            ]
            .concat(),
            // Cut inside a part, with no closing boundary.
            part("file", b"ID3\x04\x00", true)[..20].to_vec(),
        ];
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        dicta_fuzz::fuzz("multipart_forms", &seeds, |bytes| {
            let req = axum::http::Request::builder()
                .method("POST")
                .header(
                    "content-type",
                    format!("multipart/form-data; boundary={BOUNDARY}"),
                )
                .body(axum::body::Body::from(bytes.to_vec()))
                .unwrap();
            rt.block_on(async {
                let Ok(mp) = Multipart::from_request(req, &()).await else {
                    return;
                };
                let Ok(form) = read_form(mp).await else {
                    return;
                };
                for v in [&form.language, &form.model, &form.temperature]
                    .into_iter()
                    .flatten()
                {
                    // Lossy UTF-8: each kept byte is at most one character.
                    assert!(
                        v.chars().count() <= MAX_OPTION_BYTES + 1,
                        "a field past its cap"
                    );
                }
                if let Some(p) = &form.prompt {
                    assert!(p.len() <= PROMPT_TAIL_BYTES, "a prompt past its tail");
                }
                for task in [Task::Transcribe, Task::Translate] {
                    let _ = parse(form.clone(), task);
                }
            });
        });
    }
}
