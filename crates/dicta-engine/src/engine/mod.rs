//! The engine facade: one loaded model, many callers.
//!
//! [`Engine::transcribe`] takes inputs of any kind (paths, encoded bytes, decoded samples),
//! decodes the audio on decode threads *while the model runs on earlier inputs* (the
//! `pipeline` module), runs the model over windows of many inputs together and returns one
//! result per input in input order. A broken input fails only its own entry.
//!
//! Look-ahead: decoded inputs are taken in input order into *rounds* of at least
//! [`EngineConfig::lookahead_windows`] windows; the model runs one round while the next is
//! being decoded, and the decoded audio not yet finished is bounded by two rounds' worth (plus
//! one recording per decode thread). Windows are sorted by length within a round, not across
//! the whole call: a larger look-ahead packs batches a little better, a smaller one holds less
//! audio and starts the model sooner. (Probing every file's length from its container header
//! first would allow one global sort, but costs a second open of every input, needs headers
//! that state a length (not all do) and only wins padding that the scheduler already caps at
//! `max_padding_fraction`.) Rounds depend only on input order and lengths, never on timing, so
//! a call forms the same batches on every run.
//!
//! The model family is detected from the folder ([`ModelFamily::detect`]):
//! - Whisper ([`whisper`]): windows decode in batches and merge by timestamps.
//! - Moonshine ([`crate::moonshine`]): recordings cut at pauses; pieces of all inputs decode
//!   in length-sorted batches, each encoded at its own length.
//! - CTC ([`ctc`]): windows of all inputs share one length-sorted scheduler; each recording's
//!   retained log-prob frames are joined and decoded once (greedy or beam + n-gram LM) on
//!   `decode_workers` threads while the model runs the next batches.

pub mod ctc;
mod turns;
pub use turns::{Turn, Turns};
mod moonshine;
mod observe;
mod pipeline;
mod preprocess;
mod split;
mod stream;
mod whisper;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use candle_core::Device;
use dicta_core::{Error, Result, Stats, Transcript};
use dicta_decode::LogProbs;
use dicta_models::ctc::CtcModel;
use dicta_models::moonshine::MoonshineModel;
use dicta_models::whisper::Whisper;

use crate::diarize::{Diarizer, SpeakerEncoder};
use crate::offline::{PlanConfig, ScheduleConfig, Window};
use crate::vad::{SpeechFilter, Vad};
use crate::whisper::{DecodeOptions, LongFormMode};
use preprocess::Preprocess;

pub use ctc::{CtcDecoderKind, CtcOptions};
pub(crate) use pipeline::{load_audio, Transform};

/// Where one input's audio comes from.
#[derive(Debug, Clone)]
pub enum AudioSource {
    /// A file in any supported container.
    Path(PathBuf),
    /// An encoded file held in memory.
    Bytes(Vec<u8>),
    /// Already decoded 16 kHz mono samples.
    Samples(Vec<f32>),
    /// Already decoded 16 kHz samples, one vector per channel, all of one length (e.g. from
    /// `dicta_audio::decode::load_channels_owned`): their mean unless the call splits channels
    /// ([`dicta_core::ChannelMode::Split`]). Shared, so splitting copies nothing.
    Channels(std::sync::Arc<[Vec<f32>]>),
    /// Channel `channel` (0 = first) of another source, heard as a mono recording of that
    /// channel alone: what [`dicta_core::ChannelMode::Split`] makes of each input. Files are
    /// decoded and only that channel is resampled; `Samples` has the one channel 0.
    Channel {
        /// The whole recording.
        source: std::sync::Arc<AudioSource>,
        /// Which of its channels.
        channel: usize,
    },
}

/// One input of a transcription call.
#[derive(Debug, Clone)]
pub struct Input {
    /// Caller's id, echoed in the transcript.
    pub id: String,
    /// Where the audio came from, for reports (a path as given, or a label).
    pub audio: String,
    /// The audio itself.
    pub source: AudioSource,
}

impl Input {
    /// An input read from a file; the id and label are the path as given.
    pub fn from_path(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let label = path.to_string_lossy().into_owned();
        Self {
            id: label.clone(),
            audio: label,
            source: AudioSource::Path(path),
        }
    }

