//! The HTTP surface: router, per-request context (id, timeout, metrics, logs) and the gate
//! (API key, declared body size) in front of every route but `/health`.

mod batch;
mod health;
mod openai;
mod openai_form;
mod openai_stream;
mod stream;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use dicta_core::Error;
use tracing::Instrument as _;

use crate::backend::Backend;
use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::pipeline::Pipeline;

/// Everything the handlers share.
pub(crate) struct AppState {
    pub cfg: Arc<ServerConfig>,
    pub pipeline: Pipeline,
    pub metrics: Arc<Metrics>,
    /// One flag per resident model, set once its batcher warmed it up.
    pub ready: Vec<Arc<AtomicBool>>,
    /// The default model's name.
    pub model: String,
    /// Every resident model (name, backend), the default first; the backends serve stream
    /// sessions (batch work goes through the pipeline's batchers).
    pub models: Vec<(String, Arc<dyn Backend>)>,
    /// One permit per open WebSocket stream (`max_streams`).
    pub streams: Arc<tokio::sync::Semaphore>,
    /// How far behind the open streams are (admission, `lag` events, shedding).
    pub stream_load: Arc<crate::stream::load::StreamLoad>,
    /// Turns true when the server starts shutting down (streams end their utterance and close).
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

pub(crate) type Shared = Arc<AppState>;

impl AppState {
    /// The resident model `name` picks (see [`crate::pipeline::pick_model`]).
    pub fn model(&self, name: Option<&str>) -> dicta_core::Result<&(String, Arc<dyn Backend>)> {
        let i = crate::pipeline::pick_model(self.models.iter().map(|m| m.0.as_str()), name)?;
        Ok(&self.models[i])
    }

    /// Whether every resident model warmed up.
    pub fn is_ready(&self) -> bool {
        self.ready
            .iter()
            .all(|r| r.load(std::sync::atomic::Ordering::Acquire))
    }
}

/// The server's id for one HTTP request; also sent back as the `x-request-id` header.
#[derive(Debug, Clone)]
pub(crate) struct RequestId(pub String);

/// Builds the router.
pub(crate) fn router(state: Shared) -> Router {
    // Orchestrator probes carry no key: /health and /readyz are open, /metrics with
    // `public_metrics` (a Prometheus scraper without the key).
    let mut open = Router::new()
        .route("/", get(demo))
        .route("/health", get(health::health))
        .route("/readyz", get(health::readyz));
    let mut protected = Router::new();
    if state.cfg.public_metrics {
        open = open.route("/metrics", get(health::metrics));
    } else {
        protected = protected.route("/metrics", get(health::metrics));
    }
    let protected = protected
        .route("/v1/models", get(openai::models))
        .route("/v1/audio/transcriptions", post(openai::transcriptions))
        .route("/v1/audio/translations", post(openai::translations))
        .route("/transcribe", post(batch::transcribe))
        .route("/v1/transcriptions/raw", post(batch::raw))
        .route("/v1/stream", get(stream::stream))
        .route("/v1/realtime", get(crate::realtime::upgrade))
        .route_layer(from_fn_with_state(state.clone(), gate));
    open.merge(protected)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.cfg.max_body_bytes()))
        .layer(from_fn_with_state(state.clone(), request_context))
        .with_state(state)
}

/// `GET /`: the live-transcription page (microphone → `/v1/stream`); static, no key needed to
/// load it (its requests carry the key the user types).
async fn demo() -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        include_str!("demo.html"),
    )
        .into_response()
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(uri.path())
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), uri.path())
}

/// Counts a request whose future was dropped before it answered: the client went away.
struct InFlight {
    metrics: Arc<Metrics>,
    span: tracing::Span,
    answered: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.answered {
            self.metrics.disconnects.inc();
            self.span
                .in_scope(|| tracing::info!("client went away before the answer; work dropped"));
        }
    }
}

