//! The Dicta server: one resident model behind an HTTP API (axum + tokio).
//!
//! Requests from many clients are coalesced into shared backend calls: the batcher thread
//! takes the first queued request, waits up to `batch_wait_ms` for more (up to `max_group`
//! requests and `max_group_inputs` inputs) and calls [`Backend::transcribe`] once for all of
//! them; results go back to each request by position, so request ids stay independent of the
//! callers' input ids.
//!
//! Routes (all but `/health` and `/readyz`, and `/metrics` with `public_metrics`, need
//! `Authorization: Bearer <api_key>` when a key is set; the scheme is case-insensitive):
//!
//! | route | what |
//! | --- | --- |
//! | `GET /health` | liveness |
//! | `GET /readyz` | 200 once the backend warmed up, 503 before |
//! | `GET /metrics` | Prometheus (OpenMetrics text) |
//! | `GET /v1/models` | the resident model, OpenAI list shape |
//! | `POST /v1/audio/transcriptions` | OpenAI-compatible multipart form |
//! | `POST /v1/audio/translations` | the same, translating to English (multilingual models) |
//! | `POST /transcribe` | JSON batch `{"inputs":[{"id","audio_base64"}],"parameters":{..}}` |
//! | `POST /v1/transcriptions/raw?encoding=i16_le\|f32_le&sample_rate=16000` | raw PCM body |
//! | `GET /v1/stream` (WebSocket) | live transcription: PCM frames in, partial/final events out ([`stream`]) |
//!
//! With `grpc_port`, a second listener serves NVIDIA Riva's ASR gRPC API
//! (`nvidia.riva.asr.RivaSpeechRecognition`: `Recognize`, `StreamingRecognize`,
//! `GetRivaSpeechRecognitionConfig`) and `grpc.health.v1.Health`, through the same admission,
//! limits and batchers (see `src/grpc`).
//!
//! Every error answers `{"error": {"type", "message"}}` with the status from
//! [`error::status_for`]: 400 invalid input or undecodable audio, 401 bad API key, 408 a body
//! slower than `body_timeout_s` / `min_body_rate_kib` (see `src/conn.rs`), 413 any
//! limit (`max_body_mib`, `max_inputs`, `max_audio_seconds`, `max_decoded_bytes`), 503 queue
//! full (with `Retry-After`), 504 `request_timeout_s` exceeded, 500 internal; a 401 carries
//! `WWW-Authenticate: Bearer`. A request refused before its body is used (401, or a declared
//! size over `max_body_mib`) has the body read and dropped first (up to 256 MiB or 5 s), so
//! clients that send the whole body before reading still get the answer. A request whose client
//! disconnects (or times out) is dropped before its backend call if it has not started.
//!
//! Usage (the `dicta` binary does this):
//!
//! ```no_run
//! # async fn example(backend: std::sync::Arc<dyn dicta_server::Backend>) -> dicta_core::Result<()> {
//! let bound = dicta_server::bind(dicta_server::ServerConfig { port: 0, ..Default::default() }).await?;
//! println!("listening on {}", bound.local_addr());
//! bound.run(backend, dicta_server::shutdown_signal()).await
//! # }
//! ```

mod audio;
pub mod backend;
mod coalesce;
pub mod config;
mod conn;
pub mod error;
mod format;
mod grpc;
mod languages;
mod metrics;
mod pipeline;
mod realtime;
mod routes;
pub mod stream;
mod worker;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc, Mutex};

use dicta_core::{Error, ErrorKind, Result};
use tokio::sync::oneshot;

pub use backend::{
    Backend, BackendInput, BackendOutput, RequestOptions, StreamEvent, StreamEventKind,
    StreamOptions, StreamSession, Task, Temperature,
};
pub use config::ServerConfig;
pub use error::ApiError;

use coalesce::GroupLimits;
use metrics::Metrics;
use pipeline::Pipeline;
use routes::AppState;
use worker::WorkerSetup;

/// A bound listener, not yet serving. Lets the caller learn the port before serving (port 0).
pub struct Bound {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    grpc: Option<(tokio::net::TcpListener, SocketAddr)>,
    cfg: ServerConfig,
}

