//! Liveness, readiness and metrics.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::Shared;
use crate::error::ApiError;

/// `GET /health`: 200 while the process serves HTTP (no auth, no model needed).
pub(crate) async fn health() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /readyz`: 200 once the backend warmed up, 503 before.
pub(crate) async fn readyz(State(s): State<Shared>) -> Response {
    if s.is_ready() {
        let models: Vec<&str> = s.models.iter().map(|m| m.0.as_str()).collect();
        Json(json!({ "status": "ready", "model": s.model, "models": models })).into_response()
    } else {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "not_ready",
            message: format!("model {} is still loading or warming up", s.model),
        }
        .into_response()
    }
}

/// `GET /metrics`: Prometheus/OpenMetrics text.
pub(crate) async fn metrics(State(s): State<Shared>) -> Response {
    s.metrics
        .queue_depth
        .set(i64::try_from(s.pipeline.queue_depth()).unwrap_or(i64::MAX));
    s.metrics
        .pending_audio_bytes
        .set(i64::try_from(s.pipeline.pending_audio_bytes()).unwrap_or(i64::MAX));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
        .into_response()
}
