//! Live transcription over a WebSocket: `GET /v1/stream`.
//!
//! One socket is one session. The conversation:
//!
//! 1. **Connect** with the same `Authorization: Bearer <key>` header as every other route
//!    (browsers cannot set headers on a WebSocket: put the server behind a proxy that adds
//!    it, or run without a key on a trusted network). Settings may ride on the query string:
//!    `?encoding=i16_le|f32_le&sample_rate=16000&language=en`. A full server (`max_streams`
//!    open) refuses the upgrade with 503 and the usual JSON error body; a model that cannot
//!    stream answers 501.
//! 2. The server sends `{"type":"ready","id","model","encoding","sample_rate","max_stream_seconds"}`.
//! 3. Optionally, before the first audio of an utterance, the client sends
//!    `{"type":"config","encoding":"f32_le","sample_rate":48000,"language":"en"}` (any subset);
//!    the server answers `{"type":"config",…}` with the settings now in force.
//! 4. The client sends **binary** frames of little-endian mono PCM (`i16_le` by default, or
//!    `f32_le`), any size, whole samples only. Audio at another rate than 16 kHz is resampled
//!    as it arrives. The server answers with events as they come:
//!    `{"type":"partial"|"final","text","start","end","words":[{"word","start","end"}]}`
//!    (times in seconds from the start of the utterance). A `partial` is replaced by the next
//!    partial or final; a `final` never changes.
//! 5. `{"type":"end"}` ends the utterance: the server flushes the audio not yet decoded, sends
//!    the remaining events, then `{"type":"done"}`. The socket stays open for another utterance
//!    (times restart at 0); close it when finished. Closing without `end` drops the session and
//!    its pending audio.
//!
//! Errors arrive as `{"type":"error","error":{"type","message"}}` with the stable kinds of the
//! HTTP error bodies. A bad frame or message (a partial sample, NaN, unknown JSON, `config`
//! in the middle of an utterance) is answered with an error and skipped; the session goes on.
//! Going over `max_stream_seconds` (audio over the socket's lifetime) sends a `limit_exceeded`
//! error, then the final events of the audio accepted so far and `done`, then closes with 1008.
//! A server shutdown ends the utterance the same way (events, `done`) and closes with 1001.
//!
//! Capacity ([`load`]): while an open stream is more than `stream_admit_lag_s` behind real time
//! the upgrade is refused with 503, and that stream gets `{"type":"lag","seconds",
//! "max_lag_seconds"}` events (at most every 2 s). A stream more than `stream_max_lag_s` behind
//! (the newest such, one every 2 s, never the only open stream) gets an `overloaded` error, the
//! finals of what was transcribed, `done`, and close 1013; its unread audio is dropped.
//!
//! The backend's session calls block while the model runs, so they run on tokio's blocking
//! pool; a socket handles one message at a time, which also paces a client that sends faster
//! than the model decodes (TCP backpressure).

pub(crate) mod denoise;
pub(crate) mod load;
pub(crate) mod protocol;
pub(crate) mod resample;
pub(crate) mod socket;
