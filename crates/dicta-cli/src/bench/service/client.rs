//! The clients of a service benchmark: request bodies prepared once before the runs, then
//! `concurrency` clients that take requests from a shared queue and time them.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use base64::Engine as _;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

use super::realtime::RealtimeAudio;
use super::summary::{Outcome, RequestRecord};
use super::{Endpoint, WireEncoding};
use crate::bench::workload::{item_path, WorkloadItem};

/// One request, ready to send.
pub struct Prepared {
    /// Input id.
    pub id: String,
    /// Audio seconds (decoded length at 16 kHz).
    pub audio_seconds: f64,
    body: Body,
}

impl Prepared {
    /// The WebSocket frames of a request prepared for the stream endpoint.
    pub fn frames(&self) -> Option<&[Bytes]> {
        match &self.body {
            Body::Frames(f) => Some(f),
            _ => None,
        }
    }
}

enum Body {
    /// OpenAI multipart: the file as it is on disk.
    File { name: String, bytes: Bytes },
    /// `/transcribe` JSON.
    Json(Bytes),
    /// `/v1/transcriptions/raw` body.
    Pcm(Bytes),
    /// WebSocket frames of `chunk` audio each.
    Frames(Vec<Bytes>),
    /// A Realtime session's append events.
    Realtime(RealtimeAudio),
}

/// How the clients talk to the server.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `http://host:port`.
    pub base: String,
    pub endpoint: Endpoint,
    pub encoding: WireEncoding,
    /// Streams: send each frame at its real-time offset.
    pub realtime: bool,
    /// Streams: audio per frame.
    pub chunk: Duration,
    pub api_key: Option<String>,
    /// Client-side limit per request.
    pub timeout: Duration,
}

/// Reads and encodes every input of the workload for `cfg.endpoint` (done once, untimed).
pub fn prepare(
    manifest: &Path,
    items: &[WorkloadItem],
    cfg: &ClientConfig,
) -> Result<Vec<Prepared>> {
    let b64 = base64::engine::general_purpose::STANDARD;
    items
        .iter()
        .map(|item| {
            let path = item_path(manifest, item);
            let samples = dicta_audio::decode::load_path(&path)
                .with_context(|| format!("cannot decode {}", path.display()))?;
            let audio_seconds = samples.len() as f64 / dicta_audio::SAMPLE_RATE as f64;
            let body = match cfg.endpoint {
                Endpoint::Openai => Body::File {
                    name: path
                        .file_name()
                        .map_or("audio.wav".into(), |n| n.to_string_lossy().into_owned()),
                    bytes: std::fs::read(&path)?.into(),
                },
                Endpoint::Transcribe => {
                    let audio = b64.encode(std::fs::read(&path)?);
                    let body = json!({
                        "inputs": [{"id": item.id, "audio_base64": audio}],
                        "parameters": {"language": "en"},
                    });
                    Body::Json(serde_json::to_vec(&body)?.into())
                }
                Endpoint::Raw => Body::Pcm(pcm(&samples, cfg.encoding).into()),
                Endpoint::Realtime => {
                    Body::Realtime(super::realtime::prepare(&samples, cfg.chunk)?)
                }
                Endpoint::Stream => {
                    let per = (cfg.chunk.as_secs_f64() * dicta_audio::SAMPLE_RATE as f64).round();
                    Body::Frames(
                        samples
                            .chunks((per as usize).max(1))
                            .map(|c| pcm(c, cfg.encoding).into())
                            .collect(),
                    )
                }
            };
            Ok(Prepared {
                id: item.id.clone(),
                audio_seconds,
                body,
            })
        })
        .collect()
}

