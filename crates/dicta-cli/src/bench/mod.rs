//! `dicta bench`: speed (RTFx) and accuracy (WER) of Dicta, side by side with peers.
//!
//! - `dicta bench workloads` builds the workloads (real utterances, concatenated where needed).
//! - `dicta bench engine` times the in-process engine: model loaded once, warm-up, N runs,
//!   sweeps over batch sizes, beam sizes and thread counts.
//! - `dicta bench accuracy` transcribes one input per call and reports WER/CER with RTFx and
//!   per-input latency p50/p99.
//! - `--vs faster-whisper` runs the peer in `bench/peers/` on the very same files and model, with
//!   runs interleaved (Dicta, peer, Dicta, peer…) so both see the same machine load.
//!
//! Results are written as JSON, CSV and Markdown (see `docs/benchmarks.md`).

mod arm;
mod protocol;
mod report;
mod runner;
mod service;
mod stats;
mod stream;
mod worker;
mod workload;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};

use crate::{fetch, Globals};
pub use protocol::Mode;

/// `dicta bench …`
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// The bench subcommands.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Time the in-process engine (RTFx, wall, time split, peak RSS) over a configuration sweep.
    Engine(RunArgs),
    /// WER/CER per workload with RTFx and per-input latency p50/p99 (one input per call).
    Accuracy(RunArgs),
    /// Build the workloads and print their descriptions (JSON lines).
    Workloads(WorkloadArgs),
    /// Drive a running or spawned `dicta serve` with concurrent clients (RTFx, latency, rejections).
    Service(service::ServiceArgs),
    /// Streaming sessions fed real recordings at N× real time: WER vs offline, first-partial
    /// latency, batching, and how many real-time sessions the machine sustains.
    Stream(stream::StreamArgs),
    /// Internal: the Dicta arm's worker process.
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

/// Where workloads come from.
#[derive(Debug, Args, Clone)]
pub struct WorkloadArgs {
    /// Workloads: short, 8x30s, mixed, 4min, 128x30s, mixed100, 1h, large (= the last three),
    /// all, or a manifest of `{"id","audio","text"}` lines.
    #[arg(long, short, value_delimiter = ',', default_value = "short")]
    pub workload: Vec<String>,
    /// Data manifest the workloads are built from (shared/data format).
    #[arg(
        long,
        env = "DICTA_BENCH_DATA",
        default_value = "../shared/data/manifest.jsonl"
    )]
    pub data: PathBuf,
    /// Seed of the workload builder.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Peers that `--vs` can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Peer {
    /// PyPI faster-whisper (CTranslate2), script bench/peers/faster_whisper_peer.py.
    FasterWhisper,
}

/// Long-form mode for inputs over 30 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LongForm {
    /// Seek through windows following predicted timestamps (faster-whisper's WhisperModel).
    Sequential,
    /// Lanes of at least 60 s cut at pauses, each seeking as faster-whisper, batched.
    Batched,
    /// Dicta's default: as batched without previous-text conditioning (the bench's default);
    /// with it, sequential below 12 minutes and lanes of at least 6 minutes above.
    Auto,
}

/// Arguments of `dicta bench engine` and `dicta bench accuracy`.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub workloads: WorkloadArgs,
    /// Model folder (CTranslate2 Whisper, shared with the peers) or a known name.
    #[arg(long, env = "DICTA_MODEL", default_value = fetch::DEFAULT_MODEL)]
    pub model: String,
    /// Timed runs per configuration (default: 3 for engine, 1 for accuracy).
    #[arg(long)]
    pub runs: Option<usize>,
    /// Untimed warm-up runs per configuration and arm.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Batch sizes to sweep (windows per model call).
    #[arg(long, value_delimiter = ',', default_value = "8")]
    pub batch_sizes: Vec<usize>,
    /// Beam sizes to sweep (1 = greedy).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub beam_sizes: Vec<usize>,
    /// Temperature fallback schedule (e.g. `0` or `0,0.2,0.4,0.6,0.8,1`).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub temperature: Vec<f32>,
    /// Feed the previous window's text as a prompt.
    #[arg(long)]
    pub condition_on_previous_text: bool,
    /// Decode without timestamps.
    #[arg(long)]
    pub without_timestamps: bool,
    /// Long-form mode for inputs over 30 s.
    #[arg(long, value_enum, default_value_t = LongForm::Auto)]
    pub long_form: LongForm,
    /// Window overlap of CTC models (seconds).
    #[arg(long, default_value_t = 5.0)]
    pub overlap_seconds: f32,
    /// CPU thread counts to sweep (one arm process per count; default: all cores).
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Inputs per call: batch (all at once) or per-item (default: batch for engine, per-item for accuracy).
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// Peers to run side by side, interleaved run by run.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub vs: Vec<Peer>,
    /// More Dicta models (folders or known names) run as extra arms, interleaved with the
    /// others and compared with the first Dicta arm (e.g. `--vs-model moonshine-tiny`).
    #[arg(long, value_delimiter = ',')]
    pub vs_model: Vec<String>,
    /// Dicta compute types (one arm each): default (what `dicta transcribe` runs: int8 where the
    /// CPU has byte dot products, else float32), float32, int8.
    #[arg(long, value_delimiter = ',', default_value = "default")]
    pub compute_types: Vec<String>,
    /// faster-whisper compute types (one arm each).
    #[arg(long, value_delimiter = ',', default_value = "int8,float32")]
    pub vs_compute_types: Vec<String>,
    /// Folder of the peer scripts.
    #[arg(long, default_value = "bench/peers")]
    pub peers_dir: PathBuf,
    /// Output folder for results.json, results.csv, results.md (default: bench-results/<unix time>).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Write every arm's hypotheses (with normalized texts and errors) for diffing.
    #[arg(long)]
    pub save_transcripts: bool,
}

/// Runs `dicta bench`; returns the exit code (0 all rows ok, 1 any row failed, 2 usage).
pub fn run(args: &BenchArgs, g: &Globals) -> Result<u8> {
    match &args.command {
        BenchCommand::Engine(a) => runner::run(a, "engine", g),
        BenchCommand::Accuracy(a) => runner::run(a, "accuracy", g),
        BenchCommand::Workloads(a) => runner::workloads(a, g),
        BenchCommand::Worker(a) => worker::run(a),
        BenchCommand::Service(a) => service::run(a, g),
        BenchCommand::Stream(a) => stream::run(a, g),
    }
}
