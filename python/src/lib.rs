//! `dicta._dicta`: the native half of the `dicta` Python package (the public API, its docs and
//! input conversions are in `python/dicta/__init__.py`).
//!
//! One [`NativeEngine`] is one loaded [`dicta_engine::Engine`]: calls from many Python threads
//! share its batching and its model turns. Every call that does engine work releases the GIL
//! for that work. Results cross the boundary as the CLI's JSON (a `str` the Python side
//! parses), so the two can never drift apart; errors become `dicta.errors` exceptions with the
//! library's messages.

mod errors;
mod options;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dicta_core::{format, Error, ErrorKind, Result};
use dicta_engine::stream::Session;
use dicta_engine::whisper::LongFormMode;
use dicta_engine::{AudioSource, CtcDecoderKind, Engine, EngineConfig, Input};
use dicta_models::whisper::ComputeType;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict};
use serde_json::{json, Value};

use errors::IntoPy;

/// Sample rate the engine runs at; arrays at other rates are resampled to it as files are.
const SAMPLE_RATE: u32 = 16_000;

/// A loaded model serving `transcribe` calls and streaming sessions.
#[pyclass(frozen, name = "Engine", module = "dicta._dicta")]
struct NativeEngine {
    engine: Arc<Engine>,
}

/// Little-endian `f32` samples from a buffer's bytes.
fn f32_samples(bytes: &[u8]) -> Result<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return Err(Error::invalid_input(format!(
            "samples must be float32: {} bytes is not a whole number of samples",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// One input as the Python side hands it over: `(kind, id, label, payload, sample_rate)` with
/// kind `"path"` (payload: str), `"bytes"` (an encoded file) or `"samples"` (float32 bytes).
type RawInput = (String, String, String, Py<PyAny>, u32);

fn to_input(py: Python<'_>, raw: &RawInput) -> PyResult<Result<Input>> {
    let (kind, id, label, payload, rate) = raw;
    let payload = payload.bind(py);
    let source = match kind.as_str() {
        "path" => Ok(AudioSource::Path(PathBuf::from(
            payload.extract::<String>()?,
        ))),
        "bytes" => Ok(AudioSource::Bytes(
            payload.extract::<PyBackedBytes>()?.to_vec(),
        )),
        "samples" => {
            let bytes = payload.extract::<PyBackedBytes>()?;
            let samples = f32_samples(&bytes);
            // Resampling is engine work: outside the GIL.
            let rate = *rate;
            py.detach(move || {
                samples.and_then(|s| {
                    if rate == SAMPLE_RATE {
                        // As given, as faster-whisper takes arrays.
                        Ok(s)
                    } else {
                        // As a file at that rate is read (FFmpeg's resampler, then 16-bit
                        // rounding), so an array and its file give the same transcript.
                        dicta_audio::decode::Audio {
                            samples: s,
                            sample_rate: rate,
                        }
                        .into_16k()
                    }
                })
            })
            .map(AudioSource::Samples)
        }
        other => Err(Error::internal(format!("unknown input kind {other:?}"))),
    };
    Ok(source.map(|source| Input {
        id: id.clone(),
        audio: label.clone(),
        source,
    }))
}

fn parse_compute_type(s: Option<&str>) -> Result<ComputeType> {
    s.unwrap_or("default").parse::<ComputeType>()
}

#[pymethods]
impl NativeEngine {
    /// Loads `model` (a folder, or a known name fetched into `home` with `python -m pip`).
    #[new]
    #[pyo3(signature = (
        model, *, home, python, compute_type=None, threads=None, batch_size=8,
        long_form="auto", overlap_seconds=5.0, vad_model=None, speaker_model=None,
        decoder="greedy", lm=None, lm_alpha=0.5, lm_beta=1.0, beam_width=25, progress=false,
        assistant=None, assistant_tokens=5
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: String,
        home: PathBuf,
        python: String,
        compute_type: Option<String>,
        threads: Option<usize>,
        batch_size: usize,
        long_form: &str,
        overlap_seconds: f32,
        vad_model: Option<String>,
        speaker_model: Option<String>,
        decoder: &str,
        lm: Option<PathBuf>,
        lm_alpha: f64,
        lm_beta: f64,
        beam_width: usize,
        progress: bool,
        assistant: Option<String>,
        assistant_tokens: usize,
    ) -> PyResult<Self> {
        let config = (|| -> Result<EngineConfig> {
            let mut config = EngineConfig {
                batch_size,
                threads,
                compute_type: parse_compute_type(compute_type.as_deref())?,
                long_form: match long_form {
                    "sequential" => LongFormMode::Sequential,
                    "batched" => LongFormMode::Batched,
                    "auto" => LongFormMode::Auto,
                    other => {
                        return Err(Error::invalid_input(format!(
                            "long_form must be \"sequential\", \"batched\" or \"auto\", got \
                             {other:?}"
                        )))
                    }
                },
                overlap_seconds,
                assistant_tokens,
                ..EngineConfig::default()
            };
            config.stream.threads = threads;
            config.ctc.decoder = match decoder {
                "greedy" => CtcDecoderKind::Greedy,
                "beam" => CtcDecoderKind::Beam,
                other => {
                    return Err(Error::invalid_input(format!(
                        "decoder must be \"greedy\" or \"beam\", got {other:?}"
                    )))
                }
            };
            config.ctc.lm = lm;
            config.ctc.lm_weights.alpha = lm_alpha;
            config.ctc.lm_weights.beta = lm_beta;
            config.ctc.beam.beam_width = beam_width;
            config.validate()?;
            Ok(config)
        })()
        .py_err(py)?;
        let engine = py
            .detach(|| -> Result<Engine> {
                let resolve =
                    |spec: &str| dicta_fetch::resolve_model(spec, &home, &python, progress);
                let model_dir = resolve(&model)?;
                let config = EngineConfig {
                    vad_model: vad_model.as_deref().map(resolve).transpose()?,
                    speaker_model: speaker_model.as_deref().map(resolve).transpose()?,
                    assistant_model: assistant.as_deref().map(resolve).transpose()?,
                    assistant_compute_type: config.compute_type,
                    ..config
                };
                Engine::load(&model_dir, config).map_err(|e| {
                    let msg = format!(
                        "cannot load the model in {}: {}",
                        model_dir.display(),
                        e.message
                    );
                    Error::new(e.kind, msg)
                })
            })
            .py_err(py)?;
        Ok(Self {
            engine: Arc::new(engine),
        })
    }

    /// Transcribes `inputs` ([`RawInput`]s) with the keyword `options`; returns the CLI's JSON
    /// (`{"results":[…],"stats":{…}}`, results in input order, a failed input carrying its
    /// error). Bad options raise; a bad input fails alone. `on_event`, when given, is called
    /// from the engine's threads with each progress event as JSON ([`event_json`]); what it
    /// raises is ignored. Once `cancel` is set the work stops at the next model pass and the
    /// unfinished inputs fail with `timeout`.
    #[pyo3(signature = (inputs, options=None, verbose=false, on_event=None, cancel=None))]
    fn transcribe(
        &self,
        py: Python<'_>,
        inputs: Vec<RawInput>,
        options: Option<&Bound<'_, PyDict>>,
        verbose: bool,
        on_event: Option<Py<PyAny>>,
        cancel: Option<PyRef<'_, Cancel>>,
    ) -> PyResult<String> {
        let mut opts = options::decode_options(&self.engine.config().decode, options).py_err(py)?;
        if let Some(c) = cancel {
            // A flag, not a Python callable: the engine polls it at every model pass, and must
            // not need the GIL for that.
            opts.cancel = dicta_core::Cancel::from_flag(Arc::clone(&c.flag));
        }
        if let Some(cb) = on_event {
            opts.progress = dicta_engine::progress::Progress::new(move |e| {
                let text = event_json(&e).to_string();
                Python::attach(|py| {
                    if let Err(err) = cb.call1(py, (text,)) {
                        // The caller's bug must not stop the transcription; Python shows it.
                        err.print(py);
                    }
                });
            });
        }
        let converted = inputs
            .iter()
            .map(|raw| to_input(py, raw))
            .collect::<PyResult<Vec<_>>>()?;
        let engine = Arc::clone(&self.engine);
        let body = py.detach(move || {
            // Inputs that could not even be read in (bad sample buffers) keep their place.
            let mut ok = Vec::with_capacity(converted.len());
            let mut refused = Vec::with_capacity(converted.len());
            for c in converted {
                match c {
                    Ok(input) => {
                        ok.push(input);
                        refused.push(None);
                    }
                    Err(e) => refused.push(Some(e)),
                }
            }
            let out = engine.transcribe_with(&ok, &opts);
            let mut done = ok.iter().zip(out.results);
            let results: Vec<Value> = refused
                .into_iter()
                .zip(&inputs)
                .map(|(refused, (_, id, label, _, _))| match refused {
                    Some(e) => format::result_json(id, label, &Err(e), verbose),
                    None => match done.next() {
                        Some((input, r)) => {
                            format::result_json(&input.id, &input.audio, &r, verbose)
                        }
                        None => format::result_json(
                            id,
                            label,
                            &Err(Error::internal("the engine returned fewer results")),
                            verbose,
                        ),
                    },
                })
                .collect();
            let mut stats = out.stats;
            stats.inputs = inputs.len();
            json!({"results": results, "stats": stats}).to_string()
        });
        Ok(body)
    }

    /// Opens a streaming session (16 kHz mono float32 blocks of any size) on the engine's
    /// batching worker, started by the first session.
    #[pyo3(signature = (options=None))]
    fn open_session(
        &self,
        py: Python<'_>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<NativeSession> {
        let opts = options::session_options(options).py_err(py)?;
        let engine = Arc::clone(&self.engine);
        let session = py.detach(move || engine.open_session(opts)).py_err(py)?;
        Ok(NativeSession {
            inner: Mutex::new(Some(session)),
        })
    }

    /// The folder the model was loaded from.
    #[getter]
    fn model_dir(&self) -> String {
        self.engine.model_dir().display().to_string()
    }

    /// `"whisper"`, `"moonshine"` or `"ctc"`.
    #[getter]
    fn family(&self) -> &'static str {
        match self.engine.family() {
            dicta_engine::ModelFamily::Whisper => "whisper",
            dicta_engine::ModelFamily::Moonshine => "moonshine",
            dicta_engine::ModelFamily::Ctc => "ctc",
        }
    }

    /// Option names `transcribe` accepts.
    #[staticmethod]
    fn transcribe_options() -> Vec<&'static str> {
        options::DECODE_OPTIONS.to_vec()
    }
}

