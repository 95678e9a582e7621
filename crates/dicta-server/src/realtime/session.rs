//! One realtime transcription session (see the module docs of [`crate::realtime`]).

use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use base64::Engine as _;
use dicta_audio::decode::PcmEncoding;
use dicta_core::{Error, ErrorKind, Result, Segment};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinSet;

use crate::audio::{AudioFormat, Payload, RawInput};
use crate::backend::{RequestOptions, SegmentSink, TurnDetector, TurnEvent};
use crate::pipeline::TranscribeRequest;
use crate::routes::Shared;
use crate::stream::denoise::Denoiser;
use crate::stream::resample::StreamResampler;

use super::beta;
use super::settings::{Format, ServerVad, Settings, MAX_ITEM_SECONDS, RATE};

/// Least audio `input_audio_buffer.commit` takes (OpenAI's 100 ms).
const MIN_COMMIT: u64 = RATE / 10;
/// Audio kept before the speech while nobody speaks, beyond the prefix padding: the detector
/// reports a start some windows after it.
const KEEP_QUIET: u64 = 2 * RATE;

/// Event ids, unique in the process.
fn event_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("event_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// `{"type": kind, "event_id", …fields}`.
fn event(kind: &str, fields: Value) -> Value {
    let mut v = json!({"type": kind, "event_id": event_id()});
    if let (Some(o), Value::Object(f)) = (v.as_object_mut(), fields) {
        o.extend(f);
    }
    v
}

/// OpenAI's error event for `e`, answering the client event `client_event` if any.
fn error_event(e: &Error, client_event: Option<&str>) -> Value {
    let kind = if e.kind == ErrorKind::InvalidInput {
        "invalid_request_error"
    } else {
        "server_error"
    };
    event(
        "error",
        json!({"error": {"type": kind, "code": e.kind.as_str(), "message": e.message,
                         "param": null, "event_id": client_event}}),
    )
}

/// The item being heard: its id and first sample (the prefix padding included).
struct Item {
    id: String,
    from: u64,
}

/// One session's state between messages.
struct Realtime {
    state: Shared,
    id: String,
    settings: Settings,
    resampler: StreamResampler,
    /// Noise reduction of the 16 kHz audio the detector hears.
    denoiser: Option<Denoiser>,
    /// Opened with the settings' turn detection (and again when it changes).
    detector: Option<Box<dyn TurnDetector>>,
    /// The session sample at the detector's position 0.
    detector_base: u64,
    /// 16 kHz audio of the input buffer from sample `buffer_start` of the session.
    buffer: Vec<f32>,
    buffer_start: u64,
    item: Option<Item>,
    previous_item: Option<String>,
    items: u64,
    /// Audio seconds appended over the session.
    seconds: f64,
    /// Events of the transcriptions in flight, for the socket.
    events: UnboundedSender<Value>,
    tasks: JoinSet<()>,
}

/// Keeps the `active_streams` gauge up while the socket lives.
struct Active(std::sync::Arc<crate::metrics::Metrics>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active_streams.dec();
    }
}

