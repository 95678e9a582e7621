//! What a soak measured: the per-interval tally, the samples, the summary, and their CSV and
//! Markdown renderings.

use serde::Serialize;
use serde_json::{json, Value};

use super::super::summary::{Outcome, RequestRecord};
use crate::bench::report::csv_cell;
use crate::bench::stats::percentile;

/// Errors kept per interval and overall (the counts are always complete).
const KEEP_ERRORS: usize = 5;

/// Counts and latencies of one interval (or of the whole soak).
#[derive(Debug, Default)]
pub struct Tally {
    pub uploads_ok: usize,
    pub uploads_failed: usize,
    pub upload_latency: Vec<f64>,
    pub streams_ok: usize,
    pub streams_failed: usize,
    /// End of audio → `done` of each successful utterance.
    pub finalize: Vec<f64>,
    /// Audio seconds transcribed successfully (uploads and streams).
    pub audio_s: f64,
    /// The first few errors.
    pub errors: Vec<String>,
}

impl Tally {
    /// Counts one upload: ok only with a non-empty transcript (the clips are all speech).
    pub fn upload(&mut self, rec: RequestRecord) {
        let empty = rec.text.as_deref().unwrap_or_default().is_empty();
        match rec.outcome {
            Outcome::Ok if !empty => {
                self.uploads_ok += 1;
                self.upload_latency.push(rec.latency_s);
                self.audio_s += rec.audio_seconds;
            }
            Outcome::Ok => self.upload_failed(format!("{}: empty transcript", rec.id)),
            o => self.upload_failed(format!(
                "{}: {o:?}: {}",
                rec.id,
                rec.error.unwrap_or_default()
            )),
        }
    }

    pub fn upload_failed(&mut self, e: String) {
        self.uploads_failed += 1;
        self.keep(format!("upload {e}"));
    }

    pub fn stream_failed(&mut self, e: String) {
        self.streams_failed += 1;
        self.keep(format!("stream {e}"));
    }

    pub fn keep(&mut self, e: String) {
        if self.errors.len() < KEEP_ERRORS {
            self.errors.push(e);
        }
    }

    pub fn merge(&mut self, o: &Tally) {
        self.uploads_ok += o.uploads_ok;
        self.uploads_failed += o.uploads_failed;
        self.upload_latency.extend(&o.upload_latency);
        self.streams_ok += o.streams_ok;
        self.streams_failed += o.streams_failed;
        self.finalize.extend(&o.finalize);
        self.audio_s += o.audio_s;
        for e in &o.errors {
            self.keep(e.clone());
        }
    }
}

/// The counts and latency percentiles of a [`Tally`], as samples and the summary report them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    pub uploads_ok: usize,
    pub uploads_failed: usize,
    pub upload_p50_s: Option<f64>,
    pub upload_p95_s: Option<f64>,
    /// Stream utterances answered with `done` and a non-empty transcript.
    pub streams_ok: usize,
    /// Stream utterances that failed: error events, closes, time-outs, refused sockets.
    pub streams_failed: usize,
    /// End of audio → `done`, seconds.
    pub finalize_p50_s: Option<f64>,
    pub finalize_p95_s: Option<f64>,
}

impl Counts {
    pub fn of(t: &Tally) -> Self {
        Self {
            uploads_ok: t.uploads_ok,
            uploads_failed: t.uploads_failed,
            upload_p50_s: percentile(&t.upload_latency, 50.0),
            upload_p95_s: percentile(&t.upload_latency, 95.0),
            streams_ok: t.streams_ok,
            streams_failed: t.streams_failed,
            finalize_p50_s: percentile(&t.finalize, 50.0),
            finalize_p95_s: percentile(&t.finalize, 95.0),
        }
    }

    /// Failed uploads and stream utterances.
    pub fn errors(&self) -> usize {
        self.uploads_failed + self.streams_failed
    }
}

