//! The engine worker: one OS thread per loaded model and mode, batching the queued chunks of many
//! sessions into one model call. The batching rule lives in [`BatchQueue`]; this is the thin
//! thread around it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dicta_core::{Error, Result};

use super::queue::BatchQueue;

/// A model the worker can batch: one call takes requests of different sessions and returns one
/// result per request, in order. Implementations hold no per-session state (that travels in the
/// requests), so any sessions' requests can share a call.
pub trait StreamModel: Send + Sync {
    /// What one session sends per call (a chunk, or an audio buffer to re-decode).
    type Request: Send + 'static;
    /// What that session gets back.
    type Output: Send + 'static;

    /// Runs one batched call over `requests` (rows of one batch). Must return exactly one result
    /// per request; an error for the whole call is returned as that error for every row.
    fn forward_chunks(&self, requests: &[Self::Request]) -> Vec<Result<Self::Output>>;
}

/// Runs every call of `inner` inside its own rayon pool of `threads` threads (`None`: as many
/// as rayon's global pool has), so a worker's model kernels use a bounded number of cores and
/// its decoder loop runs on a pool worker: called from the worker's own thread instead, every
/// kernel was handed to the global pool with a wake-up each, dozens per decoder step, while
/// the global pool's workers spun between kernels (see `Engine::load`).
///
/// Errors: `Internal` when the pool cannot be built; `InvalidInput` for `Some(0)`.
pub fn with_threads<R: Send + Sync + 'static, O: Send + 'static>(
    inner: Arc<dyn StreamModel<Request = R, Output = O>>,
    threads: Option<usize>,
) -> Result<Arc<dyn StreamModel<Request = R, Output = O>>> {
    let n = threads.unwrap_or_else(rayon::current_num_threads);
    if n == 0 {
        return Err(Error::invalid_input("stream threads must be >= 1, got 0"));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        // Not "dicta-stream-…": that names the workers themselves (one per model, counted by
        // name in tests/stream_engine_threads.rs).
        .thread_name(|i| format!("dicta-spool-{i}"))
        .build()
        .map_err(|e| Error::internal(format!("stream thread pool: {e}")))?;
    Ok(Arc::new(InPool { inner, pool }))
}

struct InPool<R, O> {
    inner: Arc<dyn StreamModel<Request = R, Output = O>>,
    pool: rayon::ThreadPool,
}

impl<R: Send + Sync + 'static, O: Send + 'static> StreamModel for InPool<R, O> {
    type Request = R;
    type Output = O;

    fn forward_chunks(&self, requests: &[R]) -> Vec<Result<O>> {
        self.pool.install(|| self.inner.forward_chunks(requests))
    }
}

/// Batching settings of a worker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkerConfig {
    /// Most requests (of distinct sessions) per model call (`B`).
    pub max_batch: usize,
    /// How long the first queued request waits for requests of other sessions.
    pub max_wait: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            max_batch: 16,
            max_wait: Duration::from_millis(10),
        }
    }
}

/// Counters of a worker since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Model calls made.
    pub calls: u64,
    /// Requests served (rows over all calls).
    pub rows: u64,
    /// Failed calls (every row got the error).
    pub failed_calls: u64,
    /// Rows of the most recent calls (at most [`WorkerStats::RECENT`] kept, oldest first).
    pub batch_sizes: Vec<usize>,
}

impl WorkerStats {
    /// How many recent batch sizes are kept.
    pub const RECENT: usize = 1024;
}

struct Job<R, O> {
    request: R,
    alive: Arc<AtomicBool>,
    reply: mpsc::SyncSender<Result<O>>,
}

struct State<R, O> {
    queue: BatchQueue<Job<R, O>>,
    closed: bool,
}

struct Shared<R, O> {
    state: Mutex<State<R, O>>,
    wake: Condvar,
    open_sessions: AtomicUsize,
    stats: Mutex<WorkerStats>,
}

