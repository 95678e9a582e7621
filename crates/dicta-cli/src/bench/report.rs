//! Result rows (one per arm and configuration) and their JSON / CSV / Markdown renderings.

use dicta_eval::Scorer;
use serde::Serialize;

use super::protocol::{Ready, RunReply, RunRequest};
use super::stats::{percentile, summarise};
use super::workload::WorkloadItem;

/// Version of the row schema, written into every row.
pub const SCHEMA: &str = "dicta-bench/1";

/// One arm on one configuration of one workload: the same fields for every arm.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    pub schema: &'static str,
    /// `engine` or `accuracy`.
    pub harness: String,
    pub workload: String,
    /// `dicta`, `faster-whisper-int8`, …
    pub arm: String,
    pub version: String,
    pub compute_type: String,
    /// What actually ran (e.g. `BatchedInferencePipeline(batch_size=8)`).
    pub pipeline: String,
    pub threads: usize,
    pub mode: String,
    pub batch_size: usize,
    pub beam_size: usize,
    pub temperatures: String,
    pub condition_on_previous_text: bool,
    pub without_timestamps: bool,
    pub long_form: String,
    /// `ok`, `oom`, `crash` or `error`.
    pub status: String,
    pub error: Option<String>,
    /// Timed runs that completed.
    pub runs: usize,
    pub load_seconds: f64,
    pub inputs: usize,
    pub audio_seconds: f64,
    pub wall_median: Option<f64>,
    pub wall_min: Option<f64>,
    pub wall_max: Option<f64>,
    /// (max − min) / median of the run walls.
    pub wall_spread: Option<f64>,
    pub rtfx_median: Option<f64>,
    pub rtfx_min: Option<f64>,
    pub rtfx_max: Option<f64>,
    /// Corpus WER after Whisper's English normalizer on both sides.
    pub wer: Option<f64>,
    pub cer: Option<f64>,
    pub failed_inputs: usize,
    /// Per-input latency percentiles over all runs (per-item mode).
    pub latency_p50: Option<f64>,
    pub latency_p99: Option<f64>,
    pub batch_mean: Option<f64>,
    pub batch_max: Option<usize>,
    pub padding_fraction: Option<f64>,
    /// `engine` (reported per batch) or `estimate` (1 − audio / (windows × 30 s)).
    pub padding_source: Option<String>,
    pub decode_seconds: Option<f64>,
    pub features_seconds: Option<f64>,
    pub model_seconds: Option<f64>,
    pub decoder_seconds: Option<f64>,
    pub peak_rss_mb: Option<f64>,
    /// `run` (peak reset before each run) or `process` (reset refused: the worker's peak since
    /// it started, earlier workloads included).
    pub peak_rss_scope: Option<String>,
    /// Seconds the model waited for decoded audio (median over runs).
    pub input_wait_seconds: Option<f64>,
    /// The arm this row is compared with (peer rows name `dicta`).
    pub vs: Option<String>,
    /// Median over run pairs of (Dicta RTFx / this arm's RTFx): > 1 means Dicta is faster.
    pub dicta_speedup_median: Option<f64>,
    pub dicta_speedup_min: Option<f64>,
    pub dicta_speedup_max: Option<f64>,
    /// Wall seconds of every timed run, in order.
    pub run_walls: Vec<f64>,
    /// Model batch sizes of the last run.
    pub batch_sizes: Vec<usize>,
}

/// Per-item hypothesis of one row, for `--save-transcripts`.
#[derive(Debug, Clone, Serialize)]
pub struct Hypothesis {
    pub id: String,
    pub reference: String,
    pub hypothesis: Option<String>,
    pub reference_normalized: String,
    pub hypothesis_normalized: String,
    pub word_errors: usize,
    pub reference_words: usize,
    pub error: Option<String>,
}

