//! The `realtime` endpoint's client: each input is one OpenAI Realtime transcription session
//! (`GET /v1/realtime?intent=transcription`), as a caller of a voice application opens it.
//!
//! The input is sent as 24 kHz 16-bit PCM `input_audio_buffer.append` events of `chunk` audio
//! each (at real time or as fast as possible). When the server offers `server_vad` turn
//! detection, 1 s of silence follows the speech so that the detector ends its last turn, and the
//! server's turns are the items; without it the client commits the buffer by hand. The session
//! is done when every committed item is `completed` (or `failed`); its text is the items'
//! transcripts in the order they were committed, and `finalize_s` is how long after the end of
//! the input's audio the last transcript arrived — what a caller waits from the moment they stop
//! talking (with `server_vad` that includes the detector's `silence_duration_ms`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use super::client::{connect, note_error, pcm, record, ClientConfig, Prepared};
use super::summary::{Outcome, RequestRecord};
use super::WireEncoding;

/// The rate of `audio/pcm`, the Realtime API's default input format.
const RATE: u32 = 24_000;
/// Silence after the speech when the server detects turns (its default `silence_duration_ms`
/// is 500 ms).
const TAIL_SECONDS: f64 = 1.0;

/// One session's messages, prepared before the runs.
pub struct RealtimeAudio {
    /// `input_audio_buffer.append` messages of the input.
    appends: Vec<String>,
    /// Those of the silence sent after it when the server detects turns.
    tail: Vec<String>,
}

/// The input (16 kHz) as append messages of `chunk` audio each, at 24 kHz.
pub fn prepare(samples: &[f32], chunk: Duration) -> Result<RealtimeAudio> {
    let audio = dicta_audio::resample::resample(samples, 16_000, RATE)?;
    let per = ((chunk.as_secs_f64() * f64::from(RATE)).round() as usize).max(1);
    let append = |c: &[f32]| {
        let b64 = base64::engine::general_purpose::STANDARD.encode(pcm(c, WireEncoding::I16Le));
        json!({"type": "input_audio_buffer.append", "audio": b64}).to_string()
    };
    let silence = vec![0.0f32; (TAIL_SECONDS * f64::from(RATE)) as usize];
    Ok(RealtimeAudio {
        appends: audio.chunks(per).map(append).collect(),
        tail: silence.chunks(per).map(append).collect(),
    })
}

/// What the session's events said so far.
#[derive(Default)]
struct Items {
    /// Item ids in the order they were committed.
    committed: Vec<String>,
    /// Transcripts of the items done (`None`: failed).
    done: HashMap<String, Option<String>>,
    /// A turn has started and not stopped.
    speaking: bool,
    /// The session's turn detection (from `session.created`).
    detects_turns: Option<bool>,
    /// `session.updated` answered the barrier sent after the audio.
    barrier: bool,
    /// When the last item was done (seconds since the start).
    last_done: Option<f64>,
    error: Option<String>,
    error_kind: Option<String>,
}

impl Items {
    fn absorb(&mut self, text: &str, at: f64) {
        let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        let item = || v["item_id"].as_str().unwrap_or_default().to_string();
        match v["type"].as_str().unwrap_or_default() {
            "session.created" => {
                self.detects_turns =
                    Some(!v["session"]["audio"]["input"]["turn_detection"].is_null())
            }
            "session.updated" => self.barrier = true,
            "input_audio_buffer.speech_started" => self.speaking = true,
            "input_audio_buffer.speech_stopped" => self.speaking = false,
            "input_audio_buffer.committed" => {
                self.speaking = false;
                self.committed.push(item());
            }
            "conversation.item.input_audio_transcription.completed" => {
                let t = v["transcript"]
                    .as_str()
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                self.done.insert(item(), Some(t));
                self.last_done = Some(at);
            }
            "conversation.item.input_audio_transcription.failed" => {
                self.done.insert(item(), None);
                self.last_done = Some(at);
                self.error
                    .get_or_insert_with(|| format!("item failed: {}", v["error"]));
                // A failed item's kind is its `code` (`overloaded` when the queue was full).
                if let Some(code) = v["error"]["code"].as_str() {
                    self.error_kind.get_or_insert_with(|| code.to_string());
                }
            }
            "error" => note_error(&mut self.error, &mut self.error_kind, &v),
            _ => {}
        }
    }

