//! `dicta bench service`: throughput and latency of `dicta serve` under concurrent clients.
//!
//! Spawns `dicta serve` (this very executable) on port 0 — or targets `--url` — waits for
//! `/readyz`, then drives it with `--concurrency` clients that take the workload's inputs from a
//! shared queue, one request per input, over the chosen endpoint: the OpenAI multipart route,
//! `/transcribe` (JSON, base64), `/v1/transcriptions/raw` (PCM body) or the `/v1/stream`
//! WebSocket (paced at real time or not). One warm-up pass, then `--runs` timed passes.
//!
//! With `--vs-engine`, `bench engine`'s in-process arm runs the same workload and model right
//! after every service run, so the ratio service RTFx / engine RTFx measures the cost of serving
//! (HTTP, decoding uploads, request coalescing) on the same machine load.
//!
//! With `--soak-minutes`, the passes give way to a soak (see [`soak`]): real-time streams and
//! uploads side by side on one server for that long, its RSS sampled at a fixed interval.

mod client;
mod realtime;
mod server;
mod soak;
mod summary;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use dicta_eval::Scorer;
use serde::Serialize;
use serde_json::json;

use super::arm::{Arm, ArmSpec};
use super::protocol::{Mode, RunReply, RunRequest};
use super::report::{build_row, Row};
use super::workload::{read_items, WorkloadInfo, WorkloadItem};
use super::WorkloadArgs;
use crate::{fetch, Globals};
use client::ClientConfig;
use summary::{RequestRecord, RunSummary, ServiceRow};

/// The route the clients use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// `POST /v1/audio/transcriptions` (multipart, the WAV file as is).
    Openai,
    /// `POST /transcribe` (JSON, one base64 input per request).
    Transcribe,
    /// `POST /v1/transcriptions/raw` (headerless PCM body).
    Raw,
    /// `GET /v1/stream` (WebSocket, binary PCM frames).
    Stream,
    /// `GET /v1/realtime?intent=transcription` (OpenAI's Realtime API: 24 kHz PCM appends; the
    /// server's `server_vad` turns, or a commit by hand when it has no detector).
    Realtime,
}

/// PCM encoding on the wire (raw and stream endpoints).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
pub enum WireEncoding {
    /// Signed 16-bit little-endian.
    #[value(name = "i16_le")]
    #[serde(rename = "i16_le")]
    I16Le,
    /// 32-bit float little-endian.
    #[value(name = "f32_le")]
    #[serde(rename = "f32_le")]
    F32Le,
}

impl WireEncoding {
    /// The server's name of the encoding.
    pub fn as_str(self) -> &'static str {
        match self {
            WireEncoding::I16Le => "i16_le",
            WireEncoding::F32Le => "f32_le",
        }
    }
}