/// Connections the kernel may queue for `accept` (Linux caps it at `net.core.somaxconn`).
/// tokio's `TcpListener::bind` asks for 1024: a burst of connects beyond what the accept loop
/// has taken then has its SYNs dropped, and each such client waits a second to retry.
const BACKLOG: u32 = 4096;

/// A listener on the first address `host:port` resolves to that binds (as tokio's `bind`
/// tries them), with [`BACKLOG`] and, on Unix, `SO_REUSEADDR` (as tokio's `bind` sets it).
async fn listen(host: &str, port: u16) -> std::io::Result<tokio::net::TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        match socket.bind(addr).and_then(|()| socket.listen(BACKLOG)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the host resolves to no address",
        )
    }))
}

/// Validates `cfg` and binds `host:port`.
pub async fn bind(cfg: ServerConfig) -> Result<Bound> {
    cfg.validate()?;
    let listener = listen(&cfg.host, cfg.port).await.map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot bind {}:{}: {e}", cfg.host, cfg.port),
        )
    })?;
    let addr = listener.local_addr()?;
    let grpc = match cfg.grpc_port {
        None => None,
        Some(port) => {
            let l = listen(&cfg.host, port).await.map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!("cannot bind the gRPC port {}:{port}: {e}", cfg.host),
                )
            })?;
            let a = l.local_addr()?;
            Some((l, a))
        }
    };
    Ok(Bound {
        listener,
        addr,
        grpc,
        cfg,
    })
}