/// One sample: the server's memory and CPU at time `t_s`, and what happened since the last one.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// 0 before the load starts, then 1, 2, …
    pub sample: usize,
    /// Seconds since the load started.
    pub t_s: f64,
    /// Resident set of the server, MiB (`None` when it cannot be read).
    pub rss_mb: Option<f64>,
    /// Server CPU time over wall time since the last sample, in cores (needs its pid).
    pub cpu_cores: Option<f64>,
    /// What the interval's requests did.
    #[serde(flatten)]
    pub counts: Counts,
    /// Audio seconds transcribed in the interval.
    pub audio_s: f64,
    /// The interval's first errors.
    pub errors: Vec<String>,
}

impl Sample {
    pub fn print(&self) {
        let f = |v: Option<f64>, d: usize| v.map_or("?".into(), |x| format!("{x:.d$}"));
        let mut line = format!(
            "dicta bench service: soak {:>3} t={} rss {} MB cpu {} | uploads {} ok {} failed, p50 \
             {} s p95 {} s | utterances {} ok {} failed, end→done p50 {} s",
            self.sample,
            clock(self.t_s),
            f(self.rss_mb, 1),
            f(self.cpu_cores, 2),
            self.counts.uploads_ok,
            self.counts.uploads_failed,
            f(self.counts.upload_p50_s, 2),
            f(self.counts.upload_p95_s, 2),
            self.counts.streams_ok,
            self.counts.streams_failed,
            f(self.counts.finalize_p50_s, 2),
        );
        if let Some(e) = self.errors.first() {
            line.push_str(&format!(" | first error: {e}"));
        }
        eprintln!("{line}");
    }
}

/// `m:ss` of `t` seconds.
pub fn clock(t: f64) -> String {
    let s = t.round() as u64;
    format!("{}:{:02}", s / 60, s % 60)
}

/// The soak in a few numbers.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub duration_s: f64,
    /// Before the load started.
    pub rss_idle_mb: Option<f64>,
    /// First sample under load.
    pub rss_first_mb: Option<f64>,
    pub rss_last_mb: Option<f64>,
    pub rss_max_mb: Option<f64>,
    /// Sample 2 (minute 2 at the default 60 s sampling): past the warm-up, the growth's start.
    pub rss_from_mb: Option<f64>,
    /// Last − sample 2.
    pub rss_growth_mb: Option<f64>,
    /// Least-squares slope over samples 2…last, MiB per hour.
    pub rss_slope_mb_per_h: Option<f64>,
    pub cpu_cores_mean: Option<f64>,
    /// What all requests of the soak did.
    #[serde(flatten)]
    pub counts: Counts,
    /// Audio transcribed, hours.
    pub audio_h: f64,
    /// `counts.errors()`, written out in soak.json.
    pub errors: usize,
    pub first_errors: Vec<String>,
}

impl Summary {
    pub fn of(samples: &[Sample], t: &Tally) -> Self {
        let rss = |i: usize| samples.get(i).and_then(|s| s.rss_mb);
        let last = samples.last();
        let tail: Vec<(f64, f64)> = samples
            .iter()
            .skip(2)
            .filter_map(|s| Some((s.t_s, s.rss_mb?)))
            .collect();
        let cpu: Vec<f64> = samples.iter().filter_map(|s| s.cpu_cores).collect();
        let counts = Counts::of(t);
        Summary {
            duration_s: last.map_or(0.0, |s| s.t_s),
            rss_idle_mb: rss(0),
            rss_first_mb: rss(1),
            rss_last_mb: last.and_then(|s| s.rss_mb),
            rss_max_mb: samples.iter().filter_map(|s| s.rss_mb).reduce(f64::max),
            rss_from_mb: rss(2),
            rss_growth_mb: rss(2).zip(last.and_then(|s| s.rss_mb)).map(|(a, b)| b - a),
            rss_slope_mb_per_h: slope(&tail).map(|s| s * 3600.0),
            cpu_cores_mean: (!cpu.is_empty()).then(|| cpu.iter().sum::<f64>() / cpu.len() as f64),
            errors: counts.errors(),
            counts,
            audio_h: t.audio_s / 3600.0,
            first_errors: t.errors.clone(),
        }
    }

