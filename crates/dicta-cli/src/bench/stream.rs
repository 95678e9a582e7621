//! `dicta bench stream`: streaming sessions of the in-process engine fed real recordings.
//!
//! 1. Accuracy run: the English items with a reference text of the manifest go through
//!    `--sessions` concurrent sessions (each takes the next item when done), every item paced
//!    at `--speed` × real time in `--block-ms` blocks. Reports the corpus WER of the final
//!    transcripts next to the WER of offline `Engine::transcribe` on the same files in the same
//!    process, first-partial latency (wall time from the first block to the first partial, and
//!    how many seconds of audio the partial text trails what was fed), partials per item, model
//!    calls and mean batch size, and whether the sessions kept pace.
//! 2. Capacity (`--capacity`): at 1× real time, N = 1, 2, 4, … sessions each stream
//!    `--capacity-seconds` of audio; the largest N whose sessions keep pace is reported.
//!
//! A session keeps pace when no block is fed later than `2 × step / speed` seconds after its
//! due time: a session that cannot keep up falls behind a little more at every step, so over a
//! stream of many steps its lag grows past that bound.
//!
//! JSON goes to stdout; a Markdown summary to stderr.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use dicta_engine::stream::{EventKind, SessionOptions, StreamConfig, WorkerConfig};
use dicta_engine::whisper::DecodeOptions;
use dicta_engine::{Engine, EngineConfig, Input};
use dicta_eval::Scorer;
use serde::Serialize;

use crate::{fetch, Globals};

/// Arguments of `dicta bench stream`.
#[derive(Debug, Args, Clone)]
pub struct StreamArgs {
    /// Model folder or a known name.
    #[arg(long, env = "DICTA_MODEL", default_value = fetch::DEFAULT_MODEL)]
    pub model: String,
    /// Data manifest (shared/data format); English items with a `text` are used.
    #[arg(long, default_value = "../shared/data/manifest.jsonl")]
    pub manifest: PathBuf,
    /// Feeding speed as a multiple of real time.
    #[arg(long, default_value_t = 10.0)]
    pub speed: f64,
    /// Concurrent sessions of the accuracy run.
    #[arg(long, default_value_t = 4)]
    pub sessions: usize,
    /// New audio per model call (seconds; Whisper decode interval / CTC chunk step).
    #[arg(long, default_value_t = 1.0)]
    pub step_seconds: f32,
    /// Audio per `feed` call in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub block_ms: u64,
    /// Use only the first N items.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Use only items whose id contains one of these strings.
    #[arg(long, value_delimiter = ',')]
    pub ids: Vec<String>,
    /// CPU threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Most sessions per model call.
    #[arg(long, default_value_t = 16)]
    pub max_batch: usize,
    /// How long a queued chunk waits for other sessions' chunks (ms).
    #[arg(long, default_value_t = 10)]
    pub max_wait_ms: u64,
    /// Whisper: cut the buffer after confirmed text once it is longer than this (seconds).
    #[arg(long, default_value_t = 15.0)]
    pub trim_seconds: f32,
    /// Whisper/Moonshine: a step is at least the buffer / this (0: fixed steps; default: the
    /// model family's, 0 for Whisper and 4 for Moonshine).
    #[arg(long)]
    pub step_divisor: Option<usize>,
    /// Moonshine: cut the buffer at a pause once it is longer than this (seconds; default: the
    /// stream engine's, 5).
    #[arg(long)]
    pub moonshine_trim_seconds: Option<f32>,
    /// Weight precision: `default` (the model's own), `float32`, `int8` (as `dicta
    /// transcribe --compute-type`).
    #[arg(long, default_value = "default", value_parser = crate::transcribe_cmd::parse_compute_type)]
    pub compute_type: dicta_models::whisper::ComputeType,
    /// Offline baselines to run, one per beam size (empty: none).
    #[arg(long, value_delimiter = ',', default_value = "5,1")]
    pub offline_beam_sizes: Vec<usize>,
    /// Skip the offline baselines.
    #[arg(long)]
    pub no_offline: bool,
    /// Also measure capacity: sessions sustained at 1× real time.
    #[arg(long)]
    pub capacity: bool,
    /// Audio per session in each capacity level (seconds).
    #[arg(long, default_value_t = 30.0)]
    pub capacity_seconds: f64,
    /// Largest N tried by the capacity sweep.
    #[arg(long, default_value_t = 32)]
    pub capacity_max_sessions: usize,
    /// Start every session of a capacity level at the same instant (their steps fall due
    /// together) instead of spreading the starts evenly over one step, as independent callers
    /// arrive.
    #[arg(long)]
    pub capacity_lockstep: bool,
    /// Skip the accuracy run (capacity only).
    #[arg(long)]
    pub no_accuracy: bool,
    /// Write one JSON line per item (reference, streamed and offline text) here.
    #[arg(long)]
    pub items_out: Option<PathBuf>,
    /// Sessions end utterances where Silero VAD hears silence (endpointing defaults: 600 ms of
    /// silence, 300 ms of pad), and make no model call while nobody speaks.
    #[arg(long)]
    pub vad: bool,
    /// Voice activity detector for `--vad` (a known name, fetched on first use, or a file or
    /// folder).
    #[arg(long, env = "DICTA_VAD_MODEL", default_value = fetch::DEFAULT_VAD_MODEL)]
    pub vad_model: String,
    /// `--vad` options as a JSON object of faster-whisper's names over the endpointing
    /// defaults, e.g. `{"min_silence_duration_ms":1000}`.
    #[arg(long, value_parser = parse_vad_parameters)]
    pub vad_parameters: Option<dicta_core::VadOptions>,
    /// Capacity streams: seconds of faint noise (about −60 dBFS) after each clip, as on one
    /// side of a conversation while the other side speaks (0: clips back to back).
    #[arg(long, default_value_t = 0.0)]
    pub pause_seconds: f64,
}

