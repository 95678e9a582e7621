//! `StreamingRecognize`: one call is one session of the backend, fed as audio arrives.
//!
//! The first message carries `streaming_config`; later ones `audio_content` (headerless
//! samples per the config, any size; a WAV header at the very start is skipped). The call holds
//! one of the `max_streams` slots. When the client half-closes, the rest of the audio is decoded
//! and the last finals are sent before the call ends with OK. Going over `max_stream_seconds`,
//! a second `streaming_config`, or no message for `stream_idle_timeout_s` end the call with an
//! error status after the finals of the audio accepted so far; a server shutdown ends it like a
//! half-close.
//!
//! Capacity follows the WebSocket route's rules ([`crate::stream::load`]): a reader task reads
//! up to [`READ_AHEAD`] messages ahead of the session and records when each audio chunk
//! arrived, so a call's lag (the age of its oldest audio not yet transcribed) counts like a
//! socket's. While any open stream, WebSocket or gRPC, is more than `stream_admit_lag_s`
//! behind real time, a new call is refused with `RESOURCE_EXHAUSTED` (the WebSocket route
//! answers 503); a call more than `stream_max_lag_s` behind (the newest such, never the only
//! open stream) gets the finals of what was transcribed, its read-ahead audio is dropped, and
//! it ends with `RESOURCE_EXHAUSTED`.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dicta_core::{Error, ErrorKind, Result};
use futures_util::Stream;
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tonic::{Status, Streaming};

use super::convert::{self, RawCoding};
use super::pb::nvidia::riva::asr::streaming_recognize_request::StreamingRequest;
use super::pb::nvidia::riva::asr::{StreamingRecognizeRequest, StreamingRecognizeResponse};
use super::status;
use crate::backend::{StreamEvent, StreamEventKind, StreamSession};
use crate::routes::Shared;
use crate::stream::load::LagTracker;
use crate::stream::resample::StreamResampler;

/// Messages read ahead of the session (each chunk's arrival is recorded when it is read).
const READ_AHEAD: usize = 64;

/// One read of the inbound stream, as the reader task hands it on.
type Read = std::result::Result<Option<StreamingRecognizeRequest>, Status>;

/// The responses of one call.
pub(crate) type ResponseStream =
    Pin<Box<dyn Stream<Item = std::result::Result<StreamingRecognizeResponse, Status>> + Send>>;

/// What the call's config asks for.
struct Settings {
    coding: RawCoding,
    rate: u32,
    channels: usize,
    interim: bool,
    words: bool,
    language: String,
    /// `enable_automatic_punctuation` and `profanity_filter`.
    text: super::text_rules::TextRules,
}

/// Reads the config, admits the call and opens its session; the audio is handled by a task
/// that feeds the returned stream.
pub(crate) async fn start(
    state: Shared,
    mut inbound: Streaming<StreamingRecognizeRequest>,
) -> std::result::Result<ResponseStream, Status> {
    let first = inbound
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument("the stream ended before its streaming_config"))?;
    let Some(StreamingRequest::StreamingConfig(config)) = first.streaming_request else {
        return Err(Status::invalid_argument(
            "the first message of StreamingRecognize must carry streaming_config",
        ));
    };
    let rc = config.config.unwrap_or_default();
    let model = Some(rc.model.clone()).filter(|m| !m.is_empty());
    let (_, backend) = state.model(model.as_deref()).map_err(status)?.clone();
    if !backend.supports_streaming() {
        return Err(Status::unimplemented(format!(
            "model {} does not support streaming; use Recognize",
            backend.model_name()
        )));
    }
    let (coding, rate, channels) = convert::raw_spec(&rc).map_err(status)?;
    if channels > 1 && rc.enable_separate_recognition_per_channel {
        return Err(status(Error::invalid_input(
            "enable_separate_recognition_per_channel is for Recognize; a stream's channels are \
             mixed (open one stream per channel to recognize them apart)",
        )));
    }
    let resampler = StreamResampler::new(rate).map_err(status)?;
    // The WebSocket route's capacity rule: while open streams are behind real time, one more
    // would only put every stream further behind.
    let behind = state.stream_load.worst_lag();
    if behind > state.cfg.stream_admit_lag_s {
        state.metrics.streams_refused_behind.inc();
        return Err(status(Error::new(
            ErrorKind::Overloaded,
            format!(
                "open streams are {behind:.1} s behind real time (stream_admit_lag_s is {}); retry later",
                state.cfg.stream_admit_lag_s
            ),
        )));
    }
    let permit = state.streams.clone().try_acquire_owned().map_err(|_| {
        status(Error::new(
            ErrorKind::Overloaded,
            format!(
                "max_streams is {}, and every stream slot is taken; retry later",
                state.cfg.max_streams
            ),
        ))
    })?;
    let options = convert::stream_options(&rc, model).map_err(status)?;
    let language = options.language.clone();
    let session = tokio::task::spawn_blocking(move || backend.open_stream(options))
        .await
        .map_err(|e| status(Error::internal(format!("opening the session failed: {e}"))))?
        .map_err(status)?;
    let settings = Settings {
        coding,
        rate,
        channels,
        interim: config.interim_results,
        words: rc.enable_word_time_offsets,
        language: language.unwrap_or_default(),
        text: super::text_rules::TextRules::of(&rc),
    };
    let (tx, rx) = mpsc::channel(32);
    let id = first.id;
    let lag = Arc::new(Mutex::new(state.stream_load.register()));
    let bytes_per_second = f64::from(rate) * (coding.bytes() * channels) as f64;
    let reads = read_ahead(inbound, Arc::clone(&lag), bytes_per_second);
    tokio::spawn(async move {
        let mut call = Call {
            lag,
            state,
            settings,
            resampler,
            session: Some(session),
            tx,
            id,
            carry: Vec::new(),
            seconds: 0.0,
            started: false,
            _permit: permit,
        };
        call.run(reads).await;
    });
    Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
}