    /// The summary sentence of soak.md and of the last line printed.
    pub fn line(&self) -> String {
        let f = |v: Option<f64>, d: usize| v.map_or("?".into(), |x| format!("{x:.d$}"));
        format!(
            "{}: RSS idle {} MB, first {} MB, last {} MB, max {} MB; growth from sample 2 to the \
             end {} MB (slope {} MB/h); errors {} (uploads {} of {}, stream utterances {} of {}); \
             upload p50 / p95 {} / {} s, end→done p50 / p95 {} / {} s, server CPU {} cores, {:.2} h \
             of audio transcribed",
            clock(self.duration_s),
            f(self.rss_idle_mb, 1),
            f(self.rss_first_mb, 1),
            f(self.rss_last_mb, 1),
            f(self.rss_max_mb, 1),
            self.rss_growth_mb.map_or("?".into(), |g| format!("{g:+.1}")),
            self.rss_slope_mb_per_h.map_or("?".into(), |g| format!("{g:+.1}")),
            self.errors,
            self.counts.uploads_failed,
            self.counts.uploads_ok + self.counts.uploads_failed,
            self.counts.streams_failed,
            self.counts.streams_ok + self.counts.streams_failed,
            f(self.counts.upload_p50_s, 2),
            f(self.counts.upload_p95_s, 2),
            f(self.counts.finalize_p50_s, 2),
            f(self.counts.finalize_p95_s, 2),
            f(self.cpu_cores_mean, 2),
            self.audio_h,
        )
    }
}

/// Least-squares slope of y over x (`None` under two points or with no spread in x).
fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let (mx, my) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The CSV columns, in order.
const COLUMNS: [&str; 15] = [
    "sample",
    "t_s",
    "minute",
    "rss_mb",
    "cpu_cores",
    "uploads_ok",
    "uploads_failed",
    "upload_p50_s",
    "upload_p95_s",
    "streams_ok",
    "streams_failed",
    "finalize_p50_s",
    "finalize_p95_s",
    "audio_s",
    "first_error",
];