/// A session's options: VAD endpointing with `--vad`.
fn session_options(args: &StreamArgs) -> SessionOptions {
    SessionOptions {
        vad: args.vad.then(|| {
            args.vad_parameters
                .clone()
                .unwrap_or_else(dicta_core::VadOptions::endpointing)
        }),
        ..SessionOptions::default()
    }
}

fn parse_vad_parameters(text: &str) -> std::result::Result<dicta_core::VadOptions, String> {
    dicta_core::VadOptions::endpointing()
        .overlaid_json(text)
        .map_err(|e| e.message)
}

/// A queued recording: (job index, id, samples).
type Job = (usize, String, Arc<Vec<f32>>);

/// One recording with its reference.
struct Clip {
    id: String,
    text: String,
    samples: Arc<Vec<f32>>,
}

/// What one streamed item measured.
#[derive(Debug, Clone, Serialize)]
struct ItemResult {
    id: String,
    audio_seconds: f64,
    text: String,
    partials: usize,
    /// Wall seconds from the first block fed to the first partial.
    first_partial_wall: Option<f64>,
    /// Seconds of audio fed but not yet covered by the first partial's text.
    first_partial_audio_lag: Option<f64>,
    /// Seconds of audio fed when the first partial arrived.
    first_partial_audio_fed: Option<f64>,
    /// Latest a block was fed after its due time (seconds).
    max_lag: f64,
    /// Wall seconds from the first block to the final result.
    wall: f64,
}

#[derive(Debug, Serialize, Default)]
struct Percentiles {
    p50: Option<f64>,
    p90: Option<f64>,
    n: usize,
}

fn percentiles(mut v: Vec<f64>) -> Percentiles {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| -> Option<f64> {
        (!v.is_empty()).then(|| v[((v.len() - 1) as f64 * q).round() as usize])
    };
    Percentiles {
        p50: at(0.5),
        p90: at(0.9),
        n: v.len(),
    }
}