/// Builds a row from the replies of the timed runs (failed replies included).
#[allow(clippy::too_many_arguments)]
pub fn build_row(
    harness: &str,
    workload: &str,
    ready: &Ready,
    label: &str,
    req: &RunRequest,
    replies: &[RunReply],
    items: &[WorkloadItem],
) -> (Row, Vec<Hypothesis>) {
    let ok: Vec<&RunReply> = replies.iter().filter(|r| r.ok).collect();
    let failed = replies.iter().find(|r| !r.ok);
    let mut row = Row {
        schema: SCHEMA,
        harness: harness.into(),
        workload: workload.into(),
        arm: label.into(),
        version: ready.version.clone(),
        compute_type: ready.compute_type.clone(),
        threads: ready.threads,
        mode: serde_json::to_value(req.mode)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default(),
        batch_size: req.batch_size,
        beam_size: req.beam_size,
        temperatures: req
            .temperatures
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(","),
        condition_on_previous_text: req.condition_on_previous_text,
        without_timestamps: req.without_timestamps,
        long_form: req.long_form.clone(),
        load_seconds: ready.load_seconds,
        inputs: items.len(),
        runs: ok.len(),
        status: match failed {
            Some(f) => f.error_kind.clone().unwrap_or_else(|| "error".into()),
            None => "ok".into(),
        },
        error: failed.and_then(|f| f.error.clone()),
        ..Row::default()
    };
    let Some(last) = ok.last() else {
        return (row, Vec::new());
    };
    row.pipeline = last.pipeline.clone();
    row.audio_seconds = last.audio_seconds;
    row.run_walls = ok.iter().map(|r| r.wall_seconds).collect();
    if let Some(w) = summarise(&row.run_walls) {
        (row.wall_median, row.wall_min, row.wall_max, row.wall_spread) =
            (Some(w.median), Some(w.min), Some(w.max), Some(w.spread));
    }
    let rtfx: Vec<f64> = ok.iter().map(|r| rtfx(r)).collect();
    if let Some(s) = summarise(&rtfx) {
        (row.rtfx_median, row.rtfx_min, row.rtfx_max) = (Some(s.median), Some(s.min), Some(s.max));
    }
    let latencies: Vec<f64> = ok
        .iter()
        .flat_map(|r| r.items.iter().filter_map(|i| i.seconds))
        .collect();
    row.latency_p50 = percentile(&latencies, 50.0);
    row.latency_p99 = percentile(&latencies, 99.0);
    let med = |f: fn(&RunReply) -> Option<f64>| {
        let v: Vec<f64> = ok.iter().filter_map(|r| f(r)).collect();
        super::stats::median(&v)
    };
    row.decode_seconds = med(|r| r.decode_seconds);
    row.features_seconds = med(|r| r.features_seconds);
    row.model_seconds = med(|r| r.model_seconds);
    row.decoder_seconds = med(|r| r.decoder_seconds);
    row.peak_rss_mb = ok
        .iter()
        .filter_map(|r| r.peak_rss_bytes)
        .max()
        .map(|b| b as f64 / (1 << 20) as f64);
    row.peak_rss_scope = row.peak_rss_mb.map(|_| {
        if ok.iter().any(|r| r.peak_rss_process_wide) {
            "process"
        } else {
            "run"
        }
        .to_string()
    });
    row.input_wait_seconds = med(|r| r.input_wait_seconds);
    row.batch_sizes = last.batch_sizes.clone();
    if !last.batch_sizes.is_empty() {
        let n = last.batch_sizes.len() as f64;
        row.batch_mean = Some(last.batch_sizes.iter().sum::<usize>() as f64 / n);
        row.batch_max = last.batch_sizes.iter().copied().max();
    }
    row.padding_fraction = padding(last);
    row.padding_source = row.padding_fraction.map(|_| {
        if last.padding_fractions.is_empty() {
            "estimate"
        } else {
            "engine"
        }
        .to_string()
    });
    let (hyps, summary_wer, summary_cer, failed_inputs) = score(last, items);
    (row.wer, row.cer, row.failed_inputs) = (summary_wer, summary_cer, failed_inputs);
    (row, hyps)
}

fn rtfx(r: &RunReply) -> f64 {
    if r.wall_seconds > 0.0 {
        r.audio_seconds / r.wall_seconds
    } else {
        0.0
    }
}

/// Mean padding fraction of the model batches; when the engine does not report it, estimated
/// from the windows: every window is 30 s of model input, of which the audio fills a part.
fn padding(r: &RunReply) -> Option<f64> {
    if !r.padding_fractions.is_empty() {
        return Some(r.padding_fractions.iter().sum::<f64>() / r.padding_fractions.len() as f64);
    }
    let windows = r.windows.filter(|&w| w > 0)? as f64;
    Some((1.0 - r.audio_seconds / (windows * 30.0)).clamp(0.0, 1.0))
}

