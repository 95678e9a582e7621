//! `dicta vad`: speech segments of audio files (Silero VAD with faster-whisper's rules), and the
//! VAD flags shared with `dicta transcribe --vad-filter` and `dicta serve`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use dicta_engine::vad::{Vad, VadOptions, VadResult};
use dicta_engine::Input;
use serde_json::{json, Value};

use crate::{fetch, Globals};

/// Voice activity detection settings (faster-whisper's `VadOptions`, same names and defaults).
#[derive(Debug, Clone, Args)]
pub struct VadArgs {
    /// VAD model: a known name (fetched on first use) or a `.onnx` file / folder.
    #[arg(long, env = "DICTA_VAD_MODEL", default_value = fetch::DEFAULT_VAD_MODEL)]
    pub vad_model: String,
    /// A window with speech probability at or above this is speech.
    #[arg(long, alias = "threshold", default_value_t = 0.5)]
    pub vad_threshold: f64,
    /// Speech ends only below this (default: threshold − 0.15, at least 0.01).
    #[arg(long, alias = "neg-threshold")]
    pub vad_neg_threshold: Option<f64>,
    /// Speech chunks this short or shorter (ms) are dropped.
    #[arg(long, alias = "min-speech-duration-ms", default_value_t = 0)]
    pub vad_min_speech_duration_ms: u32,
    /// Longer chunks (s) are split at the last pause over 98 ms, or hard before this.
    #[arg(long, alias = "max-speech-duration-s", default_value_t = f64::INFINITY)]
    pub vad_max_speech_duration_s: f64,
    /// Silence (ms) that ends a chunk.
    #[arg(long, alias = "min-silence-duration-ms", default_value_t = 2000)]
    pub vad_min_silence_duration_ms: u32,
    /// Padding (ms) added on each side of a chunk.
    #[arg(long, alias = "speech-pad-ms", default_value_t = 400)]
    pub vad_speech_pad_ms: u32,
}

impl VadArgs {
    /// The options these flags describe.
    pub fn options(&self) -> VadOptions {
        VadOptions {
            threshold: self.vad_threshold,
            neg_threshold: self.vad_neg_threshold,
            min_speech_duration_ms: self.vad_min_speech_duration_ms,
            max_speech_duration_s: self.vad_max_speech_duration_s,
            min_silence_duration_ms: self.vad_min_silence_duration_ms,
            speech_pad_ms: self.vad_speech_pad_ms,
        }
    }

    /// The model file or folder, fetching a known name on first use.
    pub fn resolve_model(&self, g: &Globals, progress: bool) -> Result<PathBuf> {
        Ok(fetch::resolve_model(
            &self.vad_model,
            &g.home,
            &g.python,
            progress,
        )?)
    }
}

/// `dicta vad` arguments.
#[derive(Debug, Args)]
pub struct VadCmdArgs {
    /// Audio files (any format `dicta transcribe` reads).
    pub inputs: Vec<PathBuf>,
    /// Write the JSON here instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub vad: VadArgs,
    /// Hide fetch progress.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs `dicta vad`; returns the exit code (0 all ok, 1 any input failed, 2 usage).
pub fn run(args: &VadCmdArgs, g: &Globals) -> Result<u8> {
    if args.inputs.is_empty() {
        eprintln!("dicta vad: no inputs; give audio files (see --help)");
        return Ok(2);
    }
    let opts = args.vad.options();
    if let Err(e) = opts.validate() {
        eprintln!("dicta vad: {}", e.message);
        return Ok(2);
    }
    let path = args.vad.resolve_model(g, !args.quiet)?;
    let vad = Vad::load(&path)
        .with_context(|| format!("cannot load the VAD model {}", path.display()))?;
    let inputs: Vec<Input> = args.inputs.iter().map(Input::from_path).collect();
    let results = vad.detect(&inputs, &opts);
    let mut failed = 0;
    let out: Vec<Value> = inputs
        .iter()
        .zip(&results)
        .map(|(input, r)| {
            if let Err(e) = r {
                failed += 1;
                eprintln!("dicta vad: {}: {}: {}", input.audio, e.kind, e.message);
            }
            result_json(input, r)
        })
        .collect();
    let mut body = serde_json::to_string_pretty(&json!({ "results": out }))?;
    body.push('\n');
    crate::write_output(args.output.as_deref(), &body)?;
    Ok(if failed > 0 { 1 } else { 0 })
}

fn result_json(input: &Input, r: &dicta_core::Result<VadResult>) -> Value {
    match r {
        Ok(v) => json!({
            "id": v.id, "audio": v.audio, "duration": v.duration,
            "segments": v.segments.iter()
                .map(|c| json!({"start": c.start_seconds(), "end": c.end_seconds()}))
                .collect::<Vec<_>>(),
            "error": null,
        }),
        Err(e) => json!({
            "id": input.id, "audio": input.audio, "duration": null, "segments": [],
            "error": {"type": e.kind.as_str(), "message": e.message},
        }),
    }
}