/// Little-endian PCM bytes of `samples` (in [-1, 1]) in `encoding`.
pub fn pcm(samples: &[f32], encoding: WireEncoding) -> Vec<u8> {
    match encoding {
        // The inverse of the server's `s / 32768`, so s16 sources round-trip exactly.
        WireEncoding::I16Le => samples
            .iter()
            .flat_map(|&x| ((x * 32768.0).round().clamp(-32768.0, 32767.0) as i16).to_le_bytes())
            .collect(),
        WireEncoding::F32Le => samples.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// Sends every request once with `concurrency` clients; returns the records in request order and
/// the wall time from the first send to the last answer.
pub async fn run_all(
    http: &reqwest::Client,
    cfg: &ClientConfig,
    requests: &Arc<Vec<Prepared>>,
    concurrency: usize,
) -> (Vec<RequestRecord>, f64) {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (http, cfg, requests, next) =
            (http.clone(), cfg.clone(), requests.clone(), next.clone());
        clients.spawn(async move {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(p) = requests.get(i) else { break };
                done.push((i, timed(&http, &cfg, p).await));
            }
            done
        });
    }
    let mut all = Vec::with_capacity(requests.len());
    while let Some(r) = clients.join_next().await {
        // A client task only ends by finishing its loop; a panic there is a bug worth seeing.
        all.extend(r.expect("a benchmark client panicked"));
    }
    let wall = start.elapsed().as_secs_f64();
    all.sort_by_key(|(i, _)| *i);
    (all.into_iter().map(|(_, r)| r).collect(), wall)
}

/// Sends one request and waits for its whole answer, up to the client limit `cfg.timeout`
/// (past it the request counts as failed).
pub async fn timed(http: &reqwest::Client, cfg: &ClientConfig, p: &Prepared) -> RequestRecord {
    match tokio::time::timeout(cfg.timeout, one(http, cfg, p)).await {
        Ok(r) => r,
        Err(_) => record(
            p,
            Outcome::Failed,
            None,
            cfg.timeout.as_secs_f64(),
            Err(format!(
                "no answer within the client limit of {} s",
                cfg.timeout.as_secs()
            )),
        ),
    }
}

/// A request's record with nothing streamed: `text` is the transcript or the error.
pub(super) fn record(
    p: &Prepared,
    outcome: Outcome,
    status: Option<u16>,
    latency: f64,
    text: std::result::Result<String, String>,
) -> RequestRecord {
    let (text, error) = match text {
        Ok(t) => (Some(t), None),
        Err(e) => (None, Some(e)),
    };
    RequestRecord {
        id: p.id.clone(),
        outcome,
        http_status: status,
        audio_seconds: p.audio_seconds,
        latency_s: latency,
        first_partial_s: None,
        finalize_s: None,
        partials: None,
        text,
        error,
    }
}

async fn one(http: &reqwest::Client, cfg: &ClientConfig, p: &Prepared) -> RequestRecord {
    let base = &cfg.base;
    let start = Instant::now();
    let req = match &p.body {
        Body::File { name, bytes } => {
            let file =
                reqwest::multipart::Part::stream_with_length(bytes.clone(), bytes.len() as u64)
                    .file_name(name.clone())
                    .mime_str("audio/wav")
                    .expect("a valid mime type");
            let form = reqwest::multipart::Form::new()
                .part("file", file)
                .text("model", "whisper-1")
                .text("language", "en")
                .text("response_format", "json");
            http.post(format!("{base}/v1/audio/transcriptions"))
                .multipart(form)
        }
        Body::Json(body) => http
            .post(format!("{base}/transcribe"))
            .header("content-type", "application/json")
            .body(body.clone()),
        Body::Pcm(body) => http
            .post(format!("{base}/v1/transcriptions/raw"))
            .query(&[
                ("encoding", cfg.encoding.as_str()),
                ("sample_rate", "16000"),
                ("language", "en"),
                ("id", p.id.as_str()),
            ])
            .body(body.clone()),
        Body::Frames(frames) => return stream(cfg, p, frames).await,
        Body::Realtime(audio) => return super::realtime::session(cfg, p, audio).await,
    };
    let req = match &cfg.api_key {
        Some(k) => req.bearer_auth(k),
        None => req,
    };
    let answer = async {
        let r = req.send().await?;
        let status = r.status().as_u16();
        let body = r.bytes().await?;
        Ok::<_, reqwest::Error>((status, body))
    }
    .await;
    let latency = start.elapsed().as_secs_f64();
    match answer {
        Err(e) => record(p, Outcome::Failed, None, latency, Err(e.to_string())),
        Ok((status, body)) => {
            let text = transcript(cfg.endpoint, status, &body);
            let outcome = if text.is_ok() {
                Outcome::Ok
            } else {
                Outcome::of_status(status)
            };
            record(p, outcome, Some(status), latency, text)
        }
    }
}

