//! `POST /v1/audio/transcriptions` with `stream=true`: OpenAI's server-sent events. Each
//! segment's text comes as a `transcript.text.delta` as soon as its window is decoded (window by
//! window in Whisper's sequential mode; at the end where segments are only final then: VAD
//! filter, diarization, batched long-form), then `transcript.text.done` with the whole text; the
//! deltas put together are that text. The OpenAI SDKs read them with
//! `client.audio.transcriptions.create(..., stream=True)`. With `response_format=diarized_json`
//! each segment's delta carries its `segment_id` and is followed by a `transcript.text.segment`
//! event with its times and speaker (as OpenAI's diarizing model streams). With
//! `include[]=logprobs` each delta carries the `logprobs` of its tokens and `done` all of them.
//!
//! Errors before the first segment (the upload, the options, a full queue) are the route's
//! usual JSON errors with their status; one after it is an event `{"type": "error", "error":
//! {"type", "message"}}`, which the SDKs raise. A client that goes away cancels the work, and so
//! does `request_timeout_s` (a `timeout` error event once the response has started: the
//! server's timeout answers only until the first event).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;

use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use dicta_core::{Error, Result, Segment};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::{RequestId, Shared};
use crate::audio::RawInput;
use crate::backend::{RequestOptions, SegmentSink};
use crate::error::ApiError;
use crate::pipeline::{TranscribeOutcome, TranscribeRequest};

type Run = Pin<Box<dyn Future<Output = Result<TranscribeOutcome>> + Send>>;

/// What the event stream still has to send.
struct State {
    /// The transcription, until it has answered.
    run: Option<Run>,
    /// Segments from the backend as they become final.
    segments: UnboundedReceiver<Vec<Segment>>,
    /// Segments sent as deltas so far.
    sent: usize,
    /// Events ready to go.
    queue: VecDeque<Value>,
    /// `request_timeout_s` from the start of the request.
    deadline: tokio::time::Instant,
    /// What the client is told when it passes.
    timeout: Error,
    /// `diarized_json`: segment events with speakers, labelled as the whole answer labels them.
    diarized: Option<crate::format::SpeakerLetters>,
    /// `include[]=logprobs`: deltas and `done` carry their tokens' log-probabilities.
    logprobs: bool,
}

impl State {
    /// An `error` event: the WebSocket stream's error message, the same JSON.
    fn error(&mut self, e: &Error) {
        let message = crate::stream::protocol::ServerMessage::error(e);
        self.queue
            .push_back(serde_json::to_value(message).unwrap_or(Value::Null));
    }

    /// Waits for what the request does next: segments (queued as deltas) or the deadline (the
    /// work dropped, which cancels it, and a `timeout` event) give `None`; its answer is
    /// returned. `None` at once when it has answered.
    async fn next_step(&mut self) -> Option<Result<TranscribeOutcome>> {
        let run = self.run.as_mut()?;
        tokio::select! {
            biased;
            Some(segments) = self.segments.recv() => {
                self.deltas(&segments);
                None
            }
            out = run => {
                self.run = None;
                Some(out)
            }
            _ = tokio::time::sleep_until(self.deadline) => {
                self.run = None;
                let timeout = self.timeout.clone();
                self.error(&timeout);
                None
            }
        }
    }

    fn deltas(&mut self, segments: &[Segment]) {
        for s in segments {
            let text = crate::format::delta_text(s, self.sent == 0);
            let index = self.sent;
            self.sent += 1;
            match &mut self.diarized {
                Some(letters) => {
                    let speaker = letters.label(s.speaker.as_deref());
                    let segment = crate::format::diarized_segment(index, s, speaker);
                    self.queue.push_back(json!({
                        "type": "transcript.text.delta",
                        "delta": text,
                        "segment_id": segment["id"],
                    }));
                    self.queue.push_back(segment);
                }
                None if !text.is_empty() => {
                    let mut delta = json!({"type": "transcript.text.delta", "delta": text});
                    if self.logprobs {
                        delta["logprobs"] = crate::format::logprobs(std::slice::from_ref(s));
                    }
                    self.queue.push_back(delta)
                }
                None => {}
            }
        }
    }

    /// The answer: any segments the sink did not carry, then `done`; or the error.
    fn finish(&mut self, out: Result<TranscribeOutcome>) {
        while let Ok(segments) = self.segments.try_recv() {
            self.deltas(&segments);
        }
        let transcript = out.and_then(|o| {
            o.results
                .into_iter()
                .next()
                .unwrap_or_else(|| Err(Error::internal("the backend returned no result")))
        });
        match transcript {
            Ok(t) => {
                self.deltas(t.segments.get(self.sent..).unwrap_or_default());
                let mut done = json!({"type": "transcript.text.done", "text": t.text.trim()});
                if self.logprobs {
                    done["logprobs"] = crate::format::logprobs(&t.segments);
                }
                self.queue.push_back(done);
            }
            Err(e) => self.error(&e),
        }
    }
}

/// Runs the request and answers with its events (see the module docs).
pub(crate) async fn events(
    s: Shared,
    id: RequestId,
    input: RawInput,
    options: RequestOptions,
    model: Option<String>,
    diarized: bool,
) -> std::result::Result<Response, ApiError> {
    let logprobs = options.token_logprobs;
    let (tx, rx) = unbounded_channel::<Vec<Segment>>();
    let sink = SegmentSink::new(move |segments| {
        // The receiver is gone only when the client is; the work is being cancelled then.
        let _ = tx.send(segments.to_vec());
    });
    let request = TranscribeRequest {
        request_id: id.0,
        inputs: vec![input],
        options,
        model,
        segments: Some(sink),
    };
    let deadline = tokio::time::Instant::now() + s.cfg.request_timeout();
    let timeout = s.cfg.request_timeout_error();
    let run: Run = Box::pin(async move { s.pipeline.run(request).await });
    let mut state = State {
        run: Some(run),
        segments: rx,
        sent: 0,
        queue: VecDeque::new(),
        deadline,
        timeout,
        diarized: diarized.then(crate::format::SpeakerLetters::default),
        logprobs,
    };
    // Wait for the first segments (or the answer) before choosing the response: an error that
    // comes first is an ordinary HTTP error. (The server's own timeout, started earlier, ends
    // this wait before the deadline here can.)
    if let Some(out) = state.next_step().await {
        let out = out?;
        if let Some(Err(e)) = out.results.first() {
            return Err(e.clone().into());
        }
        state.finish(Ok(out));
    }
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(v) = st.queue.pop_front() {
                let event = Event::default().data(v.to_string());
                return Some((Ok::<_, Infallible>(event), st));
            }
            st.run.as_ref()?;
            if let Some(out) = st.next_step().await {
                st.finish(out);
            }
        }
    });
    Ok(Sse::new(stream).into_response())
}