    /// An input of decoded 16 kHz mono samples; `id` doubles as the label.
    pub fn from_samples(id: impl Into<String>, samples: Vec<f32>) -> Self {
        let id = id.into();
        Self {
            audio: id.clone(),
            id,
            source: AudioSource::Samples(samples),
        }
    }
}

/// Engine-wide settings (the defaults of every call). Build with
/// `EngineConfig { batch_size: 4, ..EngineConfig::default() }` so new fields keep compiling.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Windows per model call.
    pub batch_size: usize,
    /// Whisper: how recordings longer than one window are processed.
    pub long_form: LongFormMode,
    /// Whisper: default decoding options.
    pub decode: DecodeOptions,
    /// CTC: window length in seconds (default 30).
    pub chunk_seconds: f32,
    /// CTC: minimum overlap between consecutive windows in seconds (default 5).
    pub overlap_seconds: f32,
    /// CTC: most padded model output frames per batch (`rows × longest row`); default
    /// `batch_size` full windows.
    pub max_batch_frames: Option<usize>,
    /// CTC: most padding per batch as a fraction of its padded frames (default 0.15).
    pub max_padding_fraction: f32,
    /// CTC: threads decoding joined log-probs while the model runs (default 2).
    pub decode_workers: usize,
    /// Threads for audio decoding and the model's CPU kernels: the size of the engine's own
    /// pool, which runs one call at a time (default: as many as rayon's global pool has, i.e.
    /// all cores unless `RAYON_NUM_THREADS` says otherwise).
    pub threads: Option<usize>,
    /// CTC: decoder, LM and segmentation settings.
    pub ctc: CtcOptions,
    /// Windows of decoded audio per round of the offline pipeline (see the module docs);
    /// default `4 × batch_size`. `Some(usize::MAX)`: decode every input before the model starts.
    pub lookahead_windows: Option<usize>,
    /// Streaming sessions ([`Engine::open_session`]): batching, step, session limit.
    pub stream: crate::stream::StreamConfig,
    /// Whisper and Moonshine: numeric type of the weights (`Auto`: int8 where the CPU has fast
    /// int8 kernels, else float32; `Float32` is the reference path); CTC models run in float32.
    pub compute_type: dicta_models::whisper::ComputeType,
    /// Voice activity detector loaded with the model (an `.onnx` file or a folder holding
    /// `silero_vad_v6.onnx`), needed by calls with [`DecodeOptions::vad`]; none by default.
    pub vad_model: Option<PathBuf>,
    /// Speaker embedding model (`embedding_model.ckpt` or its folder), needed with `vad_model`
    /// by calls with [`DecodeOptions::diarize`]; none by default.
    pub speaker_model: Option<PathBuf>,
    /// Whisper: a smaller Whisper model (folder) loaded beside the main one for speculative
    /// decoding: it drafts tokens that the main model verifies in one decoder pass, for every
    /// temperature-0 greedy pass (`beam_size` 1). Lossless: the output is the main model's,
    /// token for token. Loaded with `assistant_compute_type`. None by default.
    pub assistant_model: Option<PathBuf>,
    /// Compute type of the assistant model.
    pub assistant_compute_type: dicta_models::whisper::ComputeType,
    /// Tokens the assistant drafts per round (default 5).
    pub assistant_tokens: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        let plan = PlanConfig::default();
        Self {
            batch_size: 8,
            long_form: LongFormMode::Auto,
            decode: DecodeOptions::default(),
            chunk_seconds: plan.chunk_seconds,
            overlap_seconds: plan.overlap_seconds,
            max_batch_frames: None,
            max_padding_fraction: ScheduleConfig::default().max_padding_fraction,
            decode_workers: 2,
            threads: None,
            ctc: CtcOptions::default(),
            stream: crate::stream::StreamConfig::default(),
            lookahead_windows: None,
            compute_type: dicta_models::whisper::ComputeType::default(),
            vad_model: None,
            speaker_model: None,
            assistant_model: None,
            assistant_compute_type: dicta_models::whisper::ComputeType::default(),
            assistant_tokens: crate::whisper::DEFAULT_DRAFT_TOKENS,
        }
    }
}