/// Totals of one multi-session run.
#[derive(Debug, Serialize)]
struct RunSummary {
    sessions: usize,
    speed: f64,
    items: usize,
    audio_seconds: f64,
    wall_seconds: f64,
    first_partial_wall_s: Percentiles,
    first_partial_audio_lag_s: Percentiles,
    first_partial_audio_fed_s: Percentiles,
    items_without_partial: usize,
    partials_per_item: f64,
    model_calls: u64,
    model_rows: u64,
    mean_batch: f64,
    /// Largest feeding lag of any block (seconds).
    max_lag_s: f64,
    /// Wall time of the slowest item over its paced duration (1.0 = exactly real time×speed).
    slowest_rtf: f64,
    kept_up: bool,
}

#[derive(Debug, Serialize)]
struct Offline {
    beam_size: usize,
    wer: f64,
    wall_seconds: f64,
}

#[derive(Debug, Serialize)]
struct Accuracy {
    stream_wer: f64,
    run: RunSummary,
    offline: Vec<Offline>,
}

#[derive(Debug, Serialize)]
struct Capacity {
    audio_seconds_per_session: f64,
    levels: Vec<RunSummary>,
    max_realtime_sessions: usize,
}

#[derive(Debug, Serialize)]
struct Report {
    model: String,
    threads: Option<usize>,
    step_seconds: f32,
    block_ms: u64,
    max_batch: usize,
    max_wait_ms: u64,
    accuracy: Option<Accuracy>,
    capacity: Option<Capacity>,
}

/// Runs `dicta bench stream`; returns the exit code.
pub fn run(args: &StreamArgs, g: &Globals) -> Result<u8> {
    crate::set_threads(args.threads);
    if args.sessions == 0 || !args.speed.is_finite() || args.speed <= 0.0 || args.block_ms == 0 {
        bail!("--sessions, --speed and --block-ms must be > 0");
    }
    let model_dir = fetch::resolve_model(&args.model, &g.home, &g.python, true)?;
    let clips = load_clips(&args.manifest, args.limit, &args.ids)?;
    if clips.is_empty() {
        bail!("{}: no English items with a text", args.manifest.display());
    }
    let config = EngineConfig {
        stream: StreamConfig {
            worker: WorkerConfig {
                max_batch: args.max_batch,
                max_wait: Duration::from_millis(args.max_wait_ms),
            },
            step_seconds: Some(args.step_seconds),
            whisper_trim_seconds: args.trim_seconds,
            moonshine_trim_seconds: args
                .moonshine_trim_seconds
                .unwrap_or(StreamConfig::default().moonshine_trim_seconds),
            step_divisor: args.step_divisor,
            ..StreamConfig::default()
        },
        compute_type: args.compute_type,
        vad_model: if args.vad {
            Some(fetch::resolve_model(
                &args.vad_model,
                &g.home,
                &g.python,
                true,
            )?)
        } else {
            None
        },
        ..EngineConfig::default()
    };
    let engine = Engine::load(&model_dir, config)
        .with_context(|| format!("cannot load the model in {}", model_dir.display()))?;
    let accuracy = if args.no_accuracy {
        None
    } else {
        Some(accuracy(&engine, &clips, args)?)
    };
    let capacity = if args.capacity {
        Some(capacity(&engine, &clips, args)?)
    } else {
        None
    };
    let report = Report {
        model: model_dir.display().to_string(),
        threads: args.threads,
        step_seconds: args.step_seconds,
        block_ms: args.block_ms,
        max_batch: args.max_batch,
        max_wait_ms: args.max_wait_ms,
        accuracy,
        capacity,
    };
    println!("{}", serde_json::to_string_pretty(&report)?);
    eprintln!("{}", markdown(&report));
    Ok(0)
}

fn load_clips(manifest: &Path, limit: Option<usize>, ids: &[String]) -> Result<Vec<Clip>> {
    let root = manifest.parent().unwrap_or(Path::new("."));
    let items = dicta_eval::load_manifest(manifest).map_err(|e| anyhow::anyhow!(e.message))?;
    let mut clips = Vec::new();
    for item in items {
        let (Some(text), Some("en")) = (item.text.clone(), item.language.as_deref()) else {
            continue;
        };
        if !ids.is_empty() && !ids.iter().any(|i| item.id.contains(i.as_str())) {
            continue;
        }
        if limit.is_some_and(|l| clips.len() >= l) {
            break;
        }
        let rel = item.audio_16k_wav.as_deref().unwrap_or(&item.audio);
        let samples = dicta_audio::decode::load_path(&root.join(rel))
            .map_err(|e| anyhow::anyhow!("{}: {}", item.id, e.message))?;
        clips.push(Clip {
            id: item.id,
            text,
            samples: Arc::new(samples),
        });
    }
    Ok(clips)
}

