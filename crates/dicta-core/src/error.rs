//! Typed errors with stable kinds.
//!
//! Every library crate returns [`Error`]; each transport (HTTP, gRPC, CLI) owns one table
//! from [`ErrorKind`] to its own status code, so the mapping lives in exactly one place.

use std::fmt;

/// Stable category of an error. Transports map these to status codes; the string form
/// (see [`ErrorKind::as_str`]) is part of the public JSON error shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The caller supplied something invalid (bad parameter, malformed request).
    InvalidInput,
    /// The input holds no audio (zero bytes, zero samples).
    EmptyInput,
    /// The input is in a format Dicta cannot decode.
    UnsupportedFormat,
    /// The input claims a supported format but is damaged (truncated, lying header, bad samples).
    CorruptInput,
    /// A configured limit was exceeded; the message names the limit and the value given.
    LimitExceeded,
    /// A model folder is missing, incomplete or cannot be run safely.
    ModelLoad,
    /// Fetching a model or resource failed (network, pip, checksum).
    Fetch,
    /// The service is overloaded (queue full); retry later.
    Overloaded,
    /// The request took longer than allowed.
    Timeout,
    /// A filesystem or OS error.
    Io,
    /// A bug or an unexpected failure inside Dicta (including tensor backend errors).
    Internal,
}

impl ErrorKind {
    /// The stable snake_case name used in JSON error bodies and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::EmptyInput => "empty_input",
            ErrorKind::UnsupportedFormat => "unsupported_format",
            ErrorKind::CorruptInput => "corrupt_input",
            ErrorKind::LimitExceeded => "limit_exceeded",
            ErrorKind::ModelLoad => "model_load",
            ErrorKind::Fetch => "fetch",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Io => "io",
            ErrorKind::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Dicta error: a stable [`ErrorKind`] plus a human-readable message that names the
/// input, the limit or the value involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Error {
    /// Stable category.
    pub kind: ErrorKind,
    /// What went wrong, naming the input/limit/value.
    pub message: String,
}

/// Result alias used across Dicta's library crates.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Builds an error of the given kind.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// Shorthand for [`ErrorKind::InvalidInput`].
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }

    /// Shorthand for [`ErrorKind::ModelLoad`].
    pub fn model_load(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::ModelLoad, message)
    }

    /// Shorthand for [`ErrorKind::Internal`].
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// Shorthand for [`ErrorKind::LimitExceeded`]; `limit` names the setting.
    pub fn limit(limit: &str, allowed: impl fmt::Display, given: impl fmt::Display) -> Self {
        Self::new(
            ErrorKind::LimitExceeded,
            format!("{limit} is {allowed}, but the input has {given}"),
        )
    }

    /// Prefixes the message with context (e.g. the input name) keeping the kind.
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::new(ErrorKind::Io, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_serializes_to_its_stable_name() {
        for kind in [
            ErrorKind::InvalidInput,
            ErrorKind::EmptyInput,
            ErrorKind::UnsupportedFormat,
            ErrorKind::CorruptInput,
            ErrorKind::LimitExceeded,
            ErrorKind::ModelLoad,
            ErrorKind::Fetch,
            ErrorKind::Overloaded,
            ErrorKind::Timeout,
            ErrorKind::Io,
            ErrorKind::Internal,
        ] {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
    }

    #[test]
    fn limit_message_names_limit_and_value() {
        let e = Error::limit("max_audio_seconds", 3600, "4000.5 s");
        assert_eq!(e.kind, ErrorKind::LimitExceeded);
        assert!(e.message.contains("max_audio_seconds"));
        assert!(e.message.contains("3600"));
        assert!(e.message.contains("4000.5 s"));
        let e = e.context("a.wav");
        assert!(e.to_string().starts_with("limit_exceeded: a.wav: "));
    }
}