/// Arguments of `dicta bench service`.
#[derive(Debug, Args, Clone)]
pub struct ServiceArgs {
    #[command(flatten)]
    pub workloads: WorkloadArgs,
    /// Model folder or known name, for the spawned server and `--vs-engine`.
    #[arg(long, env = "DICTA_MODEL", default_value = fetch::DEFAULT_MODEL)]
    pub model: String,
    /// Drive this running server (`http://host:port`) instead of spawning one.
    #[arg(long)]
    pub url: Option<String>,
    /// Bearer key sent with every request.
    #[arg(long, env = "DICTA_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Route the clients use.
    #[arg(long, value_enum, default_value_t = Endpoint::Openai)]
    pub endpoint: Endpoint,
    /// PCM encoding of raw bodies and stream frames.
    #[arg(long, value_enum, default_value_t = WireEncoding::I16Le)]
    pub wire_encoding: WireEncoding,
    /// Streams: 1 feeds audio at real time, 0 as fast as possible.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub realtime: u8,
    /// Streams: milliseconds of audio per WebSocket frame.
    #[arg(long, default_value_t = 100)]
    pub chunk_ms: u64,
    /// Timed runs.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Untimed warm-up passes.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Client-side limit per request (seconds); later answers count as failed.
    #[arg(long, default_value_t = 600.0)]
    pub client_timeout_s: f64,
    /// Also time `bench engine`'s in-process arm on the same workload, run by run.
    #[arg(long)]
    pub vs_engine: bool,
    /// Spawned server and engine arm: CPU threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Spawned server: how long a request waits for others to share a model batch (ms).
    #[arg(long, default_value_t = 20)]
    pub batch_wait_ms: u64,
    /// Spawned server: requests coalesced into one engine call at most.
    #[arg(long, default_value_t = 8)]
    pub max_group: usize,
    /// Spawned server: requests waiting at most (more are answered 503).
    #[arg(long, default_value_t = 32)]
    pub max_queue: usize,
    /// Spawned server and engine arm: windows per model call.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Spawned server and engine arm: beam size (1 = greedy, as `bench engine`).
    #[arg(long, default_value_t = 1)]
    pub beam_size: usize,
    /// Spawned server: one more `dicta serve` argument (repeatable), e.g. `--serve-arg=--max-streams=32`.
    #[arg(long = "serve-arg", allow_hyphen_values = true)]
    pub serve_args: Vec<String>,
    /// Soak instead of timed passes: this many minutes (fractions allowed) of real-time streams and
    /// uploads at once, with the server's RSS sampled; writes soak.csv, soak.md, soak.json.
    #[arg(long)]
    pub soak_minutes: Option<f64>,
    /// Soak: WebSocket streams fed at real time, each looping over the workload's clips.
    /// The defaults (2 streams, 1 upload client pausing 500 ms) keep tiny.en on 2 cores ~70% busy.
    #[arg(long, default_value_t = 2)]
    pub soak_streams: usize,
    /// Soak: clients posting the workload's clips to the OpenAI route, one after another.
    #[arg(long, default_value_t = 1)]
    pub soak_uploads: usize,
    /// Soak: pause of each upload client after each answer (ms).
    #[arg(long, default_value_t = 500)]
    pub soak_upload_gap_ms: u64,
    /// Soak: seconds between two samples (RSS, CPU, counts, latencies).
    #[arg(long, default_value_t = 60.0)]
    pub soak_sample_s: f64,
    /// Soak: utterances per stream socket before it is closed and another opened (0: keep it
    /// until the server's `max_stream_seconds` would be passed).
    #[arg(long, default_value_t = 20)]
    pub soak_stream_utterances: usize,
    /// Soak with `--url`: the server's process id, whose RSS and CPU are read from /proc (else
    /// RSS comes from `/metrics` `process_resident_memory_bytes`, when the server exports it).
    #[arg(long)]
    pub soak_pid: Option<u32>,
    /// Output folder for results.json, results.csv, results.md (default: bench-results/<unix time>).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
}

