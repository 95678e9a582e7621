//! Prometheus metrics (OpenMetrics text at `GET /metrics`).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Route template (e.g. `/v1/audio/transcriptions`) and status code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RouteStatus {
    pub route: String,
    pub status: u16,
}

/// Route template only.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RouteLabel {
    pub route: String,
}

/// Why the server closed an HTTP connection (or refused a new one).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CloseReason {
    pub reason: &'static str,
}

type HistogramFamily = Family<RouteLabel, Histogram, fn() -> Histogram>;

/// Every metric the server exports, plus the registry that encodes them.
pub(crate) struct Metrics {
    registry: Registry,
    /// Requests answered, by route and status.
    pub requests: Family<RouteStatus, Counter>,
    /// Seconds from request start to response, by route.
    pub latency: HistogramFamily,
    /// Requests admitted and not yet taken by the batcher (refreshed at each scrape).
    pub queue_depth: Gauge,
    /// Admitted requests whose audio is being decoded (not yet queued for the batcher).
    pub decoding: Gauge,
    /// Bytes of decoded audio held by requests in progress (refreshed at each scrape).
    pub pending_audio_bytes: Gauge,
    /// Seconds a request waited in the queue before its group started.
    pub queue_seconds: Histogram,
    /// Requests per backend call.
    pub group_requests: Histogram,
    /// Inputs (recordings) per backend call.
    pub group_inputs: Histogram,
    /// Wall seconds of each backend call.
    pub backend_seconds: Histogram,
    /// Audio seconds handed to the backend.
    pub audio_seconds: Counter<f64, AtomicU64>,
    /// Real-time factor (audio seconds / wall seconds) of each backend call.
    pub rtfx: Histogram,
    /// Requests dropped before running because their client went away.
    pub abandoned: Counter,
    /// Requests whose client disconnected (or timed out) before the answer was sent.
    pub disconnects: Counter,
    /// Inputs whose backend work was cancelled midway because every client waiting on it left.
    pub cancelled_inputs: Counter,
    /// WebSocket streams open now.
    pub active_streams: Gauge,
    /// WebSocket streams closed because their client sent nothing for `stream_idle_timeout_s`.
    pub idle_streams_closed: Counter,
    /// Audio seconds received over WebSocket streams (at the client's rate).
    pub stream_audio_seconds: Counter<f64, AtomicU64>,
    /// WebSocket streams ended because they fell more than `stream_max_lag_s` behind.
    pub streams_shed: Counter,
    /// WebSocket upgrades refused because open streams were more than `stream_admit_lag_s`
    /// behind.
    pub streams_refused_behind: Counter,
    /// HTTP connections open now (upgraded WebSocket streams excluded).
    pub connections_open: Gauge,
    /// Connections the server closed (or refused) before the client did, by reason:
    /// `header_timeout`, `body_timeout`, `evicted` (idle, closed for a new one at
    /// `max_connections`), `refused` (at the cap with none idle).
    pub connections_closed: Family<CloseReason, Counter>,
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("dicta");
        let requests = Family::<RouteStatus, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by route and status",
            requests.clone(),
        );
        let latency: HistogramFamily =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.005, 2.0, 16)));
        registry.register(
            "http_request_duration_seconds",
            "Seconds from request start to response (to the last event for server-sent events), by route",
            latency.clone(),
        );
        let queue_depth = Gauge::default();
        registry.register(
            "queue_depth",
            "Requests admitted and waiting for the batcher",
            queue_depth.clone(),
        );
        let decoding = Gauge::default();
        registry.register(
            "decoding_requests",
            "Admitted requests whose audio is being decoded",
            decoding.clone(),
        );
        let pending_audio_bytes = Gauge::default();
        registry.register(
            "pending_audio_bytes",
            "Bytes of decoded audio held by requests in progress (max_pending_audio_mib caps it)",
            pending_audio_bytes.clone(),
        );
        let queue_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register(
            "queue_seconds",
            "Seconds a request waited before its backend call started",
            queue_seconds.clone(),
        );
        let group_requests = Histogram::new(exponential_buckets(1.0, 2.0, 8));
        registry.register(
            "batch_requests",
            "Requests coalesced into one backend call",
            group_requests.clone(),
        );
        let group_inputs = Histogram::new(exponential_buckets(1.0, 2.0, 10));
        registry.register(
            "batch_inputs",
            "Inputs (recordings) in one backend call",
            group_inputs.clone(),
        );
        let backend_seconds = Histogram::new(exponential_buckets(0.005, 2.0, 16));
        registry.register(
            "backend_seconds",
            "Wall seconds of one backend call",
            backend_seconds.clone(),
        );
        let audio_seconds = Counter::<f64, AtomicU64>::default();
        registry.register(
            "audio_seconds",
            "Audio seconds transcribed",
            audio_seconds.clone(),
        );
        let rtfx = Histogram::new(exponential_buckets(0.5, 2.0, 14));
        registry.register(
            "rtfx",
            "Real-time factor (audio seconds / wall seconds) of one backend call",
            rtfx.clone(),
        );
        let abandoned = Counter::default();
        registry.register(
            "abandoned_requests",
            "Queued requests dropped unrun because their client went away",
            abandoned.clone(),
        );
        let disconnects = Counter::default();
        registry.register(
            "client_disconnects",
            "Requests whose client left before the answer was sent",
            disconnects.clone(),
        );
        let active_streams = Gauge::default();
        registry.register(
            "active_streams",
            "WebSocket streams open now",
            active_streams.clone(),
        );
        let cancelled_inputs = Counter::default();
        registry.register(
            "cancelled_inputs",
            "Inputs whose backend work stopped midway because their clients left",
            cancelled_inputs.clone(),
        );
        let idle_streams_closed = Counter::default();
        registry.register(
            "idle_streams_closed",
            "WebSocket streams closed for sending nothing for stream_idle_timeout_s",
            idle_streams_closed.clone(),
        );
        let stream_audio_seconds = Counter::<f64, AtomicU64>::default();
        registry.register(
            "stream_audio_seconds",
            "Audio seconds received over WebSocket streams",
            stream_audio_seconds.clone(),
        );
        let streams_shed = Counter::default();
        registry.register(
            "streams_shed",
            "WebSocket streams ended for falling more than stream_max_lag_s behind",
            streams_shed.clone(),
        );
        let streams_refused_behind = Counter::default();
        registry.register(
            "streams_refused_behind",
            "WebSocket upgrades refused while open streams were more than stream_admit_lag_s behind",
            streams_refused_behind.clone(),
        );
        let connections_open = Gauge::default();
        registry.register(
            "connections_open",
            "HTTP connections open now (max_connections caps it)",
            connections_open.clone(),
        );
        let connections_closed = Family::<CloseReason, Counter>::default();
        registry.register(
            "connections_closed",
            "Connections closed or refused by the server, by reason",
            connections_closed.clone(),
        );
        Self {
            registry,
            requests,
            latency,
            queue_depth,
            decoding,
            pending_audio_bytes,
            queue_seconds,
            group_requests,
            group_inputs,
            backend_seconds,
            audio_seconds,
            rtfx,
            abandoned,
            disconnects,
            cancelled_inputs,
            active_streams,
            idle_streams_closed,
            stream_audio_seconds,
            streams_shed,
            streams_refused_behind,
            connections_open,
            connections_closed,
        }
    }

    /// Counts one connection the server closed for `reason`.
    pub fn connection_closed(&self, reason: &'static str) {
        self.connections_closed
            .get_or_create(&CloseReason { reason })
            .inc();
    }

    /// Records one answered request.
    pub fn observe_request(&self, route: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RouteStatus {
                route: route.to_string(),
                status,
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabel {
                route: route.to_string(),
            })
            .observe(seconds);
    }

    /// Encodes everything in the OpenMetrics text format, with the standard `process_*`
    /// metrics (resident and virtual memory, CPU seconds, open and max file descriptors) where
    /// the OS tells them (Linux `/proc/self`).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        let process = process_metrics();
        if !process.is_empty() {
            // Before the OpenMetrics terminator, which must stay last.
            let end = out.rfind("# EOF").unwrap_or(out.len());
            out.insert_str(end, &process);
        }
        out
    }
}

