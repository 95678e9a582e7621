//! Whisper streaming: the session re-decodes its unconfirmed audio buffer every `step` samples,
//! confirms words with LocalAgreement-2 ([`LocalAgreement`]) and trims the buffer after
//! confirmed segments, so each decode sees at most one 30 s window however long the stream. The
//! decodes of many sessions are batched by the worker.
//!
//! With a voice activity detector ([`super::SessionOptions::vad`]) a session also ends
//! utterances on silence: once `min_silence_duration_ms` of silence follows speech, the buffer
//! is decoded once more right there (not at the next step), every pending word becomes final,
//! and the next utterance starts afresh; and while no utterance is in progress no step calls
//! the model (the buffer keeps only `speech_pad_ms` of audio for the next one).
//!
//! Moonshine streams run the same session logic over [`super::moonshine::MoonshineChunkModel`]
//! with their own geometry ([`WhisperGeometry::for_moonshine`]): a shorter buffer, and cuts at
//! the quietest point before the confirmed text (Moonshine has no timestamps to cut by), so each
//! step re-encodes only the few seconds since the last cut.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use dicta_audio::mel::MelConfig;
use dicta_core::{Error, ErrorKind, Result, Transcript, Word};
use dicta_models::whisper::Whisper;

use super::agreement::LocalAgreement;
use super::placement::{geometry_voicing, words_of};
use super::worker::{StreamModel, Worker};
use super::{Event, EventKind, SAMPLE_RATE};
use crate::vad::{Activity, Endpoint, OnlineVad};
use crate::whisper::{DecodeOptions, InputOptions, WhisperTranscriber};

/// Whisper as a [`StreamModel`]: one call decodes the buffers of many sessions as one batch.
pub struct WhisperChunkModel {
    model: Arc<Whisper>,
    opts: DecodeOptions,
}

impl WhisperChunkModel {
    /// Wraps a loaded model; `opts` apply to every decode (validated here), except that a
    /// buffer's window is never finished in place: its end is where audio stopped arriving, not
    /// the end of the recording, and the next step decodes it again anyway
    /// ([`crate::whisper::FinalWindow::Seek`]).
    pub fn new(model: Arc<Whisper>, mut opts: DecodeOptions) -> Result<Self> {
        opts.validate()?;
        opts.final_window = crate::whisper::FinalWindow::Seek;
        Ok(Self { model, opts })
    }
}

/// One re-decode of a session's buffer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BufferDecode {
    /// The buffer: 16 kHz audio, at most one model window.
    pub audio: Vec<f32>,
    /// Token ids of the buffer's previous hypothesis ([`dicta_core::Segment::tokens`] joined;
    /// empty: none). Whisper drafts from them and verifies the drafts, so they change no
    /// result, only the time it takes: the new hypothesis mostly repeats the last one.
    pub draft: Vec<u32>,
    /// The session's own language, prompt and hotwords ([`super::SessionOptions::decode`]).
    pub options: Arc<InputOptions>,
}

impl StreamModel for WhisperChunkModel {
    type Request = BufferDecode;
    type Output = Transcript;

    /// `requests`: audio buffers (16 kHz, at most one 30 s window each) → one transcript each.
    fn forward_chunks(&self, requests: &[BufferDecode]) -> Vec<Result<Transcript>> {
        let all_err = |e: Error| requests.iter().map(|_| Err(e.clone())).collect();
        let transcriber = match WhisperTranscriber::new(&self.model) {
            Ok(t) => t,
            Err(e) => return all_err(e),
        };
        let audios: Vec<&[f32]> = requests.iter().map(|r| r.audio.as_slice()).collect();
        let drafts: Vec<&[u32]> = requests.iter().map(|r| r.draft.as_slice()).collect();
        let inputs: Vec<&InputOptions> = if requests.iter().all(|r| r.options.is_empty()) {
            Vec::new()
        } else {
            requests.iter().map(|r| &*r.options).collect()
        };
        match transcriber.transcribe_with_drafts(
            &audios,
            &drafts,
            &inputs,
            &self.opts,
            requests.len(),
        ) {
            Ok(out) => out.transcripts,
            Err(e) => all_err(e),
        }
    }
}

