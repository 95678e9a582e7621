//! Dicta's benchmark arm: a child process that loads the model once and answers run requests
//! over stdin/stdout (see [`super::protocol`]). Running the engine in a child lets the driver
//! report an out-of-memory (the child dies) instead of dying with it, and gives each thread count
//! its own process (the CPU thread pools are sized once per process).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use dicta_engine::whisper::{DecodeOptions, LongFormMode};
use dicta_engine::{Engine, EngineConfig, EngineOutput, Input};

use super::protocol::{
    peak_rss_bytes, reset_peak_rss, ItemResult, Mode, Ready, RunReply, RunRequest,
};
use super::workload::{item_path, read_items};
use dicta_models::whisper::ComputeType;

/// `dicta bench worker` (internal): serve run requests for one model and thread count.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// Model folder (already resolved).
    #[arg(long)]
    pub model: PathBuf,
    /// CPU threads (sizes the thread pools before they start).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Whisper weights: float32 or int8.
    #[arg(long, default_value = "float32", value_parser = crate::transcribe_cmd::parse_compute_type)]
    pub compute_type: ComputeType,
}

/// Runs the worker loop until stdin closes.
pub fn run(args: &WorkerArgs) -> Result<u8> {
    if let Some(n) = args.threads.filter(|&n| n > 0) {
        // Before any pool starts: rayon and candle size their pools from this once.
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let start = Instant::now();
    let mut key = (8usize, LongFormMode::Sequential);
    let mut engine = load(&args.model, key, args.compute_type)?;
    let ready = Ready {
        arm: "dicta".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        load_seconds: start.elapsed().as_secs_f64(),
        threads,
        compute_type: match (engine.whisper(), engine.moonshine()) {
            (Some(w), _) => w.compute_type().to_string(),
            (None, Some(m)) => m.compute_type.to_string(),
            (None, None) => "float32".to_string(),
        },
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string(&ready)?)?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<RunRequest>(&line) {
            Err(e) => RunReply::failed("error", format!("bad request: {e}")),
            Ok(req) => {
                let want = (req.batch_size, long_form(&req));
                // The engine's batch size and long-form mode are load-time settings.
                if want != key {
                    drop(engine);
                    engine = load(&args.model, want, args.compute_type)?;
                    key = want;
                }
                run_one(&engine, &req)
            }
        };
        writeln!(out, "{}", serde_json::to_string(&reply)?)?;
        out.flush()?;
    }
    Ok(0)
}

fn long_form(req: &RunRequest) -> LongFormMode {
    match req.long_form.as_str() {
        "batched" => LongFormMode::Batched,
        "auto" => LongFormMode::Auto,
        _ => LongFormMode::Sequential,
    }
}

fn load(
    model: &Path,
    (batch_size, long_form): (usize, LongFormMode),
    compute_type: ComputeType,
) -> Result<Engine> {
    let config = EngineConfig {
        batch_size,
        long_form,
        compute_type,
        decode: DecodeOptions::greedy(),
        ..EngineConfig::default()
    };
    Engine::load(model, config)
        .with_context(|| format!("cannot load the model in {}", model.display()))
}

fn run_one(engine: &Engine, req: &RunRequest) -> RunReply {
    let items = match read_items(&req.manifest) {
        Ok(i) => i,
        Err(e) => return RunReply::failed("error", format!("{e:#}")),
    };
    let inputs: Vec<Input> = items
        .iter()
        .map(|it| {
            let mut input = Input::from_path(item_path(&req.manifest, it));
            input.id = it.id.clone();
            input
        })
        .collect();
    let opts = DecodeOptions {
        beam_size: req.beam_size,
        temperatures: req.temperatures.clone(),
        condition_on_previous_text: req.condition_on_previous_text,
        without_timestamps: req.without_timestamps,
        language: Some("en".into()),
        ..DecodeOptions::default()
    };
    let rss_reset = reset_peak_rss();
    let mut reply = RunReply {
        ok: true,
        pipeline: format!(
            "Engine::transcribe_with({}, batch_size={}, long_form={})",
            if req.mode == Mode::Batch {
                "all inputs"
            } else {
                "one input per call"
            },
            req.batch_size,
            engine.config().long_form.as_str()
        ),
        ..RunReply::default()
    };
    let start = Instant::now();
    match req.mode {
        Mode::Batch => {
            let out = engine.transcribe_with(&inputs, &opts);
            absorb(&mut reply, &inputs, out, None);
        }
        Mode::PerItem => {
            for input in &inputs {
                let t = Instant::now();
                let out = engine.transcribe_with(std::slice::from_ref(input), &opts);
                let secs = t.elapsed().as_secs_f64();
                absorb(&mut reply, std::slice::from_ref(input), out, Some(secs));
            }
        }
    }
    reply.wall_seconds = start.elapsed().as_secs_f64();
    // Where the reset is refused, the process's peak is still an upper bound; say so.
    reply.peak_rss_bytes = peak_rss_bytes();
    reply.peak_rss_process_wide = !rss_reset;
    if let Some(e) = reply.items.iter().find_map(|i| i.error.as_ref()) {
        // An allocation the allocator refused but survived (rare: Rust usually aborts, which
        // the driver sees as a dead worker).
        if e.contains("out of memory") || e.contains("memory allocation") {
            reply.ok = false;
            reply.error_kind = Some("oom".into());
            reply.error = Some(e.clone());
        }
    }
    reply
}

/// Adds one engine call's results and stats to the reply.
fn absorb(reply: &mut RunReply, inputs: &[Input], out: EngineOutput, seconds: Option<f64>) {
    let s = out.stats;
    reply.audio_seconds += s.audio_seconds;
    *reply.decode_seconds.get_or_insert(0.0) += s.decode_seconds;
    *reply.features_seconds.get_or_insert(0.0) += s.features_seconds;
    *reply.model_seconds.get_or_insert(0.0) += s.model_seconds;
    *reply.decoder_seconds.get_or_insert(0.0) += s.decoder_seconds;
    *reply.input_wait_seconds.get_or_insert(0.0) += s.input_wait_seconds;
    *reply.windows.get_or_insert(0) += s.windows;
    reply.batch_sizes.extend(s.batch_sizes);
    reply.padding_fractions.extend(s.padding_fractions);
    for (input, r) in inputs.iter().zip(out.results) {
        reply.items.push(match r {
            Ok(t) => ItemResult {
                id: input.id.clone(),
                text: Some(t.text),
                seconds,
                error: None,
            },
            Err(e) => ItemResult {
                id: input.id.clone(),
                text: None,
                seconds,
                error: Some(format!("{}: {}", e.kind.as_str(), e.message)),
            },
        });
    }
}