/// The Prometheus client libraries' standard process metrics, by their usual names (no `dicta_`
/// prefix, so dashboards and `dicta bench service --soak-minutes` find them): from
/// `/proc/self/{stat,limits,fd}` on Linux; empty elsewhere or when `/proc` cannot be read.
fn process_metrics() -> String {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return String::new();
    };
    // Fields after the command name, which is in parentheses and may hold spaces.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return String::new();
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `man 5 proc`: utime 14, stime 15, vsize 23, rss 24 (1-based, counting pid and comm);
    // `fields[0]` is field 3.
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    // Linux reports times in clock ticks of USER_HZ (100 on every architecture Rust supports
    // there) and RSS in pages of the process' page size.
    const TICKS_PER_SECOND: f64 = 100.0;
    let page = page_size();
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: Option<f64>| {
        if let Some(v) = value {
            let sample = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{sample} {v}\n"
            ));
        }
    };
    metric(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        field(24).map(|p| p * page),
    );
    metric(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        field(23),
    );
    metric(
        "process_cpu_seconds",
        "counter",
        "Total user and system CPU time spent in seconds.",
        field(14)
            .zip(field(15))
            .map(|(u, s)| (u + s) / TICKS_PER_SECOND),
    );
    metric(
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
        std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as f64),
    );
    metric(
        "process_max_fds",
        "gauge",
        "Maximum number of open file descriptors.",
        max_fds(),
    );
    out
}

