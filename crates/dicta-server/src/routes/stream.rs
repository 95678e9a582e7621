//! `GET /v1/stream`: admission and upgrade of a WebSocket stream (the protocol is documented
//! in [`crate::stream`]).

use axum::extract::rejection::QueryRejection;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use axum::Extension;
use dicta_core::{Error, ErrorKind};

use super::{RequestId, Shared};
use crate::error::ApiError;
use crate::stream::protocol::{ConfigFields, StreamSettings};
use crate::stream::socket::serve_socket;

/// The query string of `GET /v1/stream`: the stream settings, and the API key for clients that
/// cannot send headers (checked by the gate).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StreamQuery {
    encoding: Option<String>,
    sample_rate: Option<u32>,
    language: Option<String>,
    model: Option<String>,
    task: Option<String>,
    prompt: Option<String>,
    hotwords: Option<String>,
    vad: Option<bool>,
    vad_parameters: Option<String>,
    api_key: Option<String>,
}

/// The `api_key` of a `/v1/stream` query string, if any.
pub(crate) fn query_key(uri: &Uri) -> Option<String> {
    let q: Query<StreamQuery> = Query::try_from_uri(uri).ok()?;
    q.0.api_key
}

/// Largest WebSocket message accepted (a frame of audio is typically a few KiB).
const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// Checks streaming support, the query-string settings and a free stream slot, then upgrades.
pub(crate) async fn stream(
    State(s): State<Shared>,
    Extension(id): Extension<RequestId>,
    query: Result<Query<StreamQuery>, QueryRejection>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let ws = ws.map_err(|r| ApiError {
        status: r.status(),
        kind: "upgrade_required",
        message: format!("GET /v1/stream is a WebSocket endpoint: {}", r.body_text()),
    })?;
    let Query(q) = query.map_err(|r| Error::invalid_input(r.body_text()))?;
    let fields = ConfigFields {
        encoding: q.encoding,
        sample_rate: q.sample_rate,
        language: q.language,
        model: q.model,
        task: q.task,
        prompt: q.prompt,
        hotwords: q.hotwords,
        vad: q.vad,
        vad_parameters: q.vad_parameters.map(serde_json::Value::String),
    };
    let settings = StreamSettings::default().with(fields)?;
    let (name, backend) = s.model(settings.options.model.as_deref())?;
    if !backend.supports_streaming() {
        return Err(ApiError {
            status: StatusCode::NOT_IMPLEMENTED,
            kind: "not_supported",
            message: format!("model {name} does not support streaming"),
        });
    }
    backend.check_stream_options(&settings.options)?;
    // Capacity, not only sockets: while open streams are behind real time, one more would
    // only put every stream further behind.
    let behind = s.stream_load.worst_lag();
    if behind > s.cfg.stream_admit_lag_s {
        s.metrics.streams_refused_behind.inc();
        return Err(Error::new(
            ErrorKind::Overloaded,
            format!(
                "open streams are {behind:.1} s behind real time (stream_admit_lag_s is {}); retry later",
                s.cfg.stream_admit_lag_s
            ),
        )
        .into());
    }
    let permit = s.streams.clone().try_acquire_owned().map_err(|_| {
        Error::new(
            ErrorKind::Overloaded,
            format!(
                "max_streams is {}, and {} streams are open; retry later",
                s.cfg.max_streams, s.cfg.max_streams
            ),
        )
    })?;
    Ok(ws
        // A browser that sent the key as a subprotocol needs one chosen in the answer.
        .protocols(["dicta"])
        .max_message_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| serve_socket(s, socket, settings, id.0, permit)))
}