/// Corpus WER/CER of one run against the references (failed inputs score as empty hypotheses).
fn score(
    r: &RunReply,
    items: &[WorkloadItem],
) -> (Vec<Hypothesis>, Option<f64>, Option<f64>, usize) {
    let mut scorer = Scorer::new();
    let mut hyps = Vec::with_capacity(items.len());
    let mut failed = 0;
    for item in items {
        let got = r.items.iter().find(|i| i.id == item.id);
        let hyp = got.and_then(|g| g.text.clone());
        if hyp.is_none() {
            failed += 1;
        }
        let (w, _) = scorer.add(&item.text, hyp.as_deref().unwrap_or(""), Some("en"));
        hyps.push(Hypothesis {
            id: item.id.clone(),
            reference: item.text.clone(),
            reference_normalized: scorer.normalize(&item.text, Some("en")),
            hypothesis_normalized: scorer.normalize(hyp.as_deref().unwrap_or(""), Some("en")),
            hypothesis: hyp,
            word_errors: w.errors(),
            reference_words: w.ref_len,
            error: got
                .and_then(|g| g.error.clone())
                .or_else(|| got.is_none().then(|| "no result".into())),
        });
    }
    let s = scorer.summary();
    (hyps, Some(s.wer()), Some(s.cer()), failed)
}

/// Fills a peer row's comparison with Dicta from run pairs (run i of Dicta with run i of the
/// peer, which ran right after it).
pub fn compare(peer: &mut Row, dicta: &Row) {
    let pairs: Vec<f64> = dicta
        .run_walls
        .iter()
        .zip(&peer.run_walls)
        .filter(|(d, _)| **d > 0.0)
        .map(|(d, p)| p / d)
        .collect();
    if let Some(s) = summarise(&pairs) {
        peer.vs = Some(dicta.arm.clone());
        (
            peer.dicta_speedup_median,
            peer.dicta_speedup_min,
            peer.dicta_speedup_max,
        ) = (Some(s.median), Some(s.min), Some(s.max));
    }
}

/// Scalar columns of the CSV, in order (the JSON has all fields).
const CSV_COLUMNS: &[&str] = &[
    "schema",
    "harness",
    "workload",
    "arm",
    "version",
    "compute_type",
    "pipeline",
    "threads",
    "mode",
    "batch_size",
    "beam_size",
    "temperatures",
    "condition_on_previous_text",
    "without_timestamps",
    "long_form",
    "status",
    "error",
    "runs",
    "load_seconds",
    "inputs",
    "audio_seconds",
    "wall_median",
    "wall_min",
    "wall_max",
    "wall_spread",
    "rtfx_median",
    "rtfx_min",
    "rtfx_max",
    "wer",
    "cer",
    "failed_inputs",
    "latency_p50",
    "latency_p99",
    "batch_mean",
    "batch_max",
    "padding_fraction",
    "padding_source",
    "decode_seconds",
    "features_seconds",
    "model_seconds",
    "decoder_seconds",
    "peak_rss_mb",
    "peak_rss_scope",
    "input_wait_seconds",
    "vs",
    "dicta_speedup_median",
    "dicta_speedup_min",
    "dicta_speedup_max",
];

