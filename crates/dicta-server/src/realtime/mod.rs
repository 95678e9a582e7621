//! OpenAI's Realtime API for transcription: `GET /v1/realtime?intent=transcription`, a
//! WebSocket as the `openai` SDK opens it (`client.realtime.connect(extra_query={"intent":
//! "transcription"})`), with the same API key as every other route: `Authorization: Bearer`, or
//! from a browser, OpenAI's subprotocols `["realtime", "openai-insecure-api-key.<key>"]` (the
//! answer chooses `realtime`).
//!
//! The conversation (OpenAI's event names and shapes):
//!
//! 1. The server sends `session.created` with the session: `audio.input.format` (`audio/pcm`
//!    at 24 kHz; `audio/pcmu` / `audio/pcma` at 8 kHz), `audio.input.transcription` (`model`,
//!    `language`, `prompt`), `audio.input.turn_detection` (`server_vad` with `threshold`,
//!    `prefix_padding_ms` 300 and `silence_duration_ms` 500 when the server has a voice
//!    activity detector, else `null`) and `include`.
//! 2. `session.update` (or the beta's `transcription_session.update`: `beta.rs`) changes any
//!    of those (answered by `session.updated` with the whole session) and
//!    `audio.input.noise_reduction` (`near_field` / `far_field`: RNNoise on the audio the turn
//!    detector hears; the model hears the audio as it came, which it transcribes
//!    better); `semantic_vad` and fields Dicta does not know are refused with an `error` event,
//!    the session unchanged.
//! 3. `input_audio_buffer.append` (`audio`: base64) adds audio to the input buffer. With
//!    `server_vad` the detector ([`crate::backend::TurnDetector`]) answers
//!    `input_audio_buffer.speech_started` (`audio_start_ms`, which includes the prefix padding)
//!    and `input_audio_buffer.speech_stopped` (`audio_end_ms`, which includes the silence that
//!    ended it), then commits that audio as an item (`input_audio_buffer.committed`).
//!    `input_audio_buffer.commit` commits the buffer by hand (at least 100 ms), and
//!    `input_audio_buffer.clear` drops it (`input_audio_buffer.cleared`).
//! 4. Each committed item is transcribed through the server's queue and batches, as an upload
//!    is: `conversation.item.input_audio_transcription.delta` per segment as its window is
//!    decoded, then `…completed` with the `transcript` and `usage` (`{"type":"duration",
//!    "seconds"}`), or `…failed` with the error. With `include:
//!    ["item.input_audio_transcription.logprobs"]` both carry `logprobs`.
//!
//! Errors are `{"type":"error","error":{"type","code","message","param","event_id"}}`; the
//! session goes on. The socket holds one of `max_streams` slots; `max_stream_seconds` bounds
//! its audio, `stream_idle_timeout_s` its silences, and a server shutdown closes it with 1001.

mod beta;
mod session;
mod settings;

pub(crate) use settings::{server_vad, ServerVad};

use std::collections::HashMap;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Extension;
use dicta_core::{Error, ErrorKind};

use crate::error::ApiError;
use crate::routes::{RequestId, Shared};

/// Largest client message: an `append` of about a minute of 24 kHz audio in base64.
const MAX_MESSAGE_BYTES: usize = 8 << 20;

/// `GET /v1/realtime`: checks the intent and a free stream slot, then upgrades.
pub(crate) async fn upgrade(
    State(s): State<Shared>,
    Extension(id): Extension<RequestId>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let ws = ws.map_err(|r| ApiError {
        status: r.status(),
        kind: "upgrade_required",
        message: format!(
            "GET /v1/realtime is a WebSocket endpoint: {}",
            r.body_text()
        ),
    })?;
    if query.get("intent").map(String::as_str) != Some("transcription") {
        return Err(Error::invalid_input(
            "Dicta's realtime route serves transcription sessions: connect with \
             ?intent=transcription",
        )
        .into());
    }
    let permit = s.streams.clone().try_acquire_owned().map_err(|_| {
        Error::new(
            ErrorKind::Overloaded,
            format!(
                "max_streams is {}, and every stream slot is taken; retry later",
                s.cfg.max_streams
            ),
        )
    })?;
    let beta = beta::requested(&headers);
    Ok(ws
        // A browser offers `realtime` beside the key's subprotocol and needs one chosen.
        .protocols(["realtime"])
        .max_message_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| session::serve(s, socket, id.0, permit, beta)))
}
