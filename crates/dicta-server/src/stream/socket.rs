//! The loop of one WebSocket session (see the module docs of [`crate::stream`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use dicta_core::{Error, ErrorKind, Result};
use tokio::sync::OwnedSemaphorePermit;

use super::load::LagTracker;
use super::protocol::{decode_frame, ClientMessage, ServerMessage, StreamSettings};
use super::resample::StreamResampler;
use crate::backend::{StreamEvent, StreamSession};
use crate::metrics::Metrics;
use crate::routes::Shared;

/// Close codes (RFC 6455): going away, policy violation, internal error, try later, too big.
const CLOSE_GOING_AWAY: u16 = 1001;
const CLOSE_POLICY: u16 = 1008;
const CLOSE_INTERNAL: u16 = 1011;
const CLOSE_TRY_LATER: u16 = 1013;
const CLOSE_TOO_BIG: u16 = 1009;

/// Whether a read failed because the client's message passed the size limit.
fn too_big(e: &axum::Error) -> bool {
    use std::error::Error as _;
    e.source()
        .and_then(|s| s.downcast_ref::<tungstenite::Error>())
        .is_some_and(|t| matches!(t, tungstenite::Error::Capacity(_)))
}

/// Most bytes of client messages read ahead while the model runs (about 4 minutes of 16 kHz
/// `i16_le`); past this the socket is not read until the backlog shrinks (TCP backpressure).
const MAX_BACKLOG_BYTES: usize = 8 << 20;

/// One read from the socket: `None` or an error when the client is gone.
type Incoming = Option<std::result::Result<Message, axum::Error>>;

fn incoming_bytes(m: &Incoming) -> usize {
    match m {
        Some(Ok(Message::Binary(b))) => b.len(),
        Some(Ok(Message::Text(t))) => t.len(),
        _ => 0,
    }
}

/// Least time between two `lag` events of one stream.
const LAG_EVENT_GAP: Duration = Duration::from_secs(2);

fn is_gone(m: &Incoming) -> bool {
    matches!(m, None | Some(Err(_)) | Some(Ok(Message::Close(_))))
}

/// Keeps the `active_streams` gauge up while the socket lives.
struct Active<'a>(&'a Metrics);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.active_streams.dec();
    }
}