/// The soft limit on open files (`Max open files` in `/proc/self/limits`).
fn max_fds() -> Option<f64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Bytes per memory page: the ELF auxiliary vector's `AT_PAGESZ` (`/proc/self/auxv`), else 4096.
fn page_size() -> f64 {
    const AT_PAGESZ: u64 = 6;
    let word = std::mem::size_of::<usize>();
    std::fs::read("/proc/self/auxv")
        .ok()
        .and_then(|auxv| {
            auxv.chunks_exact(2 * word).find_map(|pair| {
                let num = |b: &[u8]| {
                    let mut buf = [0u8; 8];
                    buf[..word].copy_from_slice(b);
                    u64::from_ne_bytes(buf)
                };
                (num(&pair[..word]) == AT_PAGESZ).then(|| num(&pair[word..]) as f64)
            })
        })
        .unwrap_or(4096.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_text_names_route_status_and_histograms() {
        let m = Metrics::new();
        m.observe_request("/transcribe", 413, 0.02);
        m.group_requests.observe(3.0);
        m.queue_depth.set(2);
        let text = m.encode();
        assert!(text.contains(r#"dicta_http_requests_total{route="/transcribe",status="413"} 1"#));
        assert!(text.contains("dicta_batch_requests_count 1"));
        assert!(text.contains("dicta_queue_depth 2"));
        assert!(text.ends_with("# EOF\n"));
    }

    /// The process metrics agree with what `/proc/self/status` says of this test process.
    #[cfg(target_os = "linux")]
    #[test]
    fn process_metrics_report_this_process() {
        let text = Metrics::new().encode();
        let value = |name: &str| -> f64 {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing in\n{text}"));
            line[name.len() + 1..].parse().unwrap()
        };
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let kib = |field: &str| -> f64 {
            let l = status.lines().find(|l| l.starts_with(field)).unwrap();
            l[field.len()..]
                .trim()
                .trim_end_matches(" kB")
                .trim()
                .parse()
                .unwrap()
        };
        let rss = value("process_resident_memory_bytes");
        // RSS moves a little between the two reads; the units must agree.
        let status_rss = kib("VmRSS:") * 1024.0;
        assert!(
            (rss - status_rss).abs() < 0.1 * status_rss,
            "{rss} vs {status_rss}"
        );
        let vm = value("process_virtual_memory_bytes");
        assert!((vm - kib("VmSize:") * 1024.0).abs() < 0.1 * vm, "{vm}");
        assert!(value("process_cpu_seconds_total") >= 0.0);
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(text.contains("# TYPE process_cpu_seconds counter\n"));
        assert!(text.ends_with("# EOF\n"));
    }
}
