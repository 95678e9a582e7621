//! The HTTP listener: accepts connections and serves the router on each (HTTP/1.1 with
//! WebSocket upgrades), with the limits `axum::serve` does not have:
//!
//! - a header timeout (`header_timeout_s`): a connection that has not sent a whole request
//!   head this long after it opened, or after its previous response, is closed, which bounds
//!   slow-header clients and idle keep-alive connections alike;
//! - a body timeout (`body_timeout_s`, `min_body_rate_kib`): a body that stalls, or averages
//!   too slow a rate, ends the request with 408 ([`BodyDeadline`], answered by the router's
//!   request context) and its connection;
//! - a cap on open connections (`max_connections`): at the cap a new connection closes the
//!   oldest idle one (no request in flight, no response body still being sent; one that a
//!   request reached meanwhile answers it, then closes), so a flood of idle sockets cannot
//!   lock out `/health`; with none idle the new one is refused at once (the kernel's backlog
//!   does not fill up behind it).
//!
//! Shutdown is graceful as with `axum::serve`: no new connections, in-flight requests finish,
//! idle connections close.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::Router;
use futures_util::FutureExt as _;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{watch, Notify};
use tower::Service as _;

use crate::config::ServerConfig;
use crate::metrics::Metrics;

/// Serves `router` on `listener` until `shutdown` completes, then until every connection is
/// done.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    cfg: &ServerConfig,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let limits = Arc::new(Limits::from(cfg));
    let table = Arc::new(Table::new(cfg.max_connections, metrics.clone()));
    // Dropping the receiver tells the accept loop and every connection to wind down.
    let (signal_tx, signal_rx) = watch::channel(());
    tokio::spawn(async move {
        shutdown.await;
        drop(signal_rx);
    });
    // Each connection holds a receiver; the server is done when none is left.
    let (close_tx, close_rx) = watch::channel(());
    loop {
        let (tcp, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
            () = signal_tx.closed() => break,
        };
        let Some(slot) = table.admit() else {
            metrics.connection_closed("refused");
            drop(tcp);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(serve_connection(
            tcp,
            router.clone(),
            limits.clone(),
            metrics.clone(),
            slot,
            signal_tx.clone(),
            close_rx.clone(),
        ));
    }
    drop(close_rx);
    drop(listener);
    close_tx.closed().await;
}

/// Per-connection errors are the client's; others (out of file descriptors above all) would
/// spin the loop, so it pauses briefly, as `axum::serve` does.
async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; pausing the listener");
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// The timeouts each connection applies.
struct Limits {
    header: Duration,
    body_stall: Duration,
    /// Bytes per second.
    body_min_rate: f64,
}

impl From<&ServerConfig> for Limits {
    fn from(cfg: &ServerConfig) -> Self {
        Self {
            header: cfg.header_timeout(),
            body_stall: cfg.body_timeout(),
            body_min_rate: cfg.min_body_rate_kib * 1024.0,
        }
    }
}

async fn serve_connection(
    tcp: tokio::net::TcpStream,
    router: Router,
    limits: Arc<Limits>,
    metrics: Arc<Metrics>,
    slot: Slot,
    signal_tx: watch::Sender<()>,
    close_rx: watch::Receiver<()>,
) {
    let busy = slot.busy.clone();
    let body_limits = limits.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let in_flight = InFlight::enter(busy.clone());
        let deadline = BodyDeadline::default();
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(deadline.clone());
        let body = TimedBody::new(body, &body_limits, deadline);
        let mut router = router.clone();
        async move {
            let response = router.call(hyper::Request::from_parts(parts, body)).await;
            // The request stays in flight until its response body is written out (or dropped):
            // a streamed or slowly read body is not idle.
            response.map(|r| {
                r.map(|body| {
                    axum::body::Body::new(HeldBody {
                        inner: body,
                        _in_flight: in_flight,
                    })
                })
            })
        }
    });
    // HTTP/1.1 only: hyper's header timer starts as the connection opens (the auto builder
    // would first wait, untimed, for bytes to tell HTTP/1 from HTTP/2), and no client of this
    // server speaks cleartext HTTP/2 (gRPC has its own listener).
    let mut conn = pin!(hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header)
        .serve_connection(TokioIo::new(tcp), service)
        .with_upgrades());
    let mut stopping = pin!(signal_tx.closed().fuse());
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    if e.is_timeout() {
                        metrics.connection_closed("header_timeout");
                    }
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            () = &mut stopping => conn.as_mut().graceful_shutdown(),
            // Evicted to make room at `max_connections`. hyper closes a connection at once when
            // it is between requests (waiting for, or part way through, a request head), and
            // otherwise after the response in progress: the accept loop saw no request in
            // flight, but one may have begun since, or a response may still be flushing.
            () = slot.evict.notified() => conn.as_mut().graceful_shutdown(),
        }
    }
    drop(slot);
    drop(close_rx);
}

/// The open connections, oldest first, with whether each has a request in flight.
struct Table {
    entries: Mutex<BTreeMap<u64, Entry>>,
    next: AtomicU64,
    cap: usize,
    metrics: Arc<Metrics>,
}