/// Serves one upgraded socket until the client leaves, goes idle or the server stops.
pub(super) async fn serve(
    state: Shared,
    mut socket: WebSocket,
    id: String,
    permit: OwnedSemaphorePermit,
    beta: bool,
) {
    let _permit = permit;
    state.metrics.active_streams.inc();
    let _active = Active(state.metrics.clone());
    let (tx, mut rx) = unbounded_channel();
    let mut rt = match Realtime::new(state.clone(), format!("sess_{id}"), tx) {
        Ok(rt) => rt,
        Err(e) => {
            let _ = send(&mut socket, &error_event(&e, None)).await;
            return;
        }
    };
    tracing::info!(session = %rt.id, "realtime session opened");
    // A client that asked for the beta gets its first event in the beta's shape.
    let created = if beta {
        rt.session_event("transcription_session.created", true)
    } else {
        rt.session_event("session.created", false)
    };
    if !send(&mut socket, &created).await {
        return;
    }
    let mut shutdown = state.shutdown.clone();
    let idle = state.cfg.stream_idle_timeout();
    let mut idle_deadline = tokio::time::Instant::now() + idle;
    let close = loop {
        tokio::select! {
            biased;
            _ = shutdown.changed() => break Some((1001, "the server is shutting down")),
            Some(ev) = rx.recv() => {
                if !send(&mut socket, &ev).await {
                    break None;
                }
            }
            msg = socket.recv() => {
                idle_deadline = tokio::time::Instant::now() + idle;
                let text = match msg {
                    Some(Ok(Message::Text(t))) => t,
                    Some(Ok(Message::Binary(_))) => {
                        let e = Error::invalid_input(
                            "realtime events are JSON text; audio goes base64 in \
                             input_audio_buffer.append",
                        );
                        if !send(&mut socket, &error_event(&e, None)).await {
                            break None;
                        }
                        continue;
                    }
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break None,
                    Some(Ok(_)) => continue,
                };
                let (out, close) = rt.handle(text.as_str()).await;
                let mut gone = false;
                for ev in &out {
                    if !send(&mut socket, ev).await {
                        gone = true;
                        break;
                    }
                }
                if gone {
                    break None;
                }
                if close.is_some() {
                    break close;
                }
            }
            () = tokio::time::sleep_until(idle_deadline) => {
                let e = Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "stream_idle_timeout_s is {}, and the client sent nothing for that \
                         long; the session is closed",
                        state.cfg.stream_idle_timeout_s
                    ),
                );
                state.metrics.idle_streams_closed.inc();
                let _ = send(&mut socket, &error_event(&e, None)).await;
                break Some((1008, "idle timeout"));
            }
        }
    };
    if let Some((code, reason)) = close {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        let _ = socket.send(Message::Close(Some(frame))).await;
    }
    // Transcriptions nobody reads any more stop (their requests are cancelled).
    rt.tasks.abort_all();
    tracing::info!(session = %rt.id, seconds = rt.seconds, "realtime session closed");
}

async fn send(socket: &mut WebSocket, v: &Value) -> bool {
    socket
        .send(Message::Text(v.to_string().into()))
        .await
        .is_ok()
}

impl Realtime {
    fn new(state: Shared, id: String, events: UnboundedSender<Value>) -> Result<Self> {
        let default_model = state.model.clone();
        // Turn detection is on where the default model's backend has a detector.
        let turn = ServerVad::default();
        let detector = state
            .model(None)?
            .1
            .open_turn_detector(&turn.options())
            .ok();
        let settings = Settings {
            format: Format::Pcm,
            model: default_model,
            language: None,
            prompt: String::new(),
            turn_detection: detector.is_some().then_some(turn),
            noise_reduction: None,
            logprobs: false,
        };
        Ok(Self {
            resampler: StreamResampler::new(settings.format.rate())?,
            denoiser: None,
            state,
            id,
            settings,
            detector,
            detector_base: 0,
            buffer: Vec::new(),
            buffer_start: 0,
            item: None,
            previous_item: None,
            items: 0,
            seconds: 0.0,
            events,
            tasks: JoinSet::new(),
        })
    }

