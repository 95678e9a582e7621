//! The engine facade: one loaded model, many callers.
//!
//! [`Engine::transcribe`] takes inputs of any kind (paths, encoded bytes, decoded samples),
//! decodes the audio on a worker pool, runs the model over windows of all inputs together and
//! returns one result per input in input order. A broken input fails only its own entry.

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::Device;
use dicta_core::{Error, Result, Stats, Transcript};
use dicta_models::whisper::Whisper;
use rayon::prelude::*;

use crate::whisper::{DecodeOptions, LongFormMode, WhisperTranscriber};

/// Where one input's audio comes from.
#[derive(Debug, Clone)]
pub enum AudioSource {
    /// A file in any supported container.
    Path(PathBuf),
    /// An encoded file held in memory.
    Bytes(Vec<u8>),
    /// Already decoded 16 kHz mono samples.
    Samples(Vec<f32>),
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
}

/// Engine-wide settings (the defaults of every call).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Windows per model call.
    pub batch_size: usize,
    /// How recordings longer than one window are processed.
    pub long_form: LongFormMode,
    /// Default decoding options.
    pub decode: DecodeOptions,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            batch_size: 8,
            long_form: LongFormMode::Sequential,
            decode: DecodeOptions::default(),
        }
    }
}

impl EngineConfig {
    /// Checks ranges; messages name the setting and the value given.
    pub fn validate(&self) -> Result<()> {
        if self.batch_size == 0 {
            return Err(Error::invalid_input("batch_size must be >= 1, got 0"));
        }
        self.decode.validate()
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

/// A loaded model plus its default settings; shareable across threads.
pub struct Engine {
    whisper: Whisper,
    config: EngineConfig,
    model_dir: PathBuf,
}

impl Engine {
    /// Loads the model in `model_dir` (a CTranslate2 or Hugging Face Whisper folder) on the CPU.
    pub fn load(model_dir: &Path, config: EngineConfig) -> Result<Self> {
        config.validate()?;
        let whisper = Whisper::load(model_dir, &Device::Cpu)?;
        tracing::info!(model = %model_dir.display(), format = ?whisper.format, "model loaded");
        Ok(Self {
            whisper,
            config,
            model_dir: model_dir.to_path_buf(),
        })
    }

    /// The engine's default settings.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The folder the model was loaded from.
    pub fn model_dir(&self) -> &Path {
        &self.model_dir
    }

    /// The loaded Whisper model.
    pub fn whisper(&self) -> &Whisper {
        &self.whisper
    }

    /// Transcribes `inputs` with the engine's default options.
    pub fn transcribe(&self, inputs: &[Input]) -> EngineOutput {
        self.transcribe_with(inputs, &self.config.decode)
    }

    /// Transcribes `inputs` with the given decoding options; results come back in input order.
    pub fn transcribe_with(&self, inputs: &[Input], opts: &DecodeOptions) -> EngineOutput {
        let start = Instant::now();
        let audio: Vec<Result<Vec<f32>>> = inputs.par_iter().map(load_audio).collect();
        let decode_seconds = start.elapsed().as_secs_f64();

        let ok: Vec<usize> = (0..inputs.len()).filter(|&i| audio[i].is_ok()).collect();
        let samples: Vec<&[f32]> = ok
            .iter()
            .map(|&i| audio[i].as_ref().map(|a| a.as_slice()).unwrap_or(&[]))
            .collect();
        let model_start = Instant::now();
        let decoded = WhisperTranscriber::new(&self.whisper).and_then(|t| {
            t.transcribe(&samples, opts, self.config.long_form, self.config.batch_size)
        });
        let model_seconds = model_start.elapsed().as_secs_f64();

        let mut results: Vec<Result<Transcript>> = audio
            .iter()
            .map(|a| match a {
                Err(e) => Err(e.clone()),
                Ok(_) => Err(Error::internal("not transcribed")),
            })
            .collect();
        let mut stats = Stats {
            inputs: inputs.len(),
            decode_seconds,
            model_seconds,
            ..Stats::default()
        };
        match decoded {
            Ok(out) => {
                stats.windows = out.windows;
                stats.batch_sizes = out.batch_sizes;
                stats.long_form_mode = Some(out.long_form_mode.as_str().to_string());
                for (&i, r) in ok.iter().zip(out.transcripts) {
                    results[i] = r.map(|mut t| {
                        t.id = inputs[i].id.clone();
                        t.audio = inputs[i].audio.clone();
                        t
                    });
                }
            }
            Err(e) => {
                for &i in &ok {
                    results[i] = Err(e.clone());
                }
            }
        }
        stats.audio_seconds = audio
            .iter()
            .filter_map(|a| a.as_ref().ok())
            .map(|a| a.len() as f64 / f64::from(dicta_audio::SAMPLE_RATE))
            .sum();
        stats.wall_seconds = start.elapsed().as_secs_f64();
        stats.rtfx = if stats.wall_seconds > 0.0 {
            stats.audio_seconds / stats.wall_seconds
        } else {
            0.0
        };
        EngineOutput { results, stats }
    }
}

fn load_audio(input: &Input) -> Result<Vec<f32>> {
    match &input.source {
        AudioSource::Path(p) => dicta_audio::decode::load_path(p),
        AudioSource::Bytes(b) => dicta_audio::decode::load_bytes(b, &input.audio),
        AudioSource::Samples(s) => {
            if s.is_empty() {
                return Err(Error::new(
                    dicta_core::ErrorKind::EmptyInput,
                    format!("{}: no samples", input.audio),
                ));
            }
            if let Some(bad) = s.iter().position(|x| !x.is_finite()) {
                return Err(Error::new(
                    dicta_core::ErrorKind::CorruptInput,
                    format!("{}: sample {bad} is not finite", input.audio),
                ));
            }
            Ok(s.clone())
        }
    }
}