/// Buffer geometry of Whisper streaming, in samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WhisperGeometry {
    /// New samples between two decodes of the buffer (a whole number of mel hops).
    pub step: usize,
    /// Longest buffer one decode may see: the model's window (`n_audio_ctx` × 2 mel hops, 30 s).
    pub max_buffer: usize,
    /// Above this length the buffer is cut after the last confirmed segment.
    pub trim: usize,
    /// Above `trim`, cut at the quietest 200 ms before the confirmed text when no segment end
    /// allows a cut (models without timestamps).
    pub cut_at_pauses: bool,
    /// When > 0, a step is at least `buffer / step_divisor` (rounded up to whole `step`s): the
    /// cost of re-decoding grows with the buffer, so longer buffers are re-decoded less often
    /// (a bounded cost per second of audio). 0: every step is `step`.
    pub step_divisor: usize,
}

impl WhisperGeometry {
    /// New samples to take before the next decode of a buffer of `buffered` samples.
    pub fn next_step(&self, buffered: usize) -> usize {
        if self.step_divisor == 0 {
            return self.step;
        }
        (buffered / self.step_divisor).div_ceil(self.step).max(1) * self.step
    }
}

impl WhisperGeometry {
    /// Geometry of `model`: the mel hop and the window length come from its front end and
    /// encoder; `step_seconds` is rounded to whole hops; `trim_seconds` is clamped below the
    /// window.
    ///
    /// Errors: `InvalidInput` for a step that is not positive or does not fit in the window.
    pub fn for_whisper(model: &Whisper, step_seconds: f32, trim_seconds: f32) -> Result<Self> {
        let hop = MelConfig::whisper(model.config.n_mels).hop_length;
        // The encoder's two convolutions halve the mel frames: n_audio_ctx × 2 frames of `hop`.
        let max_buffer = model.config.n_audio_ctx * 2 * hop;
        let to_hops = |s: f32| (f64::from(s) * SAMPLE_RATE as f64 / hop as f64).round() as usize;
        if !(step_seconds.is_finite() && step_seconds > 0.0) || to_hops(step_seconds) == 0 {
            return Err(Error::invalid_input(format!(
                "whisper step must be at least one mel hop ({hop} samples), got {step_seconds} s"
            )));
        }
        let step = to_hops(step_seconds) * hop;
        if step * 2 > max_buffer {
            return Err(Error::invalid_input(format!(
                "whisper step {step_seconds} s must be at most half the {} s window",
                max_buffer / SAMPLE_RATE
            )));
        }
        let trim = if trim_seconds.is_finite() && trim_seconds > 0.0 {
            (to_hops(trim_seconds) * hop).min(max_buffer - step)
        } else {
            max_buffer - step
        };
        Ok(Self {
            step,
            max_buffer,
            trim,
            cut_at_pauses: false,
            step_divisor: 0,
        })
    }

    /// Geometry of Moonshine streams: `step_seconds` rounded to 10 ms, a buffer of at most one
    /// Moonshine piece ([`crate::moonshine::MAX_PIECE_SECONDS`]), cut at pauses above
    /// `trim_seconds`.
    ///
    /// Errors: `InvalidInput` for a step that is not positive or over half the buffer.
    pub fn for_moonshine(step_seconds: f32, trim_seconds: f32) -> Result<Self> {
        let max_buffer = crate::moonshine::MAX_PIECE_SECONDS as usize * SAMPLE_RATE;
        let hop = SAMPLE_RATE / 100;
        let step = (f64::from(step_seconds) * 100.0).round().max(0.0) as usize * hop;
        if !(step_seconds.is_finite() && step > 0 && step * 2 <= max_buffer) {
            return Err(Error::invalid_input(format!(
                "moonshine step must be between 0.01 s and {} s, got {step_seconds} s",
                max_buffer / SAMPLE_RATE / 2
            )));
        }
        let trim = if trim_seconds.is_finite() && trim_seconds > 0.0 {
            ((f64::from(trim_seconds) * SAMPLE_RATE as f64) as usize).min(max_buffer - step)
        } else {
            max_buffer - step
        };
        Ok(Self {
            step,
            max_buffer,
            trim,
            cut_at_pauses: true,
            step_divisor: MOONSHINE_STEP_DIVISOR,
        })
    }
}

