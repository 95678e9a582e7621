//! Streaming sessions on the engine's loaded model.
//!
//! The first [`Engine::open_session`] starts one [`StreamEngine`] (one batching worker thread)
//! over the weights the engine already holds; every later session shares it, so a hundred open
//! sessions cost one model in memory and one thread. An engine that never opens a session
//! (`dicta transcribe`) starts nothing.
//!
//! Settings come from [`EngineConfig::stream`](super::EngineConfig::stream); the worker's model
//! calls run on `stream.threads` threads, or on `threads` of the engine when that is unset.
//! Whisper streams decode greedily (one beam, temperature 0 only) with the engine's other
//! decoding options (language, task, prompt, suppression; a session may set its own language,
//! prompt and hotwords, [`SessionOptions::decode`]): every step re-decodes the buffer,
//! so a beam or fallback costs every session on every step. CTC streams use the engine's
//! decoder (greedy, or beam with the shared LM).

use std::sync::{Arc, MutexGuard};

use dicta_core::Result;

use super::{Backend, Engine};
use crate::stream::session::check_session;
use crate::stream::{
    CtcStreamDecoder, Honours, Session, SessionOptions, StreamConfig, StreamEngine, WorkerStats,
};
use crate::whisper::DecodeOptions;

impl Engine {
    /// Opens a streaming session on the loaded model. The first call starts the engine's
    /// stream worker; later calls only add a session to it.
    ///
    /// Errors: `Overloaded` when `stream.max_sessions` sessions are open; `InvalidInput` for
    /// bad options; `Internal` when the worker thread cannot start.
    pub fn open_session(&self, opts: SessionOptions) -> Result<Session> {
        self.stream_engine()?.open_session(opts)
    }

    /// Checks a session's options as [`Engine::open_session`] would, without starting the
    /// stream worker or opening anything (a server refuses a bad stream before it upgrades).
    ///
    /// Errors: `InvalidInput` naming what the model cannot honour.
    pub fn check_session_options(&self, opts: &SessionOptions) -> Result<()> {
        let honours = match &self.backend {
            Backend::Whisper(w) => Honours::Whisper(Arc::clone(w), self.config.decode.task),
            Backend::Moonshine(_) => Honours::Moonshine,
            Backend::Ctc(_) => Honours::Ctc,
        };
        check_session(opts, &honours, self.vad.is_some())
    }

    /// Counters of the stream worker (model calls, batch sizes); `None` before the first
    /// session started it.
    pub fn stream_stats(&self) -> Option<WorkerStats> {
        self.streams_lock().as_ref().map(|s| s.stats())
    }

    /// Streaming sessions open now (0 before the worker started).
    pub fn open_stream_sessions(&self) -> usize {
        self.streams_lock()
            .as_ref()
            .map_or(0, |s| s.open_sessions())
    }

    /// Whether the stream worker has been started (by a first [`Engine::open_session`]).
    pub fn stream_started(&self) -> bool {
        self.streams_lock().is_some()
    }

    /// The stream settings actually in force: `EngineConfig::stream` with `threads` defaulted
    /// to the size of the engine's pool.
    pub fn stream_config(&self) -> StreamConfig {
        let mut cfg = self.config.stream.clone();
        if cfg.threads.is_none() {
            cfg.threads = Some(self.pool.current_num_threads());
        }
        cfg
    }

    /// The options every Whisper stream decode uses: the engine's, made greedy (and without
    /// the offline progress callback: sessions report their own events), and without a
    /// `prefix`: each step decodes a buffer of the stream, which would start with it again.
    pub fn stream_decode_options(&self) -> DecodeOptions {
        DecodeOptions {
            beam_size: 1,
            best_of: 1,
            temperatures: vec![0.0],
            progress: Default::default(),
            prefix: None,
            ..self.config.decode.clone()
        }
    }

    fn streams_lock(&self) -> MutexGuard<'_, Option<Arc<StreamEngine>>> {
        self.streams.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stream engine, started on first use. The lock is held while it starts, so two first
    /// sessions opened at once still share one worker.
    fn stream_engine(&self) -> Result<Arc<StreamEngine>> {
        let mut slot = self.streams_lock();
        if let Some(s) = slot.as_ref() {
            return Ok(Arc::clone(s));
        }
        let cfg = self.stream_config();
        let engine = match &self.backend {
            Backend::Whisper(w) => {
                StreamEngine::whisper(Arc::clone(w), self.stream_decode_options(), cfg)?
            }
            Backend::Ctc(c) => {
                let decoder = match c.beam() {
                    Some(b) => CtcStreamDecoder::Beam(Arc::new(b.clone())),
                    None => CtcStreamDecoder::Greedy,
                };
                StreamEngine::ctc(c.shared_model(), decoder, cfg)?
            }
            Backend::Moonshine(m) => {
                StreamEngine::moonshine(Arc::clone(m), self.stream_decode_options(), cfg)?
            }
        };
        let engine = match &self.vad {
            Some(vad) => engine.with_vad(vad.clone()),
            None => engine,
        };
        tracing::info!(family = ?self.family(), "stream worker started");
        let engine = Arc::new(engine);
        *slot = Some(Arc::clone(&engine));
        Ok(engine)
    }
}