    /// The transcripts of the items done, in the order they were committed.
    fn text(&self) -> String {
        let texts: Vec<&str> = self
            .committed
            .iter()
            .filter_map(|id| self.done.get(id)?.as_deref())
            .filter(|t| !t.is_empty())
            .collect();
        texts.join(" ")
    }

    /// Every committed item is done (and the audio has all been seen).
    fn finished(&self) -> bool {
        self.barrier && !self.speaking && self.committed.iter().all(|id| self.done.contains_key(id))
    }
}

/// One session: `session.created`, the appends, then the turns' transcripts.
pub async fn session(cfg: &ClientConfig, p: &Prepared, audio: &RealtimeAudio) -> RequestRecord {
    let start = Instant::now();
    let ws = match connect(cfg, "/v1/realtime?intent=transcription").await {
        Ok(ws) => ws,
        Err((status, e)) => {
            let outcome = status.map_or(Outcome::Failed, Outcome::of_status);
            return record(p, outcome, status, start.elapsed().as_secs_f64(), Err(e));
        }
    };
    let (mut tx, mut rx) = ws.split();
    let mut items = Items::default();
    let result = run(cfg, audio, start, &mut tx, &mut rx, &mut items).await;
    let _ = tx.send(Message::Close(None)).await;
    let latency = start.elapsed().as_secs_f64();
    // The handshake's status: the session itself was accepted.
    let status = Some(101);
    match result.and_then(|ended| items.error.clone().map_or(Ok(ended), Err)) {
        Ok(ended) => {
            let mut rec = record(p, Outcome::Ok, status, latency, Ok(items.text()));
            rec.finalize_s = Some((items.last_done.unwrap_or(latency) - ended).max(0.0));
            rec
        }
        Err(e) => {
            let outcome = if items.error_kind.as_deref() == Some("overloaded") {
                Outcome::Rejected503
            } else {
                Outcome::Failed
            };
            record(p, outcome, status, latency, Err(e))
        }
    }
}

type Tx = futures_util::stream::SplitSink<super::client::Socket, Message>;
type Rx = futures_util::stream::SplitStream<super::client::Socket>;

/// Sends the audio while reading events; returns when the input's audio ended (seconds since
/// `start`) once every item is done.
async fn run(
    cfg: &ClientConfig,
    audio: &RealtimeAudio,
    start: Instant,
    tx: &mut Tx,
    rx: &mut Rx,
    items: &mut Items,
) -> std::result::Result<f64, String> {
    // The session's turn detection decides whether the tail of silence goes out.
    while items.detects_turns.is_none() {
        next(rx, start, items).await?;
    }
    let detects = items.detects_turns == Some(true);
    let tail: &[String] = if detects { &audio.tail } else { &[] };
    let chunk = cfg.chunk;
    let mut ended = 0.0;
    for (k, msg) in audio.appends.iter().chain(tail).enumerate() {
        if cfg.realtime {
            let due = start + chunk * k as u32;
            // Read what arrives while waiting for the next chunk's time.
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(due.into()) => break,
                    r = next(rx, start, items) => r?,
                }
            }
        }
        if k == audio.appends.len() {
            // The input's audio is over (paced: its last chunk's time has passed).
            ended = start.elapsed().as_secs_f64();
        }
        tx.send(Message::text(msg.clone()))
            .await
            .map_err(|e| format!("sending: {e}"))?;
        if items.error.is_some() {
            return Err(items.error.clone().unwrap_or_default());
        }
    }
    if cfg.realtime {
        // The last chunk's audio has "happened" only once its duration has passed.
        let all = audio.appends.len() + tail.len();
        tokio::time::sleep_until((start + chunk * all as u32).into()).await;
    }
    if tail.is_empty() {
        ended = start.elapsed().as_secs_f64();
    }
    if !detects {
        send(tx, json!({"type": "input_audio_buffer.commit"})).await?;
    }
    // Events follow the client's messages in order: once this is answered, every append has
    // been heard.
    send(
        tx,
        json!({"type": "session.update", "session": {"type": "transcription"}}),
    )
    .await?;
    while !items.barrier {
        next(rx, start, items).await?;
    }
    if items.speaking {
        // Speech the detector has not ended yet (no pause long enough): commit it by hand.
        send(tx, json!({"type": "input_audio_buffer.commit"})).await?;
        while items.speaking {
            next(rx, start, items).await?;
        }
    }
    while !items.finished() {
        next(rx, start, items).await?;
    }
    Ok(ended)
}