fn accuracy(engine: &Engine, clips: &[Clip], args: &StreamArgs) -> Result<Accuracy> {
    let jobs: Vec<(String, Arc<Vec<f32>>)> = clips
        .iter()
        .map(|c| (c.id.clone(), Arc::clone(&c.samples)))
        .collect();
    let (run, items) = stream_run(
        engine,
        jobs,
        args.sessions,
        args.speed,
        Duration::ZERO,
        args,
    )?;
    let mut scorer = Scorer::new();
    for (c, r) in clips.iter().zip(&items) {
        scorer.add(&c.text, &r.text, Some("en"));
    }
    let stream_wer = scorer.summary().wer();
    let mut offline = Vec::new();
    let mut offline_texts: Vec<Vec<String>> = Vec::new();
    let beams: &[usize] = if args.no_offline {
        &[]
    } else {
        &args.offline_beam_sizes
    };
    for &beam_size in beams {
        let inputs: Vec<Input> = clips
            .iter()
            .map(|c| Input::from_samples(c.id.clone(), c.samples.to_vec()))
            .collect();
        let opts = DecodeOptions {
            beam_size,
            ..engine.config().decode.clone()
        };
        let t = Instant::now();
        let out = engine.transcribe_with(&inputs, &opts);
        let wall_seconds = t.elapsed().as_secs_f64();
        let mut scorer = Scorer::new();
        let mut texts = Vec::new();
        for (c, r) in clips.iter().zip(&out.results) {
            let text = r.as_ref().map(|t| t.text.clone()).unwrap_or_default();
            scorer.add(&c.text, &text, Some("en"));
            texts.push(text);
        }
        offline.push(Offline {
            beam_size,
            wer: scorer.summary().wer(),
            wall_seconds,
        });
        offline_texts.push(texts);
    }
    if let Some(path) = &args.items_out {
        let mut lines = String::new();
        for (i, (c, r)) in clips.iter().zip(&items).enumerate() {
            let off: Vec<&str> = offline_texts.iter().map(|t| t[i].as_str()).collect();
            let line = serde_json::json!({
                "id": c.id, "reference": c.text, "stream": r.text, "offline": off,
                "partials": r.partials, "first_partial_wall": r.first_partial_wall,
                "first_partial_audio_lag": r.first_partial_audio_lag,
            });
            lines.push_str(&line.to_string());
            lines.push('\n');
        }
        std::fs::write(path, lines).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(Accuracy {
        stream_wer,
        run,
        offline,
    })
}

fn capacity(engine: &Engine, clips: &[Clip], args: &StreamArgs) -> Result<Capacity> {
    // Each session streams its own concatenation of items (different starting items), so the
    // sessions never hear the same audio at the same time.
    let want = (args.capacity_seconds * 16_000.0) as usize;
    let stream_for = |first: usize| -> Arc<Vec<f32>> {
        let mut s = Vec::with_capacity(want);
        let mut i = first;
        let pause = (args.pause_seconds.max(0.0) * 16_000.0) as usize;
        while s.len() < want {
            s.extend_from_slice(&clips[i % clips.len()].samples);
            s.extend(dicta_audio::noise::faint_noise(pause, i as u32));
            i += 1;
        }
        s.truncate(want);
        Arc::new(s)
    };
    let mut levels = Vec::new();
    let mut best = 0;
    let mut n = 1;
    while n <= args.capacity_max_sessions {
        let jobs = (0..n)
            .map(|k| (format!("capacity-{k}"), stream_for(k * 7)))
            .collect();
        // Independent callers do not start on the same 10 ms: session k starts k/n of a step
        // after the first, so the sweep measures sustained load, not one synchronised burst.
        let stagger = if args.capacity_lockstep {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(f64::from(args.step_seconds) / n as f64)
        };
        let (run, _) = stream_run(engine, jobs, n, 1.0, stagger, args)?;
        let kept = run.kept_up;
        tracing::info!(
            sessions = n,
            kept,
            max_lag = run.max_lag_s,
            "capacity level"
        );
        eprintln!(
            "capacity: {n} sessions: kept up {kept} (max lag {:.2} s, mean batch {:.2})",
            run.max_lag_s, run.mean_batch
        );
        levels.push(run);
        if !kept {
            break;
        }
        best = n;
        n *= 2;
    }
    Ok(Capacity {
        audio_seconds_per_session: args.capacity_seconds,
        levels,
        max_realtime_sessions: best,
    })
}

/// Streams every job through `sessions` concurrent sessions paced at `speed`, session k
/// starting `k × stagger` after the first; results come back in job order.
fn stream_run(
    engine: &Engine,
    jobs: Vec<(String, Arc<Vec<f32>>)>,
    sessions: usize,
    speed: f64,
    stagger: Duration,
    args: &StreamArgs,
) -> Result<(RunSummary, Vec<ItemResult>)> {
    let n_jobs = jobs.len();
    let audio_seconds: f64 = jobs.iter().map(|j| j.1.len() as f64 / 16_000.0).sum();
    let queue: Mutex<VecDeque<Job>> = Mutex::new(
        jobs.into_iter()
            .enumerate()
            .map(|(i, (id, s))| (i, id, s))
            .collect(),
    );
    let before = engine.stream_stats().unwrap_or_default();
    let block = (16_000 * args.block_ms / 1000) as usize;
    let t = Instant::now();
    let results: Vec<Result<Vec<(usize, ItemResult)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..sessions)
            .map(|k| {
                let queue = &queue;
                scope.spawn(move || -> Result<Vec<(usize, ItemResult)>> {
                    std::thread::sleep(stagger * k as u32);
                    let mut session = engine
                        .open_session(session_options(args))
                        .map_err(|e| anyhow::anyhow!(e.message))?;
                    let mut done = Vec::new();
                    loop {
                        let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
                        let Some((i, id, samples)) = next else { break };
                        let r = stream_one(&mut session, id, &samples, block, speed)?;
                        done.push((i, r));
                    }
                    Ok(done)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("session thread panicked")))
            })
            .collect()
    });
    let wall_seconds = t.elapsed().as_secs_f64();
    let mut items: Vec<Option<ItemResult>> = vec![None; n_jobs];
    for r in results {
        for (i, item) in r? {
            items[i] = Some(item);
        }
    }
    let items: Vec<ItemResult> = items.into_iter().flatten().collect();
    let after = engine.stream_stats().unwrap_or_default();
    let calls = after.calls - before.calls;
    let rows = after.rows - before.rows;
    let max_lag = items.iter().map(|i| i.max_lag).fold(0.0, f64::max);
    let slowest_rtf = items
        .iter()
        .map(|i| i.wall / (i.audio_seconds / speed))
        .fold(0.0, f64::max);
    let summary = RunSummary {
        sessions,
        speed,
        items: items.len(),
        audio_seconds,
        wall_seconds,
        first_partial_wall_s: percentiles(
            items.iter().filter_map(|i| i.first_partial_wall).collect(),
        ),
        first_partial_audio_lag_s: percentiles(
            items
                .iter()
                .filter_map(|i| i.first_partial_audio_lag)
                .collect(),
        ),
        first_partial_audio_fed_s: percentiles(
            items
                .iter()
                .filter_map(|i| i.first_partial_audio_fed)
                .collect(),
        ),
        items_without_partial: items
            .iter()
            .filter(|i| i.first_partial_wall.is_none())
            .count(),
        partials_per_item: items.iter().map(|i| i.partials as f64).sum::<f64>()
            / items.len().max(1) as f64,
        model_calls: calls,
        model_rows: rows,
        mean_batch: rows as f64 / calls.max(1) as f64,
        max_lag_s: max_lag,
        slowest_rtf,
        kept_up: max_lag <= 2.0 * f64::from(args.step_seconds) / speed,
    };
    Ok((summary, items))
}