/// The transcript in a 200 answer of `endpoint`, or what the answer says instead.
fn transcript(endpoint: Endpoint, status: u16, body: &[u8]) -> std::result::Result<String, String> {
    let v: Value = serde_json::from_slice(body).map_err(|_| {
        format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        )
    })?;
    if status != 200 {
        return Err(format!("HTTP {status}: {v}"));
    }
    let text = match endpoint {
        Endpoint::Openai => v.get("text"),
        _ => {
            let first = &v["results"][0];
            if let Some(e) = first.get("error") {
                return Err(format!("per-input error: {e}"));
            }
            first.get("text")
        }
    };
    text.and_then(Value::as_str)
        .map(|t| t.trim().to_string())
        .ok_or_else(|| format!("HTTP {status} without a transcript: {v}"))
}

/// One WebSocket stream: config, the frames (paced at real time or not), `end`; partial and
/// final events are read while sending, up to the server's `done`; then close.
async fn stream(cfg: &ClientConfig, p: &Prepared, frames: &[Bytes]) -> RequestRecord {
    let start = Instant::now();
    let fail = |status: Option<u16>, e: String| {
        record(
            p,
            Outcome::Failed,
            status,
            start.elapsed().as_secs_f64(),
            Err(e),
        )
    };
    let ws = match connect(cfg, "/v1/stream?language=en").await {
        Ok(ws) => ws,
        Err((status, e)) => {
            let mut rec = fail(status, e);
            if let Some(s) = status {
                rec.outcome = Outcome::of_status(s);
            }
            return rec;
        }
    };
    let (mut tx, mut rx) = ws.split();
    let chunk = cfg.chunk;
    let realtime = cfg.realtime;
    let encoding = cfg.encoding.as_str();
    let send = async move {
        let config =
            json!({"type": "config", "encoding": encoding, "sample_rate": 16000, "language": "en"});
        tx.send(Message::text(config.to_string())).await?;
        for (k, frame) in frames.iter().enumerate() {
            if realtime {
                tokio::time::sleep_until((start + chunk * k as u32).into()).await;
            }
            tx.send(Message::binary(frame.clone())).await?;
        }
        if realtime {
            // The last frame's audio has "happened" only once its duration has passed.
            tokio::time::sleep_until((start + chunk * frames.len() as u32).into()).await;
        }
        tx.send(Message::text(json!({"type": "end"}).to_string()))
            .await?;
        Ok::<_, tokio_tungstenite::tungstenite::Error>((Instant::now(), tx))
    };
    let receive = StreamEvents::read(&mut rx, start);
    let (sent, ev) = tokio::join!(send, receive);
    let sent = match sent {
        Ok((ended, mut tx)) => {
            // The utterance is over: a polite close, and its answer read (briefly), so that
            // the server has let this stream go before the client opens its next one.
            let _ = tx.send(Message::Close(None)).await;
            let drain = async { while let Some(Ok(_)) = rx.next().await {} };
            let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
            Ok(ended)
        }
        Err(e) => Err(e),
    };
    let mut rec = match (sent, ev.error.clone(), ev.done) {
        (Err(e), _, _) => fail(Some(101), format!("sending: {e}")),
        (_, Some(e), _) => fail(Some(101), e),
        (Ok(_), None, None) => fail(Some(101), "the stream ended without `done`".into()),
        (Ok(ended), None, Some(done)) => {
            // Complete when `done` arrives: every final event is in by then.
            let mut r = record(p, Outcome::Ok, Some(101), done, Ok(ev.finals.join(" ")));
            r.finalize_s = Some((done - ended.duration_since(start).as_secs_f64()).max(0.0));
            r
        }
    };
    if rec.outcome == Outcome::Failed {
        if let Some(o) = ev.rejection() {
            rec.outcome = o;
        }
    }
    rec.first_partial_s = ev.first_partial;
    rec.partials = Some(ev.partials);
    rec
}

