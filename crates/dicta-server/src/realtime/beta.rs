//! The Realtime API's beta dialect of transcription sessions, as clients written against it
//! speak it (the `openai` SDK's `client.beta.realtime`, which sends `OpenAI-Beta: realtime=v1`):
//! `transcription_session.update` with the session's fields flat (`input_audio_format`
//! `pcm16` / `g711_ulaw` / `g711_alaw`, `input_audio_transcription`, `turn_detection`,
//! `input_audio_noise_reduction`, `include`), answered by `transcription_session.updated`, and
//! `transcription_session.created` first when the handshake asked for the beta. The turn and
//! transcription events are the same in both dialects.
//!
//! Both dialects update the same settings: a beta session is translated into the GA shape that
//! [`super::settings::Settings::updated`] reads, and the settings' GA shape back for the answer.

use axum::http::HeaderMap;
use dicta_core::{Error, Result};
use serde_json::{json, Map, Value};

/// Whether the handshake asked for the beta (`OpenAI-Beta: realtime=v1`, alone or in a list):
/// its clients get the beta's first event (the rest is the same in both dialects).
pub(super) fn requested(headers: &HeaderMap) -> bool {
    headers
        .get_all("openai-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim() == "realtime=v1")
}

/// A `transcription_session.update`'s `session` as the GA `session.update` one.
pub(super) fn to_ga(session: &Value) -> Result<Value> {
    let Some(obj) = session.as_object() else {
        return Err(Error::invalid_input(format!(
            "session must be an object, got {session}"
        )));
    };
    let mut input = Map::new();
    let mut ga = Map::new();
    ga.insert("type".into(), json!("transcription"));
    for (key, value) in obj {
        match key.as_str() {
            "input_audio_format" => {
                let format = match value.as_str() {
                    Some("pcm16") => json!({"type": "audio/pcm", "rate": 24000}),
                    Some("g711_ulaw") => json!({"type": "audio/pcmu"}),
                    Some("g711_alaw") => json!({"type": "audio/pcma"}),
                    _ => {
                        return Err(Error::invalid_input(format!(
                            "session.input_audio_format must be pcm16, g711_ulaw or g711_alaw, \
                             got {value}"
                        )))
                    }
                };
                input.insert("format".into(), format);
            }
            "input_audio_transcription" => {
                input.insert("transcription".into(), value.clone());
            }
            "turn_detection" => {
                input.insert("turn_detection".into(), value.clone());
            }
            "input_audio_noise_reduction" => {
                input.insert("noise_reduction".into(), value.clone());
            }
            "include" => {
                ga.insert("include".into(), value.clone());
            }
            // Text is what a transcription session answers with.
            "modalities" if modalities_are_text(value) => {}
            "modalities" => {
                return Err(Error::invalid_input(format!(
                    "session.modalities of a transcription session is [\"text\"], got {value}"
                )))
            }
            // For ephemeral tokens minted over REST; a session already open has its key.
            "client_secret" => {}
            other => {
                return Err(Error::invalid_input(format!(
                    "session.{other} is not supported in a transcription session"
                )))
            }
        }
    }
    if !input.is_empty() {
        ga.insert("audio".into(), json!({ "input": input }));
    }
    Ok(Value::Object(ga))
}

fn modalities_are_text(v: &Value) -> bool {
    v.as_array()
        .is_some_and(|m| m.iter().all(|x| x == "text") && !m.is_empty())
}

/// The settings' GA session object (`Settings::json`) in the beta's shape.
pub(super) fn from_ga(ga: &Value) -> Value {
    let input = &ga["audio"]["input"];
    let format = match input["format"]["type"].as_str() {
        Some("audio/pcmu") => "g711_ulaw",
        Some("audio/pcma") => "g711_alaw",
        _ => "pcm16",
    };
    json!({
        "id": ga["id"],
        "object": "realtime.transcription_session",
        "modalities": ["text"],
        "input_audio_format": format,
        "input_audio_transcription": input["transcription"],
        "turn_detection": input["turn_detection"],
        "input_audio_noise_reduction": input["noise_reduction"],
        "include": ga["include"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beta_session_becomes_the_ga_one_and_back() {
        let beta = json!({
            "input_audio_format": "g711_ulaw",
            "input_audio_transcription": {"model": "whisper-1", "language": "en", "prompt": "x"},
            "turn_detection": null,
            "input_audio_noise_reduction": {"type": "near_field"},
            "include": ["item.input_audio_transcription.logprobs"],
            "modalities": ["text"],
        });
        let ga = to_ga(&beta).unwrap();
        assert_eq!(
            ga,
            json!({
                "type": "transcription",
                "include": ["item.input_audio_transcription.logprobs"],
                "audio": {"input": {
                    "format": {"type": "audio/pcmu"},
                    "transcription": {"model": "whisper-1", "language": "en", "prompt": "x"},
                    "turn_detection": null,
                    "noise_reduction": {"type": "near_field"},
                }},
            })
        );
        let mut shown = ga.clone();
        shown["id"] = json!("sess_1");
        let back = from_ga(&shown);
        for key in [
            "input_audio_format",
            "input_audio_transcription",
            "turn_detection",
            "input_audio_noise_reduction",
            "include",
        ] {
            assert_eq!(back[key], beta[key], "{key}");
        }
        assert_eq!(back["id"], "sess_1");
        // Only what the update names changes: an empty one names nothing.
        assert_eq!(to_ga(&json!({})).unwrap(), json!({"type": "transcription"}));
        assert_eq!(
            to_ga(&json!({"input_audio_format": "pcm16"})).unwrap()["audio"]["input"]["format"],
            json!({"type": "audio/pcm", "rate": 24000})
        );
    }

    #[test]
    fn the_beta_is_asked_for_by_its_header_alone_or_in_a_list() {
        let with = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append("OpenAI-Beta", v.parse().unwrap());
            }
            requested(&h)
        };
        assert!(with(&["realtime=v1"]));
        assert!(with(&["assistants=v2, realtime=v1"]));
        assert!(with(&["assistants=v2", "realtime=v1"]));
        assert!(!with(&[]));
        assert!(!with(&["realtime=v2"]));
    }

    #[test]
    fn what_the_beta_cannot_mean_is_refused_by_name() {
        for (session, named) in [
            (json!({"input_audio_format": "mp3"}), "input_audio_format"),
            (json!({"modalities": ["audio", "text"]}), "modalities"),
            (json!({"voice": "alloy"}), "session.voice"),
            (json!("pcm16"), "object"),
        ] {
            let e = to_ga(&session).unwrap_err();
            assert!(e.message.contains(named), "{session}: {}", e.message);
        }
    }
}