    /// Handles one client event: the events to send now, and a close when the session ends.
    async fn handle(&mut self, text: &str) -> (Vec<Value>, Option<(u16, &'static str)>) {
        let msg: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                let e = Error::invalid_input(format!("an event must be a JSON object: {e}"));
                return (vec![error_event(&e, None)], None);
            }
        };
        let client_event = msg
            .get("event_id")
            .and_then(Value::as_str)
            .map(String::from);
        let kind = msg.get("type").and_then(Value::as_str).unwrap_or_default();
        let out = match kind {
            "session.update" => self
                .update(msg.get("session").unwrap_or(&Value::Null))
                .map(|()| vec![self.session_event("session.updated", false)]),
            "transcription_session.update" => {
                beta::to_ga(msg.get("session").unwrap_or(&Value::Null))
                    .and_then(|ga| self.update(&ga))
                    .map(|()| vec![self.session_event("transcription_session.updated", true)])
            }
            "input_audio_buffer.append" => {
                let audio = msg.get("audio").and_then(Value::as_str).unwrap_or_default();
                match self.append(audio).await {
                    Err(e) if e.kind == ErrorKind::LimitExceeded => {
                        return (
                            vec![error_event(&e, client_event.as_deref())],
                            Some((1008, "max_stream_seconds exceeded")),
                        )
                    }
                    other => other,
                }
            }
            "input_audio_buffer.commit" => self.commit(),
            "input_audio_buffer.clear" => {
                self.drop_buffer();
                self.item = None;
                Ok(vec![event("input_audio_buffer.cleared", json!({}))])
            }
            other => Err(Error::invalid_input(format!(
                "unknown or unsupported event type {other:?} (a transcription session takes \
                 session.update or the beta's transcription_session.update, and \
                 input_audio_buffer.append / commit / clear)"
            ))),
        };
        match out {
            Ok(events) => (events, None),
            Err(e) => (vec![error_event(&e, client_event.as_deref())], None),
        }
    }

    /// The session as an event of type `kind`, in the beta's shape or the GA one.
    fn session_event(&self, kind: &str, beta: bool) -> Value {
        let session = self.settings.json(&self.id);
        let session = if beta {
            beta::from_ga(&session)
        } else {
            session
        };
        event(kind, json!({ "session": session }))
    }

    /// A GA `session.update`'s `session` over the settings (all of it or nothing).
    fn update(&mut self, session: &Value) -> Result<()> {
        let next = self.settings.updated(session, &self.state)?;
        let backend = self
            .state
            .model(next.resident_model().as_deref())?
            .1
            .clone();
        let resampler = (next.format != self.settings.format)
            .then(|| StreamResampler::new(next.format.rate()))
            .transpose()?;
        if next.turn_detection != self.settings.turn_detection
            || next.model != self.settings.model
            || next.noise_reduction.is_some() != self.settings.noise_reduction.is_some()
        {
            // A new detector (and its noise reduction, which it alone hears) starts at the
            // session's current position, so that both count samples from there.
            let detector = match next.turn_detection {
                Some(t) => Some(backend.open_turn_detector(&t.options())?),
                None => None,
            };
            self.denoiser = match (&detector, next.noise_reduction) {
                (Some(_), Some(_)) => Some(Denoiser::new()?),
                _ => None,
            };
            self.detector = detector;
            self.detector_base = self.buffer_start + self.buffer.len() as u64;
            self.item = None;
        }
        if let Some(r) = resampler {
            self.resampler = r;
        }
        self.settings = next;
        Ok(())
    }

    /// `input_audio_buffer.append`: the audio into the buffer, and the turns it decides.
    async fn append(&mut self, audio: &str) -> Result<Vec<Value>> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(audio.trim())
            .map_err(|e| Error::invalid_input(format!("audio must be base64: {e}")))?;
        let samples = self.settings.format.decode(&bytes)?;
        let seconds = samples.len() as f64 / f64::from(self.settings.format.rate());
        let limit = self.state.cfg.max_stream_seconds;
        if self.seconds + seconds > limit {
            return Err(Error::limit(
                "max_stream_seconds",
                format!("{limit} s per stream"),
                format!("{:.1} s and {seconds:.1} s more", self.seconds),
            ));
        }
        let samples = self.resampler.push(&samples)?;
        let buffered = (self.buffer.len() + samples.len()) as f64 / RATE as f64;
        let most = MAX_ITEM_SECONDS.min(self.state.cfg.max_audio_seconds);
        if self.detector.is_none() && buffered > most {
            return Err(Error::invalid_input(format!(
                "the input audio buffer would hold {buffered:.1} s, over the {most} s an item \
                 may have; commit it"
            )));
        }
        self.seconds += seconds;
        self.state.metrics.stream_audio_seconds.inc_by(seconds);
        self.buffer.extend_from_slice(&samples);
        let Some(mut detector) = self.detector.take() else {
            return Ok(Vec::new());
        };
        // The detector hears the cleaned audio when noise reduction is on (aligned with the
        // buffer, a little later); the model hears the audio as it came, which it transcribes
        // better (README). Both networks run off the runtime's threads.
        let mut denoiser = self.denoiser.take();
        let joined = tokio::task::spawn_blocking(move || {
            let turns = match &mut denoiser {
                Some(d) => d.push(&samples).and_then(|clean| detector.push(&clean)),
                None => detector.push(&samples),
            };
            (denoiser, detector, turns)
        })
        .await;
        let (denoiser, detector, turns) =
            joined.map_err(|e| Error::internal(format!("the turn detector failed: {e}")))?;
        (self.denoiser, self.detector) = (denoiser, Some(detector));
        let mut out = Vec::new();
        for turn in turns? {
            self.turn(turn, &mut out);
        }
        if self.item.is_none() {
            // Nobody speaks: keep only what a start may still reach back to.
            let pad = self.settings.turn_detection.map_or(0, ServerVad::pad);
            let keep = (pad + KEEP_QUIET) as usize;
            if self.buffer.len() > 2 * keep {
                let cut = self.buffer.len() - keep;
                self.buffer.drain(..cut);
                self.buffer_start += cut as u64;
            }
        }
        Ok(out)
    }

    /// One turn of the detector: `speech_started`, or `speech_stopped` and the commit.
    fn turn(&mut self, turn: TurnEvent, out: &mut Vec<Value>) {
        let pad = self.settings.turn_detection.map_or(0, ServerVad::pad);
        let ms = |sample: u64| sample * 1000 / RATE;
        match turn {
            TurnEvent::Started { start } => {
                let from = (self.detector_base + start)
                    .saturating_sub(pad)
                    .max(self.buffer_start);
                let id = self.next_item_id();
                out.push(event(
                    "input_audio_buffer.speech_started",
                    json!({"audio_start_ms": ms(from), "item_id": id}),
                ));
                self.item = Some(Item { id, from });
            }
            TurnEvent::Stopped { at, .. } => {
                // A stop of speech already committed by hand belongs to no item.
                let Some(item) = self.item.take() else { return };
                let at = self.detector_base + at;
                out.push(event(
                    "input_audio_buffer.speech_stopped",
                    json!({"audio_end_ms": ms(at), "item_id": item.id}),
                ));
                let audio = self.take(item.from, at);
                out.push(self.committed(&item.id));
                self.transcribe(item.id, audio);
            }
        }
    }

    /// The buffer's audio from `from` to `to` (session samples); the buffer then starts at
    /// `to` less the prefix padding (the next item may reach back into it).
    fn take(&mut self, from: u64, to: u64) -> Vec<f32> {
        let end = self.buffer_start + self.buffer.len() as u64;
        let (a, b) = (
            from.clamp(self.buffer_start, end),
            to.clamp(self.buffer_start, end),
        );
        let audio = self.buffer[(a - self.buffer_start) as usize..(b - self.buffer_start) as usize]
            .to_vec();
        let pad = self.settings.turn_detection.map_or(0, ServerVad::pad);
        let keep_from = b.saturating_sub(pad).max(self.buffer_start);
        self.buffer
            .drain(..(keep_from - self.buffer_start) as usize);
        self.buffer_start = keep_from;
        audio
    }

    fn committed(&mut self, item: &str) -> Value {
        let previous = self.previous_item.replace(item.to_string());
        event(
            "input_audio_buffer.committed",
            json!({"previous_item_id": previous, "item_id": item}),
        )
    }

    /// The next item's id (`item_<session>_<n>`).
    fn next_item_id(&mut self) -> String {
        self.items += 1;
        format!(
            "item_{}_{}",
            self.id.trim_start_matches("sess_"),
            self.items
        )
    }

    /// Empties the input buffer; the session's positions go on.
    fn drop_buffer(&mut self) {
        self.buffer_start += self.buffer.len() as u64;
        self.buffer.clear();
    }

    /// `input_audio_buffer.commit`: the buffer (from the start of the speech being heard, if
    /// any) as an item.
    fn commit(&mut self) -> Result<Vec<Value>> {
        let end = self.buffer_start + self.buffer.len() as u64;
        let from = self.item.as_ref().map_or(self.buffer_start, |i| i.from);
        // Checked before anything moves: a refused commit leaves the speech being heard as it was.
        if end.saturating_sub(from) < MIN_COMMIT {
            return Err(Error::invalid_input(format!(
                "the input audio buffer holds {} ms; a commit needs at least 100 ms",
                end.saturating_sub(from) * 1000 / RATE
            )));
        }
        let id = match self.item.take() {
            Some(item) => item.id,
            None => self.next_item_id(),
        };
        let audio = self.take(from, end);
        // The whole buffer went into the item.
        self.drop_buffer();
        let out = vec![self.committed(&id)];
        self.transcribe(id, audio);
        Ok(out)
    }

    /// Transcribes an item through the server's queue; its events go to the socket as they
    /// come.
    fn transcribe(&mut self, item: String, audio: Vec<f32>) {
        let state = self.state.clone();
        let events = self.events.clone();
        let settings = self.settings.clone();
        self.tasks.spawn(async move {
            let (tx, rx) = unbounded_channel::<Vec<Segment>>();
            let sink = SegmentSink::new(move |segments| {
                let _ = tx.send(segments.to_vec());
            });
            let seconds = audio.len() as f64 / RATE as f64;
            let bytes: Vec<u8> = audio.iter().flat_map(|x| x.to_le_bytes()).collect();
            let request = TranscribeRequest {
                request_id: item.clone(),
                inputs: vec![RawInput {
                    id: item.clone(),
                    payload: Payload::Bytes(bytes),
                    format: AudioFormat::Pcm {
                        encoding: PcmEncoding::F32Le,
                        sample_rate: RATE as u32,
                    },
                }],
                options: RequestOptions {
                    language: settings.language.clone(),
                    prompt: Some(settings.prompt.clone()).filter(|p| !p.trim().is_empty()),
                    token_logprobs: settings.logprobs,
                    ..RequestOptions::default()
                },
                model: settings.resident_model(),
                segments: Some(sink),
            };
            let mut item_events = ItemEvents {
                item,
                events,
                sent: 0,
                logprobs: settings.logprobs,
            };
            let out = item_events.run(&state, request, rx).await;
            item_events.finish(out, seconds);
        });
    }
}