/// Reads the call's messages ahead of the session into a bounded queue, recording each audio
/// chunk's arrival in `lag`; ends after the client's half-close or an error, or when the call
/// stops reading.
fn read_ahead(
    mut inbound: Streaming<StreamingRecognizeRequest>,
    lag: Arc<Mutex<LagTracker>>,
    bytes_per_second: f64,
) -> mpsc::Receiver<Read> {
    let (tx, rx) = mpsc::channel::<Read>(READ_AHEAD);
    tokio::spawn(async move {
        loop {
            let read = tokio::select! {
                r = inbound.message() => r,
                _ = tx.closed() => return,
            };
            let last = !matches!(read, Ok(Some(_)));
            if let Ok(Some(StreamingRecognizeRequest {
                streaming_request: Some(StreamingRequest::AudioContent(bytes)),
                ..
            })) = &read
            {
                lock(&lag).arrived(bytes.len() as f64 / bytes_per_second);
            }
            if tx.send(read).await.is_err() || last {
                return;
            }
        }
    });
    rx
}

fn lock(lag: &Mutex<LagTracker>) -> std::sync::MutexGuard<'_, LagTracker> {
    lag.lock().unwrap_or_else(|p| p.into_inner())
}

/// One call's state.
struct Call {
    /// This call's lag, shared with its reader task.
    lag: Arc<Mutex<LagTracker>>,
    state: Shared,
    settings: Settings,
    resampler: StreamResampler,
    /// `None` only while a blocking call has it.
    session: Option<Box<dyn StreamSession>>,
    tx: mpsc::Sender<std::result::Result<StreamingRecognizeResponse, Status>>,
    id: Option<super::pb::nvidia::riva::RequestId>,
    /// Bytes of an incomplete frame, completed by the next chunk.
    carry: Vec<u8>,
    /// Audio seconds received.
    seconds: f64,
    /// Whether audio arrived (a WAV header is looked for in the first chunk only).
    started: bool,
    _permit: OwnedSemaphorePermit,
}

/// How the loop ended.
enum End {
    /// Half-close or shutdown: finish and end with OK.
    Finish,
    /// Finish, then end with this status.
    Fail(Status),
    /// The client is gone: nothing more to send.
    Gone,
}

impl Call {
    async fn run(&mut self, mut reads: mpsc::Receiver<Read>) {
        let mut shutdown = self.state.shutdown.clone();
        let idle = Duration::from_secs_f64(self.state.cfg.stream_idle_timeout_s);
        let end = loop {
            let msg = tokio::select! {
                m = reads.recv() => m.unwrap_or(Ok(None)),
                _ = shutdown.wait_for(|s| *s) => break End::Finish,
                _ = tokio::time::sleep(idle) => break End::Fail(status(Error::new(
                    ErrorKind::Timeout,
                    format!("no message for stream_idle_timeout_s = {} s", self.state.cfg.stream_idle_timeout_s),
                ))),
            };
            match msg {
                Ok(Some(m)) => match m.streaming_request {
                    Some(StreamingRequest::AudioContent(bytes)) => {
                        let fed = self.audio(&bytes).await;
                        lock(&self.lag).handled();
                        match fed {
                            Ok(true) => {}
                            Ok(false) => break End::Gone,
                            Err(e) => break End::Fail(status(e)),
                        }
                        if let Some(shed) = self.shed() {
                            break End::Fail(shed);
                        }
                    }
                    Some(StreamingRequest::StreamingConfig(_)) => {
                        break End::Fail(Status::invalid_argument(
                            "streaming_config may only come first",
                        ))
                    }
                    None => {}
                },
                Ok(None) => break End::Finish,
                Err(_) => break End::Gone,
            }
        };
        // Audio read ahead and not fed is not transcribed.
        reads.close();
        lock(&self.lag).clear();
        let failure = match end {
            End::Gone => return,
            End::Finish => None,
            End::Fail(s) => Some(s),
        };
        if let Err(e) = self.finish().await {
            let _ = self.tx.send(Err(status(e))).await;
            return;
        }
        if let Some(s) = failure {
            let _ = self.tx.send(Err(s)).await;
        }
    }

