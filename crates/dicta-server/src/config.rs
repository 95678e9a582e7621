//! Server configuration: a plain struct, filled from CLI flags / env by the `dicta` binary.

use std::time::Duration;

use dicta_core::{Error, Result};

/// Everything the server needs to know besides the backend. `Default` gives the documented
/// defaults (the same as the `dicta serve` flags).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Address to bind (default `127.0.0.1`: loopback only).
    pub host: String,
    /// Port to bind; `0` picks a free port (see [`crate::Bound::local_addr`]).
    pub port: u16,
    /// Also serve Riva's ASR gRPC API and gRPC health on this port of `host` (`0` picks a free
    /// port, see [`crate::Bound::grpc_addr`]); `None`: no gRPC.
    pub grpc_port: Option<u16>,
    /// When set, every route except `/health` and `/readyz` (and `/metrics` with
    /// `public_metrics`) requires `Authorization: Bearer <api_key>`.
    pub api_key: Option<String>,
    /// Serve `/metrics` without the API key (for a Prometheus scraper that has none).
    pub public_metrics: bool,
    /// How long the batcher waits after taking a request for more to share a backend call.
    pub batch_wait_ms: u64,
    /// Most requests admitted and not yet taken by the batcher (decoding or queued); more → 503.
    pub max_queue: usize,
    /// Most requests coalesced into one backend call.
    pub max_group: usize,
    /// Most inputs (recordings) in one backend call, over all the requests of a group. A single
    /// request larger than this still runs, alone.
    pub max_group_inputs: usize,
    /// Requests holding more audio seconds than this go to each model's second batcher (the
    /// long lane), so a long upload and the short requests behind it are transcribed at the
    /// same time, taking turns on the model window by window. `0` keeps one lane.
    pub long_request_seconds: f64,
    /// Largest request body in MiB; larger → 413.
    pub max_body_mib: u64,
    /// Most inputs in one `/transcribe` request; more → 413.
    pub max_inputs: usize,
    /// Most audio seconds in one request (all inputs together); more → 413.
    pub max_audio_seconds: f64,
    /// Most bytes of decoded audio (16 kHz mono f32) in one request; more → 413.
    pub max_decoded_bytes: u64,
    /// Most MiB of decoded audio (16 kHz mono f32) held by all admitted requests together
    /// (decoding, queued or being transcribed); a request that would pass it gets 503. Uploads
    /// are decoded as a stream under their own limits, so this bounds the server's audio
    /// memory whatever the uploads expand to. The `dicta` binary defaults it to a quarter of
    /// the machine's memory.
    pub max_pending_audio_mib: u64,
    /// Longest a request may take from the start of its handler to its answer; longer → 504.
    pub request_timeout_s: f64,
    /// Most WebSocket streams (`GET /v1/stream`) open at once; one more is refused with 503
    /// before the upgrade.
    pub max_streams: usize,
    /// Most audio seconds one WebSocket stream may send over its lifetime (all utterances);
    /// more ends the stream with a `limit_exceeded` error.
    pub max_stream_seconds: f64,
    /// A WebSocket stream whose client sends nothing (no audio, text or ping) for this many
    /// seconds gets a `timeout` error event, its finals and `done`, and is closed with 1008.
    pub stream_idle_timeout_s: f64,
    /// A new WebSocket stream is refused with 503 while an open stream is more than this many
    /// seconds behind (its oldest audio not yet transcribed is that old; see
    /// `crate::stream::load`); a stream this far behind also gets `lag` events.
    pub stream_admit_lag_s: f64,
    /// A WebSocket stream more than this many seconds behind is ended (newest first, one every
    /// 2 s) with an `overloaded` error, the finals of the audio transcribed so far and `done`,
    /// then closed with 1013, so that the other streams catch up.
    pub stream_max_lag_s: f64,
    /// Longest wait for a request's headers, from the connection's start or (keep-alive) the
    /// end of its previous response; a connection that sends none in time is closed. Bounds
    /// slow-header clients and idle connections alike.
    pub header_timeout_s: f64,
    /// Longest wait for the next bytes of a request body; longer → 408 and the connection is
    /// closed. After this long a body must also average at least `min_body_rate_kib`.
    pub body_timeout_s: f64,
    /// Slowest average body rate (KiB/s) accepted once `body_timeout_s` has passed; slower →
    /// 408. `0` turns the rate check off (the stall check stays).
    pub min_body_rate_kib: f64,
    /// Most HTTP connections open at once. At the cap a new connection closes the oldest idle
    /// one (no request in flight); when none is idle the new one is refused (closed at once).
    /// WebSocket streams are counted by `max_streams` instead, once upgraded.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".to_string(),
            port: 8000,
            grpc_port: None,
            api_key: None,
            public_metrics: false,
            batch_wait_ms: 20,
            max_queue: 32,
            max_group: 8,
            max_group_inputs: 64,
            long_request_seconds: 120.0,
            max_body_mib: 64,
            max_inputs: 16,
            max_audio_seconds: 3600.0,
            max_decoded_bytes: 256 << 20,
            max_pending_audio_mib: 2048,
            request_timeout_s: 600.0,
            max_streams: 16,
            max_stream_seconds: 3600.0,
            stream_idle_timeout_s: 60.0,
            stream_admit_lag_s: 3.0,
            stream_max_lag_s: 30.0,
            header_timeout_s: 15.0,
            body_timeout_s: 30.0,
            min_body_rate_kib: 1.0,
            max_connections: 1024,
        }
    }
}

