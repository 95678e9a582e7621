//! The session API: a [`StreamEngine`] owns one loaded model and its worker thread; every
//! [`Session`] opened on it shares them and keeps its own state (audio cache, decoder state).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use dicta_core::{Error, ErrorKind, Result};
use dicta_decode::Vocabulary;
use dicta_models::ctc::CtcModel;
use dicta_models::moonshine::MoonshineModel;
use dicta_models::whisper::Whisper;

use super::chunker::{Chunk, ChunkGeometry};
use super::ctc::{ChunkLogProbs, CtcBackend, CtcChunkModel, CtcSession, CtcStreamDecoder};
use super::moonshine::MoonshineChunkModel;
use super::whisper::{WhisperBackend, WhisperChunkModel, WhisperGeometry, WhisperSession};
use super::worker::{with_threads, StreamModel, Worker, WorkerConfig, WorkerStats};
use super::{EndpointOptions, Event};
use crate::vad::{OnlineVad, Vad, VadOptions};
use crate::whisper::{check_english_only, check_language_task, DecodeOptions, InputOptions, Task};

/// Settings of a stream engine.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamConfig {
    /// Batching of the worker (B, max wait).
    pub worker: WorkerConfig,
    /// Most sessions open at once; opening one more fails with `Overloaded`.
    pub max_sessions: usize,
    /// New audio per model call in seconds (CTC chunk step / Whisper and Moonshine decode
    /// interval); `None`: 0.64 s for CTC, 1.0 s for Whisper, 0.5 s for Moonshine. Rounded to the
    /// model's frame / mel hop (10 ms for Moonshine).
    pub step_seconds: Option<f32>,
    /// CTC left context in seconds (audio before the step that each chunk repeats).
    pub left_context_seconds: f32,
    /// Whisper: cut the buffer after confirmed segments once it is longer than this.
    pub whisper_trim_seconds: f32,
    /// Moonshine: cut the buffer at a pause before the confirmed text once it is longer than
    /// this (each step re-encodes the buffer, so this bounds a step's cost).
    pub moonshine_trim_seconds: f32,
    /// Whisper and Moonshine: a step is at least the buffer's length / this (whole steps), so a
    /// long buffer is re-decoded less often ([`WhisperGeometry::step_divisor`]); 0: every step
    /// is `step_seconds`. `None`: 0 for Whisper (each decode costs one 30 s window, whatever
    /// the buffer), 4 for Moonshine (whose cost follows the buffer).
    pub step_divisor: Option<usize>,
    /// Threads of the worker's model calls (their own rayon pool); `None`: as many as rayon's
    /// global pool has.
    pub threads: Option<usize>,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            worker: WorkerConfig::default(),
            max_sessions: 256,
            step_seconds: None,
            left_context_seconds: 1.28,
            whisper_trim_seconds: 15.0,
            moonshine_trim_seconds: 5.0,
            step_divisor: None,
            threads: None,
        }
    }
}

/// Which of a session's [`InputOptions`] a stream model can honour.
pub enum Honours {
    /// Whisper: any language and task of the checkpoint (the engine's task unless the
    /// session sets its own), prompt, hotwords.
    Whisper(Arc<Whisper>, Task),
    /// Moonshine: English only, no prompt or hotwords.
    Moonshine,
    /// CTC: none of them.
    Ctc,
}

impl Honours {
    /// `InvalidInput` naming what the model cannot do with `o`.
    pub fn check(&self, o: &InputOptions) -> Result<()> {
        match self {
            Honours::Whisper(model, task) => check_language_task(
                &model.config,
                o.language.as_deref(),
                o.task.unwrap_or(*task),
            ),
            Honours::Moonshine => {
                if o.initial_prompt.is_some() || o.hotwords.is_some() {
                    return Err(Error::invalid_input(
                        "Moonshine streams take no prompt or hotwords (Whisper models do)",
                    ));
                }
                check_english_only(o.language.as_deref(), o.task.unwrap_or_default())
            }
            Honours::Ctc if !o.is_empty() => Err(Error::invalid_input(
                "CTC streams take no language, task, prompt or hotwords (Whisper models do)",
            )),
            Honours::Ctc => Ok(()),
        }
    }
}

/// Per-session options.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionOptions {
    /// CTC endpointing (Whisper finalises by agreement).
    pub endpoint: EndpointOptions,
    /// Whisper and Moonshine: end utterances where the voice activity detector hears silence
    /// (the engine needs a detector: [`StreamEngine::with_vad`]); `None`: no detector, words are
    /// final by agreement alone. See [`super::whisper`] for what an utterance end does, and
    /// [`VadOptions::endpointing`] for the usual settings.
    pub vad: Option<VadOptions>,
    /// The session's own language, task, initial prompt and hotwords (Whisper; a Moonshine
    /// session takes only language "en" and transcription, a CTC session none of them). Its decodes still share the
    /// worker's batches with every other session.
    pub decode: InputOptions,
}