/// What to do after a message.
enum Flow {
    Continue,
    /// Close with this code and reason.
    Close(u16, &'static str),
    /// The client is gone (a send failed).
    Gone,
    /// The client sent a close frame: answer it so that its close handshake completes (else
    /// it sees 1006, an abnormal closure).
    ClientClosed,
}

/// One session's state between messages.
struct Stream {
    state: Shared,
    id: String,
    settings: StreamSettings,
    resampler: StreamResampler,
    /// Opened on the first audio (so that a `config` message can still set its options).
    session: Option<Box<dyn StreamSession>>,
    /// Whether the current utterance has received audio (then `config` is refused).
    in_utterance: bool,
    /// Audio seconds received over the socket's lifetime.
    seconds: f64,
    /// Messages read while a session call ran, in arrival order. Reading on while the model
    /// works keeps the client's keepalive pings answered when it sends faster than real time.
    backlog: VecDeque<Incoming>,
    backlog_bytes: usize,
    /// Due times of the audio frames read and not yet handled (see [`crate::stream::load`]).
    lag: LagTracker,
    /// When the last `lag` event was sent.
    lag_event_at: Option<Instant>,
}

/// Serves one upgraded socket until the client leaves, the stream ends or the server stops.
/// `permit` is the stream's slot under `max_streams`, freed when this returns.
pub(crate) async fn serve_socket(
    state: Shared,
    mut socket: WebSocket,
    settings: StreamSettings,
    id: String,
    permit: OwnedSemaphorePermit,
) {
    let _permit = permit;
    let metrics = state.metrics.clone();
    metrics.active_streams.inc();
    let _active = Active(&metrics);
    let span = tracing::info_span!("stream", stream_id = %id);
    span.in_scope(|| {
        tracing::info!(encoding = %settings.encoding, rate = settings.sample_rate, "stream opened")
    });

    let resampler = match StreamResampler::new(settings.sample_rate) {
        Ok(r) => r,
        Err(e) => {
            // Settings were validated before the upgrade; kept as an honest answer.
            let _ = send(&mut socket, &ServerMessage::error(&e)).await;
            return;
        }
    };
    let ready = ServerMessage::Ready {
        id: id.clone(),
        model: state
            .model(settings.options.model.as_deref())
            .map_or_else(|_| state.model.clone(), |m| m.0.clone()),
        encoding: settings.encoding.as_str(),
        sample_rate: settings.sample_rate,
        max_stream_seconds: state.cfg.max_stream_seconds,
    };
    let mut shutdown = state.shutdown.clone();
    let state_load = state.stream_load.clone();
    let mut stream = Stream {
        state,
        id,
        settings,
        resampler,
        session: None,
        in_utterance: false,
        seconds: 0.0,
        backlog: VecDeque::new(),
        backlog_bytes: 0,
        lag: state_load.register(),
        lag_event_at: None,
    };
    if !send(&mut socket, &ready).await {
        return;
    }
    // Also stop if the server dropped the sender without a word (its task was cancelled).
    let mut sender_gone = false;
    // A socket that sends nothing (not even a ping) for this long holds a slot for nothing.
    let idle = stream.state.cfg.stream_idle_timeout();
    let mut idle_deadline = tokio::time::Instant::now() + idle;
    let flow = loop {
        let stopping = sender_gone || *shutdown.borrow();
        let next = if stopping {
            None
        } else {
            stream.backlog.pop_front()
        };
        let msg = match next {
            Some(msg) => {
                stream.backlog_bytes -= incoming_bytes(&msg);
                msg
            }
            None => tokio::select! {
                biased;
                // Fires on the one change (false → true), or if the server dropped the sender.
                changed = shutdown.changed(), if !stopping => {
                    sender_gone = changed.is_err();
                    continue;
                }
                msg = socket.recv(), if !stopping => {
                    stream.arrived(&msg);
                    msg
                }
                () = tokio::time::sleep_until(idle_deadline), if !stopping => {
                    let e = Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "stream_idle_timeout_s is {}, and the client sent nothing for that long; the stream is closed",
                            stream.state.cfg.stream_idle_timeout_s
                        ),
                    );
                    stream.state.metrics.idle_streams_closed.inc();
                    if let Flow::Gone = stream.reply_error(&mut socket, &e).await {
                        break Flow::Gone;
                    }
                    break match stream.finish(&mut socket).await {
                        Flow::Gone => Flow::Gone,
                        _ => Flow::Close(CLOSE_POLICY, "idle timeout"),
                    };
                }
                else => {
                    break match stream.finish(&mut socket).await {
                        Flow::Gone => Flow::Gone,
                        _ => Flow::Close(CLOSE_GOING_AWAY, "the server is shutting down"),
                    };
                }
            },
        };
        idle_deadline = tokio::time::Instant::now() + idle;
        let audio = matches!(msg, Some(Ok(Message::Binary(_))));
        let mut flow = match msg {
            // A message over the size limit: say so (RFC 6455's "message too big").
            Some(Err(e)) if too_big(&e) => {
                break Flow::Close(CLOSE_TOO_BIG, "message too big");
            }
            Some(Ok(Message::Close(_))) => break Flow::ClientClosed,
            None | Some(Err(_)) => break Flow::Gone,
            Some(Ok(Message::Binary(bytes))) => stream.audio(&mut socket, &bytes).await,
            Some(Ok(Message::Text(text))) => stream.text(&mut socket, text.as_str()).await,
            // Pings are answered by axum; pongs need nothing.
            Some(Ok(_)) => Flow::Continue,
        };
        if audio {
            stream.lag.handled();
            if matches!(flow, Flow::Continue) {
                flow = stream.check_lag(&mut socket).await;
            }
        }
        if !matches!(flow, Flow::Continue) {
            break flow;
        }
    };
    match flow {
        Flow::Close(code, reason) => {
            let frame = CloseFrame {
                code,
                reason: reason.into(),
            };
            let _ = socket.send(Message::Close(Some(frame))).await;
        }
        Flow::ClientClosed => {
            // The reply to the client's close frame is queued by the WebSocket layer when the
            // frame is read; it only leaves on a flush.
            let _ = futures_util::SinkExt::flush(&mut socket).await;
            span.in_scope(|| tracing::info!("client closed the stream"));
        }
        Flow::Gone => span.in_scope(|| tracing::info!("client left; session dropped")),
        Flow::Continue => {}
    }
    span.in_scope(|| tracing::info!(seconds = stream.seconds, "stream closed"));
}

/// Sends `msg` as a JSON text frame; false when the client is gone.
async fn send<T: serde::Serialize>(socket: &mut WebSocket, msg: &T) -> bool {
    let text = match serde_json::to_string(msg) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "cannot serialise a stream message");
            return true;
        }
    };
    socket.send(Message::Text(text.into())).await.is_ok()
}

impl Stream {
    /// Counts an audio frame read from the socket towards this stream's lag.
    fn arrived(&mut self, msg: &Incoming) {
        if let Some(Ok(Message::Binary(b))) = msg {
            let per_second = (self.settings.encoding.sample_bytes() as f64)
                * f64::from(self.settings.sample_rate);
            self.lag.arrived(b.len() as f64 / per_second);
        }
    }