struct Entry {
    busy: Arc<AtomicUsize>,
    evict: Arc<Notify>,
}

/// A connection's place in the [`Table`]; leaves it when dropped.
struct Slot {
    id: u64,
    table: Arc<Table>,
    busy: Arc<AtomicUsize>,
    evict: Arc<Notify>,
}

impl Table {
    fn new(cap: usize, metrics: Arc<Metrics>) -> Self {
        Self {
            entries: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
            cap,
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a new connection: free, or made by evicting the oldest idle connection;
    /// `None` when every connection has a request in flight.
    fn admit(self: &Arc<Self>) -> Option<Slot> {
        let mut entries = self.lock();
        if entries.len() >= self.cap {
            let idle = entries
                .iter()
                .find(|(_, e)| e.busy.load(Ordering::Acquire) == 0)
                .map(|(&id, _)| id)?;
            if let Some(e) = entries.remove(&idle) {
                // A permit is kept if the connection is not waiting yet.
                e.evict.notify_one();
                self.metrics.connection_closed("evicted");
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (busy, evict) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        entries.insert(
            id,
            Entry {
                busy: busy.clone(),
                evict: evict.clone(),
            },
        );
        self.metrics.connections_open.set(entries.len() as i64);
        Some(Slot {
            id,
            table: self.clone(),
            busy,
            evict,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut entries = self.table.lock();
        entries.remove(&self.id);
        self.table
            .metrics
            .connections_open
            .set(entries.len() as i64);
    }
}

/// Marks a connection busy while one of its requests is being answered.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn enter(busy: Arc<AtomicUsize>) -> Self {
        busy.fetch_add(1, Ordering::AcqRel);
        Self(busy)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request [`InFlight`] until it is done with.
struct HeldBody {
    inner: axum::body::Body,
    _in_flight: InFlight,
}

impl Body for HeldBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Set when a request's body ran out of time; the request context answers 408 then, whatever
/// the handler made of the failed read.
#[derive(Debug, Clone, Default)]
pub(crate) struct BodyDeadline(Arc<AtomicBool>);

impl BodyDeadline {
    /// Whether the body timed out.
    pub fn passed(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The body error a timeout gives the handler.
#[derive(Debug)]
struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body arrived too slowly")
    }
}

impl std::error::Error for BodyTimedOut {}

/// A request body that fails once no bytes came for `stall`, or once, `stall` after its first
/// read, it averages less than `min_rate` bytes per second. The clock starts at the handler's
/// first read, so time spent before (the gate, admission) is not the client's.
struct TimedBody {
    inner: Incoming,
    stall: Duration,
    min_rate: f64,
    deadline: BodyDeadline,
    sleep: Pin<Box<tokio::time::Sleep>>,
    started: Option<tokio::time::Instant>,
    bytes: u64,
}

impl TimedBody {
    fn new(inner: Incoming, limits: &Limits, deadline: BodyDeadline) -> Self {
        Self {
            inner,
            stall: limits.body_stall,
            min_rate: limits.body_min_rate,
            deadline,
            sleep: Box::pin(tokio::time::sleep(limits.body_stall)),
            started: None,
            bytes: 0,
        }
    }

    fn fail(&mut self) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        self.deadline.0.store(true, Ordering::Release);
        Poll::Ready(Some(Err(Box::new(BodyTimedOut))))
    }
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.deadline.passed() {
            return this.fail();
        }
        let now = tokio::time::Instant::now();
        let started = match this.started {
            Some(t) => t,
            None => {
                this.started = Some(now);
                this.sleep.as_mut().reset(now + this.stall);
                now
            }
        };
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.bytes += data.len() as u64;
                }
                let elapsed = now - started;
                let slow = this.min_rate > 0.0
                    && elapsed > this.stall
                    && (this.bytes as f64) < this.min_rate * elapsed.as_secs_f64();
                if slow {
                    return this.fail();
                }
                this.sleep.as_mut().reset(now + this.stall);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                if this.sleep.as_mut().poll(cx).is_ready() {
                    return this.fail();
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(cap: usize) -> Arc<Table> {
        Arc::new(Table::new(cap, Arc::new(Metrics::new())))
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_makes_room() {
        let t = table(2);
        let a = t.admit().unwrap();
        let b = t.admit().unwrap();
        let _busy = InFlight::enter(a.busy.clone());
        // `a` is busy, so `b` (the oldest idle) is evicted.
        let c = t.admit().unwrap();
        assert_eq!(
            t.lock().keys().copied().collect::<Vec<_>>(),
            [a.id, c.id],
            "b left the table"
        );
        // Its task is told (the permit waits until it listens).
        assert!(b.evict.notified().now_or_never().is_some());
        drop(b);
        assert_eq!(
            t.lock().len(),
            2,
            "an evicted slot's drop removes nothing else"
        );
    }

    /// One connection served on a loopback socket: its address, its slot's eviction and busy
    /// count, and the task serving it.
    async fn one_connection(
        router: Router,
    ) -> (
        std::net::SocketAddr,
        Arc<Notify>,
        Arc<AtomicUsize>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let slot = table(1).admit().unwrap();
        let (evict, busy) = (slot.evict.clone(), slot.busy.clone());
        let limits = Arc::new(Limits::from(&ServerConfig::default()));
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let metrics = Arc::new(Metrics::new());
            let (signal_tx, _signal_rx) = watch::channel(());
            let (_close_tx, close_rx) = watch::channel(());
            serve_connection(tcp, router, limits, metrics, slot, signal_tx, close_rx).await;
        });
        (addr, evict, busy, server)
    }

    /// Everything the server sends until it closes the connection (5 s at most).
    async fn read_until_closed(client: &mut tokio::net::TcpStream) -> String {
        use tokio::io::AsyncReadExt;
        let mut reply = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut reply));
        read.await
            .expect("the server closes the connection")
            .unwrap();
        String::from_utf8_lossy(&reply).into_owned()
    }

    /// The accept loop evicts a connection it saw idle; a request that began on it meanwhile
    /// is answered before the connection closes, not dropped with it.
    #[tokio::test]
    async fn an_eviction_racing_a_request_lets_the_request_finish() {
        use tokio::io::AsyncWriteExt;
        let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let handler = {
            let (entered, release) = (entered.clone(), release.clone());
            move || async move {
                entered.notify_one();
                release.notified().await;
                "done"
            }
        };
        let router = Router::new().route("/slow", axum::routing::get(handler));
        let (addr, evict, _busy, server) = one_connection(router).await;
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET /slow HTTP/1.1\r\nhost: dicta\r\n\r\n")
            .await
            .unwrap();
        entered.notified().await;
        evict.notify_one();
        // Let the connection's task take the eviction before the handler answers.
        tokio::time::sleep(Duration::from_millis(50)).await;
        release.notify_one();
        let reply = read_until_closed(&mut client).await;
        assert!(
            reply.starts_with("HTTP/1.1 200") && reply.ends_with("done"),
            "{reply:?}"
        );
        server.await.unwrap();
    }

    /// A response whose body is still being sent keeps its connection busy, and an eviction
    /// lets the body finish before the connection closes.
    #[tokio::test]
    async fn an_eviction_during_a_streamed_body_lets_the_body_finish() {
        use tokio::io::AsyncWriteExt;
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        let rx = Arc::new(Mutex::new(Some(rx)));
        let handler = move || {
            let rx = rx.lock().unwrap().take().expect("one request");
            async move {
                let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
                });
                axum::body::Body::from_stream(stream)
            }
        };
        let router = Router::new().route("/stream", axum::routing::get(handler));
        let (addr, evict, busy, server) = one_connection(router).await;
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET /stream HTTP/1.1\r\nhost: dicta\r\n\r\n")
            .await
            .unwrap();
        tx.send(Bytes::from_static(b"first ")).await.unwrap();
        // The handler has returned; its body is not done.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            busy.load(Ordering::Acquire),
            1,
            "a streaming response is busy"
        );
        evict.notify_one();
        tokio::time::sleep(Duration::from_millis(50)).await;
        tx.send(Bytes::from_static(b"second")).await.unwrap();
        drop(tx);
        let reply = read_until_closed(&mut client).await;
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply:?}");
        assert!(
            reply.contains("first ") && reply.contains("second"),
            "{reply:?}"
        );
        assert_eq!(busy.load(Ordering::Acquire), 0);
        server.await.unwrap();
    }

    /// An evicted connection that is between requests closes at once: fresh (nothing sent),
    /// idle after a response, or part way through sending a request head.
    #[tokio::test]
    async fn an_evicted_connection_between_requests_closes_at_once() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        for case in ["fresh", "idle", "partial head"] {
            let (addr, evict, _busy, server) = one_connection(router.clone()).await;
            let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
            if case == "fresh" {
                // hyper has not seen a request on it yet.
                tokio::time::sleep(Duration::from_millis(50)).await;
            } else {
                client
                    .write_all(b"GET / HTTP/1.1\r\nhost: dicta\r\n\r\n")
                    .await
                    .unwrap();
                let mut first = [0u8; 256];
                let n = client.read(&mut first).await.unwrap();
                assert!(
                    first[..n].ends_with(b"ok"),
                    "{:?}",
                    String::from_utf8_lossy(&first[..n])
                );
            }
            if case == "partial head" {
                client.write_all(b"GET / HTTP/1.1\r\nho").await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let started = std::time::Instant::now();
            evict.notify_one();
            let rest = read_until_closed(&mut client).await;
            assert!(rest.is_empty(), "{case}: {rest:?}");
            // Well under the 10 s header timeout: the eviction closed it.
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{case}: {:?}",
                started.elapsed()
            );
            server.await.unwrap();
        }
    }

    #[test]
    fn at_the_cap_with_every_connection_busy_a_new_one_is_refused() {
        let t = table(1);
        let a = t.admit().unwrap();
        let busy = InFlight::enter(a.busy.clone());
        assert!(t.admit().is_none());
        drop(busy);
        assert!(t.admit().is_some(), "idle again, so it can be evicted");
    }
}