/// Moonshine steps are at least a quarter of the buffer (see [`WhisperGeometry::step_divisor`]).
const MOONSHINE_STEP_DIVISOR: usize = 4;

/// Largest |sample| of a buffer treated as silence by the pause-cutting (Moonshine) streams
/// (−60 dBFS).
pub(super) const SILENCE: f32 = 1e-3;

/// Seconds kept between a pause cut and the estimated end of the confirmed text.
const PAUSE_MARGIN: f64 = 0.3;

/// What all sessions of one Whisper stream engine share.
pub(crate) struct WhisperBackend {
    pub worker: Worker<BufferDecode, Transcript>,
    pub geometry: WhisperGeometry,
    /// Which session options the model can honour.
    pub accepts: super::Honours,
}

/// Per-session Whisper state.
pub(crate) struct WhisperSession {
    backend: Arc<WhisperBackend>,
    /// Unconfirmed audio; `buffer[0]` is stream sample `buffer_start`.
    buffer: Vec<f32>,
    buffer_start: u64,
    /// Received samples not yet in `buffer` (they join it a step at a time).
    incoming: Vec<f32>,
    agreement: LocalAgreement,
    /// Absolute end times of the latest hypothesis' segments.
    segment_ends: Vec<f64>,
    /// Token ids of the latest hypothesis (the next decode's draft).
    last_tokens: Vec<u32>,
    last_partial: String,
    /// The session's own decode options (shared with its requests).
    options: Arc<InputOptions>,
    /// The voice activity detector that ends utterances ([`super::SessionOptions::vad`]).
    /// (Boxed: most sessions run without one.)
    gate: Option<Box<OnlineVad>>,
}

impl WhisperSession {
    pub fn new(
        backend: Arc<WhisperBackend>,
        options: Arc<InputOptions>,
        gate: Option<Box<OnlineVad>>,
    ) -> Self {
        Self {
            options,
            gate,
            agreement: new_agreement(&backend.geometry),
            backend,
            buffer: Vec::new(),
            buffer_start: 0,
            incoming: Vec::new(),
            segment_ends: Vec::new(),
            last_tokens: Vec::new(),
            last_partial: String::new(),
        }
    }

    pub fn reset(&mut self) {
        self.incoming.clear();
        self.restart_at(0);
        if let Some(g) = &mut self.gate {
            g.reset();
        }
    }

    /// Starts a new utterance at stream sample `at` (0: a new stream): no buffer, a new
    /// agreement (told where its buffer starts, past the stream's start), no hypothesis.
    fn restart_at(&mut self, at: u64) {
        self.buffer.clear();
        self.buffer_start = at;
        self.agreement = new_agreement(&self.backend.geometry);
        if at > 0 {
            self.agreement
                .buffer_starts_at(at as f64 / SAMPLE_RATE as f64);
        }
        self.segment_ends.clear();
        self.last_tokens.clear();
        self.last_partial.clear();
    }

    /// Stream sample just past the buffer.
    fn buffer_end(&self) -> u64 {
        self.buffer_start + self.buffer.len() as u64
    }

    /// Samples held (buffer + not yet decoded).
    pub fn buffered(&self) -> usize {
        self.buffer.len() + self.incoming.len()
    }