/// Feeds one recording in `block`-sample blocks, each no earlier than its due time at `speed`.
fn stream_one(
    session: &mut dicta_engine::stream::Session,
    id: String,
    samples: &[f32],
    block: usize,
    speed: f64,
) -> Result<ItemResult> {
    let start = Instant::now();
    let mut fed = 0usize;
    let mut texts = Vec::new();
    let mut partials = 0;
    let mut first: Option<(f64, f64, f64)> = None;
    let mut max_lag = 0.0f64;
    let mut handle = |events: Vec<dicta_engine::stream::Event>, fed: usize| {
        let at = start.elapsed().as_secs_f64();
        for e in events {
            match e.kind {
                EventKind::Partial => {
                    partials += 1;
                    if first.is_none() {
                        let fed = fed as f64 / 16_000.0;
                        first = Some((at, fed - e.end, fed));
                    }
                }
                EventKind::Final => texts.push(e.text),
            }
        }
    };
    for b in samples.chunks(block) {
        let due = start + Duration::from_secs_f64(fed as f64 / 16_000.0 / speed);
        let now = Instant::now();
        if now < due {
            std::thread::sleep(due - now);
        } else {
            max_lag = max_lag.max((now - due).as_secs_f64());
        }
        let events = session
            .feed(b)
            .map_err(|e| anyhow::anyhow!("{id}: {}", e.message))?;
        fed += b.len();
        handle(events, fed);
    }
    let events = session
        .end()
        .map_err(|e| anyhow::anyhow!("{id}: {}", e.message))?;
    handle(events, fed);
    Ok(ItemResult {
        id,
        audio_seconds: samples.len() as f64 / 16_000.0,
        text: texts.join(" "),
        partials,
        first_partial_wall: first.map(|f| f.0),
        first_partial_audio_lag: first.map(|f| f.1),
        first_partial_audio_fed: first.map(|f| f.2),
        max_lag,
        wall: start.elapsed().as_secs_f64(),
    })
}

