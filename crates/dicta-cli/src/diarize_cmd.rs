//! `dicta diarize`: who spoke when (Silero VAD + ECAPA-TDNN embeddings + clustering), written as
//! RTTM or JSON; and the speaker flags shared with `dicta transcribe --diarize`.

use std::fs;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use dicta_engine::diarize::{rttm, DiarizeOptions, DiarizeResult, Diarizer};
use dicta_engine::Input;
use serde_json::{json, Value};

use crate::{fetch, Globals};

/// Speaker settings.
#[derive(Debug, Clone, Args)]
pub struct SpeakerArgs {
    /// Speaker embedding model: a known name (fetched on first use) or a folder / `.ckpt` file.
    #[arg(long, env = "DICTA_SPEAKER_MODEL", default_value = fetch::DEFAULT_SPEAKER_MODEL)]
    pub speaker_model: String,
    /// The exact number of speakers, when known.
    #[arg(long)]
    pub num_speakers: Option<usize>,
    /// At least this many speakers.
    #[arg(long)]
    pub min_speakers: Option<usize>,
    /// At most this many speakers.
    #[arg(long)]
    pub max_speakers: Option<usize>,
    /// Cosine distance at which clustering stops merging (estimates the speaker count).
    #[arg(long, default_value_t = DiarizeOptions::default().threshold)]
    pub speaker_threshold: f32,
    /// Length of the windows speaker embeddings are taken from (seconds, 0.5–10).
    #[arg(long, default_value_t = DiarizeOptions::default().window_seconds)]
    pub speaker_window: f32,
    /// Step between embedding windows (seconds, at most `--speaker-window`).
    #[arg(long, default_value_t = DiarizeOptions::default().step_seconds)]
    pub speaker_step: f32,
}

impl SpeakerArgs {
    /// The options these flags describe.
    pub fn options(&self) -> DiarizeOptions {
        DiarizeOptions {
            num_speakers: self.num_speakers,
            min_speakers: self.min_speakers,
            max_speakers: self.max_speakers,
            threshold: self.speaker_threshold,
            window_seconds: self.speaker_window,
            step_seconds: self.speaker_step,
        }
    }

    /// The speaker model file or folder, fetching a known name on first use.
    pub fn resolve_model(&self, g: &Globals, progress: bool) -> Result<PathBuf> {
        Ok(fetch::resolve_model(
            &self.speaker_model,
            &g.home,
            &g.python,
            progress,
        )?)
    }