impl EngineConfig {
    /// Checks ranges; messages name the setting and the value given.
    pub fn validate(&self) -> Result<()> {
        if self.batch_size == 0 {
            return Err(Error::invalid_input("batch_size must be >= 1, got 0"));
        }
        if self.assistant_tokens == 0 {
            return Err(Error::invalid_input("assistant_tokens must be >= 1, got 0"));
        }
        if self.decode_workers == 0 {
            return Err(Error::invalid_input("decode_workers must be >= 1, got 0"));
        }
        if self.threads == Some(0) {
            return Err(Error::invalid_input("threads must be >= 1, got 0"));
        }
        if self.lookahead_windows == Some(0) {
            return Err(Error::invalid_input(
                "lookahead_windows must be >= 1, got 0",
            ));
        }
        self.plan_config().validate()?;
        self.schedule_config(1).validate()?;
        self.ctc.validate()?;
        self.decode.validate()
    }

    /// Windows per round of the offline pipeline (`lookahead_windows` or its default).
    pub fn lookahead_windows(&self) -> usize {
        self.lookahead_windows.unwrap_or(4 * self.batch_size).max(1)
    }

    /// The window plan these settings describe (16 kHz).
    pub fn plan_config(&self) -> PlanConfig {
        PlanConfig {
            chunk_seconds: self.chunk_seconds,
            overlap_seconds: self.overlap_seconds,
            sample_rate: dicta_audio::SAMPLE_RATE,
        }
    }

    /// The batch bounds these settings describe, for a model whose full window has
    /// `window_frames` output frames.
    pub fn schedule_config(&self, window_frames: usize) -> ScheduleConfig {
        ScheduleConfig {
            batch_size: self.batch_size,
            max_batch_frames: self
                .max_batch_frames
                .unwrap_or(self.batch_size * window_frames.max(1)),
            max_padding_fraction: self.max_padding_fraction,
            fixed_input: false,
        }
    }
}

/// Results of one call, in input order, with statistics of the whole call.
#[derive(Debug)]
pub struct EngineOutput {
    /// One entry per input, in input order.
    pub results: Vec<Result<Transcript>>,
    /// Timing and batching statistics.
    pub stats: Stats,
}

/// The kind of model a folder holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFamily {
    /// Whisper (CTranslate2 `model.bin` or Hugging Face `model_type: "whisper"`).
    Whisper,
    /// A CTC acoustic model (wav2vec2 family).
    Ctc,
    /// Moonshine (ONNX Runtime `encoder_model.ort` + `decoder_model_merged.ort`).
    Moonshine,
}

impl ModelFamily {
    /// Detects the family of the model in `dir`: a CTranslate2 `model.bin` or a `config.json`
    /// with `model_type` `"whisper"` is Whisper; `model_type` `"wav2vec2"` (or a `Wav2Vec2*`
    /// architecture) is CTC; `encoder_model.ort` with `decoder_model_merged.ort` is Moonshine.
    /// Errors (`ModelLoad`) name what was found otherwise.
    pub fn detect(dir: &Path) -> Result<Self> {
        if dicta_models::moonshine::is_moonshine_dir(dir) {
            return Ok(Self::Moonshine);
        }
        let config_path = dir.join("config.json");
        let config: Option<serde_json::Value> = match std::fs::read_to_string(&config_path) {
            Ok(text) => Some(serde_json::from_str(&text).map_err(|e| {
                Error::model_load(format!("{}: not valid JSON: {e}", config_path.display()))
            })?),
            Err(_) => None,
        };
        let field = |k: &str| {
            config
                .as_ref()
                .and_then(|c| c.get(k))
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string()
        };
        let model_type = field("model_type");
        let architectures: Vec<String> = config
            .as_ref()
            .and_then(|c| c.get("architectures"))
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        if model_type == "whisper" || dir.join("model.bin").is_file() {
            return Ok(Self::Whisper);
        }
        if model_type == "wav2vec2"
            || (model_type.is_empty() && architectures.iter().any(|a| a.starts_with("Wav2Vec2")))
        {
            return Ok(Self::Ctc);
        }
        if config.is_none() {
            return Err(Error::model_load(format!(
                "{}: neither a CTranslate2 model.bin, a config.json nor Moonshine .ort files; not a \
                 model folder",
                dir.display()
            )));
        }
        Err(Error::model_load(format!(
            "{}: model_type {model_type:?} (architectures {architectures:?}) is neither Whisper \
             nor a supported CTC family (wav2vec2)",
            dir.display()
        )))
    }
}

enum Backend {
    // Arc: streaming sessions share the loaded weights with offline calls.
    Whisper(std::sync::Arc<Whisper>),
    Ctc(std::sync::Arc<ctc::CtcBackend>),
    Moonshine(std::sync::Arc<MoonshineModel>),
}