/// Request id, timeout, structured log line and metrics for every request.
async fn request_context(State(s): State<Shared>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = uuid::Uuid::new_v4().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_string();
    let span =
        tracing::info_span!("request", request_id = %id, method = %req.method(), route = %route);
    req.extensions_mut().insert(RequestId(id.clone()));
    let mut in_flight = InFlight {
        metrics: s.metrics.clone(),
        span: span.clone(),
        answered: false,
    };
    let body_deadline = req.extensions().get::<crate::conn::BodyDeadline>().cloned();
    let limit = s.cfg.request_timeout();
    let mut response =
        match tokio::time::timeout(limit, next.run(req).instrument(span.clone())).await {
            Ok(response) => response,
            Err(_) => {
                let e = s.cfg.request_timeout_error();
                span.in_scope(|| ApiError::from(e).into_response())
            }
        };
    // Whatever the handler made of a body read that timed out (a 400 from an extractor, say),
    // the answer is 408, except for early refusals whose body was only being drained.
    let refused_early = matches!(
        response.status(),
        StatusCode::UNAUTHORIZED | StatusCode::PAYLOAD_TOO_LARGE
    );
    if body_deadline.is_some_and(|d| d.passed()) && !refused_early {
        s.metrics.connection_closed("body_timeout");
        response = span.in_scope(|| {
            ApiError::body_timeout(s.cfg.body_timeout_s, s.cfg.min_body_rate_kib).into_response()
        });
    }
    in_flight.answered = true;
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", v);
    }
    let finish = Finish {
        metrics: s.metrics.clone(),
        span,
        route,
        status: response.status().as_u16(),
        started,
    };
    if is_event_stream(&response) {
        // Server-sent events: the request lasts until the last event, not the headers.
        return response.map(|body| axum::body::Body::new(EventStreamBody::new(body, finish)));
    }
    finish.record();
    response
}

fn is_event_stream(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// What a request's end records: its latency and count, and the "request finished" log line.
struct Finish {
    metrics: Arc<Metrics>,
    span: tracing::Span,
    route: String,
    status: u16,
    started: Instant,
}

impl Finish {
    fn record(&self) {
        let (status, seconds) = (self.status, self.started.elapsed().as_secs_f64());
        self.metrics.observe_request(&self.route, status, seconds);
        self.span
            .in_scope(|| tracing::info!(status, seconds, "request finished"));
    }
}

/// An event stream's body that records its request when the last event has gone out, or, when
/// the client leaves first (the body is dropped unfinished), counts a disconnect.
struct EventStreamBody {
    inner: axum::body::Body,
    finish: Option<Finish>,
}

impl EventStreamBody {
    fn new(inner: axum::body::Body, finish: Finish) -> Self {
        Self {
            inner,
            finish: Some(finish),
        }
    }
}

impl http_body::Body for EventStreamBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if let std::task::Poll::Ready(None | Some(Err(_))) = polled {
            if let Some(f) = self.finish.take() {
                f.record();
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for EventStreamBody {
    fn drop(&mut self) {
        if let Some(f) = self.finish.take() {
            f.metrics.disconnects.inc();
            f.span.in_scope(|| {
                tracing::info!("client went away before the last event; work dropped")
            });
        }
    }
}

/// API key check, then the declared body size (before any of the body is used).
async fn gate(State(s): State<Shared>, req: Request, next: Next) -> Result<Response, ApiError> {
    let refused = if !authorized(&s.cfg, req.headers(), req.uri()) {
        Some(ApiError::unauthorized())
    } else {
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        declared
            .filter(|&len| len > s.cfg.max_body_bytes() as u64)
            .map(|len| body_too_large(&s.cfg, Some(len)).into())
    };
    match refused {
        Some(e) => {
            linger(req.into_body()).await;
            Err(e)
        }
        None => Ok(next.run(req).await),
    }
}

/// Whether the request carries the API key (always, without one): `Authorization: Bearer
/// <key>`, the scheme matched case-insensitively as RFC 9110 says. Browsers cannot set headers
/// on a WebSocket, so `/v1/stream` also takes the key as the subprotocol `dicta.bearer.<key>`
/// (`new WebSocket(url, ["dicta", "dicta.bearer." + key])`) or the query parameter `api_key`,
/// and `/v1/realtime` as OpenAI's browser subprotocol `openai-insecure-api-key.<key>`
/// (`new WebSocket(url, ["realtime", "openai-insecure-api-key." + key])`).
fn authorized(cfg: &ServerConfig, headers: &axum::http::HeaderMap, uri: &Uri) -> bool {
    let Some(key) = &cfg.api_key else {
        return true;
    };
    let same = |g: &str| same_secret(g.as_bytes(), key.as_bytes());
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(token)
        })
        .map(str::trim);
    if given.is_some_and(same) {
        return true;
    }
    let prefix = match uri.path() {
        "/v1/stream" => STREAM_KEY_PROTOCOL,
        "/v1/realtime" => REALTIME_KEY_PROTOCOL,
        _ => return false,
    };
    let by_protocol = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|p| p.trim().strip_prefix(prefix))
        .any(same);
    by_protocol
        || (prefix == STREAM_KEY_PROTOCOL && stream::query_key(uri).is_some_and(|k| same(&k)))
}

