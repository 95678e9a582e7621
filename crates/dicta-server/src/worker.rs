//! The batcher thread: a thin loop around [`Coalescer`] that owns every backend call.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Instant;

use dicta_core::{Error, ErrorKind, Result, Stats, Transcript};
use tokio::sync::{oneshot, OwnedSemaphorePermit};

use crate::backend::{Backend, BackendInput};
use crate::coalesce::{split_results, Coalescer, Group, GroupLimits, Pending};
use crate::metrics::Metrics;

/// A request waiting for the batcher.
pub(crate) struct Job {
    /// The server's id for the request (independent of the caller's input ids).
    pub request_id: String,
    /// Decoded inputs.
    pub inputs: Vec<BackendInput>,
    /// When the job entered the queue.
    pub enqueued: Instant,
    /// Where the answer goes; closed when the client left.
    pub reply: oneshot::Sender<JobReply>,
    /// Admission slot, released as soon as the batcher takes the job.
    pub permit: OwnedSemaphorePermit,
    /// The request's share of the server-wide decoded-audio budget, held until answered.
    pub reservation: crate::audio::Reservation,
}

impl Pending for Job {
    fn input_count(&self) -> usize {
        self.inputs.len()
    }
    fn is_abandoned(&self) -> bool {
        self.reply.is_closed()
    }
}

/// The batcher's answer to one job.
#[derive(Debug)]
pub(crate) struct JobReply {
    /// One result per input of the job, in order.
    pub results: Vec<Result<Transcript>>,
    /// Seconds between enqueueing and the start of the backend call.
    pub queue_seconds: f64,
    /// Requests in the backend call.
    pub group_requests: usize,
    /// Inputs in the backend call.
    pub group_inputs: usize,
    /// Statistics of the whole backend call.
    pub stats: Arc<Stats>,
}

/// What the batcher needs besides its queue.
pub(crate) struct WorkerSetup {
    pub backend: Arc<dyn Backend>,
    pub limits: GroupLimits,
    pub wait: std::time::Duration,
    pub metrics: Arc<Metrics>,
    pub ready: Arc<AtomicBool>,
    /// Whether this batcher warms the backend up and sets `ready` (a model's second lane does
    /// not: the first one did).
    pub warm_up: bool,
}

/// Starts the batcher thread. It warms the backend up (reporting the result on `warmed`),
/// then serves groups until every sender of `rx` is gone and the queue is drained.
pub(crate) fn spawn(
    setup: WorkerSetup,
    rx: mpsc::Receiver<Job>,
    warmed: oneshot::Sender<Result<()>>,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("dicta-batcher".into())
        .spawn(move || run(setup, rx, warmed))
        .map_err(|e| Error::internal(format!("cannot start the batcher thread: {e}")))
}

fn run(setup: WorkerSetup, mut rx: mpsc::Receiver<Job>, warmed: oneshot::Sender<Result<()>>) {
    if setup.warm_up {
        if !warm(&setup, warmed) {
            return;
        }
    } else {
        let _ = warmed.send(Ok(()));
    }
    let mut coalescer = Coalescer::new(setup.limits, setup.wait);
    while let Some(mut group) = coalescer.next_group(&mut rx) {
        group.drop_abandoned();
        if group.skipped > 0 {
            tracing::info!(count = group.skipped, "dropped requests whose client left");
            setup.metrics.abandoned.inc_by(group.skipped as u64);
        }
        if !group.items.is_empty() {
            run_group(&setup, group);
        }
    }
    tracing::info!("batcher stopped");
}

/// Warms the backend up and reports on `warmed`; false when it failed (the batcher then stops,
/// and the server with it).
fn warm(setup: &WorkerSetup, warmed: oneshot::Sender<Result<()>>) -> bool {
    let started = Instant::now();
    let warm = catch_unwind(AssertUnwindSafe(|| setup.backend.warm_up())).unwrap_or_else(|p| {
        Err(Error::internal(format!(
            "warm-up panicked: {}",
            panic_text(&p)
        )))
    });
    if let Err(e) = warm {
        tracing::error!(error = %e, "backend warm-up failed");
        let _ = warmed.send(Err(e));
        return false;
    }
    setup.ready.store(true, Ordering::Release);
    tracing::info!(
        model = %setup.backend.model_name(),
        seconds = started.elapsed().as_secs_f64(),
        "backend warmed up; ready"
    );
    let _ = warmed.send(Ok(()));
    true
}