    /// Loads the diarizer (fetching known models on first use).
    pub fn load(&self, vad_model: &str, g: &Globals, progress: bool) -> Result<Diarizer> {
        let vad = fetch::resolve_model(vad_model, &g.home, &g.python, progress)?;
        let speaker = fetch::resolve_model(&self.speaker_model, &g.home, &g.python, progress)?;
        Diarizer::load(&vad, &speaker).context("cannot load the diarization models")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DiarizeFormat {
    Rttm,
    Json,
}

/// `dicta diarize` arguments.
#[derive(Debug, Args)]
pub struct DiarizeArgs {
    /// Audio files (any format `dicta transcribe` reads).
    pub inputs: Vec<PathBuf>,
    /// Write `DIR/<file stem>.rttm` per input (RTTM format).
    #[arg(long)]
    pub output_dir: Option<PathBuf>,
    /// Write the output here instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = DiarizeFormat::Rttm)]
    pub format: DiarizeFormat,
    #[command(flatten)]
    pub speaker: SpeakerArgs,
    /// Voice activity detector: a known name or a `.onnx` file / folder.
    #[arg(long, env = "DICTA_VAD_MODEL", default_value = fetch::DEFAULT_VAD_MODEL)]
    pub vad_model: String,
    /// Also write `DIR/<file stem>.json`: every embedding window (start, end, the stretch it
    /// labels, its 192-d speaker embedding) — for speaker search, or to study the clustering
    /// (`tools/diarization/replay.py`).
    #[arg(long)]
    pub embeddings_dir: Option<PathBuf>,
    /// Hide fetch progress.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs `dicta diarize`; returns the exit code (0 all ok, 1 any input failed, 2 usage).
pub fn run(args: &DiarizeArgs, g: &Globals) -> Result<u8> {
    if args.inputs.is_empty() {
        eprintln!("dicta diarize: no inputs; give audio files (see --help)");
        return Ok(2);
    }
    if args.output_dir.is_some() && args.format == DiarizeFormat::Json {
        eprintln!("dicta diarize: --output-dir writes RTTM; use --output for JSON");
        return Ok(2);
    }
    let opts = args.speaker.options();
    if let Err(e) = opts.validate() {
        eprintln!("dicta diarize: {}", e.message);
        return Ok(2);
    }
    let diarizer = args.speaker.load(&args.vad_model, g, !args.quiet)?;
    let inputs: Vec<Input> = args.inputs.iter().map(Input::from_path).collect();
    let bar = if args.quiet || inputs.len() < 2 {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(inputs.len() as u64)
    };
    if let Some(dir) = &args.embeddings_dir {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let json_names = crate::transcribe_cmd::output_names(&inputs, "json");
    let mut results = Vec::with_capacity(inputs.len());
    for (input, name) in inputs.iter().zip(&json_names) {
        let r = match &args.embeddings_dir {
            // The windows are embedded once and clustered from the same embeddings.
            Some(dir) => with_embeddings(&diarizer, input, &opts, &dir.join(name))?,
            None => diarizer.diarize_windows(input, &opts).map(|(r, _)| r),
        };
        results.push(r);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut failed = 0;
    for (input, r) in inputs.iter().zip(&results) {
        if let Err(e) = r {
            failed += 1;
            eprintln!("dicta diarize: {}: {}: {}", input.audio, e.kind, e.message);
        }
    }
    if let Some(dir) = &args.output_dir {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let names = crate::transcribe_cmd::output_names(&inputs, "rttm");
        for ((r, name), input) in results.iter().zip(&names).zip(&inputs) {
            if let Ok(d) = r {
                let path = dir.join(name);
                fs::write(&path, rttm::write(&stem(input), &d.turns))
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
        }
        return Ok(if failed > 0 { 1 } else { 0 });
    }
    let body = match args.format {
        DiarizeFormat::Rttm => results
            .iter()
            .zip(&inputs)
            .filter_map(|(r, i)| r.as_ref().ok().map(|d| rttm::write(&stem(i), &d.turns)))
            .collect::<String>(),
        DiarizeFormat::Json => {
            let out: Vec<Value> = inputs
                .iter()
                .zip(&results)
                .map(|(i, r)| result_json(i, r))
                .collect();
            let mut s = serde_json::to_string_pretty(&json!({ "results": out }))?;
            s.push('\n');
            s
        }
    };
    crate::write_output(args.output.as_deref(), &body)?;
    Ok(if failed > 0 { 1 } else { 0 })
}

/// Diarizes one input and writes its embedding windows to `path` (an input that fails writes
/// nothing); errors only when the file cannot be written.
fn with_embeddings(
    diarizer: &Diarizer,
    input: &Input,
    opts: &DiarizeOptions,
    path: &std::path::Path,
) -> Result<dicta_core::Result<DiarizeResult>> {
    let (result, windows) = match diarizer.diarize_windows(input, opts) {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    let body = serde_json::to_string(&json!({
        "id": input.id, "audio": input.audio, "options": opts, "windows": windows,
    }))?;
    fs::write(path, body).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(Ok(result))
}

/// The recording name RTTM lines carry: the file stem.
fn stem(input: &Input) -> String {
    std::path::Path::new(&input.audio)
        .file_stem()
        .map_or_else(|| input.id.clone(), |s| s.to_string_lossy().into_owned())
}

fn result_json(input: &Input, r: &dicta_core::Result<DiarizeResult>) -> Value {
    match r {
        Ok(d) => json!({
            "id": d.id, "audio": d.audio, "duration": d.duration, "speakers": d.speakers,
            "turns": d.turns, "error": null,
        }),
        Err(e) => json!({
            "id": input.id, "audio": input.audio, "duration": null, "speakers": null, "turns": [],
            "error": {"type": e.kind.as_str(), "message": e.message},
        }),
    }
}