/// soak.csv: one row per sample.
pub fn to_csv(samples: &[Sample]) -> String {
    let mut out = COLUMNS.join(",") + "\n";
    let r = |v: Option<f64>, d: usize| v.map_or(String::new(), |x| format!("{x:.d$}"));
    for s in samples {
        let cells = [
            s.sample.to_string(),
            format!("{:.1}", s.t_s),
            format!("{:.2}", s.t_s / 60.0),
            r(s.rss_mb, 1),
            r(s.cpu_cores, 3),
            s.counts.uploads_ok.to_string(),
            s.counts.uploads_failed.to_string(),
            r(s.counts.upload_p50_s, 3),
            r(s.counts.upload_p95_s, 3),
            s.counts.streams_ok.to_string(),
            s.counts.streams_failed.to_string(),
            r(s.counts.finalize_p50_s, 3),
            r(s.counts.finalize_p95_s, 3),
            format!("{:.1}", s.audio_s),
            csv_cell(&s.errors.first().map_or(Value::Null, |e| json!(e))),
        ];
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// soak.md: the table of samples and the summary.
pub fn to_markdown(samples: &[Sample], summary: &Summary) -> String {
    let f = |v: Option<f64>, d: usize| v.map_or("–".into(), |x| format!("{x:.d$}"));
    let mut md = String::from(
        "| t | RSS MB | CPU cores | uploads ok / failed | upload p50 / p95 s | utterances ok / failed \
         | end→done p50 / p95 s |\n|---|---|---|---|---|---|---|\n",
    );
    for s in samples {
        md.push_str(&format!(
            "| {} | {} | {} | {} / {} | {} / {} | {} / {} | {} / {} |\n",
            clock(s.t_s),
            f(s.rss_mb, 1),
            f(s.cpu_cores, 2),
            s.counts.uploads_ok,
            s.counts.uploads_failed,
            f(s.counts.upload_p50_s, 2),
            f(s.counts.upload_p95_s, 2),
            s.counts.streams_ok,
            s.counts.streams_failed,
            f(s.counts.finalize_p50_s, 2),
            f(s.counts.finalize_p95_s, 2),
        ));
    }
    md.push_str(&format!("\n**Summary** — {}.\n", summary.line()));
    if !summary.first_errors.is_empty() {
        md.push_str("\nFirst errors:\n\n");
        for e in &summary.first_errors {
            md.push_str(&format!("- `{}`\n", e.replace('`', "'")));
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(k: usize, t_s: f64, rss: f64) -> Sample {
        Sample {
            sample: k,
            t_s,
            rss_mb: Some(rss),
            cpu_cores: (k > 0).then_some(1.4),
            counts: Counts {
                uploads_ok: k,
                uploads_failed: 0,
                upload_p50_s: None,
                upload_p95_s: None,
                streams_ok: 2 * k,
                streams_failed: usize::from(k == 3),
                finalize_p50_s: Some(0.5),
                finalize_p95_s: Some(0.9),
            },
            audio_s: 10.0,
            errors: if k == 3 {
                vec!["stream x: \"closed\", early".into()]
            } else {
                vec![]
            },
        }
    }

    #[test]
    fn summary_measures_growth_after_the_warm_up() {
        let samples: Vec<Sample> = [(0.0, 100.0), (60.0, 180.0), (120.0, 200.0), (180.0, 203.0)]
            .iter()
            .enumerate()
            .map(|(k, &(t, r))| sample(k, t, r))
            .collect();
        let tally = Tally {
            uploads_ok: 6,
            streams_ok: 12,
            streams_failed: 1,
            audio_s: 7200.0,
            errors: vec!["stream x: closed".into()],
            ..Tally::default()
        };
        let s = Summary::of(&samples, &tally);
        assert_eq!(
            (s.rss_idle_mb, s.rss_first_mb, s.rss_last_mb, s.rss_max_mb),
            (Some(100.0), Some(180.0), Some(203.0), Some(203.0))
        );
        assert_eq!(s.rss_from_mb, Some(200.0));
        assert!((s.rss_growth_mb.unwrap() - 3.0).abs() < 1e-9);
        // 3 MB in 60 s.
        assert!((s.rss_slope_mb_per_h.unwrap() - 180.0).abs() < 1e-6);
        assert_eq!((s.errors, s.audio_h), (1, 2.0));
        assert!((s.cpu_cores_mean.unwrap() - 1.4).abs() < 1e-9);
        assert!(s
            .line()
            .contains("errors 1 (uploads 0 of 6, stream utterances 1 of 13)"));

        let csv = to_csv(&samples);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[0], COLUMNS.join(","));
        assert!(lines[1].starts_with("0,0.0,0.00,100.0,,0,0,,,0,0,0.500,0.900,10.0,"));
        // The error is one quoted cell.
        assert!(
            lines[4].ends_with(",\"stream x: \"\"closed\"\", early\""),
            "{}",
            lines[4]
        );
        let md = to_markdown(&samples, &s);
        assert!(md.contains("| 3:00 | 203.0 | 1.40 | 3 / 0 | – / – | 6 / 1 | 0.50 / 0.90 |"));
        assert!(md.contains("First errors:"));
    }

    #[test]
    fn clock_and_slope() {
        assert_eq!(clock(3599.6), "60:00");
        assert_eq!(slope(&[(1.0, 5.0)]), None);
    }
}