async fn send(tx: &mut Tx, v: Value) -> std::result::Result<(), String> {
    tx.send(Message::text(v.to_string()))
        .await
        .map_err(|e| format!("sending: {e}"))
}

/// Reads the next event into `items`; an error event, a close or a broken socket ends the
/// session.
async fn next(rx: &mut Rx, start: Instant, items: &mut Items) -> std::result::Result<(), String> {
    match rx.next().await {
        Some(Ok(Message::Text(t))) => {
            items.absorb(&t, start.elapsed().as_secs_f64());
            match &items.error {
                Some(e) => Err(e.clone()),
                None => Ok(()),
            }
        }
        Some(Ok(Message::Close(frame))) => Err(format!("closed by the server: {frame:?}")),
        Some(Ok(_)) => Ok(()),
        Some(Err(e)) => Err(format!("WebSocket: {e}")),
        None => Err("the socket ended".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(v: Value) -> String {
        v.to_string()
    }

    #[test]
    fn a_session_is_done_when_every_committed_item_is() {
        let mut it = Items::default();
        let session = json!({"audio": {"input": {"turn_detection": {"type": "server_vad"}}}});
        it.absorb(
            &ev(json!({"type": "session.created", "session": session})),
            0.0,
        );
        assert_eq!(it.detects_turns, Some(true));
        for (t, id) in [
            ("input_audio_buffer.speech_started", "a"),
            ("input_audio_buffer.speech_stopped", "a"),
            ("input_audio_buffer.committed", "a"),
            ("input_audio_buffer.speech_started", "b"),
            ("input_audio_buffer.speech_stopped", "b"),
            ("input_audio_buffer.committed", "b"),
        ] {
            it.absorb(&ev(json!({"type": t, "item_id": id})), 1.0);
        }
        // The second item finishes first; the text keeps the order of the commits.
        let done = "conversation.item.input_audio_transcription.completed";
        it.absorb(
            &ev(json!({"type": done, "item_id": "b", "transcript": " world"})),
            2.0,
        );
        assert!(!it.finished(), "no barrier yet, and item a is not done");
        it.absorb(&ev(json!({"type": "session.updated"})), 2.5);
        assert!(!it.finished(), "item a is not done");
        it.absorb(
            &ev(json!({"type": done, "item_id": "a", "transcript": "hello"})),
            3.0,
        );
        assert!(it.finished());
        assert_eq!(it.last_done, Some(3.0));
        assert_eq!(it.text(), "hello world");
        // A turn still being heard is not finished.
        it.absorb(
            &ev(json!({"type": "input_audio_buffer.speech_started", "item_id": "c"})),
            4.0,
        );
        assert!(!it.finished());
    }

    #[test]
    fn errors_and_failed_items_are_kept() {
        let mut it = Items::default();
        let failed = "conversation.item.input_audio_transcription.failed";
        it.absorb(
            &ev(json!({"type": failed, "item_id": "a", "error": {"message": "x"}})),
            1.0,
        );
        assert_eq!(it.done.get("a"), Some(&None));
        assert!(it.error.is_some());
        assert_eq!(it.error_kind, None);
        // An item the server had no room for: its code says so (the session counts as shed).
        let mut it = Items::default();
        let error = json!({"type": "server_error", "code": "overloaded", "message": "full"});
        it.absorb(
            &ev(json!({"type": failed, "item_id": "a", "error": error})),
            1.0,
        );
        assert_eq!(it.error_kind.as_deref(), Some("overloaded"));
        let mut it = Items::default();
        it.absorb(
            &ev(json!({"type": "error", "error": {"type": "overloaded", "message": "busy"}})),
            1.0,
        );
        assert_eq!(it.error_kind.as_deref(), Some("overloaded"));
    }
}