impl ServerConfig {
    /// Checks that every limit is usable; the message names the setting and the value.
    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("max_queue", self.max_queue as f64),
            ("max_group", self.max_group as f64),
            ("max_group_inputs", self.max_group_inputs as f64),
            ("max_body_mib", self.max_body_mib as f64),
            ("max_inputs", self.max_inputs as f64),
            ("max_audio_seconds", self.max_audio_seconds),
            ("max_decoded_bytes", self.max_decoded_bytes as f64),
            ("max_pending_audio_mib", self.max_pending_audio_mib as f64),
            ("request_timeout_s", self.request_timeout_s),
            ("max_streams", self.max_streams as f64),
            ("max_stream_seconds", self.max_stream_seconds),
            ("stream_idle_timeout_s", self.stream_idle_timeout_s),
            ("stream_admit_lag_s", self.stream_admit_lag_s),
            ("stream_max_lag_s", self.stream_max_lag_s),
            ("header_timeout_s", self.header_timeout_s),
            ("body_timeout_s", self.body_timeout_s),
            ("max_connections", self.max_connections as f64),
        ];
        for (name, value) in positive {
            // NaN fails `is_finite`.
            if !value.is_finite() || value <= 0.0 {
                return Err(Error::invalid_input(format!(
                    "{name} must be a positive number, got {value}"
                )));
            }
        }
        if !self.long_request_seconds.is_finite() || self.long_request_seconds < 0.0 {
            return Err(Error::invalid_input(format!(
                "long_request_seconds must be 0 or more, got {}",
                self.long_request_seconds
            )));
        }
        if !self.min_body_rate_kib.is_finite() || self.min_body_rate_kib < 0.0 {
            return Err(Error::invalid_input(format!(
                "min_body_rate_kib must be 0 or more, got {}",
                self.min_body_rate_kib
            )));
        }
        if self.max_body_mib > (1 << 20) {
            return Err(Error::invalid_input(format!(
                "max_body_mib must be at most 1048576, got {}",
                self.max_body_mib
            )));
        }
        if self.api_key.as_deref() == Some("") {
            return Err(Error::invalid_input(
                "api_key must not be empty (omit it to disable authentication)",
            ));
        }
        Ok(())
    }

    /// The body limit in bytes.
    pub fn max_body_bytes(&self) -> usize {
        (self.max_body_mib as usize) << 20
    }

    /// The batcher's wait as a duration.
    pub fn batch_wait(&self) -> Duration {
        Duration::from_millis(self.batch_wait_ms)
    }

    /// The WebSocket idle timeout as a duration.
    pub fn stream_idle_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.stream_idle_timeout_s)
    }

    /// The header timeout as a duration.
    pub fn header_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.header_timeout_s)
    }

    /// The body stall timeout as a duration.
    pub fn body_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.body_timeout_s)
    }

    /// The per-request timeout as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.request_timeout_s)
    }

    /// What an HTTP request past [`Self::request_timeout`] is told.
    pub(crate) fn request_timeout_error(&self) -> dicta_core::Error {
        dicta_core::Error::new(
            dicta_core::ErrorKind::Timeout,
            format!(
                "request_timeout_s is {}, and the request took longer; its work was dropped",
                self.request_timeout_s
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_the_documented_flags() {
        let c = ServerConfig::default();
        c.validate().unwrap();
        assert_eq!(c.host, "127.0.0.1");
        assert_eq!((c.batch_wait_ms, c.max_queue, c.max_group), (20, 32, 8));
        assert_eq!((c.max_inputs, c.max_body_mib), (16, 64));
        assert_eq!(c.max_decoded_bytes, 256 * 1024 * 1024);
        assert_eq!(c.max_body_bytes(), 64 * 1024 * 1024);
        assert_eq!((c.max_streams, c.max_stream_seconds), (16, 3600.0));
        assert_eq!((c.header_timeout_s, c.body_timeout_s), (15.0, 30.0));
        assert_eq!((c.min_body_rate_kib, c.max_connections), (1.0, 1024));
    }

    #[test]
    fn zero_or_nan_limits_are_refused_by_name() {
        let c = ServerConfig {
            max_group: 0,
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().message.contains("max_group"));
        let c = ServerConfig {
            request_timeout_s: f64::NAN,
            ..Default::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .message
            .contains("request_timeout_s"));
        let c = ServerConfig {
            api_key: Some(String::new()),
            ..Default::default()
        };
        assert!(c.validate().is_err());
    }
}