/// An open `/v1/stream` WebSocket.
pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens the WebSocket at `route` (path and query, e.g. `/v1/stream?language=en`) with the key
/// as a bearer header; on failure, the HTTP status of a refused upgrade (if any) and what went
/// wrong.
pub async fn connect(
    cfg: &ClientConfig,
    route: &str,
) -> std::result::Result<Socket, (Option<u16>, String)> {
    let url = format!("{}{route}", cfg.base.replacen("http", "ws", 1));
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|e| (None, format!("bad URL {url}: {e}")))?;
    if let Some(k) = &cfg.api_key {
        let v = format!("Bearer {k}")
            .parse()
            .map_err(|e| (None, format!("API key is not a header value: {e}")))?;
        request.headers_mut().insert("authorization", v);
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
            let status = r.status().as_u16();
            let body = r
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default()
                .into_owned();
            Err((Some(status), format!("HTTP {status}: {body}")))
        }
        Err(e) => Err((None, format!("WebSocket connect: {e}"))),
    }
}

/// What a stream's text messages said.
#[derive(Debug, Default)]
pub struct StreamEvents {
    pub partials: usize,
    pub first_partial: Option<f64>,
    pub finals: Vec<String>,
    /// When the server said `done`: every event of the utterance has arrived.
    pub done: Option<f64>,
    pub error: Option<String>,
    /// `error.type` of the first error message.
    pub error_kind: Option<String>,
    /// Close code, when the server closed the socket.
    pub close_code: Option<u16>,
}

impl StreamEvents {
    /// Reads the server's events from `rx` (times in seconds since `start`) up to `done`, an
    /// error event, a close frame or a broken socket.
    pub async fn read<S>(rx: &mut S, start: Instant) -> Self
    where
        S: futures_util::Stream<Item = tungstenite::Result<Message>> + Unpin,
    {
        let mut ev = Self::default();
        while let Some(msg) = rx.next().await {
            match msg {
                Ok(Message::Text(t)) => {
                    ev.absorb(&t, start.elapsed().as_secs_f64());
                    if ev.done.is_some() || ev.error.is_some() {
                        break;
                    }
                }
                Ok(Message::Close(frame)) => {
                    if let Some(f) = &frame {
                        ev.close_code = Some(u16::from(f.code));
                    }
                    ev.error
                        .get_or_insert(format!("closed before `done`: {frame:?}"));
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    ev.error.get_or_insert(format!("WebSocket: {e}"));
                    break;
                }
            }
        }
        ev
    }

    /// The rejection this stream met, if any: no room for a session (close 1013 "try again
    /// later", or an `overloaded` error) is a 503; `limit_exceeded` is a 413.
    fn rejection(&self) -> Option<Outcome> {
        match (self.error_kind.as_deref(), self.close_code) {
            (Some("overloaded"), _) | (_, Some(1013)) => Some(Outcome::Rejected503),
            (Some("limit_exceeded"), _) => Some(Outcome::Rejected413),
            _ => None,
        }
    }