    /// `RESOURCE_EXHAUSTED` when this call should end to let the other streams catch up: it is
    /// more than `stream_max_lag_s` behind, the newest stream that is, and not the only one.
    fn shed(&self) -> Option<Status> {
        let max_lag = self.state.cfg.stream_max_lag_s;
        let lag = lock(&self.lag);
        if !lag.should_shed(max_lag) {
            return None;
        }
        self.state.metrics.streams_shed.inc();
        Some(status(Error::new(
            ErrorKind::Overloaded,
            format!(
                "the server is {:.1} s behind this stream (stream_max_lag_s is {max_lag}); the \
                 audio not yet transcribed is dropped and the stream is ended; retry later",
                lag.lag()
            ),
        )))
    }

    /// Takes one chunk: whole frames go to the session. `Ok(false)`: the client is gone.
    async fn audio(&mut self, bytes: &[u8]) -> Result<bool> {
        let mut bytes = bytes;
        if !self.started {
            self.started = true;
            if let Some(data) = wav_data(bytes) {
                bytes = &bytes[data..];
            }
        }
        let frame = self.settings.coding.bytes() * self.settings.channels;
        self.carry.extend_from_slice(bytes);
        let whole = self.carry.len() / frame * frame;
        let mono = convert::raw_to_mono(
            &self.carry[..whole],
            self.settings.coding,
            self.settings.channels,
        );
        self.carry.drain(..whole);
        self.seconds += mono.len() as f64 / f64::from(self.settings.rate);
        let max = self.state.cfg.max_stream_seconds;
        if self.seconds > max {
            return Err(Error::limit(
                "max_stream_seconds",
                format!("{max} s per stream"),
                format!("{:.1} s", self.seconds),
            ));
        }
        let samples = self.resampler.push(&mono)?;
        let events = self.call(move |s| s.feed(&samples)).await?;
        Ok(self.send(&events).await)
    }

    /// Decodes what is left and sends the last finals.
    async fn finish(&mut self) -> Result<()> {
        let tail = self.resampler.finish()?;
        let mut events = self.call(move |s| s.feed(&tail)).await?;
        events.extend(self.call(|s| s.end()).await?);
        self.send(&events).await;
        Ok(())
    }

    /// Runs a blocking session call on tokio's blocking pool (the session travels there and
    /// back, so no lock is held).
    async fn call(
        &mut self,
        f: impl FnOnce(&mut dyn StreamSession) -> Result<Vec<StreamEvent>> + Send + 'static,
    ) -> Result<Vec<StreamEvent>> {
        let mut session = self
            .session
            .take()
            .ok_or_else(|| Error::internal("the stream session was lost"))?;
        let (session, out) = tokio::task::spawn_blocking(move || {
            let out = f(session.as_mut());
            (session, out)
        })
        .await
        .map_err(|e| Error::internal(format!("the stream session failed: {e}")))?;
        self.session = Some(session);
        out
    }

    /// Sends the events the client asked for; false when it is gone.
    async fn send(&mut self, events: &[StreamEvent]) -> bool {
        let s = &self.settings;
        let results: Vec<_> = events
            .iter()
            .filter(|e| s.interim || e.kind == StreamEventKind::Final)
            .map(|e| {
                let mut r = convert::streaming_result(e, s.words, 0.0, self.seconds, &s.language);
                r.alternatives.iter_mut().for_each(|a| s.text.apply(a));
                r
            })
            // A final with no words (silence, or punctuation only once it is taken out) is none.
            .filter(|r| {
                !(r.is_final
                    && r.alternatives
                        .iter()
                        .all(|a| a.transcript.trim().is_empty()))
            })
            .collect();
        if results.is_empty() {
            return !self.tx.is_closed();
        }
        let response = StreamingRecognizeResponse {
            results,
            id: self.id.clone(),
        };
        self.tx.send(Ok(response)).await.is_ok()
    }
}

/// Offset of the samples in `bytes` when they start with a RIFF/WAVE header that holds its
/// `data` chunk (a client sending a WAV file's bytes as they are).
fn wav_data(bytes: &[u8]) -> Option<usize> {
    if bytes.len() < 12 || &bytes[..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return None;
    }
    let mut at = 12;
    while at + 8 <= bytes.len() {
        let id = &bytes[at..at + 4];
        let size = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().ok()?) as usize;
        if id == b"data" {
            return Some(at + 8);
        }
        at = at.checked_add(8 + size + (size & 1))?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::wav_data;

    #[test]
    fn a_wav_header_is_skipped() {
        let mut wav = b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0".to_vec();
        wav.extend([0u8; 16]);
        wav.extend(b"data\x04\0\0\0");
        wav.extend([1, 2, 3, 4]);
        assert_eq!(wav_data(&wav), Some(44));
        assert_eq!(wav_data(&[1, 2, 3, 4]), None);
    }
}