/// CSV with a header line and one line per row.
pub fn to_csv(rows: &[Row]) -> String {
    let mut out = CSV_COLUMNS.join(",");
    out.push('\n');
    for r in rows {
        let v = serde_json::to_value(r).unwrap_or_default();
        let cells: Vec<String> = CSV_COLUMNS.iter().map(|c| csv_cell(&v[*c])).collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

pub(super) fn csv_cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) if s.contains([',', '"', '\n']) => {
            format!("\"{}\"", s.replace('"', "\"\""))
        }
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A short Markdown table of the rows.
pub fn to_markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| workload | arm | threads | batch | beam | RTFx median (min–max) | wall s | WER % | CER % | p50 / p99 s | peak RSS MB | busy s: audio / model / decoder, wait s | Dicta speed-up |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let f = |x: Option<f64>, d: usize| x.map_or("–".to_string(), |v| format!("{v:.d$}"));
    for r in rows {
        let rtfx = if r.status == "ok" {
            format!(
                "{} ({}–{})",
                f(r.rtfx_median, 1),
                f(r.rtfx_min, 1),
                f(r.rtfx_max, 1)
            )
        } else {
            format!("**{}**", r.status)
        };
        let lat = if r.latency_p50.is_some() {
            format!("{} / {}", f(r.latency_p50, 2), f(r.latency_p99, 2))
        } else {
            "–".into()
        };
        let speedup = r.dicta_speedup_median.map_or("–".to_string(), |m| {
            format!(
                "{m:.2}× ({}–{})",
                f(r.dicta_speedup_min, 2),
                f(r.dicta_speedup_max, 2)
            )
        });
        // † : the peak could not be reset per run (the worker's peak since it started).
        let rss = match r.peak_rss_scope.as_deref() {
            Some("process") => format!("{} †", f(r.peak_rss_mb, 0)),
            _ => f(r.peak_rss_mb, 0),
        };
        let split = if r.model_seconds.is_some() {
            format!(
                "{} / {} / {}, {}",
                f(r.decode_seconds, 2),
                f(r.model_seconds, 2),
                f(r.decoder_seconds, 2),
                f(r.input_wait_seconds, 2)
            )
        } else {
            "–".into()
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.workload,
            r.arm,
            r.threads,
            r.batch_size,
            r.beam_size,
            rtfx,
            f(r.wall_median, 2),
            f(r.wer.map(|w| w * 100.0), 2),
            f(r.cer.map(|w| w * 100.0), 2),
            lat,
            rss,
            split,
            speedup
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::protocol::{ItemResult, Mode};

    fn req() -> RunRequest {
        RunRequest {
            manifest: "/m".into(),
            mode: Mode::Batch,
            batch_size: 2,
            beam_size: 1,
            temperatures: vec![0.0],
            condition_on_previous_text: false,
            without_timestamps: false,
            long_form: "sequential".into(),
            overlap_seconds: 5.0,
        }
    }

    fn reply(wall: f64, hyp: &str) -> RunReply {
        RunReply {
            ok: true,
            wall_seconds: wall,
            audio_seconds: 10.0,
            items: vec![ItemResult {
                id: "a".into(),
                text: Some(hyp.into()),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn row_scores_normalized_wer_and_summarises_runs() {
        let items = vec![WorkloadItem {
            id: "a".into(),
            audio: "a.wav".into(),
            text: "Mr. Smith has two cats.".into(),
            duration_s: None,
        }];
        let replies = vec![
            reply(2.0, "mister smith has 2 cats"),
            reply(1.0, "x"),
            reply(4.0, "Mister Smith has 2 dogs"),
        ];
        let (row, hyps) = build_row(
            "engine",
            "w",
            &Ready::default(),
            "dicta",
            &req(),
            &replies,
            &items,
        );
        assert_eq!(row.status, "ok");
        assert_eq!(
            (row.wall_median, row.wall_min, row.wall_max),
            (Some(2.0), Some(1.0), Some(4.0))
        );
        assert_eq!(row.rtfx_median, Some(5.0));
        // Scored on the last run: "mister smith has 2 dogs" vs "mister smith has 2 cats".
        assert_eq!(row.wer, Some(0.2));
        assert_eq!(hyps[0].word_errors, 1);
    }

    #[test]
    fn a_failed_run_marks_the_row() {
        let items = vec![WorkloadItem {
            id: "a".into(),
            audio: "a.wav".into(),
            text: "x".into(),
            duration_s: None,
        }];
        let replies = vec![reply(2.0, "x"), RunReply::failed("oom", "killed")];
        let (row, _) = build_row(
            "engine",
            "w",
            &Ready::default(),
            "dicta",
            &req(),
            &replies,
            &items,
        );
        assert_eq!(row.status, "oom");
        assert_eq!(row.runs, 1);
        assert!(to_markdown(&[row]).contains("**oom**"));
    }

    #[test]
    fn speedup_is_median_of_pair_ratios() {
        let dicta = Row {
            arm: "dicta".into(),
            run_walls: vec![1.0, 2.0, 1.0],
            ..Default::default()
        };
        let mut peer = Row {
            run_walls: vec![3.0, 2.0, 2.0],
            ..Default::default()
        };
        compare(&mut peer, &dicta);
        assert_eq!(peer.dicta_speedup_median, Some(2.0));
        assert_eq!(
            (peer.dicta_speedup_min, peer.dicta_speedup_max),
            (Some(1.0), Some(3.0))
        );
    }

    #[test]
    fn csv_quotes_cells_with_commas() {
        let row = Row {
            pipeline: "a, \"b\"".into(),
            ..Default::default()
        };
        let csv = to_csv(&[row]);
        let line = csv.lines().nth(1).unwrap();
        assert!(line.contains("\"a, \"\"b\"\"\""), "{line}");
        assert_eq!(
            csv.lines().next().unwrap().split(',').count(),
            CSV_COLUMNS.len()
        );
    }
}