    /// Takes one text message received `at` seconds after the stream started.
    pub fn absorb(&mut self, text: &str, at: f64) {
        let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        match v["type"].as_str() {
            Some("partial") => {
                self.partials += 1;
                self.first_partial.get_or_insert(at);
            }
            Some("final") => {
                let t = v["text"].as_str().unwrap_or_default().trim();
                if !t.is_empty() {
                    self.finals.push(t.to_string());
                }
            }
            Some("done") => self.done = Some(at),
            Some("error") => note_error(&mut self.error, &mut self.error_kind, &v),
            _ => {}
        }
    }
}

/// Keeps a stream's first server error: the `error` event as text, and its `error.type` (the
/// first one given).
pub(super) fn note_error(error: &mut Option<String>, kind: &mut Option<String>, v: &Value) {
    error.get_or_insert_with(|| format!("server error: {v}"));
    if let Some(k) = v["error"]["type"].as_str() {
        kind.get_or_insert_with(|| k.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i16_wire_round_trips_s16_samples() {
        let s16: Vec<i16> = vec![0, 1, -1, 32767, -32768, 1234];
        let f: Vec<f32> = s16.iter().map(|&s| s as f32 / 32768.0).collect();
        let bytes = pcm(&f, WireEncoding::I16Le);
        let back: Vec<i16> = bytes
            .chunks(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(back, s16);
        // Out-of-range floats saturate instead of wrapping.
        assert_eq!(pcm(&[2.0, -2.0], WireEncoding::I16Le), [255, 127, 0, 128]);
        assert_eq!(pcm(&[0.5], WireEncoding::F32Le), 0.5f32.to_le_bytes());
    }

    #[test]
    fn transcripts_are_read_per_endpoint() {
        let ok = br#"{"text":" Hello there. "}"#;
        assert_eq!(
            transcript(Endpoint::Openai, 200, ok).unwrap(),
            "Hello there."
        );
        let batch = br#"{"results":[{"id":"a","text":"hi"}]}"#;
        assert_eq!(transcript(Endpoint::Transcribe, 200, batch).unwrap(), "hi");
        let per_input = br#"{"results":[{"id":"a","error":{"type":"corrupt_input"}}]}"#;
        assert!(transcript(Endpoint::Raw, 200, per_input)
            .unwrap_err()
            .contains("corrupt_input"));
        let busy = br#"{"error":{"type":"overloaded","message":"queue full"}}"#;
        assert!(transcript(Endpoint::Openai, 503, busy)
            .unwrap_err()
            .contains("503"));
        assert!(transcript(Endpoint::Openai, 502, b"<html>")
            .unwrap_err()
            .contains("<html>"));
    }

    #[test]
    fn stream_events_count_partials_and_join_finals() {
        let mut ev = StreamEvents::default();
        ev.absorb(r#"{"type":"partial","text":"he"}"#, 0.5);
        ev.absorb(r#"{"type":"partial","text":"hello"}"#, 0.9);
        ev.absorb(r#"{"type":"final","text":"hello world"}"#, 1.2);
        ev.absorb(r#"{"type":"final","text":" again "}"#, 2.0);
        ev.absorb(r#"{"type":"final","text":""}"#, 2.5);
        assert_eq!(ev.partials, 2);
        assert_eq!(ev.first_partial, Some(0.5));
        assert_eq!(ev.finals, ["hello world", "again"]);
        assert!(ev.error.is_none() && ev.done.is_none());
        ev.absorb(r#"{"type":"done"}"#, 2.6);
        assert_eq!(ev.done, Some(2.6));
        assert_eq!(ev.rejection(), None);
        ev.absorb(
            r#"{"type":"error","error":{"type":"limit_exceeded","message":"boom"}}"#,
            3.0,
        );
        assert_eq!(ev.rejection(), Some(Outcome::Rejected413));
        assert!(ev.error.unwrap().contains("boom"));
        let full = StreamEvents {
            close_code: Some(1013),
            ..Default::default()
        };
        assert_eq!(full.rejection(), Some(Outcome::Rejected503));
    }
}