    pub fn feed(
        &mut self,
        id: u64,
        alive: &Arc<AtomicBool>,
        samples: &[f32],
    ) -> Result<Vec<Event>> {
        if let Some(g) = &mut self.gate {
            g.push(samples)?;
        }
        self.incoming.extend_from_slice(samples);
        let mut events = Vec::new();
        let mut taken = 0;
        // Decode points depend only on the stream's samples (whole steps, sized by the buffer
        // at that point; utterance ends where the detector decided them), so the block size
        // never changes them.
        loop {
            let step = self.backend.geometry.next_step(self.buffer.len());
            let buffer_end = self.buffer_end();
            let available = self.incoming.len() - taken;
            // An utterance that ends before the next step is due: decode it to its end now,
            // without waiting for the rest of the step.
            if let Some(end) = self.gate.as_deref().and_then(OnlineVad::next_end) {
                let reach = buffer_end + step.min(available) as u64;
                if end.at <= reach {
                    let n = end.at.saturating_sub(buffer_end) as usize;
                    self.buffer
                        .extend_from_slice(&self.incoming[taken..taken + n]);
                    taken += n;
                    if let Some(g) = &mut self.gate {
                        g.take_end();
                    }
                    if let Err(e) = self.end_utterance(id, alive, end, &mut events) {
                        self.incoming.drain(..taken);
                        return Err(e);
                    }
                    continue;
                }
            }
            if available < step {
                break;
            }
            self.buffer
                .extend_from_slice(&self.incoming[taken..taken + step]);
            taken += step;
            let result = if self.quiet() {
                self.skip_quiet();
                Ok(())
            } else {
                self.start_at_onset();
                self.decode_step(id, alive, &mut events, true)
            };
            if let Err(e) = result {
                self.incoming.drain(..taken);
                return Err(e);
            }
        }
        self.incoming.drain(..taken);
        Ok(events)
    }

    pub fn end(&mut self, id: u64, alive: &Arc<AtomicBool>) -> Result<Vec<Event>> {
        let mut events = Vec::new();
        let result = if self.incoming.is_empty() {
            // Only already-decoded audio remains: its hypothesis is the pending words.
            Ok(())
        } else {
            let rest = std::mem::take(&mut self.incoming);
            self.buffer.extend_from_slice(&rest);
            if self.quiet() {
                Ok(())
            } else {
                self.decode_step(id, alive, &mut events, true)
            }
        };
        if let Err(e) = result {
            self.reset();
            return Err(e);
        }
        let rest = self.agreement.flush();
        if let Some(e) = final_event(rest) {
            events.push(e);
        }
        self.reset();
        Ok(events)
    }

    /// With a detector: whether the buffer's end falls outside any utterance and no word
    /// waits for confirmation, so a decode would only hear silence (or a burst too short to
    /// count yet).
    fn quiet(&self) -> bool {
        let Some(g) = &self.gate else {
            return false;
        };
        let end = self.buffer_end();
        self.agreement.pending().is_empty()
            && matches!(g.activity_at(end), Activity::Quiet | Activity::Onset { .. })
    }

    /// Drops a quiet buffer without a model call, keeping `speech_pad_ms` before its end (or
    /// before a burst that may still start an utterance) for the utterance that comes next.
    fn skip_quiet(&mut self) {
        let Some(g) = &self.gate else {
            return;
        };
        let end = self.buffer_end();
        let from = match g.activity_at(end) {
            Activity::Onset { start } => start,
            _ => end,
        }
        .saturating_sub(g.pad());
        self.drop_before(from);
    }

    /// Drops the buffer's audio before stream sample `from` (none when it starts later), and
    /// the detector's decisions before the new start.
    fn drop_before(&mut self, from: u64) {
        let drop = (from.saturating_sub(self.buffer_start) as usize).min(self.buffer.len());
        if drop == 0 {
            return;
        }
        self.buffer.drain(..drop);
        self.buffer_start += drop as u64;
        if let Some(g) = &mut self.gate {
            g.forget_before(self.buffer_start);
        }
        self.agreement
            .buffer_starts_at(self.buffer_start as f64 / SAMPLE_RATE as f64);
    }

