//! The line protocol between the benchmark driver and its arms (Dicta's worker process and the
//! Python peers in `bench/peers/`): one JSON object per line on stdin/stdout.
//!
//! An arm prints a [`Ready`] line once its model is loaded, then answers every [`RunRequest`]
//! line with one [`RunReply`] line, and exits on end of input. Peers implement the same shapes,
//! so every arm is timed, scored and reported by the same code.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// First line an arm prints: the model is loaded.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Ready {
    /// Arm name (`dicta`, `faster-whisper`).
    pub arm: String,
    /// Engine version string.
    #[serde(default)]
    pub version: String,
    /// Seconds to load the model (reported apart from the runs).
    pub load_seconds: f64,
    /// CPU threads the arm uses.
    #[serde(default)]
    pub threads: usize,
    /// Weight precision used for compute (`float32`, `int8`, …).
    #[serde(default)]
    pub compute_type: String,
}

/// How the inputs of a workload are handed to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// All inputs in one call (throughput).
    Batch,
    /// One call per input, one after another (per-input latency, p50/p99).
    PerItem,
}

/// One timed pass over a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// Workload manifest (`{"id","audio","text"}` lines, paths relative to it).
    pub manifest: PathBuf,
    /// Batch or per-item.
    pub mode: Mode,
    /// Windows per model call (1 = unbatched).
    pub batch_size: usize,
    /// Beam size at temperature 0 (1 = greedy).
    pub beam_size: usize,
    /// Temperature fallback schedule.
    pub temperatures: Vec<f32>,
    /// Feed the previous window's text as a prompt.
    pub condition_on_previous_text: bool,
    /// Decode without timestamp tokens.
    pub without_timestamps: bool,
    /// Long-form mode: `sequential` or `batched`.
    pub long_form: String,
    /// Window overlap of the batched long-form mode, seconds.
    pub overlap_seconds: f32,
}

/// Result of one input.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ItemResult {
    /// Input id.
    pub id: String,
    /// Hypothesis text, when transcribed.
    #[serde(default)]
    pub text: Option<String>,
    /// Latency of this input's call (per-item mode only).
    #[serde(default)]
    pub seconds: Option<f64>,
    /// Error message, when the input failed.
    #[serde(default)]
    pub error: Option<String>,
}

/// An arm's answer to a [`RunRequest`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunReply {
    /// False when the run failed as a whole.
    pub ok: bool,
    /// Why it failed.
    #[serde(default)]
    pub error: Option<String>,
    /// `oom` for out-of-memory, `crash` for a dead process, `error` otherwise.
    #[serde(default)]
    pub error_kind: Option<String>,
    /// Wall seconds of the pass (audio file decoding included).
    #[serde(default)]
    pub wall_seconds: f64,
    /// Audio seconds transcribed.
    #[serde(default)]
    pub audio_seconds: f64,
    /// What actually ran (e.g. `BatchedInferencePipeline(batch_size=8)`).
    #[serde(default)]
    pub pipeline: String,
    /// Per-input results in manifest order.
    #[serde(default)]
    pub items: Vec<ItemResult>,
    /// Seconds decoding audio files.
    #[serde(default)]
    pub decode_seconds: Option<f64>,
    /// Seconds computing features.
    #[serde(default)]
    pub features_seconds: Option<f64>,
    /// Seconds in the model.
    #[serde(default)]
    pub model_seconds: Option<f64>,
    /// Seconds in the token decoder.
    #[serde(default)]
    pub decoder_seconds: Option<f64>,
    /// Windows decoded.
    #[serde(default)]
    pub windows: Option<usize>,
    /// Rows of every model batch.
    #[serde(default)]
    pub batch_sizes: Vec<usize>,
    /// Padding fraction of every model batch.
    #[serde(default)]
    pub padding_fractions: Vec<f64>,
    /// Peak resident memory during the run (VmHWM after a reset), bytes.
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
    /// The peak could not be reset before the run: `peak_rss_bytes` is the process's peak
    /// since it started (earlier workloads included), not this run's.
    #[serde(default)]
    pub peak_rss_process_wide: bool,
    /// Seconds the model waited for decoded audio.
    #[serde(default)]
    pub input_wait_seconds: Option<f64>,
}

impl RunReply {
    /// A failed run.
    pub fn failed(kind: &str, error: impl Into<String>) -> Self {
        Self {
            ok: false,
            error: Some(error.into()),
            error_kind: Some(kind.to_string()),
            ..Self::default()
        }
    }
}

/// Resets the peak-RSS counter of this process (Linux ≥ 4.0), so the next [`peak_rss_bytes`]
/// reading covers only what ran in between. Returns false where that is not possible.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Peak resident set size of this process (VmHWM in `/proc/self/status`), bytes; Linux only.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_with_snake_case_mode() {
        let r = RunRequest {
            manifest: "/m.jsonl".into(),
            mode: Mode::PerItem,
            batch_size: 4,
            beam_size: 1,
            temperatures: vec![0.0],
            condition_on_previous_text: false,
            without_timestamps: false,
            long_form: "sequential".into(),
            overlap_seconds: 5.0,
        };
        let s = serde_json::to_string(&r).unwrap();
        assert!(s.contains("\"mode\":\"per_item\""), "{s}");
        assert_eq!(serde_json::from_str::<RunRequest>(&s).unwrap(), r);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn peak_rss_grows_with_touched_memory() {
        let before = peak_rss_bytes().unwrap();
        let v = vec![1u8; 64 << 20];
        std::hint::black_box(&v);
        let after = peak_rss_bytes().unwrap();
        assert!(after >= before + (60 << 20), "{before} -> {after}");
    }
}