    /// After an audio frame: ends the stream if it is too far behind (so that the others catch
    /// up), or tells the client how far behind it is.
    async fn check_lag(&mut self, socket: &mut WebSocket) -> Flow {
        let cfg = &self.state.cfg;
        let (max_lag, warn_lag) = (cfg.stream_max_lag_s, cfg.stream_admit_lag_s);
        let lag = self.lag.lag();
        if self.lag.should_shed(max_lag) {
            self.state.metrics.streams_shed.inc();
            let e = Error::new(
                ErrorKind::Overloaded,
                format!(
                    "the server is {lag:.1} s behind this stream (stream_max_lag_s is {max_lag}); \
                     the audio not yet transcribed is dropped and the stream is closed; retry later"
                ),
            );
            // The frames read ahead will not be transcribed.
            self.backlog.clear();
            self.backlog_bytes = 0;
            self.lag.clear();
            if let Flow::Gone = self.reply_error(socket, &e).await {
                return Flow::Gone;
            }
            return match self.finish(socket).await {
                Flow::Gone => Flow::Gone,
                _ => Flow::Close(CLOSE_TRY_LATER, "too far behind real time"),
            };
        }
        let due = self
            .lag_event_at
            .is_none_or(|t| t.elapsed() >= LAG_EVENT_GAP);
        if lag > warn_lag && due {
            self.lag_event_at = Some(Instant::now());
            let event = ServerMessage::Lag {
                seconds: (lag * 1000.0).round() / 1000.0,
                max_lag_seconds: max_lag,
            };
            if !send(socket, &event).await {
                return Flow::Gone;
            }
        }
        Flow::Continue
    }

    async fn reply_error(&mut self, socket: &mut WebSocket, e: &Error) -> Flow {
        tracing::info!(stream_id = %self.id, kind = e.kind.as_str(), message = %e.message, "stream error");
        if send(socket, &ServerMessage::error(e)).await {
            Flow::Continue
        } else {
            Flow::Gone
        }
    }

    async fn text(&mut self, socket: &mut WebSocket, text: &str) -> Flow {
        match ClientMessage::parse(text) {
            Err(e) => self.reply_error(socket, &e).await,
            Ok(ClientMessage::End) => self.finish(socket).await,
            Ok(ClientMessage::Config(fields)) => {
                if self.in_utterance {
                    let e = Error::invalid_input(
                        "config must come before the first audio frame of an utterance \
                         (send {\"type\":\"end\"} first)",
                    );
                    return self.reply_error(socket, &e).await;
                }
                let next = match self.settings.with(fields) {
                    Ok(s) => s,
                    Err(e) => return self.reply_error(socket, &e).await,
                };
                // An unknown model, or options its streams cannot honour (a language), are
                // refused here, while the settings stay as they were.
                if let Err(e) = self
                    .state
                    .model(next.options.model.as_deref())
                    .and_then(|m| m.1.check_stream_options(&next.options))
                {
                    return self.reply_error(socket, &e).await;
                }
                let resampler = match StreamResampler::new(next.sample_rate) {
                    Ok(r) => r,
                    Err(e) => return self.reply_error(socket, &e).await,
                };
                if next.options != self.settings.options {
                    // Reopened with the new options on the next audio.
                    self.session = None;
                }
                self.settings = next;
                self.resampler = resampler;
                if send(socket, &ServerMessage::config(&self.settings)).await {
                    Flow::Continue
                } else {
                    Flow::Gone
                }
            }
        }
    }

    async fn audio(&mut self, socket: &mut WebSocket, bytes: &[u8]) -> Flow {
        let samples = match decode_frame(bytes, self.settings.encoding) {
            Ok(s) => s,
            Err(e) => return self.reply_error(socket, &e).await,
        };
        if samples.is_empty() {
            return Flow::Continue;
        }
        let seconds = samples.len() as f64 / f64::from(self.settings.sample_rate);
        let limit = self.state.cfg.max_stream_seconds;
        if self.seconds + seconds > limit {
            let e = Error::limit(
                "max_stream_seconds",
                format!("{limit} s per stream"),
                format!(
                    "{:.1} s (this frame would bring the stream to {:.1} s)",
                    self.seconds,
                    self.seconds + seconds
                ),
            );
            if matches!(self.reply_error(socket, &e).await, Flow::Gone) {
                return Flow::Gone;
            }
            return match self.finish(socket).await {
                Flow::Gone => Flow::Gone,
                _ => Flow::Close(CLOSE_POLICY, "max_stream_seconds exceeded"),
            };
        }
        self.seconds += seconds;
        self.state.metrics.stream_audio_seconds.inc_by(seconds);
        self.in_utterance = true;
        let samples = match self.resampler.push(&samples) {
            Ok(s) => s,
            Err(e) => return self.reply_error(socket, &e).await,
        };
        if let Err(e) = self.open().await {
            return self.fatal(socket, e).await;
        }
        match self.call(socket, move |s| s.feed(&samples)).await {
            Ok(events) => self.send_events(socket, &events).await,
            Err(e) => self.reply_error(socket, &e).await,
        }
    }