#[derive(Clone)]
enum Backend {
    Ctc(Arc<CtcBackend>),
    Whisper(Arc<WhisperBackend>),
}

impl Backend {
    fn stats(&self) -> WorkerStats {
        match self {
            Backend::Ctc(b) => b.worker.stats(),
            Backend::Whisper(b) => b.worker.stats(),
        }
    }

    fn open_sessions(&self) -> usize {
        match self {
            Backend::Ctc(b) => b.worker.open_sessions(),
            Backend::Whisper(b) => b.worker.open_sessions(),
        }
    }

    fn opened(&self) {
        match self {
            Backend::Ctc(b) => b.worker.session_opened(),
            Backend::Whisper(b) => b.worker.session_opened(),
        }
    }

    fn closed(&self) {
        match self {
            Backend::Ctc(b) => b.worker.session_closed(),
            Backend::Whisper(b) => b.worker.session_closed(),
        }
    }
}

/// One loaded model serving streaming sessions through one batching worker thread.
pub struct StreamEngine {
    backend: Backend,
    max_sessions: usize,
    next_id: AtomicU64,
    /// The detector sessions with [`SessionOptions::vad`] run (their own state each).
    vad: Option<Vad>,
}

impl StreamEngine {
    /// A CTC stream engine over a loaded model; the chunk geometry comes from the model's front
    /// end ([`ChunkGeometry::for_ctc`]).
    pub fn ctc(
        model: Arc<dyn CtcModel>,
        decoder: CtcStreamDecoder,
        config: StreamConfig,
    ) -> Result<Self> {
        let geometry = ChunkGeometry::for_ctc(
            model.as_ref(),
            config.step_seconds.unwrap_or(0.64),
            config.left_context_seconds,
        )?;
        let vocab = Vocabulary::from_labels(&model.vocab().tokens)?;
        Self::ctc_with_model(
            Arc::new(CtcChunkModel::new(model)),
            geometry,
            vocab,
            decoder,
            config,
        )
    }

    /// A CTC stream engine over any batched chunk model (e.g. one wrapping [`CtcChunkModel`]);
    /// `vocab` must match the model's output columns.
    pub fn ctc_with_model(
        model: Arc<dyn StreamModel<Request = Chunk, Output = ChunkLogProbs>>,
        geometry: ChunkGeometry,
        vocab: Vocabulary,
        decoder: CtcStreamDecoder,
        config: StreamConfig,
    ) -> Result<Self> {
        let model = with_threads(model, config.threads)?;
        let worker = Worker::spawn(model, config.worker, "dicta-stream-ctc")?;
        let backend = CtcBackend {
            worker,
            geometry,
            vocab,
            decoder,
        };
        Ok(Self::with_backend(Backend::Ctc(Arc::new(backend)), &config))
    }

    /// A Whisper stream engine; `opts` apply to every decode (greedy recommended:
    /// [`DecodeOptions::greedy`]).
    pub fn whisper(model: Arc<Whisper>, opts: DecodeOptions, config: StreamConfig) -> Result<Self> {
        let mut geometry = WhisperGeometry::for_whisper(
            &model,
            config.step_seconds.unwrap_or(1.0),
            config.whisper_trim_seconds,
        )?;
        if let Some(d) = config.step_divisor {
            geometry.step_divisor = d;
        }
        let accepts = Honours::Whisper(Arc::clone(&model), opts.task);
        let chunk_model = with_threads(
            Arc::new(WhisperChunkModel::new(model, opts)?),
            config.threads,
        )?;
        let worker = Worker::spawn(chunk_model, config.worker, "dicta-stream-whisper")?;
        let backend = WhisperBackend {
            worker,
            geometry,
            accepts,
        };
        Ok(Self::with_backend(
            Backend::Whisper(Arc::new(backend)),
            &config,
        ))
    }

