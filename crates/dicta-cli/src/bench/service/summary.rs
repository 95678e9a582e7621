//! What one request, one timed run and one service configuration measured, and the JSON / CSV /
//! Markdown renderings of the service rows.

use serde::Serialize;

use super::super::report::csv_cell;
use super::super::stats::{median, percentile, summarise};

/// Version of the service row schema, written into every row.
pub const SCHEMA: &str = "dicta-bench-service/1";

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A transcript came back.
    Ok,
    /// 503: the server's queue was full (admission control), or it was not ready.
    Rejected503,
    /// 413: the body or the audio was over a limit.
    Rejected413,
    /// Any other 4xx.
    Rejected4xx,
    /// A 5xx other than 503, a transport error, a client time-out or an unreadable answer.
    Failed,
}

impl Outcome {
    /// The outcome of an HTTP status that carried no transcript (a success status without one
    /// counts as failed).
    pub fn of_status(status: u16) -> Self {
        match status {
            503 => Outcome::Rejected503,
            413 => Outcome::Rejected413,
            400..=499 => Outcome::Rejected4xx,
            _ => Outcome::Failed,
        }
    }
}

/// One request of one run.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRecord {
    /// Input id (from the workload manifest).
    pub id: String,
    pub outcome: Outcome,
    /// HTTP status (101 for a WebSocket that upgraded; `None` when no answer came).
    pub http_status: Option<u16>,
    /// Audio seconds of the input.
    pub audio_seconds: f64,
    /// From the first byte sent to the full answer (the last final for streams), seconds.
    pub latency_s: f64,
    /// Streams: from the first byte sent to the first partial result.
    pub first_partial_s: Option<f64>,
    /// Streams: from the end-of-audio message to the last final result; realtime sessions: from
    /// the end of the audio to the last transcript.
    pub finalize_s: Option<f64>,
    /// Streams: partial results received.
    pub partials: Option<usize>,
    /// The transcript (streams: the final texts joined).
    pub text: Option<String>,
    /// What went wrong, when the outcome is not `ok`.
    pub error: Option<String>,
}

/// Mean, percentiles (numpy's linear method) and maximum of a set of latencies, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Latency {
    /// Summarises `values`; every field is `None` for an empty slice.
    pub fn of(values: &[f64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        Self {
            mean: Some(values.iter().sum::<f64>() / values.len() as f64),
            p50: percentile(values, 50.0),
            p90: percentile(values, 90.0),
            p95: percentile(values, 95.0),
            p99: percentile(values, 99.0),
            max: values.iter().copied().reduce(f64::max),
        }
    }
}

/// One timed run: every request of the workload, handed out to the clients.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunSummary {
    /// From the first request sent to the last answer.
    pub wall_seconds: f64,
    /// Audio seconds of the requests answered with a transcript.
    pub audio_seconds: f64,
    /// `audio_seconds / wall_seconds`: only transcribed audio counts.
    pub rtfx: f64,
    pub requests: usize,
    pub ok: usize,
    pub rejected_503: usize,
    pub rejected_413: usize,
    pub rejected_4xx: usize,
    pub failed: usize,
    /// Latency of the successful requests.
    pub latency: Latency,
    /// Streams: first-partial latency of the successful requests.
    pub first_partial_p50: Option<f64>,
    pub first_partial_p90: Option<f64>,
    /// Streams: end-of-audio → last final (`done`), median and 90th percentile.
    pub finalize_p50: Option<f64>,
    pub finalize_p90: Option<f64>,
    /// Streams: mean partial results per successful request.
    pub partials_per_request: Option<f64>,
}