/// `dicta bench service`; returns 0 when every request of every timed run succeeded, 1 otherwise,
/// 2 for bad arguments.
pub fn run(args: &ServiceArgs, g: &Globals) -> Result<u8> {
    if args.runs == 0 || args.concurrency == 0 || args.chunk_ms == 0 || args.batch_size == 0 {
        eprintln!(
            "dicta bench service: --runs, --concurrency, --chunk-ms and --batch-size must be >= 1"
        );
        return Ok(2);
    }
    if args.url.is_some() && !args.serve_args.is_empty() {
        eprintln!("dicta bench service: --serve-arg applies only to a spawned server, not --url");
        return Ok(2);
    }
    if let Some(problem) = soak::check_args(args) {
        eprintln!("dicta bench service: {problem}");
        return Ok(2);
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("bench-results/{}", super::runner::unix_now())));
    fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let needs_model = args.url.is_none() || args.vs_engine;
    let model = if needs_model {
        let m = fetch::resolve_model(&args.model, &g.home, &g.python, true)?;
        Some(fs::canonicalize(&m).unwrap_or(m))
    } else {
        None
    };
    let infos = super::runner::build_workloads(&args.workloads, g)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // Connections stay open between requests and passes (keep-alive), as a real client would.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()
        .context("cannot build the HTTP client")?;

    let mut spawned = match (&args.url, &model) {
        (Some(_), _) => None,
        (None, Some(model)) => Some(spawn_server(args, model, &out)?),
        (None, None) => unreachable!("a model is resolved whenever no --url is given"),
    };
    let base = match (&args.url, &spawned) {
        (Some(u), _) => u.trim_end_matches('/').to_string(),
        (None, Some(s)) => s.base.clone(),
        (None, None) => unreachable!("spawned above"),
    };
    eprintln!("dicta bench service: waiting for {base}/readyz");
    let ready = rt.block_on(server::wait_ready(
        &http,
        &base,
        args.api_key.as_deref(),
        Duration::from_secs(600),
        || spawned.as_mut().map_or(Ok(()), |s| s.check_alive()),
    ));
    if args.soak_minutes.is_some() {
        let pid = spawned.as_ref().map(server::Spawned::pid).or(args.soak_pid);
        let meta = meta(args, model.as_deref(), &base);
        let result = ready.and_then(|()| {
            let run = soak::Run {
                args,
                rt: &rt,
                http: &http,
                base: &base,
                pid,
                out: &out,
            };
            run.go(&infos, meta)
        });
        report_stop(spawned.map(|s| s.stop(Duration::from_secs(60))));
        result?;
        eprintln!("dicta bench service: soak results in {}", out.display());
        // A soak reports its errors (soak.md, the last line printed); it does not fail on them.
        return Ok(0);
    }
    let result = ready.and_then(|()| {
        let mut engine = match (&model, args.vs_engine) {
            (Some(m), true) => Some(Arm::start(ArmSpec::dicta(
                m,
                args.threads,
                "float32",
                out.join("logs/engine.log"),
            )?)?),
            _ => None,
        };
        let cfg = ClientConfig {
            base: base.clone(),
            endpoint: args.endpoint,
            encoding: args.wire_encoding,
            realtime: args.realtime == 1,
            chunk: Duration::from_millis(args.chunk_ms),
            api_key: args.api_key.clone(),
            timeout: Duration::from_secs_f64(args.client_timeout_s.max(0.001)),
        };
        let meta = meta(args, model.as_deref(), &base);
        let mut rows = Vec::new();
        let mut engine_rows = Vec::new();
        for info in &infos {
            let items = read_items(&info.manifest)?;
            let (row, engine_row) =
                run_workload(args, &rt, &http, &cfg, info, &items, engine.as_mut())?;
            rows.push(row);
            engine_rows.extend(engine_row);
            write_outputs(&out, &meta, &infos, &rows, &engine_rows)?;
        }
        if let Some(a) = engine {
            a.stop();
        }
        Ok(rows)
    });
    let stopped = spawned.map(|s| s.stop(Duration::from_secs(60)));
    let rows = result?;
    report_stop(stopped);
    print!("{}", summary::to_markdown(&rows));
    eprintln!("dicta bench service: results in {}", out.display());
    Ok(if rows.iter().all(|r| r.status == "ok") {
        0
    } else {
        1
    })
}

/// Says how a spawned server ended, when not cleanly.
fn report_stop(stopped: Option<Result<std::process::ExitStatus>>) {
    match stopped {
        Some(Ok(status)) if !status.success() => {
            eprintln!("dicta bench service: dicta serve exited with {status} after SIGTERM")
        }
        Some(Err(e)) => eprintln!("dicta bench service: {e:#}"),
        _ => {}
    }
}