    /// Ends the utterance: the resampler's tail, the session's final events, then `done`.
    async fn finish(&mut self, socket: &mut WebSocket) -> Flow {
        let mut events = Vec::new();
        if self.in_utterance {
            self.in_utterance = false;
            let tail = self.resampler.finish();
            let ended = match tail {
                Ok(tail) => {
                    let mut out = Ok(Vec::new());
                    if !tail.is_empty() {
                        out = self.call(socket, move |s| s.feed(&tail)).await;
                    }
                    match out {
                        Ok(mut evs) => self.call(socket, |s| s.end()).await.map(|end| {
                            evs.extend(end);
                            evs
                        }),
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            };
            match ended {
                Ok(evs) => events = evs,
                Err(e) => {
                    if matches!(self.reply_error(socket, &e).await, Flow::Gone) {
                        return Flow::Gone;
                    }
                }
            }
        }
        tracing::debug!(stream_id = %self.id, events = events.len(), "utterance ended");
        if let Flow::Gone = self.send_events(socket, &events).await {
            return Flow::Gone;
        }
        if send(socket, &ServerMessage::Done).await {
            Flow::Continue
        } else {
            Flow::Gone
        }
    }

    async fn send_events(&mut self, socket: &mut WebSocket, events: &[StreamEvent]) -> Flow {
        for event in events {
            if !send(socket, event).await {
                return Flow::Gone;
            }
        }
        Flow::Continue
    }

    /// An error after which the stream cannot go on (no session could be opened).
    async fn fatal(&mut self, socket: &mut WebSocket, e: Error) -> Flow {
        if let Flow::Gone = self.reply_error(socket, &e).await {
            return Flow::Gone;
        }
        match e.kind {
            ErrorKind::Overloaded => Flow::Close(CLOSE_TRY_LATER, "no room for another session"),
            ErrorKind::Internal => Flow::Close(CLOSE_INTERNAL, "internal error"),
            _ => Flow::Close(CLOSE_POLICY, "the session could not be opened"),
        }
    }

    /// Opens the backend session if it is not open yet (on the blocking pool).
    async fn open(&mut self) -> Result<()> {
        if self.session.is_some() {
            return Ok(());
        }
        let options = self.settings.options.clone();
        let backend = self.state.model(options.model.as_deref())?.1.clone();
        if !backend.supports_streaming() {
            return Err(Error::invalid_input(format!(
                "model {} does not support streaming",
                backend.model_name()
            )));
        }
        let session = tokio::task::spawn_blocking(move || backend.open_stream(options))
            .await
            .map_err(|e| Error::internal(format!("opening the stream session failed: {e}")))??;
        self.session = Some(session);
        Ok(())
    }

    /// Runs a blocking session call on tokio's blocking pool; the session travels there and
    /// back, so no lock is held. Meanwhile the socket is read into the backlog (which also
    /// answers pings). A panic loses the session (the next audio opens a new one).
    async fn call<T: Send + 'static>(
        &mut self,
        socket: &mut WebSocket,
        f: impl FnOnce(&mut dyn StreamSession) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let Some(mut session) = self.session.take() else {
            // Only reachable after a panic lost the session mid-utterance.
            return Err(Error::internal(
                "the stream session was lost; start a new utterance",
            ));
        };
        let mut job = tokio::task::spawn_blocking(move || {
            let out = f(session.as_mut());
            (session, out)
        });
        let joined = loop {
            let room =
                self.backlog_bytes < MAX_BACKLOG_BYTES && !self.backlog.back().is_some_and(is_gone);
            tokio::select! {
                joined = &mut job => break joined,
                msg = socket.recv(), if room => {
                    if is_gone(&msg) {
                        // Nothing queued can be answered any more.
                        self.backlog.clear();
                        self.backlog_bytes = 0;
                        self.lag.clear();
                    }
                    self.arrived(&msg);
                    self.backlog_bytes += incoming_bytes(&msg);
                    self.backlog.push_back(msg);
                }
            }
        };
        let (session, out) =
            joined.map_err(|e| Error::internal(format!("the stream session failed: {e}")))?;
        self.session = Some(session);
        out
    }
}