    /// With a detector, before the first decode of an utterance: drops the buffer's audio
    /// before `speech_pad_ms` ahead of the utterance's first speech window. A quiet buffer is
    /// only trimmed at whole steps, so it may still hold up to a step of silence before the
    /// speech, and Whisper tends to start its first segment at the buffer's start, which would
    /// put the first words in that silence.
    fn start_at_onset(&mut self) {
        let Some(g) = &self.gate else {
            return;
        };
        if !self.agreement.pending().is_empty() {
            return;
        }
        let end = self.buffer_end();
        let Activity::Speech { start } = g.activity_at(end) else {
            return;
        };
        let from = start.saturating_sub(g.pad());
        self.drop_before(from);
    }

    /// The detector ended an utterance (the buffer now reaches `end.at`): decode it once more
    /// and make every word of it final, then start the next utterance afresh at `end.at` (a
    /// new agreement: its words are not checked against this one's). The decode hears the
    /// silence that ended it too: cut at the detector's speech end plus the pad, a trailing word
    /// the detector heard as silence ("Americans" trailing off) was lost.
    fn end_utterance(
        &mut self,
        id: u64,
        alive: &Arc<AtomicBool>,
        end: Endpoint,
        events: &mut Vec<Event>,
    ) -> Result<()> {
        let decoded = if self.buffer.is_empty() {
            Ok(())
        } else {
            self.decode_step(id, alive, events, false)
        };
        let rest = self.agreement.flush();
        if let Some(e) = final_event(rest) {
            events.push(e);
        }
        self.restart_at(end.at);
        if let Some(g) = &mut self.gate {
            g.forget_before(end.at);
        }
        tracing::debug!(
            session = id,
            speech_end = end.speech_end as f64 / SAMPLE_RATE as f64,
            at = end.at as f64 / SAMPLE_RATE as f64,
            "stream utterance ended on silence"
        );
        decoded
    }

    /// One decode of the buffer: confirms what agrees with the last hypothesis, trims the
    /// buffer, and (when `partial`) reports the pending words as a partial.
    fn decode_step(
        &mut self,
        id: u64,
        alive: &Arc<AtomicBool>,
        events: &mut Vec<Event>,
        partial: bool,
    ) -> Result<()> {
        if self.backend.geometry.cut_at_pauses
            && self.agreement.pending().is_empty()
            && self.buffer.iter().all(|x| x.abs() < SILENCE)
        {
            // Nothing but silence since the last confirmed word: no model call, and the
            // silence leaves the buffer, so a quiet line costs nothing.
            self.buffer_start += self.buffer.len() as u64;
            self.buffer.clear();
            self.agreement
                .buffer_starts_at(self.buffer_start as f64 / SAMPLE_RATE as f64);
            return Ok(());
        }
        let offset = self.buffer_start as f64 / SAMPLE_RATE as f64;
        let request = BufferDecode {
            audio: self.buffer.clone(),
            draft: std::mem::take(&mut self.last_tokens),
            options: Arc::clone(&self.options),
        };
        let transcript = match self.backend.worker.call(id, Arc::clone(alive), request) {
            Ok(t) => Some(t),
            // Too little audio for one mel frame: nothing to hear yet.
            Err(e) if e.kind == ErrorKind::EmptyInput => None,
            Err(e) => return Err(e),
        };
        if let Some(t) = &transcript {
            self.last_tokens = t
                .segments
                .iter()
                .flat_map(|s| s.tokens.iter().copied())
                .collect();
        }
        let limit = offset + self.buffer.len() as f64 / SAMPLE_RATE as f64;
        let (words, ends) = transcript
            .map(|t| {
                // Models cut at pauses have no timestamps: spread their words over the
                // buffer's voiced frames, not its whole length, so that a pause in the
                // buffer moves the estimates the way it moves the speech.
                let voiced = geometry_voicing(&self.backend.geometry, &self.buffer);
                words_of(&t, offset, limit, voiced.as_ref())
            })
            .unwrap_or_default();
        tracing::debug!(
            session = id,
            buffer_start = offset,
            buffer_seconds = self.buffer.len() as f64 / SAMPLE_RATE as f64,
            hypothesis = %join(&words),
            "whisper stream hypothesis"
        );
        self.segment_ends = ends;
        self.agreement.decoded_until(limit);
        let confirmed = self.agreement.insert(words);
        tracing::debug!(
            session = id,
            confirmed = %join(&confirmed),
            pending = %join(self.agreement.pending()),
            committed_end = self.agreement.committed_end(),
            "whisper stream agreement"
        );
        if let Some(e) = final_event(confirmed) {
            events.push(e);
        }
        self.trim(events);
        if !partial {
            return Ok(());
        }
        let pending = join(self.agreement.pending());
        if pending != self.last_partial {
            if !pending.is_empty() {
                events.push(make_event(EventKind::Partial, self.agreement.pending()));
            }
            self.last_partial = pending;
        }
        Ok(())
    }

