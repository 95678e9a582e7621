//! `dicta bench service --soak-minutes N`: a long mixed load on one server, to show that its
//! memory stays flat and nothing fails over time (issue #19).
//!
//! `--soak-streams` WebSocket clients each keep a socket open and play the workload's clips into
//! it at real time, one utterance per clip (`end`, wait for `done`, next clip), reopening the
//! socket every `--soak-stream-utterances` clips so that session set-up and tear-down are
//! exercised too; `--soak-uploads` clients post the clips to the OpenAI route one after another,
//! pausing `--soak-upload-gap-ms` after each answer. Every `--soak-sample-s` the server's RSS
//! (and CPU, when its pid is known) is read and the interval's counts and latencies are printed;
//! at the end `soak.csv`, `soak.md` and `soak.json` are written.

mod report;

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use super::client::{self, ClientConfig, Prepared, Socket, StreamEvents};
use super::{Endpoint, ServiceArgs};
use crate::bench::workload::{read_items, WorkloadInfo};
use report::{to_csv, to_markdown, Counts, Sample, Summary, Tally};

/// Why the soak flags cannot run, if they cannot.
pub fn check_args(args: &ServiceArgs) -> Option<String> {
    let minutes = args.soak_minutes?;
    if !(minutes.is_finite() && minutes > 0.0) {
        return Some("--soak-minutes must be > 0".into());
    }
    if !(args.soak_sample_s.is_finite() && args.soak_sample_s >= 0.5) {
        return Some("--soak-sample-s must be >= 0.5".into());
    }
    if args.soak_streams + args.soak_uploads == 0 {
        return Some("a soak needs --soak-streams or --soak-uploads >= 1".into());
    }
    if args.vs_engine {
        return Some("--vs-engine does not apply to a soak".into());
    }
    None
}

/// One soak against a ready server.
pub struct Run<'a> {
    pub args: &'a ServiceArgs,
    pub rt: &'a tokio::runtime::Runtime,
    pub http: &'a reqwest::Client,
    /// `http://host:port`.
    pub base: &'a str,
    /// The server's process id, when known (spawned, or `--soak-pid`).
    pub pid: Option<u32>,
    pub out: &'a Path,
}

impl Run<'_> {
    /// Runs the soak over the clips of `infos` and writes its outputs.
    pub fn go(&self, infos: &[WorkloadInfo], meta: Value) -> Result<()> {
        let a = self.args;
        let minutes = a.soak_minutes.expect("checked by the caller");
        let cfg = |endpoint| ClientConfig {
            base: self.base.to_string(),
            endpoint,
            encoding: a.wire_encoding,
            realtime: true,
            chunk: Duration::from_millis(a.chunk_ms),
            api_key: a.api_key.clone(),
            timeout: Duration::from_secs_f64(a.client_timeout_s.max(0.001)),
        };
        let (up_cfg, st_cfg) = (cfg(Endpoint::Openai), cfg(Endpoint::Stream));
        let (mut uploads, mut clips) = (Vec::new(), Vec::new());
        for info in infos {
            let items = read_items(&info.manifest)?;
            uploads.extend(client::prepare(&info.manifest, &items, &up_cfg)?);
            clips.extend(client::prepare(&info.manifest, &items, &st_cfg)?);
        }
        anyhow::ensure!(!clips.is_empty(), "the soak workload has no clips");
        let audio: f64 = clips.iter().map(|p| p.audio_seconds).sum();
        let mut probe = self.rt.block_on(Probe::new(self.pid, self.http, &up_cfg));
        eprintln!(
            "dicta bench service: soak of {minutes} min: {} real-time stream(s), {} upload client(s) \
             (gap {} ms), {} clips ({audio:.0} s of audio), a sample every {} s; RSS from {}",
            a.soak_streams,
            a.soak_uploads,
            a.soak_upload_gap_ms,
            clips.len(),
            a.soak_sample_s,
            probe.source()
        );
        let load = Load {
            up_cfg,
            st_cfg,
            uploads: Arc::new(uploads),
            clips: Arc::new(clips),
            streams: a.soak_streams,
            upload_clients: a.soak_uploads,
            gap: Duration::from_millis(a.soak_upload_gap_ms),
            per_socket: a.soak_stream_utterances,
        };
        let duration = Duration::from_secs_f64(minutes * 60.0);
        let interval = Duration::from_secs_f64(a.soak_sample_s);
        let (samples, totals) = self.rt.block_on(load.run(
            self.http,
            &mut probe,
            duration,
            interval,
            a.client_timeout_s,
        ));
        let summary = Summary::of(&samples, &totals);
        eprintln!("dicta bench service: soak {}", summary.line());
        let params = json!({
            "minutes": minutes,
            "streams": a.soak_streams,
            "stream_utterances_per_socket": a.soak_stream_utterances,
            "uploads": a.soak_uploads,
            "upload_gap_ms": a.soak_upload_gap_ms,
            "sample_s": a.soak_sample_s,
            "chunk_ms": a.chunk_ms,
            "rss_source": probe.source(),
            "clips": load.clips.len(),
            "clip_audio_seconds": audio,
        });
        let doc = json!({"meta": meta, "soak": params, "workloads": infos,
                         "samples": samples, "summary": summary});
        let out = self.out;
        let write = |name: &str, text: String| {
            let path = out.join(name);
            fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
        };
        write("soak.json", serde_json::to_string_pretty(&doc)? + "\n")?;
        write("soak.csv", to_csv(&samples))?;
        let names: Vec<&str> = infos.iter().map(|i| i.name.as_str()).collect();
        let head = format!(
            "Load: {} real-time stream(s) ({} utterances per socket), {} upload client(s) on the \
             OpenAI route (gap {} ms), workload {} ({} clips, {audio:.0} s of audio), a sample \
             every {} s, RSS from {}.\n\n",
            a.soak_streams,
            a.soak_stream_utterances,
            a.soak_uploads,
            a.soak_upload_gap_ms,
            names.join(","),
            load.clips.len(),
            a.soak_sample_s,
            probe.source()
        );
        write("soak.md", head + &to_markdown(&samples, &summary))?;
        Ok(())
    }
}