fn spawn_server(args: &ServiceArgs, model: &Path, out: &Path) -> Result<server::Spawned> {
    let exe = std::env::current_exe().context("cannot find the dicta executable")?;
    let mut serve: Vec<String> = vec![
        "--model".into(),
        model.display().to_string(),
        "--batch-wait-ms".into(),
        args.batch_wait_ms.to_string(),
        "--max-group".into(),
        args.max_group.to_string(),
        "--max-queue".into(),
        args.max_queue.to_string(),
        "--batch-size".into(),
        args.batch_size.to_string(),
        "--beam-size".into(),
        args.beam_size.to_string(),
    ];
    if args.endpoint != Endpoint::Realtime {
        // The load has no vad_filter requests; don't fetch a detector for it. Realtime sessions
        // detect their turns with it.
        serve.push("--no-vad".into());
    }
    if let Some(t) = args.threads {
        serve.extend(["--threads".into(), t.to_string()]);
    }
    // Streams fed as fast as possible measure throughput: they run ahead of the audio's clock
    // whenever the server is slower than real time, which a server refuses and sheds for live
    // clients (`--stream-admit-lag-s`, `--stream-max-lag-s`); here that is the point.
    let lag_flags = ["--stream-admit-lag-s", "--stream-max-lag-s"];
    if matches!(args.endpoint, Endpoint::Stream) && args.realtime == 0 {
        for flag in lag_flags {
            if !args.serve_args.iter().any(|a| a.starts_with(flag)) {
                serve.extend([flag.into(), "1e9".into()]);
            }
        }
    }
    // Each client opens its next stream as soon as the last one is done, which can reach the
    // server before it has let the last one go: with `--max-streams` equal to the clients,
    // that race (not the load) would answer 503. Room for twice the clients measures the load.
    if matches!(args.endpoint, Endpoint::Stream | Endpoint::Realtime)
        && !args
            .serve_args
            .iter()
            .any(|a| a.starts_with("--max-streams"))
    {
        let room = (2 * args.concurrency).max(16);
        serve.extend(["--max-streams".into(), room.to_string()]);
    }
    serve.extend(args.serve_args.iter().cloned());
    eprintln!(
        "dicta bench service: starting dicta serve {}",
        serve.join(" ")
    );
    server::Spawned::start(&exe, &serve, &out.join("logs/serve.log"))
}

/// Warm-up and timed runs of one workload; with an engine arm, one engine run after every
/// service run.
fn run_workload(
    args: &ServiceArgs,
    rt: &tokio::runtime::Runtime,
    http: &reqwest::Client,
    cfg: &ClientConfig,
    info: &WorkloadInfo,
    items: &[WorkloadItem],
    mut engine: Option<&mut Arm>,
) -> Result<(ServiceRow, Option<Row>)> {
    let requests = Arc::new(client::prepare(&info.manifest, items, cfg)?);
    let name = &info.name;
    let engine_req = engine_request(args, info);
    for w in 0..args.warmup {
        let (recs, wall) = rt.block_on(client::run_all(http, cfg, &requests, args.concurrency));
        let s = RunSummary::of(&recs, wall);
        eprintln!(
            "dicta bench service: {name} warm-up {}: {}",
            w + 1,
            describe(&s, &recs)
        );
        if let Some(arm) = engine.as_deref_mut() {
            let r = arm.run(&engine_req);
            eprintln!(
                "dicta bench service: {name} engine warm-up {}: {}",
                w + 1,
                describe_engine(&r)
            );
        }
    }
    let mut runs = Vec::new();
    let mut last = Vec::new();
    let mut engine_replies = Vec::new();
    for i in 0..args.runs {
        let (recs, wall) = rt.block_on(client::run_all(http, cfg, &requests, args.concurrency));
        let s = RunSummary::of(&recs, wall);
        eprintln!(
            "dicta bench service: {name} run {}/{}: {}",
            i + 1,
            args.runs,
            describe(&s, &recs)
        );
        runs.push(s);
        last = recs;
        if let Some(arm) = engine.as_deref_mut() {
            let r = arm.run(&engine_req);
            eprintln!(
                "dicta bench service: {name} engine run {}/{}: {}",
                i + 1,
                args.runs,
                describe_engine(&r)
            );
            engine_replies.push(r);
        }
    }
    let mut row = ServiceRow {
        schema: summary::SCHEMA,
        harness: "service",
        workload: name.clone(),
        endpoint: serde_json::to_value(args.endpoint)?
            .as_str()
            .unwrap_or_default()
            .into(),
        wire_encoding: matches!(args.endpoint, Endpoint::Raw | Endpoint::Stream)
            .then(|| args.wire_encoding.as_str().to_string()),
        realtime: matches!(args.endpoint, Endpoint::Stream | Endpoint::Realtime)
            .then_some(args.realtime == 1),
        concurrency: args.concurrency,
        url: cfg.base.clone(),
        spawned: args.url.is_none(),
        inputs: items.len(),
        ..ServiceRow::default()
    };
    if args.url.is_none() {
        row.threads = args.threads;
        row.batch_wait_ms = Some(args.batch_wait_ms);
        row.max_group = Some(args.max_group);
        row.batch_size = Some(args.batch_size);
        row.beam_size = Some(args.beam_size);
    }
    row.wer = Some(wer(items, &last));
    row.finish(runs, last);
    let engine_row = engine.map(|arm| {
        let rtfx: Vec<f64> = engine_replies
            .iter()
            .map(|r| {
                if r.ok && r.wall_seconds > 0.0 {
                    r.audio_seconds / r.wall_seconds
                } else {
                    0.0
                }
            })
            .collect();
        row.compare_with_engine(&rtfx);
        build_row(
            "engine",
            name,
            &arm.ready,
            "dicta-engine",
            &engine_req,
            &engine_replies,
            items,
        )
        .0
    });
    Ok((row, engine_row))
}