impl RunSummary {
    /// Summarises the records of one run that took `wall_seconds`.
    pub fn of(records: &[RequestRecord], wall_seconds: f64) -> Self {
        let ok: Vec<&RequestRecord> = records
            .iter()
            .filter(|r| r.outcome == Outcome::Ok)
            .collect();
        let count = |o: Outcome| records.iter().filter(|r| r.outcome == o).count();
        let audio_seconds: f64 = ok.iter().map(|r| r.audio_seconds).sum();
        let latencies: Vec<f64> = ok.iter().map(|r| r.latency_s).collect();
        let first: Vec<f64> = ok.iter().filter_map(|r| r.first_partial_s).collect();
        let finalize: Vec<f64> = ok.iter().filter_map(|r| r.finalize_s).collect();
        let partials: Vec<f64> = ok
            .iter()
            .filter_map(|r| r.partials.map(|p| p as f64))
            .collect();
        Self {
            wall_seconds,
            audio_seconds,
            rtfx: if wall_seconds > 0.0 {
                audio_seconds / wall_seconds
            } else {
                0.0
            },
            requests: records.len(),
            ok: ok.len(),
            rejected_503: count(Outcome::Rejected503),
            rejected_413: count(Outcome::Rejected413),
            rejected_4xx: count(Outcome::Rejected4xx),
            failed: count(Outcome::Failed),
            latency: Latency::of(&latencies),
            first_partial_p50: percentile(&first, 50.0),
            first_partial_p90: percentile(&first, 90.0),
            finalize_p50: percentile(&finalize, 50.0),
            finalize_p90: percentile(&finalize, 90.0),
            partials_per_request: (!partials.is_empty())
                .then(|| partials.iter().sum::<f64>() / partials.len() as f64),
        }
    }

    /// The per-field median of several runs (counts are summed: they describe all the runs).
    pub fn median_of(runs: &[RunSummary]) -> Option<Self> {
        if runs.is_empty() {
            return None;
        }
        let m = |f: fn(&RunSummary) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        let mo = |f: fn(&RunSummary) -> Option<f64>| {
            median(&runs.iter().filter_map(f).collect::<Vec<_>>())
        };
        let sum = |f: fn(&RunSummary) -> usize| runs.iter().map(f).sum();
        Some(Self {
            wall_seconds: m(|r| r.wall_seconds)?,
            audio_seconds: m(|r| r.audio_seconds)?,
            rtfx: m(|r| r.rtfx)?,
            requests: sum(|r| r.requests),
            ok: sum(|r| r.ok),
            rejected_503: sum(|r| r.rejected_503),
            rejected_413: sum(|r| r.rejected_413),
            rejected_4xx: sum(|r| r.rejected_4xx),
            failed: sum(|r| r.failed),
            latency: Latency {
                mean: mo(|r| r.latency.mean),
                p50: mo(|r| r.latency.p50),
                p90: mo(|r| r.latency.p90),
                p95: mo(|r| r.latency.p95),
                p99: mo(|r| r.latency.p99),
                max: mo(|r| r.latency.max),
            },
            first_partial_p50: mo(|r| r.first_partial_p50),
            first_partial_p90: mo(|r| r.first_partial_p90),
            finalize_p50: mo(|r| r.finalize_p50),
            finalize_p90: mo(|r| r.finalize_p90),
            partials_per_request: mo(|r| r.partials_per_request),
        })
    }
}

/// One service configuration on one workload.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServiceRow {
    pub schema: &'static str,
    /// Always `service`.
    pub harness: &'static str,
    pub workload: String,
    /// `openai`, `transcribe`, `raw`, `stream` or `realtime`.
    pub endpoint: String,
    /// Raw and stream bodies: `i16_le` or `f32_le`.
    pub wire_encoding: Option<String>,
    /// Streams: whether audio was fed at real time.
    pub realtime: Option<bool>,
    pub concurrency: usize,
    /// The server's base URL; `spawned` says whether this run started it.
    pub url: String,
    pub spawned: bool,
    /// Server settings when spawned (`None` for `--url`).
    pub threads: Option<usize>,
    pub batch_wait_ms: Option<u64>,
    pub max_group: Option<usize>,
    pub batch_size: Option<usize>,
    pub beam_size: Option<usize>,
    /// `ok` (every request of every timed run ok), `rejected` (some rejected, none failed) or
    /// `failed`.
    pub status: String,
    pub inputs: usize,
    /// Every timed run, in order.
    pub runs: Vec<RunSummary>,
    /// The per-field median of the runs.
    pub median: Option<RunSummary>,
    pub rtfx_min: Option<f64>,
    pub rtfx_max: Option<f64>,
    /// Corpus WER of the last run (Whisper's English normalizer; failed requests score as empty).
    pub wer: Option<f64>,
    /// `--vs-engine`: median in-process RTFx of `bench engine` on the same workload and model.
    pub engine_rtfx_median: Option<f64>,
    /// Median over run pairs of service RTFx / engine RTFx (1.0 = no serving overhead).
    pub service_vs_engine_median: Option<f64>,
    pub service_vs_engine_min: Option<f64>,
    pub service_vs_engine_max: Option<f64>,
    /// The requests of the last run, in workload order.
    pub requests: Vec<RequestRecord>,
}