/// Prefix of the WebSocket subprotocol that carries the API key on `/v1/stream`.
const STREAM_KEY_PROTOCOL: &str = "dicta.bearer.";
/// Prefix of the one that carries it on `/v1/realtime` (OpenAI's, for browsers).
const REALTIME_KEY_PROTOCOL: &str = "openai-insecure-api-key.";

/// Most bytes read and dropped from a refused request's body before answering.
const LINGER_BYTES: usize = 256 << 20;
/// Longest time spent doing so.
const LINGER_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads and drops what the client is still sending (bounded in bytes and time) before an
/// early refusal is answered, as nginx's lingering close does: a client that writes its whole
/// body before reading (Python's `urllib`, many others) would otherwise have its connection
/// reset under it and never see the 401/413.
async fn linger(body: axum::body::Body) {
    use futures_util::StreamExt as _;
    let mut stream = body.into_data_stream();
    let mut seen = 0usize;
    let _ = tokio::time::timeout(LINGER_TIME, async {
        while let Some(Ok(chunk)) = stream.next().await {
            seen += chunk.len();
            if seen > LINGER_BYTES {
                break;
            }
        }
    })
    .await;
}

/// Compares secrets without an early exit on the first differing byte.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The 413 for a body over `max_body_mib`; `given` is the size when known.
pub(crate) fn body_too_large(cfg: &ServerConfig, given: Option<u64>) -> Error {
    Error::limit(
        "max_body_mib",
        format!("{} MiB ({} bytes)", cfg.max_body_mib, cfg.max_body_bytes()),
        given.map_or_else(
            || format!("a body over {} bytes", cfg.max_body_bytes()),
            |n| format!("a {n}-byte body"),
        ),
    )
}

/// Maps an axum extractor rejection (by its status) onto the error table: 413 → the body
/// limit, anything else → invalid input with axum's explanation.
pub(crate) fn rejection(cfg: &ServerConfig, status: StatusCode, text: String) -> ApiError {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        body_too_large(cfg, None).into()
    } else {
        Error::invalid_input(text).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_by_content_and_length() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"", b"a"));
    }

    #[test]
    fn body_limit_message_names_limit_and_size() {
        let cfg = ServerConfig {
            max_body_mib: 1,
            ..Default::default()
        };
        let m = body_too_large(&cfg, Some(2_000_000)).message;
        assert!(m.contains("max_body_mib is 1 MiB (1048576 bytes)"), "{m}");
        assert!(m.contains("2000000-byte body"), "{m}");
    }
}