impl Bound {
    /// The address actually bound (the real port when `port` was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The gRPC address bound (`ServerConfig::grpc_port`), if any.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.as_ref().map(|g| g.1)
    }

    /// Warms the backend up on the batcher thread and serves until `shutdown` completes; then
    /// stops accepting connections, finishes in-flight requests, ends open WebSocket streams
    /// (their final events, `done`, close 1001), drains the batcher and returns. A failed
    /// warm-up stops the server and returns its error.
    pub async fn run(
        self,
        backend: Arc<dyn Backend>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        self.run_models(vec![backend], shutdown).await
    }

    /// [`Bound::run`] with several resident models: one batcher per model (its own queue and
    /// coalescing), picked per request by name (`model` of the OpenAI form, of `/transcribe`
    /// and of the stream settings; none or `"whisper-1"` picks the first). `/readyz` answers 200
    /// once every model warmed up; a failed warm-up of any stops the server.
    ///
    /// Errors: `InvalidInput` for no backends or two with the same name.
    pub async fn run_models(
        self,
        backends: Vec<Arc<dyn Backend>>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let names: Vec<String> = backends.iter().map(|b| b.model_name()).collect();
        if names.is_empty() {
            return Err(Error::invalid_input("the server needs at least one model"));
        }
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(Error::invalid_input(format!(
                    "two resident models are both named {n:?}"
                )));
            }
        }
        let cfg = Arc::new(self.cfg);
        let metrics = Arc::new(Metrics::new());
        let mut ready = Vec::new();
        let mut workers = Vec::new();
        let mut queues = Vec::new();
        let mut warmed = Vec::new();
        for (backend, name) in backends.iter().zip(&names) {
            let flag = Arc::new(AtomicBool::new(false));
            let setup = |warm_up: bool| WorkerSetup {
                backend: backend.clone(),
                limits: GroupLimits {
                    max_requests: cfg.max_group,
                    max_inputs: cfg.max_group_inputs,
                },
                wait: cfg.batch_wait(),
                metrics: metrics.clone(),
                ready: flag.clone(),
                warm_up,
            };
            let (queue_tx, queue_rx) = mpsc::sync_channel(cfg.max_queue);
            let (warmed_tx, warmed_rx) = oneshot::channel();
            workers.push(worker::spawn(setup(true), queue_rx, warmed_tx)?);
            // The long lane: long requests run beside the short ones (the engine interleaves
            // their windows on the model).
            let long_queue = if cfg.long_request_seconds > 0.0 {
                let (tx, rx) = mpsc::sync_channel(cfg.max_queue);
                workers.push(worker::spawn(setup(false), rx, oneshot::channel().0)?);
                Some(tx)
            } else {
                None
            };
            queues.push(pipeline::ModelQueue {
                name: name.clone(),
                queue: queue_tx,
                long_queue,
                translation: backend.supports_translation(),
                languages: backend.languages(),
            });
            ready.push(flag);
            warmed.push(warmed_rx);
        }
        let streams = Arc::new(tokio::sync::Semaphore::new(cfg.max_streams));
        let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
        let state = Arc::new(AppState {
            pipeline: Pipeline::new(cfg.clone(), queues, metrics.clone()),
            cfg: cfg.clone(),
            metrics,
            ready,
            model: names[0].clone(),
            models: names
                .iter()
                .cloned()
                .zip(backends.iter().cloned())
                .collect(),
            streams: streams.clone(),
            stream_load: Arc::default(),
            shutdown: stopping,
        });
        let grpc = self.grpc.map(|(listener, addr)| {
            tracing::info!(%addr, "serving gRPC (Riva ASR, health)");
            let mut stopping = state.shutdown.clone();
            tokio::spawn(grpc::serve(state.clone(), listener, async move {
                let _ = stopping.wait_for(|s| *s).await;
            }))
        });
        let conn_metrics = state.metrics.clone();
        let app = routes::router(state);
        tracing::info!(addr = %self.addr, models = ?names, "serving");

        let warm_error = Arc::new(Mutex::new(None));
        let stop = {
            let warm_error = warm_error.clone();
            async move {
                let warm_failed = async {
                    // The first warm-up failure of any model; warmed-up models (or batchers
                    // that are gone, which the requests will report) keep serving.
                    let failures = warmed.into_iter().map(|rx| {
                        Box::pin(async move {
                            match rx.await {
                                Ok(Err(e)) => e,
                                _ => std::future::pending().await,
                            }
                        })
                    });
                    futures_select_all(failures.collect()).await
                };
                tokio::select! {
                    () = shutdown => tracing::info!("shutdown requested; finishing in-flight requests"),
                    e = warm_failed => *warm_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e),
                }
                // Upgraded sockets are no longer the HTTP server's connections: tell them.
                let _ = stopping_tx.send(true);
            }
        };
        conn::serve(self.listener, app, &cfg, conn_metrics, stop).await;
        // WebSocket streams end their utterance and close; each frees its slot when done.
        let all = u32::try_from(cfg.max_streams).unwrap_or(u32::MAX);
        let _ = streams.acquire_many(all).await;
        // The gRPC server shares the router's state (and so the batchers' queues): let it end.
        let grpc_result = match grpc {
            Some(task) => task
                .await
                .map_err(|e| Error::internal(format!("the gRPC server task failed: {e}")))
                .and_then(|r| r),
            None => Ok(()),
        };
        // Every connection is closed, so the router and its queue sender are gone: the
        // batcher drains what is left and exits.
        let joined = tokio::task::spawn_blocking(move || {
            // Join every batcher, even after one failed.
            let joined: Vec<bool> = workers.into_iter().map(|w| w.join().is_ok()).collect();
            joined.into_iter().all(|ok| ok)
        })
        .await;
        grpc_result?;
        if !joined.unwrap_or(false) {
            return Err(Error::internal("a batcher thread panicked"));
        }
        if let Some(e) = warm_error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(e.context("backend warm-up failed"));
        }
        tracing::info!("server stopped");
        Ok(())
    }
}

/// The output of the first of `futures` to complete (they never all stay pending here: each
/// is a warm-up that either fails or waits forever, so this waits forever unless one fails).
async fn futures_select_all<F: Future + Unpin>(futures: Vec<F>) -> F::Output {
    let mut futures = futures;
    std::future::poll_fn(move |cx| {
        for f in futures.iter_mut() {
            if let std::task::Poll::Ready(v) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(v);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Binds and serves until `shutdown` completes (see [`Bound::run`]).
pub async fn serve(
    cfg: ServerConfig,
    backend: Arc<dyn Backend>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    bind(cfg).await?.run(backend, shutdown).await
}

/// Completes on SIGINT (Ctrl-C) or, on Unix, SIGTERM: the usual `shutdown` for [`serve`].
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