impl ServiceRow {
    /// Fills status, median and RTFx range from `runs` and keeps `last` as the request list.
    pub fn finish(&mut self, runs: Vec<RunSummary>, last: Vec<RequestRecord>) {
        let all_ok = runs.iter().all(|r| r.ok == r.requests) && !runs.is_empty();
        let failed = runs.is_empty() || runs.iter().any(|r| r.failed > 0);
        self.status = if all_ok {
            "ok"
        } else if failed {
            "failed"
        } else {
            "rejected"
        }
        .into();
        self.median = RunSummary::median_of(&runs);
        if let Some(s) = summarise(&runs.iter().map(|r| r.rtfx).collect::<Vec<_>>()) {
            (self.rtfx_min, self.rtfx_max) = (Some(s.min), Some(s.max));
        }
        self.runs = runs;
        self.requests = last;
    }

    /// Pairs run `i` of the service with run `i` of the engine (which ran right after it).
    pub fn compare_with_engine(&mut self, engine_rtfx: &[f64]) {
        self.engine_rtfx_median = median(engine_rtfx);
        let ratios: Vec<f64> = self
            .runs
            .iter()
            .zip(engine_rtfx)
            .filter(|(_, e)| **e > 0.0)
            .map(|(s, e)| s.rtfx / e)
            .collect();
        if let Some(s) = summarise(&ratios) {
            (
                self.service_vs_engine_median,
                self.service_vs_engine_min,
                self.service_vs_engine_max,
            ) = (Some(s.median), Some(s.min), Some(s.max));
        }
    }
}

/// Columns of the CSV: one line per run and one `median` line per row.
const CSV_COLUMNS: &[&str] = &[
    "schema",
    "workload",
    "endpoint",
    "wire_encoding",
    "realtime",
    "concurrency",
    "threads",
    "batch_wait_ms",
    "max_group",
    "batch_size",
    "beam_size",
    "status",
    "run",
    "requests",
    "ok",
    "rejected_503",
    "rejected_413",
    "rejected_4xx",
    "failed",
    "audio_seconds",
    "wall_seconds",
    "rtfx",
    "latency_mean",
    "latency_p50",
    "latency_p90",
    "latency_p95",
    "latency_p99",
    "latency_max",
    "first_partial_p50",
    "first_partial_p90",
    "finalize_p50",
    "finalize_p90",
    "partials_per_request",
    "wer",
    "engine_rtfx_median",
    "service_vs_engine_median",
];

/// CSV with a header line, then per row one line per run and a `median` line.
pub fn to_csv(rows: &[ServiceRow]) -> String {
    let mut out = CSV_COLUMNS.join(",") + "\n";
    for row in rows {
        let base = serde_json::to_value(row).unwrap_or_default();
        let lines = row
            .runs
            .iter()
            .enumerate()
            .map(|(i, r)| ((i + 1).to_string(), r))
            .chain(row.median.iter().map(|m| ("median".to_string(), m)));
        for (label, run) in lines {
            let r = serde_json::to_value(run).unwrap_or_default();
            let cells: Vec<String> = CSV_COLUMNS
                .iter()
                .map(|&c| {
                    let v = match c {
                        "run" => serde_json::Value::String(label.clone()),
                        _ if c.starts_with("latency_") => r["latency"][&c[8..]].clone(),
                        _ if !r[c].is_null() => r[c].clone(),
                        _ => base[c].clone(),
                    };
                    csv_cell(&v)
                })
                .collect();
            out.push_str(&cells.join(","));
            out.push('\n');
        }
    }
    out
}