/// What the clients run and how.
struct Load {
    up_cfg: ClientConfig,
    st_cfg: ClientConfig,
    /// The clips as OpenAI uploads.
    uploads: Arc<Vec<Prepared>>,
    /// The same clips as stream frames.
    clips: Arc<Vec<Prepared>>,
    streams: usize,
    upload_clients: usize,
    gap: Duration,
    per_socket: usize,
}

impl Load {
    /// Runs the clients for `duration`, sampling every `interval` (and once before the load
    /// starts, and once after the clients have finished their last request); returns the samples
    /// and the whole run's tally.
    async fn run(
        &self,
        http: &reqwest::Client,
        probe: &mut Probe,
        duration: Duration,
        interval: Duration,
        client_timeout_s: f64,
    ) -> (Vec<Sample>, Tally) {
        let tally = Arc::new(Mutex::new(Tally::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut totals = Tally::default();
        let t0 = Instant::now();
        let mut samples = vec![probe.sample(0, 0.0, Tally::default()).await];
        samples[0].print();
        let mut clients = tokio::task::JoinSet::new();
        let n = self.clips.len();
        for s in 0..self.streams {
            let (cfg, clips, tally, stop) = (
                self.st_cfg.clone(),
                self.clips.clone(),
                tally.clone(),
                stop.clone(),
            );
            let (first, per_socket) = (s * n / self.streams, self.per_socket);
            clients.spawn(async move {
                stream_client(&cfg, &clips, first, per_socket, &tally, &stop).await
            });
        }
        for u in 0..self.upload_clients {
            let (http, cfg, uploads, tally, stop, gap) = (
                http.clone(),
                self.up_cfg.clone(),
                self.uploads.clone(),
                tally.clone(),
                stop.clone(),
                self.gap,
            );
            // Half a workload away from the streams: the two kinds do not play the same clip.
            let first = (u * n / self.upload_clients + n / 2) % n;
            clients.spawn(async move {
                let mut next = first;
                while !stop.load(Ordering::Relaxed) {
                    let rec = client::timed(&http, &cfg, &uploads[next % uploads.len()]).await;
                    next += 1;
                    tally.lock().expect("tally lock").upload(rec);
                    if !gap.is_zero() {
                        tokio::time::sleep(gap).await;
                    }
                }
            });
        }
        let take = |totals: &mut Tally| {
            let t = std::mem::take(&mut *tally.lock().expect("tally lock"));
            totals.merge(&t);
            t
        };
        let mut k = 1;
        // No sample within half an interval of the end: the final one follows right after.
        while interval.as_secs_f64() * (k as f64 + 0.5) < duration.as_secs_f64() {
            tokio::time::sleep_until((t0 + interval * k as u32).into()).await;
            let t = take(&mut totals);
            samples.push(probe.sample(k, t0.elapsed().as_secs_f64(), t).await);
            samples.last().expect("pushed").print();
            k += 1;
        }
        tokio::time::sleep_until((t0 + duration).into()).await;
        // Requests and utterances under way finish (and count) before the last sample.
        stop.store(true, Ordering::Relaxed);
        let drain = Duration::from_secs_f64(client_timeout_s.max(1.0) + 5.0);
        let drained = tokio::time::timeout(drain, async {
            while let Some(r) = clients.join_next().await {
                r.expect("a soak client panicked");
            }
        })
        .await;
        if drained.is_err() {
            eprintln!(
                "dicta bench service: soak clients still busy {drain:?} after the end; abandoned"
            );
        }
        let t = take(&mut totals);
        samples.push(probe.sample(k, t0.elapsed().as_secs_f64(), t).await);
        samples.last().expect("pushed").print();
        (samples, totals)
    }
}

/// One stream client: sockets opened one after another until `stop`, each carrying up to
/// `per_socket` utterances (0: as many as the server's `max_stream_seconds` allows).
async fn stream_client(
    cfg: &ClientConfig,
    clips: &[Prepared],
    first: usize,
    per_socket: usize,
    tally: &Mutex<Tally>,
    stop: &AtomicBool,
) {
    let mut next = first;
    let fail = |e: String| tally.lock().expect("tally lock").stream_failed(e);
    while !stop.load(Ordering::Relaxed) {
        let (mut tx, mut rx) = match client::connect(cfg, "/v1/stream?language=en").await {
            Ok(ws) => ws.split(),
            Err((_, e)) => {
                fail(e);
                // A server that refuses sockets is not retried in a tight loop.
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // `ready` comes first; its `max_stream_seconds` caps the audio of one socket.
        let limit = match tokio::time::timeout(Duration::from_secs(30), rx.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => serde_json::from_str::<Value>(&t)
                .ok()
                .and_then(|v| v["max_stream_seconds"].as_f64())
                .unwrap_or(f64::INFINITY),
            other => {
                fail(format!("no `ready` message after connecting: {other:?}"));
                continue;
            }
        };
        let config = json!({"type": "config", "encoding": cfg.encoding.as_str(),
                            "sample_rate": 16000, "language": "en"});
        if let Err(e) = tx.send(Message::text(config.to_string())).await {
            fail(format!("sending config: {e}"));
            continue;
        }
        let (mut used, mut count) = (0.0, 0);
        while !stop.load(Ordering::Relaxed) && (per_socket == 0 || count < per_socket) {
            let p = &clips[next % clips.len()];
            // A margin of a second under the limit: the server counts resampled audio.
            if count > 0 && used + p.audio_seconds > limit - 1.0 {
                break;
            }
            next += 1;
            count += 1;
            used += p.audio_seconds;
            let frames = p
                .frames()
                .expect("clips are prepared for the stream endpoint");
            let got = tokio::time::timeout(cfg.timeout, utterance(cfg, &mut tx, &mut rx, frames))
                .await
                .unwrap_or_else(|_| Err(format!("no `done` within {} s", cfg.timeout.as_secs())));
            match got {
                Ok((text, finalize)) if !text.is_empty() => {
                    let mut t = tally.lock().expect("tally lock");
                    t.streams_ok += 1;
                    t.finalize.push(finalize);
                    t.audio_s += p.audio_seconds;
                }
                // The socket is fine: the next clip goes on it.
                Ok(_) => fail(format!("{}: empty transcript", p.id)),
                Err(e) => {
                    fail(format!("{}: {e}", p.id));
                    break;
                }
            }
        }
        let _ = tx.send(Message::Close(None)).await;
    }
}

/// One utterance on an open socket: the frames at real time, `end`, then events up to `done`;
/// returns the finals joined and the seconds from `end` to `done`.
async fn utterance(
    cfg: &ClientConfig,
    tx: &mut SplitSink<Socket, Message>,
    rx: &mut SplitStream<Socket>,
    frames: &[Bytes],
) -> std::result::Result<(String, f64), String> {
    let start = Instant::now();
    let chunk = cfg.chunk;
    let send = async {
        for (k, frame) in frames.iter().enumerate() {
            tokio::time::sleep_until((start + chunk * k as u32).into()).await;
            tx.send(Message::binary(frame.clone())).await?;
        }
        // The last frame's audio has "happened" only once its duration has passed.
        tokio::time::sleep_until((start + chunk * frames.len() as u32).into()).await;
        tx.send(Message::text(json!({"type": "end"}).to_string()))
            .await?;
        Ok::<_, tokio_tungstenite::tungstenite::Error>(start.elapsed().as_secs_f64())
    };
    let receive = StreamEvents::read(rx, start);
    let (sent, ev) = tokio::join!(send, receive);
    match (sent, ev.error, ev.done) {
        (Err(e), _, _) => Err(format!("sending: {e}")),
        (_, Some(e), _) => Err(e),
        (Ok(_), None, None) => Err("the socket ended without `done`".into()),
        (Ok(ended), None, Some(done)) => Ok((ev.finals.join(" "), (done - ended).max(0.0))),
    }
}

/// Where the server's memory is read.
struct Probe {
    pid: Option<u32>,
    /// `GET /metrics` when no pid is known and the server exports its RSS there.
    metrics: Option<(reqwest::Client, ClientConfig)>,
    /// CPU seconds of the server at the last sample, and when it was read.
    last_cpu: Option<(f64, Instant)>,
}

impl Probe {
    async fn new(pid: Option<u32>, http: &reqwest::Client, cfg: &ClientConfig) -> Self {
        let mut p = Probe {
            pid,
            metrics: None,
            last_cpu: None,
        };
        if pid.is_none() {
            p.metrics = Some((http.clone(), cfg.clone()));
            if p.metrics_rss().await.is_none() {
                eprintln!(
                    "dicta bench service: no process_resident_memory_bytes on {}/metrics and no \
                     --soak-pid: RSS is not sampled",
                    cfg.base
                );
                p.metrics = None;
            }
        }
        p
    }

    fn source(&self) -> String {
        match (self.pid, &self.metrics) {
            (Some(pid), _) => format!("/proc/{pid}/status"),
            (None, Some((_, cfg))) => format!("{}/metrics", cfg.base),
            (None, None) => "nowhere".into(),
        }
    }

    async fn sample(&mut self, sample: usize, t_s: f64, t: Tally) -> Sample {
        let rss_mb = match self.pid {
            Some(pid) => proc_rss_kib(pid).map(|k| k / 1024.0),
            None => self.metrics_rss().await.map(|b| b / 1048576.0),
        };
        let now = Instant::now();
        let cpu = self.pid.and_then(proc_cpu_seconds);
        let cpu_cores = match (cpu, self.last_cpu) {
            (Some(c), Some((c0, at))) if now > at => Some((c - c0) / (now - at).as_secs_f64()),
            _ => None,
        };
        self.last_cpu = cpu.map(|c| (c, now));
        Sample {
            sample,
            t_s,
            rss_mb,
            cpu_cores,
            counts: Counts::of(&t),
            audio_s: t.audio_s,
            errors: t.errors,
        }
    }

    /// `process_resident_memory_bytes` from the server's `/metrics`, in bytes.
    async fn metrics_rss(&self) -> Option<f64> {
        let (http, cfg) = self.metrics.as_ref()?;
        let mut req = http.get(format!("{}/metrics", cfg.base));
        if let Some(k) = &cfg.api_key {
            req = req.bearer_auth(k);
        }
        let text = req.send().await.ok()?.text().await.ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .and_then(|v| v.trim().parse().ok())
    }
}

/// `VmRSS` of a process, KiB.
fn proc_rss_kib(pid: u32) -> Option<f64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// User + system CPU seconds of a process so far.
fn proc_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks / hz as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_readers_see_this_process() {
        let me = std::process::id();
        assert!(proc_rss_kib(me).unwrap() > 0.0);
        assert!(proc_cpu_seconds(me).unwrap() >= 0.0);
    }
}