    /// Cuts the buffer after the last segment that ends inside the confirmed text once it is
    /// longer than `trim`; forces a cut (confirming what is pending) when the next step would
    /// not fit in the model's window.
    fn trim(&mut self, events: &mut Vec<Event>) {
        let g = self.backend.geometry;
        let start = self.buffer_start as f64 / SAMPLE_RATE as f64;
        let committed = self.agreement.committed_end();
        let mut cut: Option<f64> = None;
        if self.buffer.len() > g.trim {
            cut = self
                .segment_ends
                .iter()
                .copied()
                .filter(|&e| e <= committed + 1e-6 && e > start)
                .reduce(f64::max);
        }
        if cut.is_none() && g.cut_at_pauses && self.buffer.len() > g.trim {
            // Word times are spread estimates here: cut in a pause well before the confirmed
            // end, and let the agreement skip the confirmed words still in the buffer by text.
            let to = ((committed - PAUSE_MARGIN - start) * SAMPLE_RATE as f64).max(0.0) as usize;
            cut = crate::moonshine::pieces::quietest_point(&self.buffer, SAMPLE_RATE, to)
                .map(|p| start + p as f64 / SAMPLE_RATE as f64);
        }
        if cut.is_none() && self.buffer.len() + g.next_step(self.buffer.len()) > g.max_buffer {
            if committed > start + 1.0 {
                cut = Some(committed);
            } else {
                let forced = self.agreement.flush();
                let end = forced.last().map_or(f64::INFINITY, |w| w.end);
                if let Some(e) = final_event(forced) {
                    events.push(e);
                }
                self.last_partial.clear();
                cut = Some(end);
            }
        }
        if let Some(cut) = cut {
            let drop = ((cut - start) * SAMPLE_RATE as f64).round().max(0.0) as usize;
            let drop = drop.min(self.buffer.len());
            self.buffer.drain(..drop);
            self.buffer_start += drop as u64;
            self.agreement
                .buffer_starts_at(self.buffer_start as f64 / SAMPLE_RATE as f64);
            tracing::debug!(
                cut,
                kept = self.buffer.len(),
                "whisper stream buffer trimmed"
            );
        }
    }
}

/// Models cut at pauses have no timestamps: their word times are estimates.
fn new_agreement(g: &WhisperGeometry) -> LocalAgreement {
    if g.cut_at_pauses {
        LocalAgreement::with_estimated_times()
    } else {
        LocalAgreement::new()
    }
}

fn join(words: &[Word]) -> String {
    words
        .iter()
        .map(|w| w.word.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn make_event(kind: EventKind, words: &[Word]) -> Event {
    Event {
        kind,
        text: join(words),
        start: words.first().map_or(0.0, |w| w.start),
        end: words.last().map_or(0.0, |w| w.end),
        words: words.to_vec(),
    }
}

fn final_event(words: Vec<Word>) -> Option<Event> {
    (!words.is_empty()).then(|| make_event(EventKind::Final, &words))
}