/// One backend call for a group, and the answers back to each job.
fn run_group(setup: &WorkerSetup, group: Group<Job>) {
    let started = Instant::now();
    let group_requests = group.items.len();
    let mut counts = Vec::with_capacity(group_requests);
    let mut replies = Vec::with_capacity(group_requests);
    let mut inputs = Vec::with_capacity(group.input_count());
    // The samples stay in memory until the backend call returns; so do their reservations.
    let mut reservations = Vec::with_capacity(group_requests);
    for job in group.items {
        drop(job.permit);
        reservations.push(job.reservation);
        let queue_seconds = started.duration_since(job.enqueued).as_secs_f64();
        setup.metrics.queue_seconds.observe(queue_seconds);
        counts.push(job.inputs.len());
        inputs.extend(job.inputs);
        replies.push((job.request_id, job.reply, queue_seconds));
    }
    let group_inputs = inputs.len();
    let audio_seconds = inputs.iter().map(|i| i.samples.len()).sum::<usize>() as f64
        / f64::from(dicta_audio::SAMPLE_RATE);
    let ids: Vec<&str> = replies.iter().map(|r| r.0.as_str()).collect();
    tracing::debug!(requests = group_requests, inputs = group_inputs, request_ids = ?ids, "backend call");

    let outcome = catch_unwind(AssertUnwindSafe(|| setup.backend.transcribe(inputs)));
    drop(reservations);
    let wall = started.elapsed().as_secs_f64();
    let (per_job, stats) = match outcome {
        Ok(out) if out.results.len() == group_inputs => {
            (split_results(&counts, out.results), out.stats)
        }
        Ok(out) => {
            let e = Error::internal(format!(
                "the backend returned {} results for {} inputs",
                out.results.len(),
                group_inputs
            ));
            (fail_all(&counts, &e), out.stats)
        }
        Err(p) => {
            let e = Error::internal(format!("the backend panicked: {}", panic_text(&p)));
            (fail_all(&counts, &e), Stats::default())
        }
    };
    observe_group(setup, group_requests, group_inputs, audio_seconds, wall);
    let cancelled = per_job
        .iter()
        .flatten()
        .filter(|r| r.as_ref().is_err_and(|e| e.kind == ErrorKind::Timeout))
        .count();
    if cancelled > 0 {
        tracing::info!(
            inputs = cancelled,
            "backend work cancelled: its clients left"
        );
        setup.metrics.cancelled_inputs.inc_by(cancelled as u64);
    }
    let stats = Arc::new(stats);
    for ((request_id, reply, queue_seconds), results) in replies.into_iter().zip(per_job) {
        let answer = JobReply {
            results,
            queue_seconds,
            group_requests,
            group_inputs,
            stats: stats.clone(),
        };
        if reply.send(answer).is_err() {
            tracing::info!(request_id, "client left before its result was ready");
        }
    }
}

fn observe_group(setup: &WorkerSetup, requests: usize, inputs: usize, audio: f64, wall: f64) {
    let m = &setup.metrics;
    m.group_requests.observe(requests as f64);
    m.group_inputs.observe(inputs as f64);
    m.backend_seconds.observe(wall);
    m.audio_seconds.inc_by(audio);
    if wall > 0.0 && audio > 0.0 {
        m.rtfx.observe(audio / wall);
    }
}

fn fail_all(counts: &[usize], e: &Error) -> Vec<Vec<Result<Transcript>>> {
    counts
        .iter()
        .map(|&n| (0..n).map(|_| Err(e.clone())).collect())
        .collect()
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}