/// One streaming session; its state is its own, its model calls are batched with every other
/// session of the engine.
#[pyclass(frozen, name = "Session", module = "dicta._dicta")]
struct NativeSession {
    inner: Mutex<Option<Session>>,
}

impl NativeSession {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Session) -> Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            match guard.as_mut() {
                Some(s) => f(s),
                None => Err(Error::invalid_input("the session is closed")),
            }
        })
        .py_err(py)
    }
}

fn events_json(events: Vec<dicta_engine::stream::Event>) -> Result<String> {
    serde_json::to_string(&events).map_err(|e| Error::internal(e.to_string()))
}

#[pymethods]
impl NativeSession {
    /// Feeds float32 samples (bytes); returns the new events as a JSON list.
    fn feed(&self, py: Python<'_>, samples: PyBackedBytes) -> PyResult<String> {
        let samples = f32_samples(&samples).py_err(py)?;
        if let Some(bad) = samples.iter().position(|x| !x.is_finite()) {
            return Err(errors::to_py(
                py,
                Error::new(
                    ErrorKind::CorruptInput,
                    format!("sample {bad} is not finite"),
                ),
            ));
        }
        self.with(py, |s| s.feed(&samples).and_then(events_json))
    }

    /// Ends the stream: pads and flushes the tail; returns the last events as a JSON list. The
    /// session may be fed again afterwards (a new stream, times from zero).
    fn end(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |s| s.end().and_then(events_json))
    }

    /// Releases the session's slot on the worker; later calls raise.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// Samples fed but not processed yet.
    #[getter]
    fn buffered_samples(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map_or(0, |s| s.buffered_samples())
    }
}