/// The engine arm's request: the server's decoding settings (its `DecodeOptions` defaults with
/// the benchmark's beam size), all inputs in one call.
fn engine_request(args: &ServiceArgs, info: &WorkloadInfo) -> RunRequest {
    let d = dicta_engine::whisper::DecodeOptions::default();
    RunRequest {
        manifest: info.manifest.clone(),
        mode: Mode::Batch,
        batch_size: args.batch_size,
        beam_size: args.beam_size,
        temperatures: d.temperatures,
        condition_on_previous_text: d.condition_on_previous_text,
        without_timestamps: d.without_timestamps,
        long_form: "sequential".into(),
        overlap_seconds: 5.0,
    }
}

/// Corpus WER of one run's transcripts (failed requests score as empty hypotheses).
fn wer(items: &[WorkloadItem], records: &[RequestRecord]) -> f64 {
    let mut scorer = Scorer::new();
    for (item, rec) in items.iter().zip(records) {
        scorer.add(&item.text, rec.text.as_deref().unwrap_or(""), Some("en"));
    }
    scorer.summary().wer()
}

fn describe(s: &RunSummary, recs: &[RequestRecord]) -> String {
    let mut line = format!(
        "{:.2} s, RTFx {:.1}, ok {}/{}, rejected {}, failed {}, latency p50 {:.2} s, p90 {:.2} s",
        s.wall_seconds,
        s.rtfx,
        s.ok,
        s.requests,
        s.rejected_503 + s.rejected_413 + s.rejected_4xx,
        s.failed,
        s.latency.p50.unwrap_or(f64::NAN),
        s.latency.p90.unwrap_or(f64::NAN),
    );
    if let Some(e) = recs.iter().find_map(|r| r.error.as_ref()) {
        line.push_str(&format!("; first error: {e}"));
    }
    line
}

fn describe_engine(r: &RunReply) -> String {
    if r.ok && r.wall_seconds > 0.0 {
        format!(
            "{:.2} s, RTFx {:.1}",
            r.wall_seconds,
            r.audio_seconds / r.wall_seconds
        )
    } else {
        format!("FAILED: {}", r.error.as_deref().unwrap_or(""))
    }
}

fn meta(args: &ServiceArgs, model: Option<&Path>, base: &str) -> serde_json::Value {
    let mut m = super::runner::meta(model.unwrap_or(Path::new("")), args.runs, args.warmup);
    m["service"] = json!({
        "url": base,
        "spawned": args.url.is_none(),
        "endpoint": args.endpoint,
        "concurrency": args.concurrency,
        "vs_engine": args.vs_engine,
    });
    m
}

fn write_outputs(
    out: &Path,
    meta: &serde_json::Value,
    infos: &[WorkloadInfo],
    rows: &[ServiceRow],
    engine_rows: &[Row],
) -> Result<()> {
    let doc = json!({"meta": meta, "workloads": infos, "rows": rows, "engine_rows": engine_rows});
    fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(&doc)? + "\n",
    )?;
    fs::write(out.join("results.csv"), summary::to_csv(rows))?;
    let mut md = summary::to_markdown(rows);
    if !engine_rows.is_empty() {
        md.push_str("\nIn-process engine on the same workloads (`--vs-engine`):\n\n");
        md.push_str(&super::report::to_markdown(engine_rows));
    }
    fs::write(out.join("results.md"), md)?;
    Ok(())
}