/// A Markdown table: per row one line per run and a bold median line.
pub fn to_markdown(rows: &[ServiceRow]) -> String {
    let mut out = String::from(
        "| workload | endpoint | clients | run | RTFx | ok / rejected / failed | latency mean / p50 / p90 / p95 / p99 / max s | first partial p50 / p90 s | end → final p50 / p90 s | partials/req | service/engine |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let f = |x: Option<f64>, d: usize| x.map_or("–".to_string(), |v| format!("{v:.d$}"));
    for row in rows {
        let endpoint = match (&row.wire_encoding, row.realtime) {
            (Some(e), Some(rt)) => format!("{} ({e}, realtime {})", row.endpoint, u8::from(rt)),
            (Some(e), None) => format!("{} ({e})", row.endpoint),
            _ => row.endpoint.clone(),
        };
        let lines = row
            .runs
            .iter()
            .enumerate()
            .map(|(i, r)| ((i + 1).to_string(), r, None))
            .chain(row.median.iter().map(|m| {
                let vs = row.service_vs_engine_median.map(|v| {
                    format!(
                        "{v:.2} ({}–{}; engine RTFx {})",
                        f(row.service_vs_engine_min, 2),
                        f(row.service_vs_engine_max, 2),
                        f(row.engine_rtfx_median, 1)
                    )
                });
                ("**median**".to_string(), m, vs)
            }));
        for (label, r, vs) in lines {
            let l = &r.latency;
            out.push_str(&format!(
                "| {} | {} | {} | {} | {:.1} | {} / {} / {} | {} / {} / {} / {} / {} / {} | {} / {} | {} / {} | {} | {} |\n",
                row.workload,
                endpoint,
                row.concurrency,
                label,
                r.rtfx,
                r.ok,
                r.rejected_503 + r.rejected_413 + r.rejected_4xx,
                r.failed,
                f(l.mean, 2),
                f(l.p50, 2),
                f(l.p90, 2),
                f(l.p95, 2),
                f(l.p99, 2),
                f(l.max, 2),
                f(r.first_partial_p50, 2),
                f(r.first_partial_p90, 2),
                f(r.finalize_p50, 2),
                f(r.finalize_p90, 2),
                f(r.partials_per_request, 1),
                vs.unwrap_or_else(|| "–".into()),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(outcome: Outcome, latency: f64, audio: f64) -> RequestRecord {
        RequestRecord {
            id: "x".into(),
            outcome,
            http_status: Some(200),
            audio_seconds: audio,
            latency_s: latency,
            first_partial_s: None,
            finalize_s: None,
            partials: None,
            text: Some("t".into()),
            error: None,
        }
    }

    #[test]
    fn statuses_map_to_outcomes() {
        assert_eq!(Outcome::of_status(503), Outcome::Rejected503);
        assert_eq!(Outcome::of_status(413), Outcome::Rejected413);
        assert_eq!(Outcome::of_status(400), Outcome::Rejected4xx);
        assert_eq!(Outcome::of_status(429), Outcome::Rejected4xx);
        assert_eq!(Outcome::of_status(500), Outcome::Failed);
        assert_eq!(Outcome::of_status(504), Outcome::Failed);
        // A 200 without a transcript is a failure, not a success.
        assert_eq!(Outcome::of_status(200), Outcome::Failed);
    }

    #[test]
    fn run_counts_outcomes_and_times_only_successes() {
        let records = vec![
            rec(Outcome::Ok, 1.0, 10.0),
            rec(Outcome::Ok, 3.0, 20.0),
            rec(Outcome::Ok, 2.0, 30.0),
            rec(Outcome::Rejected503, 0.01, 40.0),
            rec(Outcome::Failed, 9.0, 50.0),
        ];
        let s = RunSummary::of(&records, 4.0);
        assert_eq!((s.requests, s.ok, s.rejected_503, s.failed), (5, 3, 1, 1));
        // Only transcribed audio counts: (10 + 20 + 30) / 4.
        assert_eq!(s.audio_seconds, 60.0);
        assert_eq!(s.rtfx, 15.0);
        // numpy.percentile([1, 2, 3], [50, 90, 99]) == [2.0, 2.8, 2.98]
        assert_eq!(s.latency.mean, Some(2.0));
        assert_eq!(s.latency.p50, Some(2.0));
        assert!((s.latency.p90.unwrap() - 2.8).abs() < 1e-12);
        assert!((s.latency.p99.unwrap() - 2.98).abs() < 1e-12);
        assert_eq!(s.latency.max, Some(3.0));
        assert_eq!(s.first_partial_p50, None);
        assert_eq!(s.partials_per_request, None);
    }

    #[test]
    fn stream_fields_summarise_partials() {
        let mut a = rec(Outcome::Ok, 5.0, 5.0);
        (a.first_partial_s, a.partials, a.finalize_s) = (Some(0.5), Some(4), Some(0.2));
        let mut b = rec(Outcome::Ok, 6.0, 6.0);
        (b.first_partial_s, b.partials, b.finalize_s) = (Some(1.5), Some(7), Some(0.4));
        let s = RunSummary::of(&[a, b], 6.0);
        assert_eq!(s.first_partial_p50, Some(1.0));
        assert!((s.first_partial_p90.unwrap() - 1.4).abs() < 1e-12);
        assert_eq!(s.partials_per_request, Some(5.5));
        assert!((s.finalize_p50.unwrap() - 0.3).abs() < 1e-12);
        assert!((s.finalize_p90.unwrap() - 0.38).abs() < 1e-12);
    }

    #[test]
    fn median_run_takes_field_medians_and_sums_counts() {
        let runs: Vec<RunSummary> = [(2.0, 3.0), (1.0, 1.0), (4.0, 2.0)]
            .iter()
            .map(|&(wall, lat)| RunSummary::of(&[rec(Outcome::Ok, lat, 8.0)], wall))
            .collect();
        let m = RunSummary::median_of(&runs).unwrap();
        assert_eq!(m.wall_seconds, 2.0);
        assert_eq!(m.rtfx, 4.0);
        assert_eq!(m.latency.p50, Some(2.0));
        assert_eq!((m.requests, m.ok), (3, 3));
        assert_eq!(RunSummary::median_of(&[]), None);
    }

    #[test]
    fn row_status_and_engine_ratio() {
        let ok = RunSummary::of(&[rec(Outcome::Ok, 1.0, 10.0)], 1.0);
        let rejected = RunSummary::of(
            &[
                rec(Outcome::Ok, 1.0, 10.0),
                rec(Outcome::Rejected503, 0.0, 1.0),
            ],
            2.0,
        );
        let failed = RunSummary::of(&[rec(Outcome::Failed, 1.0, 10.0)], 1.0);
        let mut row = ServiceRow::default();
        row.finish(vec![ok.clone(), ok.clone()], Vec::new());
        assert_eq!(row.status, "ok");
        row.compare_with_engine(&[20.0, 5.0]);
        // Pairs: 10/20 and 10/5.
        assert_eq!(row.service_vs_engine_median, Some(1.25));
        assert_eq!(
            (row.service_vs_engine_min, row.service_vs_engine_max),
            (Some(0.5), Some(2.0))
        );
        row.finish(vec![ok.clone(), rejected], Vec::new());
        assert_eq!(row.status, "rejected");
        row.finish(vec![ok, failed], Vec::new());
        assert_eq!(row.status, "failed");
        row.finish(Vec::new(), Vec::new());
        assert_eq!(row.status, "failed");
    }

    #[test]
    fn csv_has_a_line_per_run_and_a_median_line() {
        let mut row = ServiceRow {
            workload: "w".into(),
            endpoint: "openai".into(),
            ..Default::default()
        };
        let run = RunSummary::of(&[rec(Outcome::Ok, 1.5, 10.0)], 2.0);
        row.finish(vec![run.clone(), run], Vec::new());
        let csv = to_csv(&[row.clone()]);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 4);
        let header: Vec<&str> = lines[0].split(',').collect();
        assert_eq!(header.len(), CSV_COLUMNS.len());
        let median: Vec<&str> = lines[3].split(',').collect();
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
        assert_eq!(median[col("run")], "median");
        assert_eq!(median[col("workload")], "w");
        assert_eq!(median[col("rtfx")], "5.0");
        assert_eq!(median[col("latency_p50")], "1.5");
        assert_eq!(median[col("ok")], "2");
        assert!(to_markdown(&[row]).contains("| **median** |"));
    }
}
