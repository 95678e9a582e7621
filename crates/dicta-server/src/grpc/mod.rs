//! NVIDIA Riva's ASR gRPC API (`nvidia.riva.asr.RivaSpeechRecognition`) and
//! `grpc.health.v1.Health`, on their own port (`ServerConfig::grpc_port`), so that Riva's own
//! client (`riva.client.ASRService`) and telephony stacks built on it work unmodified.
//!
//! - `Recognize`: the whole audio in one message (a WAV/FLAC/MP3/OGG file, or raw `LINEAR_PCM`,
//!   `MULAW` or `ALAW` at `sample_rate_hertz` with `audio_channel_count` interleaved channels),
//!   through the same admission, limits and batcher as HTTP; one result per segment.
//! - `StreamingRecognize`: a `streaming_config` message, then `audio_content` chunks of any
//!   size (raw samples, or a WAV whose header is skipped); interim results (`is_final: false`,
//!   with `interim_results`) and finals, word offsets with `enable_word_time_offsets`. Takes one
//!   of the `max_streams` slots, as a WebSocket stream does.
//! - `GetRivaSpeechRecognitionConfig`: the resident models.
//! - Both recognize calls write their text as the config asks (`enable_automatic_punctuation`,
//!   `profanity_filter`: [`text_rules`]).
//!
//! With an API key, every ASR call needs the metadata `authorization: Bearer <key>` (health
//! probes do not). Errors carry the gRPC code of [`crate::error::grpc_code_for`] and the
//! library's message; the metadata `dicta-error-type` holds the stable error kind.

mod convert;
mod profanity;
mod recognize;
mod streaming;
mod text_rules;

pub(crate) use convert::{alaw, mulaw};

use std::sync::Arc;

use dicta_core::{Error, ErrorKind};
use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

use crate::routes::Shared;

/// The generated messages and service of Riva's protos (see build.rs).
#[allow(clippy::all, missing_docs, rustdoc::all)]
pub mod pb {
    /// `package nvidia.riva` and below.
    pub mod nvidia {
        /// `package nvidia.riva`: audio encodings, request ids.
        pub mod riva {
            tonic::include_proto!("nvidia.riva");
            /// `package nvidia.riva.asr`: the speech-recognition service.
            pub mod asr {
                tonic::include_proto!("nvidia.riva.asr");
            }
        }
    }
}

use pb::nvidia::riva::asr::riva_speech_recognition_server::RivaSpeechRecognitionServer;

/// The Riva service over the server's shared state.
pub(crate) struct RivaAsr {
    state: Shared,
}

/// A library error as a gRPC status: the code from the one table, the message, and the kind in
/// the `dicta-error-type` metadata.
pub(crate) fn status(e: Error) -> Status {
    let mut s = Status::new(crate::error::grpc_code_for(e.kind), e.message);
    if let Ok(v) = MetadataValue::try_from(e.kind.as_str()) {
        s.metadata_mut().insert("dicta-error-type", v);
    }
    s
}

/// The API-key check of every ASR call (the same rule as HTTP's gate: `Bearer`, any case).
fn check_key(key: Option<&str>, req: &Request<()>) -> Result<(), Status> {
    let Some(key) = key else { return Ok(()) };
    let given = req
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    if given == Some(key) {
        Ok(())
    } else {
        Err(Status::unauthenticated(
            "missing or invalid API key: send the metadata `authorization: Bearer <key>`",
        ))
    }
}

/// Serves the Riva service and health on `listener` until `stop` completes (in-flight calls
/// finish; open streams end their utterance when the server's shutdown flag turns).
pub(crate) async fn serve(
    state: Shared,
    listener: tokio::net::TcpListener,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> dicta_core::Result<()> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_not_serving::<RivaSpeechRecognitionServer<RivaAsr>>()
        .await;
    // SERVING once every model warmed up (as /readyz), NOT_SERVING again at shutdown.
    let ready = {
        let state = state.clone();
        let health = health.clone();
        tokio::spawn(async move {
            let mut shutdown = state.shutdown.clone();
            while !state.is_ready() {
                tokio::select! {
                    _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
                    _ = shutdown.changed() => return,
                }
            }
            health
                .set_serving::<RivaSpeechRecognitionServer<RivaAsr>>()
                .await;
            let _ = shutdown.wait_for(|s| *s).await;
            health
                .set_not_serving::<RivaSpeechRecognitionServer<RivaAsr>>()
                .await;
        })
    };
    let key: Option<Arc<str>> = state.cfg.api_key.as_deref().map(Arc::from);
    let limit = state.cfg.max_body_bytes();
    let asr = RivaSpeechRecognitionServer::new(RivaAsr {
        state: state.clone(),
    })
    .max_decoding_message_size(limit)
    .max_encoding_message_size(limit);
    let asr = tonic::service::interceptor::InterceptedService::new(asr, move |req: Request<()>| {
        check_key(key.as_deref(), &req).map(|()| req)
    });
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let served = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(asr)
        .serve_with_incoming_shutdown(incoming, stop)
        .await;
    ready.abort();
    served.map_err(|e| Error::new(ErrorKind::Io, format!("gRPC server error: {e}")))
}