/// Decodes an audio file (a path, or the bytes of a file) to mono float32 at `sampling_rate`
/// (16 kHz: what the engine hears), as the engine does (FFmpeg's resampler and 16-bit
/// rounding); returns the samples' bytes.
#[pyfunction]
#[pyo3(signature = (source, sampling_rate = 16_000))]
fn decode_audio<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    sampling_rate: u32,
) -> PyResult<Bound<'py, PyBytes>> {
    let loaded = if let Ok(path) = source.extract::<PathBuf>() {
        py.detach(|| dicta_audio::decode::load_path_at(Path::new(&path), sampling_rate))
    } else {
        let bytes = source.extract::<PyBackedBytes>()?.to_vec();
        py.detach(|| dicta_audio::decode::load_owned_at(bytes, "<bytes>", sampling_rate))
    }
    .py_err(py)?;
    let bytes: Vec<u8> = loaded
        .samples
        .iter()
        .flat_map(|s| s.to_le_bytes())
        .collect();
    Ok(PyBytes::new(py, &bytes))
}

/// Every channel of an audio file (a path or its bytes) at `sampling_rate`, as little-endian
/// f32 bytes per channel: faster-whisper's `decode_audio(split_stereo=True)` samples on a
/// stereo file.
#[pyfunction]
#[pyo3(signature = (source, sampling_rate = 16_000))]
fn decode_audio_channels<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    sampling_rate: u32,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let loaded = if let Ok(path) = source.extract::<PathBuf>() {
        py.detach(|| dicta_audio::decode::load_channels_path_at(Path::new(&path), sampling_rate))
    } else {
        let bytes = source.extract::<PyBackedBytes>()?.to_vec();
        py.detach(|| dicta_audio::decode::load_channels_owned_at(bytes, "<bytes>", sampling_rate))
    }
    .py_err(py)?;
    Ok(loaded
        .channels
        .iter()
        .map(|c| {
            let bytes: Vec<u8> = c.iter().flat_map(|s| s.to_le_bytes()).collect();
            PyBytes::new(py, &bytes)
        })
        .collect())
}