/// The transcription events of one item.
struct ItemEvents {
    item: String,
    events: UnboundedSender<Value>,
    /// Segments sent as deltas.
    sent: usize,
    logprobs: bool,
}

impl ItemEvents {
    /// Runs the request, sending a delta per segment as they come.
    async fn run(
        &mut self,
        state: &Shared,
        request: TranscribeRequest,
        mut segments: UnboundedReceiver<Vec<Segment>>,
    ) -> Result<dicta_core::Transcript> {
        let run = state.pipeline.run(request);
        tokio::pin!(run);
        let out = loop {
            tokio::select! {
                biased;
                Some(s) = segments.recv() => self.deltas(&s),
                out = &mut run => break out,
            }
        };
        while let Ok(s) = segments.try_recv() {
            self.deltas(&s);
        }
        out?.results
            .into_iter()
            .next()
            .unwrap_or_else(|| Err(Error::internal("the backend returned no result")))
    }

    fn deltas(&mut self, segments: &[Segment]) {
        for s in segments {
            let text = crate::format::delta_text(s, self.sent == 0);
            self.sent += 1;
            if text.is_empty() {
                continue;
            }
            let mut e = event(
                "conversation.item.input_audio_transcription.delta",
                json!({"item_id": self.item, "content_index": 0, "delta": text}),
            );
            if self.logprobs {
                e["logprobs"] = crate::format::logprobs(std::slice::from_ref(s));
            }
            let _ = self.events.send(e);
        }
    }

    fn finish(&mut self, out: Result<dicta_core::Transcript>, seconds: f64) {
        let e = match out {
            Ok(t) => {
                self.deltas(t.segments.get(self.sent..).unwrap_or_default());
                let mut e = event(
                    "conversation.item.input_audio_transcription.completed",
                    json!({"item_id": self.item, "content_index": 0,
                           "transcript": t.text.trim(),
                           "usage": {"type": "duration", "seconds": seconds}}),
                );
                if self.logprobs {
                    e["logprobs"] = crate::format::logprobs(&t.segments);
                }
                e
            }
            Err(err) => event(
                "conversation.item.input_audio_transcription.failed",
                json!({"item_id": self.item, "content_index": 0,
                       "error": {"type": "server_error", "code": err.kind.as_str(),
                                 "message": err.message, "param": null}}),
            ),
        };
        let _ = self.events.send(e);
    }
}
