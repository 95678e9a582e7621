//! The one table from [`ErrorKind`] to HTTP status (and the one to gRPC codes), and the JSON
//! error body.
//!
//! Every error the server answers has the body `{"error": {"type": ..., "message": ...}}`
//! (the shape OpenAI's SDKs parse). `type` is the stable [`ErrorKind`] name, or one of the
//! transport-only types `unauthorized`, `request_timeout` (408, a body too slow), `not_found`
//! and `method_not_allowed`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use dicta_core::{Error, ErrorKind};

/// HTTP status for each error kind. This is the only place that mapping lives.
///
/// Every [`ErrorKind::LimitExceeded`] is 413 — including too many inputs in one request
/// (`max_inputs`), which is a request too large rather than a malformed one — so the table
/// stays a pure function of the kind.
pub fn status_for(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::InvalidInput
        | ErrorKind::EmptyInput
        | ErrorKind::UnsupportedFormat
        | ErrorKind::CorruptInput => StatusCode::BAD_REQUEST,
        ErrorKind::LimitExceeded => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::ModelLoad | ErrorKind::Fetch | ErrorKind::Io | ErrorKind::Internal => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

/// gRPC code for each error kind (the Riva service, `crate::grpc`). This is the only place
/// that mapping lives: bad input is `INVALID_ARGUMENT`, a full server and a request over a
/// limit `RESOURCE_EXHAUSTED` (the `dicta-error-type` metadata tells `overloaded` from
/// `limit_exceeded`), a request over its time `DEADLINE_EXCEEDED`.
pub fn grpc_code_for(kind: ErrorKind) -> tonic::Code {
    match kind {
        ErrorKind::InvalidInput
        | ErrorKind::EmptyInput
        | ErrorKind::UnsupportedFormat
        | ErrorKind::CorruptInput => tonic::Code::InvalidArgument,
        ErrorKind::LimitExceeded | ErrorKind::Overloaded => tonic::Code::ResourceExhausted,
        ErrorKind::Timeout => tonic::Code::DeadlineExceeded,
        ErrorKind::ModelLoad | ErrorKind::Fetch | ErrorKind::Io | ErrorKind::Internal => {
            tonic::Code::Internal
        }
    }
}

/// An error on its way to the client: status, stable type name and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable type name (`ErrorKind::as_str`, or a transport-only type).
    pub kind: &'static str,
    /// Human-readable message naming the limit/value/input involved.
    pub message: String,
}

impl ApiError {
    /// 401: missing or wrong API key. The message never echoes the key given.
    pub fn unauthorized() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            kind: "unauthorized",
            message: "missing or invalid API key: send `Authorization: Bearer <key>`".into(),
        }
    }

    /// 404 for an unknown route.
    pub fn not_found(path: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            kind: "not_found",
            message: format!("no route for {path}"),
        }
    }

    /// 408: the request body stalled, or came slower than the server accepts.
    pub fn body_timeout(body_timeout_s: f64, min_body_rate_kib: f64) -> Self {
        Self {
            status: StatusCode::REQUEST_TIMEOUT,
            kind: "request_timeout",
            message: format!(
                "the request body arrived too slowly: body_timeout_s is {body_timeout_s} (longest \
                 wait for more bytes) and min_body_rate_kib is {min_body_rate_kib} (slowest \
                 average after that long)"
            ),
        }
    }

    /// 405 for a known route with the wrong method.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        Self {
            status: StatusCode::METHOD_NOT_ALLOWED,
            kind: "method_not_allowed",
            message: format!("{method} is not allowed on {path}"),
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        Self {
            status: status_for(e.kind),
            kind: e.kind.as_str(),
            message: e.message,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = self.status.as_u16(), kind = self.kind, message = %self.message, "request failed");
        } else {
            tracing::info!(status = self.status.as_u16(), kind = self.kind, message = %self.message, "request refused");
        }
        let body = serde_json::json!({"error": {"type": self.kind, "message": self.message}});
        let mut response = (self.status, Json(body)).into_response();
        let headers = response.headers_mut();
        // RFC 9110: a 401 names the scheme it wants; a 503 says when to come back.
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"dicta\""),
            );
        }
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        // The rest of a body that timed out is not read: the connection cannot be reused.
        if self.status == StatusCode::REQUEST_TIMEOUT {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_covers_the_documented_statuses() {
        assert_eq!(status_for(ErrorKind::CorruptInput), StatusCode::BAD_REQUEST);
        assert_eq!(status_for(ErrorKind::EmptyInput), StatusCode::BAD_REQUEST);
        assert_eq!(
            status_for(ErrorKind::LimitExceeded),
            StatusCode::PAYLOAD_TOO_LARGE
        );
        assert_eq!(
            status_for(ErrorKind::Overloaded),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(status_for(ErrorKind::Timeout), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(
            status_for(ErrorKind::ModelLoad),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn conversion_keeps_kind_name_and_message() {
        let e: ApiError = Error::limit("max_inputs", 16, "17 inputs").into();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(e.kind, "limit_exceeded");
        assert!(e.message.contains("max_inputs") && e.message.contains("17"));
    }
}