/// Names of the models `Engine(model=…)` fetches by name.
#[pyfunction]
fn known_models() -> Vec<(&'static str, &'static str)> {
    dicta_fetch::ARTIFACTS
        .iter()
        .map(|a| (a.name, a.description))
        .collect()
}

/// Fetches a named model into `home` (a no-op when fetched) and returns its folder.
#[pyfunction]
#[pyo3(signature = (name, *, home, python, progress=false))]
fn fetch_model(
    py: Python<'_>,
    name: String,
    home: PathBuf,
    python: String,
    progress: bool,
) -> PyResult<String> {
    py.detach(|| dicta_fetch::resolve_model(&name, &home, &python, progress))
        .map(|p| p.display().to_string())
        .py_err(py)
}

/// A flag that stops a running `Engine.transcribe` (`dicta.Cancel`): set from any thread.
#[pyclass(module = "dicta._dicta", frozen)]
struct Cancel {
    flag: Arc<std::sync::atomic::AtomicBool>,
}

#[pymethods]
impl Cancel {
    #[new]
    fn new() -> Self {
        Self {
            flag: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    /// Stops the work this flag was given to (at its next model pass).
    fn cancel(&self) {
        self.flag.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether [`Cancel::cancel`] was called.
    #[getter]
    fn cancelled(&self) -> bool {
        self.flag.load(std::sync::atomic::Ordering::Acquire)
    }
}

#[pymodule]
fn _dicta(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeEngine>()?;
    m.add_class::<Cancel>()?;
    m.add_class::<NativeSession>()?;
    m.add_function(wrap_pyfunction!(decode_audio, m)?)?;
    m.add_function(wrap_pyfunction!(decode_audio_channels, m)?)?;
    m.add_function(wrap_pyfunction!(known_models, m)?)?;
    m.add_function(wrap_pyfunction!(fetch_model, m)?)?;
    m.add("DEFAULT_MODEL", dicta_fetch::DEFAULT_MODEL)?;
    m.add("SAMPLE_RATE", SAMPLE_RATE)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// A progress event as `dicta.Engine.transcribe`'s `on_event` receives it: `{"type":
/// "started"|"audio"|"language"|"segments", "input": i, …}` with `duration` (s), `seconds`
/// (s finished), `language`, `probability` and `all_language_probs` (`[[code, p], …]`, most
/// likely first, or None), or `segments` (verbose segments).
fn event_json(e: &dicta_engine::progress::ProgressEvent) -> Value {
    use dicta_engine::progress::ProgressEvent as E;
    match e {
        E::Started { input, duration } => {
            json!({"type": "started", "input": input, "duration": duration})
        }
        E::Audio { input, seconds } => json!({"type": "audio", "input": input, "seconds": seconds}),
        E::Language {
            input,
            language,
            probability,
            all,
        } => json!({"type": "language", "input": input, "language": language,
                    "probability": probability, "all_language_probs": all}),
        E::Segments { input, segments } => {
            json!({"type": "segments", "input": input, "segments": segments})
        }
        _ => json!({"type": "other"}),
    }
}