    /// A Moonshine stream engine: the Whisper session logic (re-decoding with
    /// LocalAgreement-2) over Moonshine, whose cost follows the buffer's length.
    pub fn moonshine(
        model: Arc<MoonshineModel>,
        opts: DecodeOptions,
        config: StreamConfig,
    ) -> Result<Self> {
        let mut geometry = WhisperGeometry::for_moonshine(
            config.step_seconds.unwrap_or(0.5),
            config.moonshine_trim_seconds,
        )?;
        if let Some(d) = config.step_divisor {
            geometry.step_divisor = d;
        }
        let chunk_model = with_threads(
            Arc::new(MoonshineChunkModel::new(model, opts)?),
            config.threads,
        )?;
        let worker = Worker::spawn(chunk_model, config.worker, "dicta-stream-moonshine")?;
        let backend = WhisperBackend {
            worker,
            geometry,
            accepts: Honours::Moonshine,
        };
        Ok(Self::with_backend(
            Backend::Whisper(Arc::new(backend)),
            &config,
        ))
    }

    fn with_backend(backend: Backend, config: &StreamConfig) -> Self {
        Self {
            backend,
            max_sessions: config.max_sessions,
            next_id: AtomicU64::new(1),
            vad: None,
        }
    }

    /// This engine with a voice activity detector, which sessions opened with
    /// [`SessionOptions::vad`] run on their audio (on the caller's thread: Silero costs
    /// about 1% of a core per real-time stream).
    pub fn with_vad(mut self, vad: Vad) -> Self {
        self.vad = Some(vad);
        self
    }

    /// Checks `opts` as [`StreamEngine::open_session`] does, opening nothing.
    ///
    /// Errors: `InvalidInput` naming what the model (or a missing detector) cannot honour.
    pub fn check_session_options(&self, opts: &SessionOptions) -> Result<()> {
        let honours = match &self.backend {
            Backend::Whisper(b) => &b.accepts,
            Backend::Ctc(_) => &Honours::Ctc,
        };
        check_session(opts, honours, self.vad.is_some())
    }

    /// Opens a session sharing this engine's model and worker.
    ///
    /// Errors: `Overloaded` when `max_sessions` are open; `InvalidInput` for bad options.
    pub fn open_session(&self, opts: SessionOptions) -> Result<Session> {
        self.check_session_options(&opts)?;
        let gate = match (&opts.vad, &self.vad) {
            (Some(o), Some(vad)) => Some(Box::new(OnlineVad::new(vad.clone(), o)?)),
            _ => None,
        };
        if self.backend.open_sessions() >= self.max_sessions {
            return Err(Error::new(
                ErrorKind::Overloaded,
                format!(
                    "max_sessions is {}, and {} sessions are open",
                    self.max_sessions,
                    self.backend.open_sessions()
                ),
            ));
        }
        self.backend.opened();
        let core = match &self.backend {
            Backend::Ctc(b) => Core::Ctc(CtcSession::new(Arc::clone(b), opts.endpoint)),
            Backend::Whisper(b) => Core::Whisper(WhisperSession::new(
                Arc::clone(b),
                Arc::new(opts.decode),
                gate,
            )),
        };
        Ok(Session {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            alive: Arc::new(AtomicBool::new(true)),
            core: Arc::new(Mutex::new(core)),
            backend: self.backend.clone(),
        })
    }

    /// Sessions open now.
    pub fn open_sessions(&self) -> usize {
        self.backend.open_sessions()
    }

    /// The worker's counters (model calls, batch sizes).
    pub fn stats(&self) -> WorkerStats {
        self.backend.stats()
    }

    /// The CTC chunk geometry (`None` for Whisper).
    pub fn chunk_geometry(&self) -> Option<ChunkGeometry> {
        match &self.backend {
            Backend::Ctc(b) => Some(b.geometry),
            Backend::Whisper(_) => None,
        }
    }

    /// The Whisper / Moonshine buffer geometry (`None` for CTC).
    pub fn whisper_geometry(&self) -> Option<WhisperGeometry> {
        match &self.backend {
            Backend::Whisper(b) => Some(b.geometry),
            Backend::Ctc(_) => None,
        }
    }
}

/// `InvalidInput` when a session asks for VAD endpointing that cannot run: on a CTC model
/// (its streams end utterances on their own trailing silence, [`SessionOptions::endpoint`]) or
/// without a loaded detector; or with options out of range.
/// Checks a session's options against what its model `honours` and whether a voice activity
/// detector is loaded (`have_vad`): the one check behind [`StreamEngine::check_session_options`]
/// and [`crate::Engine::check_session_options`] (which checks before the stream worker exists).
pub(crate) fn check_session(
    opts: &SessionOptions,
    honours: &Honours,
    have_vad: bool,
) -> Result<()> {
    opts.endpoint.validate()?;
    honours.check(&opts.decode)?;
    let Some(o) = &opts.vad else {
        return Ok(());
    };
    if matches!(honours, Honours::Ctc) {
        return Err(Error::invalid_input(
            "CTC streams end utterances on their own trailing silence (endpoint options); \
             VAD endpointing is for Whisper and Moonshine streams",
        ));
    }
    if !have_vad {
        return Err(Error::invalid_input(
            "VAD endpointing needs a voice activity detector, and none is loaded \
             (EngineConfig::vad_model; dicta serve: --vad-model, without --no-vad)",
        ));
    }
    o.validate()
}