impl<R, O> Shared<R, O> {
    fn lock(&self) -> MutexGuard<'_, State<R, O>> {
        // A panic never happens while the lock is held (the model runs unlocked), but stay
        // usable even if it did.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Handle of a worker thread; dropping it stops the thread after the queued requests.
pub struct Worker<R: Send + 'static, O: Send + 'static> {
    shared: Arc<Shared<R, O>>,
    thread: Option<JoinHandle<()>>,
}

impl<R: Send + 'static, O: Send + 'static> Worker<R, O> {
    /// Starts the worker thread for `model`.
    ///
    /// Errors: `Internal` when the OS refuses a thread.
    pub fn spawn(
        model: Arc<dyn StreamModel<Request = R, Output = O>>,
        config: WorkerConfig,
        name: &str,
    ) -> Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: BatchQueue::new(config.max_batch, config.max_wait),
                closed: false,
            }),
            wake: Condvar::new(),
            open_sessions: AtomicUsize::new(0),
            stats: Mutex::new(WorkerStats::default()),
        });
        let thread_shared = Arc::clone(&shared);
        let (started_tx, started) = mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let _ = started_tx.send(());
                run(&thread_shared, model.as_ref())
            })
            .map_err(|e| Error::internal(format!("cannot start stream worker thread: {e}")))?;
        // Return only once the thread runs (named, visible to the OS), so callers observe a
        // started worker.
        started
            .recv()
            .map_err(|_| Error::internal("stream worker thread exited at start"))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Queues `request` of `session` and returns the channel its result arrives on. The request
    /// is skipped if `alive` is false by the time it would run.
    pub fn submit(
        &self,
        session: u64,
        alive: Arc<AtomicBool>,
        request: R,
    ) -> mpsc::Receiver<Result<O>> {
        let (tx, rx) = mpsc::sync_channel(1);
        let job = Job {
            request,
            alive,
            reply: tx,
        };
        self.shared.lock().queue.push(session, job, Instant::now());
        self.shared.wake.notify_one();
        rx
    }

    /// Queues `request` and blocks until its result arrives.
    pub fn call(&self, session: u64, alive: Arc<AtomicBool>, request: R) -> Result<O> {
        self.submit(session, alive, request)
            .recv()
            .map_err(|_| Error::internal("stream worker dropped the request (session closed)"))?
    }

    /// Counts one more open session (sessions that might still send requests).
    pub fn session_opened(&self) {
        self.shared.open_sessions.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts one session less and wakes the worker (a waiting batch may now be complete).
    pub fn session_closed(&self) {
        self.shared.open_sessions.fetch_sub(1, Ordering::SeqCst);
        self.shared.wake.notify_one();
    }

    /// Open sessions.
    pub fn open_sessions(&self) -> usize {
        self.shared.open_sessions.load(Ordering::SeqCst)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> WorkerStats {
        self.shared
            .stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl<R: Send + 'static, O: Send + 'static> Drop for Worker<R, O> {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run<R: Send + 'static, O: Send + 'static>(
    shared: &Shared<R, O>,
    model: &dyn StreamModel<Request = R, Output = O>,
) {
    let mut state = shared.lock();
    loop {
        state.queue.retain(|j| j.alive.load(Ordering::SeqCst));
        let open = shared.open_sessions.load(Ordering::SeqCst);
        let Some(due) = state.queue.due(open) else {
            if state.closed {
                return;
            }
            state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            continue;
        };
        let now = Instant::now();
        if due > now && !state.closed {
            state = shared
                .wake
                .wait_timeout(state, due - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue;
        }
        let batch = state.queue.take_batch();
        drop(state);
        serve(shared, model, batch);
        state = shared.lock();
    }
}

/// Runs one call and hands every waiting session its own result (or the call's error).
fn serve<R: Send + 'static, O: Send + 'static>(
    shared: &Shared<R, O>,
    model: &dyn StreamModel<Request = R, Output = O>,
    batch: Vec<(u64, Job<R, O>)>,
) {
    let n = batch.len();
    let mut requests = Vec::with_capacity(n);
    let mut replies = Vec::with_capacity(n);
    for (_, job) in batch {
        requests.push(job.request);
        replies.push(job.reply);
    }
    tracing::debug!(rows = n, "stream worker call");
    let results = match catch_unwind(AssertUnwindSafe(|| model.forward_chunks(&requests))) {
        Ok(r) if r.len() == n => r,
        Ok(r) => {
            let e = Error::internal(format!(
                "stream model returned {} results for {n} requests",
                r.len()
            ));
            (0..n).map(|_| Err(e.clone())).collect()
        }
        Err(_) => {
            let e = Error::internal("stream model call panicked");
            (0..n).map(|_| Err(e.clone())).collect()
        }
    };
    let failed = results.iter().all(|r| r.is_err());
    if failed {
        tracing::warn!(rows = n, "stream model call failed");
    }
    {
        let mut stats = shared.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.calls += 1;
        stats.rows += n as u64;
        stats.failed_calls += u64::from(failed);
        if stats.batch_sizes.len() >= WorkerStats::RECENT {
            stats.batch_sizes.remove(0);
        }
        stats.batch_sizes.push(n);
    }
    for (reply, result) in replies.into_iter().zip(results) {
        // The session may have gone meanwhile; nobody to tell then.
        let _ = reply.send(result);
    }
}