fn markdown(r: &Report) -> String {
    let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.3}"));
    let mut s = String::new();
    if let Some(a) = &r.accuracy {
        let run = &a.run;
        s.push_str(&format!(
            "| items | audio s | speed | sessions | stream WER | {} | first partial wall p50/p90 s | audio lag p50/p90 s | partials/item | calls | mean batch | slowest RTF | kept up |\n",
            a.offline
                .iter()
                .map(|o| format!("offline WER (beam {})", o.beam_size))
                .collect::<Vec<_>>()
                .join(" | ")
        ));
        s.push_str(&format!(
            "|---|---|---|---|---|{}---|---|---|---|---|---|---|\n",
            "---|".repeat(a.offline.len())
        ));
        s.push_str(&format!(
            "| {} | {:.1} | {} | {} | {:.2}% | {} | {}/{} | {}/{} | {:.1} | {} | {:.2} | {:.2} | {} |\n",
            run.items,
            run.audio_seconds,
            run.speed,
            run.sessions,
            100.0 * a.stream_wer,
            a.offline
                .iter()
                .map(|o| format!("{:.2}%", 100.0 * o.wer))
                .collect::<Vec<_>>()
                .join(" | "),
            f(run.first_partial_wall_s.p50),
            f(run.first_partial_wall_s.p90),
            f(run.first_partial_audio_lag_s.p50),
            f(run.first_partial_audio_lag_s.p90),
            run.partials_per_item,
            run.model_calls,
            run.mean_batch,
            run.slowest_rtf,
            run.kept_up
        ));
    }
    if let Some(c) = &r.capacity {
        s.push_str(&format!(
            "\nCapacity at 1x real time ({} s per session): {} sessions\n\n| sessions | max lag s | mean batch | kept up |\n|---|---|---|---|\n",
            c.audio_seconds_per_session, c.max_realtime_sessions
        ));
        for l in &c.levels {
            s.push_str(&format!(
                "| {} | {:.2} | {:.2} | {} |\n",
                l.sessions, l.max_lag_s, l.mean_batch, l.kept_up
            ));
        }
    }
    s
}