enum Core {
    Ctc(CtcSession),
    Whisper(WhisperSession),
}

impl Core {
    fn feed(&mut self, id: u64, alive: &Arc<AtomicBool>, samples: &[f32]) -> Result<Vec<Event>> {
        match self {
            Core::Ctc(s) => s.feed(id, alive, samples),
            Core::Whisper(s) => s.feed(id, alive, samples),
        }
    }

    fn end(&mut self, id: u64, alive: &Arc<AtomicBool>) -> Result<Vec<Event>> {
        match self {
            Core::Ctc(s) => s.end(id, alive),
            Core::Whisper(s) => s.end(id, alive),
        }
    }

    fn reset(&mut self) {
        match self {
            Core::Ctc(s) => s.reset(),
            Core::Whisper(s) => s.reset(),
        }
    }

    fn buffered(&self) -> usize {
        match self {
            Core::Ctc(s) => s.buffered(),
            Core::Whisper(s) => s.buffered(),
        }
    }
}

/// One live stream. `feed` returns only what is new; `end` flushes and resets, after which the
/// session can be fed a new stream. Dropping it frees its slot and skips its queued requests.
///
/// A model-call error is returned by the `feed`/`end` that waited on it; the chunk is lost and
/// the session stays usable.
pub struct Session {
    id: u64,
    alive: Arc<AtomicBool>,
    core: Arc<Mutex<Core>>,
    backend: Backend,
}

fn lock(core: &Mutex<Core>) -> MutexGuard<'_, Core> {
    core.lock().unwrap_or_else(|p| p.into_inner())
}

fn check_samples(samples: &[f32]) -> Result<()> {
    if let Some(i) = samples.iter().position(|s| !s.is_finite()) {
        return Err(Error::invalid_input(format!(
            "sample {i} of the block is not finite ({})",
            samples[i]
        )));
    }
    Ok(())
}

impl Session {
    /// The session's id (unique within its engine).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Feeds a block of 16 kHz mono samples (any length); runs every chunk it completes and
    /// returns the new events (partials and finals). Blocks the calling thread while the model
    /// runs; use [`Session::feed_async`] on a tokio runtime.
    pub fn feed(&mut self, samples: &[f32]) -> Result<Vec<Event>> {
        check_samples(samples)?;
        lock(&self.core).feed(self.id, &self.alive, samples)
    }

    /// Ends the stream: pads and flushes the audio not yet decoded (nothing when only decoded
    /// audio remains), returns the final events and resets the session.
    pub fn end(&mut self) -> Result<Vec<Event>> {
        lock(&self.core).end(self.id, &self.alive)
    }

    /// Starts over: forgets audio and text without emitting anything.
    pub fn reset(&mut self) {
        lock(&self.core).reset();
    }

    /// Samples held in the session's buffers (audio cache and not-yet-decoded audio).
    pub fn buffered_samples(&self) -> usize {
        lock(&self.core).buffered()
    }

    /// [`Session::feed`] for async callers: the work runs on tokio's blocking pool, never on
    /// the runtime's threads. Must be called inside a tokio runtime. If the future is dropped
    /// the block is still processed, but its events are lost.
    pub async fn feed_async(&mut self, samples: Vec<f32>) -> Result<Vec<Event>> {
        check_samples(&samples)?;
        let (core, id, alive) = (Arc::clone(&self.core), self.id, Arc::clone(&self.alive));
        tokio::task::spawn_blocking(move || lock(&core).feed(id, &alive, &samples))
            .await
            .map_err(|e| Error::internal(format!("stream feed task failed: {e}")))?
    }

    /// [`Session::end`] for async callers (runs on tokio's blocking pool).
    pub async fn end_async(&mut self) -> Result<Vec<Event>> {
        let (core, id, alive) = (Arc::clone(&self.core), self.id, Arc::clone(&self.alive));
        tokio::task::spawn_blocking(move || lock(&core).end(id, &alive))
            .await
            .map_err(|e| Error::internal(format!("stream end task failed: {e}")))?
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("buffered_samples", &self.buffered_samples())
            .finish_non_exhaustive()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.alive.store(false, Ordering::SeqCst);
        self.backend.closed();
    }
}