/// A loaded model plus its default settings; shareable across threads.
pub struct Engine {
    backend: Backend,
    config: EngineConfig,
    model_dir: PathBuf,
    /// The engine's own pool (`threads` workers): calls run inside it, one at a time (see
    /// `in_pool`).
    pool: rayon::ThreadPool,
    /// Whether a call is running inside `pool`.
    pooled: std::sync::atomic::AtomicBool,
    /// Turns on the model for concurrent `transcribe` calls (one batch of model work each).
    acoustic: Turns,
    /// The streaming worker, started by the first `open_session` (see `stream.rs`).
    streams: Mutex<Option<std::sync::Arc<crate::stream::StreamEngine>>>,
    /// The voice activity detector of `config.vad_model`.
    vad: Option<Vad>,
    /// The diarizer of `config.vad_model` + `config.speaker_model`.
    diarizer: Option<Diarizer>,
    /// Speculative decoding's draft model (`config.assistant_model`).
    assistant: Option<Whisper>,
}

impl Engine {
    /// Loads the model in `model_dir` (Whisper: CTranslate2 or Hugging Face folder; CTC: a
    /// Hugging Face wav2vec2 folder) on the CPU, and the LM when `config.ctc` names one.
    pub fn load(model_dir: &Path, config: EngineConfig) -> Result<Self> {
        config.validate()?;
        // Always a pool of the engine's own, also when the caller names no size: a call that
        // runs on the caller's thread hands every kernel to rayon's global pool and sleeps
        // until it is done, a wake-up per kernel and dozens per decoder step, while the
        // global pool's workers spin and yield between kernels (a third busy thread on the
        // cores); inside the pool the decoder loop runs on a worker that shares each kernel
        // with the others (greedy 4-minute recording, interleaved: 2.25-3.38 s against
        // 1.99-2.74 s in the pool).
        let threads = config.threads.unwrap_or_else(rayon::current_num_threads);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("dicta-engine-{i}"))
            .build()
            .map_err(|e| Error::internal(format!("thread pool: {e}")))?;
        let backend = match ModelFamily::detect(model_dir)? {
            ModelFamily::Whisper => {
                if config.ctc.lm.is_some() || config.ctc.decoder != CtcDecoderKind::Greedy {
                    tracing::warn!("CTC decoder options are ignored for a Whisper model");
                }
                let opts = dicta_models::whisper::LoadOptions {
                    compute_type: config.compute_type,
                };
                let whisper = Whisper::load_with(model_dir, &Device::Cpu, &opts)?;
                tracing::info!(model = %model_dir.display(), format = ?whisper.format, "model loaded");
                Backend::Whisper(std::sync::Arc::new(whisper))
            }
            ModelFamily::Ctc => Backend::Ctc(std::sync::Arc::new(ctc::CtcBackend::load(
                model_dir, &config,
            )?)),
            ModelFamily::Moonshine => {
                if config.ctc.lm.is_some() || config.ctc.decoder != CtcDecoderKind::Greedy {
                    tracing::warn!("CTC decoder options are ignored for a Moonshine model");
                }
                let m = MoonshineModel::load(model_dir, config.compute_type)?;
                tracing::info!(model = %model_dir.display(), "Moonshine model loaded");
                Backend::Moonshine(std::sync::Arc::new(m))
            }
        };
        let assistant = match (&config.assistant_model, &backend) {
            (None, _) => None,
            (Some(p), Backend::Whisper(main)) => {
                let opts = dicta_models::whisper::LoadOptions {
                    compute_type: config.assistant_compute_type,
                };
                let a = Whisper::load_with(p, &Device::Cpu, &opts)?;
                // Checks the pair (same mel input) now rather than at the first call.
                crate::whisper::Assistant::new(main, &a, config.assistant_tokens)?;
                tracing::info!(assistant = %p.display(), "assistant model loaded");
                Some(a)
            }
            (Some(p), _) => {
                tracing::warn!(
                    assistant = %p.display(),
                    "assistant_model (speculative decoding) is for Whisper models; ignored"
                );
                None
            }
        };
        let vad = match &config.vad_model {
            Some(p) => {
                let v = Vad::load(p)?;
                tracing::info!(vad = %p.display(), "voice activity detector loaded");
                Some(v)
            }
            None => None,
        };
        let diarizer = match (&config.speaker_model, &vad) {
            (None, _) => None,
            (Some(p), Some(v)) => {
                let enc = SpeakerEncoder::load(p)?;
                tracing::info!(speaker = %p.display(), "speaker encoder loaded");
                Some(Diarizer::new(v.clone(), enc))
            }
            (Some(_), None) => {
                return Err(Error::invalid_input(
                    "speaker_model needs vad_model too (diarization finds speech first)",
                ))
            }
        };
        Ok(Self {
            backend,
            config,
            model_dir: model_dir.to_path_buf(),
            pool,
            pooled: Default::default(),
            acoustic: Turns::new(),
            streams: Mutex::new(None),
            vad,
            diarizer,
            assistant,
        })
    }

    /// Same as [`Engine::load`] (the name for it).
    pub fn new(model_dir: &Path, config: EngineConfig) -> Result<Self> {
        Self::load(model_dir, config)
    }

    /// The engine's default settings.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The folder the model was loaded from.
    pub fn model_dir(&self) -> &Path {
        &self.model_dir
    }

    /// The numeric type the model runs in (`default` resolved for this CPU); `None` for CTC
    /// models, which have one.
    pub fn compute_type(&self) -> Option<dicta_models::whisper::ComputeType> {
        match &self.backend {
            Backend::Whisper(w) => Some(w.compute_type()),
            Backend::Moonshine(m) => Some(m.compute_type),
            Backend::Ctc(_) => None,
        }
    }

    /// The family of the loaded model.
    pub fn family(&self) -> ModelFamily {
        match self.backend {
            Backend::Whisper(_) => ModelFamily::Whisper,
            Backend::Ctc(_) => ModelFamily::Ctc,
            Backend::Moonshine(_) => ModelFamily::Moonshine,
        }
    }

    /// The voice activity detector loaded with the model (`EngineConfig::vad_model`).
    pub fn vad(&self) -> Option<&Vad> {
        self.vad.as_ref()
    }

    /// The loaded Whisper model, if the engine runs one.
    pub fn whisper(&self) -> Option<&Whisper> {
        match &self.backend {
            Backend::Whisper(w) => Some(w),
            Backend::Ctc(_) | Backend::Moonshine(_) => None,
        }
    }

    /// Checks that the model can honour `opts.language` and `opts.task` (a language code it
    /// knows, translation only on multilingual Whisper), so a front end can refuse a bad flag as
    /// a usage error before reading any input; the error lists the codes that work.
    pub fn check_language_task(&self, opts: &DecodeOptions) -> Result<()> {
        let language = opts.language.as_deref();
        match &self.backend {
            Backend::Whisper(w) => {
                crate::whisper::check_language_task(&w.config, language, opts.task)
            }
            Backend::Moonshine(_) => {
                if language.is_some_and(|l| !l.eq_ignore_ascii_case("en")) {
                    return Err(Error::invalid_input(format!(
                        "language {:?}: Moonshine models are English-only; use language \"en\" or omit it",
                        language.unwrap_or_default()
                    )));
                }
                if opts.task == crate::whisper::Task::Translate {
                    return Err(Error::invalid_input(
                        "task \"translate\": Moonshine models only transcribe English",
                    ));
                }
                Ok(())
            }
            Backend::Ctc(_) => Ok(()),
        }
    }

    /// The loaded Moonshine model, if the engine runs one.
    pub fn moonshine(&self) -> Option<&MoonshineModel> {
        match &self.backend {
            Backend::Moonshine(m) => Some(m),
            Backend::Whisper(_) | Backend::Ctc(_) => None,
        }
    }

    /// The loaded CTC model, if the engine runs one.
    pub fn ctc_model(&self) -> Option<&dyn CtcModel> {
        match &self.backend {
            Backend::Ctc(c) => Some(c.model()),
            Backend::Whisper(_) | Backend::Moonshine(_) => None,
        }
    }

    /// CTC: the windows a recording of `n_samples` samples is cut into (with the frames each
    /// retains); `None` for Whisper.
    pub fn plan_windows(&self, n_samples: usize) -> Option<Vec<Window>> {
        match &self.backend {
            Backend::Ctc(c) => Some(c.planner().plan(0, n_samples)),
            Backend::Whisper(_) | Backend::Moonshine(_) => None,
        }
    }

    /// Transcribes `inputs` with the engine's default options.
    pub fn transcribe(&self, inputs: &[Input]) -> EngineOutput {
        self.transcribe_with(inputs, &self.config.decode)
    }

    /// Transcribes `inputs` with the given Whisper decoding options (CTC models use the
    /// engine's [`CtcOptions`]); results come back in input order.
    ///
    /// With [`DecodeOptions::channels`] `Split`, every channel of every input is transcribed on
    /// its own (the channels of all inputs share the batches) and each input's channels are
    /// merged by start time, each segment carrying its `channel`; with `diarize` the speaker
    /// of a segment is its channel (`SPEAKER_00` for channel 0), not a clustering.
    pub fn transcribe_with(&self, inputs: &[Input], opts: &DecodeOptions) -> EngineOutput {
        if opts.channels == dicta_core::ChannelMode::Split {
            return split::transcribe(self, inputs, opts);
        }
        self.in_pool(|| {
            let start = Instant::now();
            let mut stats = Stats {
                inputs: inputs.len(),
                compute_type: self.compute_type().map(|c| c.as_str().to_string()),
                ..Stats::default()
            };
            let refuse = |msg: &str| {
                let e = Error::invalid_input(msg);
                let results = inputs.iter().map(|_| Err(e.clone())).collect();
                EngineOutput {
                    results,
                    stats: stats.clone(),
                }
            };
            if !opts.clip_timestamps.is_empty() && !matches!(self.backend, Backend::Whisper(_)) {
                return refuse(
                    "clip_timestamps is a Whisper option (its seek loop); this model is not a \
                     Whisper model",
                );
            }
            if opts.initial_prompt_tokens.is_some() && !matches!(self.backend, Backend::Whisper(_))
            {
                return refuse(
                    "initial_prompt as token ids is a Whisper option (its tokenizer's ids); this \
                     model is not a Whisper model",
                );
            }
            if opts.token_logprobs && !matches!(self.backend, Backend::Whisper(_)) {
                return refuse(
                    "token log-probabilities (token_logprobs, OpenAI's include[]=logprobs) are \
                     a Whisper option; this model is not a Whisper model",
                );
            }
            if opts.prefix.as_deref().is_some_and(|p| !p.is_empty())
                && !matches!(self.backend, Backend::Whisper(_))
            {
                return refuse(
                    "prefix is a Whisper option (forced at the start of its first window); \
                     this model is not a Whisper model",
                );
            }
            let filter = match (&opts.vad, &self.vad) {
                (None, _) => None,
                (Some(o), Some(v)) => Some(SpeechFilter::new(v, o.clone(), inputs.len())),
                (Some(_), None) => {
                    return refuse(
                        "vad_filter needs a voice activity detector, and none is loaded \
                         (EngineConfig::vad_model; dicta: --vad-model)",
                    )
                }
            };
            let diarize =
                match (&opts.diarize, &self.diarizer) {
                    (None, _) => None,
                    (Some(o), Some(d)) => Some((d, o.clone())),
                    (Some(_), None) => return refuse(
                        "diarize needs a voice activity detector and a speaker model, and they \
                         are not loaded (EngineConfig::vad_model + speaker_model; dicta: \
                         --vad-model, --speaker-model)",
                    ),
                };
            // Progress: segments are final only after `pre.finish` when it changes them.
            let hold = filter.is_some() || diarize.is_some();
            let observer = observe::Observer::new(&opts.progress, inputs.len(), hold);
            let pre = Preprocess::new(filter, diarize, inputs.len()).observed(observer.clone());
            let transform = pre.active().then_some(&pre as &dyn Transform<'_>);
            let mut warnings = Vec::new();
            let mut results = self.with_audio(
                inputs,
                transform,
                &mut stats,
                &mut warnings,
                |audio, stats| match &self.backend {
                    Backend::Whisper(w) => {
                        let (cfg, turns) = (&self.config, &self.acoustic);
                        let asst = self.assistant.as_ref();
                        whisper::run(w, asst, audio, opts, cfg, turns, &observer, stats)
                    }
                    Backend::Ctc(c) => {
                        c.transcribe(audio, &self.config, &self.acoustic, &observer, stats)
                    }
                    Backend::Moonshine(m) => {
                        let (cfg, turns) = (&self.config, &self.acoustic);
                        moonshine::run(m, audio, opts, cfg, turns, &observer, stats)
                    }
                },
            );
            pre.finish(&mut results, opts.language.as_deref(), &mut stats);
            warnings.resize(results.len(), None);
            for ((r, input), warning) in results.iter_mut().zip(inputs).zip(warnings) {
                if let Ok(t) = r {
                    t.id = input.id.clone();
                    t.audio = input.audio.clone();
                    t.warnings.extend(warning);
                }
            }
            observer.flush(&results);
            finish_stats(&mut stats, start);
            EngineOutput { results, stats }
        })
    }

    /// CTC: the joined `[T, V]` log-probs of each input, exactly what the decoder would see
    /// (planned, batched and stitched as [`Engine::transcribe`] does, but not decoded).
    /// Errors (`InvalidInput`) for a Whisper engine.
    pub fn ctc_log_probs(&self, inputs: &[Input]) -> Result<(Vec<Result<LogProbs>>, Stats)> {
        let Backend::Ctc(c) = &self.backend else {
            return Err(Error::invalid_input(
                "ctc_log_probs needs a CTC model; this engine runs an encoder-decoder model",
            ));
        };
        Ok(self.in_pool(|| {
            let start = Instant::now();
            let mut stats = Stats {
                inputs: inputs.len(),
                ..Stats::default()
            };
            let results =
                self.with_audio(inputs, None, &mut stats, &mut Vec::new(), |audio, stats| {
                    c.log_probs(audio, &self.config, &self.acoustic, stats)
                });
            finish_stats(&mut stats, start);
            (results, stats)
        }))
    }

    /// Runs `consume` while decode threads decode `inputs` ahead of it (see the module docs),
    /// then records the decode and wait times, and puts in `warnings` the note on each input
    /// read only in part (by input index).
    fn with_audio<'a, R>(
        &self,
        inputs: &'a [Input],
        transform: Option<&dyn pipeline::Transform<'a>>,
        stats: &mut Stats,
        warnings: &mut Vec<Option<String>>,
        consume: impl FnOnce(&mut pipeline::Prefetch<'a>, &mut Stats) -> R,
    ) -> R {
        let chunk_samples = match &self.backend {
            Backend::Ctc(c) => c.planner().chunk_samples(),
            Backend::Whisper(_) => whisper::WINDOW_SAMPLES,
            Backend::Moonshine(_) => moonshine::PIECE_SAMPLES,
        };
        // This round and the next one.
        let budget = self
            .config
            .lookahead_windows()
            .saturating_mul(2)
            .saturating_mul(chunk_samples);
        // As many decode threads as the engine's pool has workers (`threads`, or the global
        // pool's size, which the CLI sets from --threads).
        let threads = self.pool.current_num_threads();
        pipeline::with_prefetch(inputs, threads, budget, transform, |audio| {
            let r = consume(audio, stats);
            stats.decode_seconds += audio.decode_seconds();
            stats.input_wait_seconds += audio.wait_seconds();
            *warnings = audio.take_warnings();
            r
        })
    }

    /// Runs `f` inside the engine's pool if no other call is in it; otherwise on this thread.
    ///
    /// One call at a time: a pool worker that waits for its share of a kernel runs other jobs
    /// of the pool meanwhile, another call's whole `install` among them, and that call would
    /// then wait for a turn of the model (`Turns`) held further down the same worker's stack,
    /// forever. Concurrent callers run on their own threads instead (their kernels on rayon's
    /// global pool) and still take turns with the call in the pool batch by batch.
    fn in_pool<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        use std::sync::atomic::{AtomicBool, Ordering};
        let pool = &self.pool;
        if pool.current_thread_index().is_some() {
            return f();
        }
        if self
            .pooled
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return f();
        }
        /// Clears `pooled` when the call leaves the pool, also while unwinding.
        struct Leave<'a>(&'a AtomicBool);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _leave = Leave(&self.pooled);
        pool.install(f)
    }
}

fn finish_stats(stats: &mut Stats, start: Instant) {
    stats.wall_seconds = start.elapsed().as_secs_f64();
    stats.rtfx = if stats.wall_seconds > 0.0 {
        stats.audio_seconds / stats.wall_seconds
    } else {
        0.0
    };
    stats.peak_rss_bytes = peak_rss_bytes();
}

/// The process's peak resident set size (`VmHWM`), where the OS reports it (Linux).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
