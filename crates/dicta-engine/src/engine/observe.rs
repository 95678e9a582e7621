//! The engine's side of [`crate::progress`]: turns what the model families report (indices of
//! their group of recordings, times of the audio the model heard) into the caller's events
//! (indices of the call, times of the original audio), and keeps the promises of the module
//! docs there: audio progress strictly increasing and ending at the duration, and the
//! concatenated segment events equal to the transcript's segments.
//!
//! Plain struct, shared by reference: the decode threads report `Started` (and the VAD map),
//! the model loop and CTC decode workers the rest. Events are emitted under the lock, so one
//! input's events reach the caller in order.

use std::sync::{Arc, Mutex, MutexGuard};

use dicta_core::{Result, Segment, Transcript};

use crate::progress::{Progress, ProgressEvent};
use crate::vad::SpeechMap;
use crate::whisper::DecodeOptions;

/// What was reported of one input so far.
#[derive(Debug, Default)]
struct Slot {
    /// Original length (s), once decoded.
    duration: Option<f64>,
    /// Audio finished (s of the original audio), as last reported.
    done: f64,
    /// Segments handed over so far.
    emitted: usize,
    /// Speech times → original times (VAD filter).
    map: Option<SpeechMap>,
}

struct State {
    user: Progress,
    /// Segments wait for the end of the call (VAD filter, diarization).
    hold: bool,
    slots: Mutex<Vec<Slot>>,
}

/// Reports one call's progress to the caller's [`Progress`]; does nothing when nobody listens.
#[derive(Clone, Default)]
pub(crate) struct Observer(Option<Arc<State>>);

impl Observer {
    /// An observer of a call over `n` inputs reporting to `user`; `hold`: segments are only
    /// final after the call (times moved back, speakers put on).
    pub(crate) fn new(user: &Progress, n: usize, hold: bool) -> Self {
        if !user.is_active() {
            return Self(None);
        }
        Self(Some(Arc::new(State {
            user: user.clone(),
            hold,
            slots: Mutex::new((0..n).map(|_| Slot::default()).collect()),
        })))
    }

    /// Whether anyone listens.
    pub(crate) fn is_active(&self) -> bool {
        self.0.is_some()
    }

    fn lock(state: &State) -> MutexGuard<'_, Vec<Slot>> {
        state.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Input `i`'s original audio is decoded: `samples` samples at 16 kHz.
    pub(crate) fn started(&self, i: usize, samples: usize) {
        let Some(s) = &self.0 else { return };
        let duration = samples as f64 / f64::from(dicta_audio::SAMPLE_RATE);
        let mut slots = Self::lock(s);
        if let Some(slot) = slots.get_mut(i) {
            slot.duration = Some(duration);
            s.user.emit(ProgressEvent::Started { input: i, duration });
        }
    }

    /// Input `i`'s model audio is its speech, joined: `map` moves its times back.
    pub(crate) fn speech_map(&self, i: usize, map: SpeechMap) {
        let Some(s) = &self.0 else { return };
        if let Some(slot) = Self::lock(s).get_mut(i) {
            slot.map = Some(map);
        }
    }

    /// `seconds` of the audio the model hears of input `i` are finished.
    pub(crate) fn audio(&self, i: usize, seconds: f64) {
        let Some(s) = &self.0 else { return };
        let mut slots = Self::lock(s);
        let Some(slot) = slots.get_mut(i) else { return };
        let mut t = match &slot.map {
            Some(m) => m.original_time(seconds, m.chunk_index(seconds, true)),
            None => seconds,
        };
        if let Some(d) = slot.duration {
            t = t.min(d);
        }
        if t > slot.done {
            slot.done = t;
            s.user.emit(ProgressEvent::Audio {
                input: i,
                seconds: t,
            });
        }
    }

    /// Input `i` is transcribed in `language` (a fact of the input, not of model times: never
    /// held back).
    pub(crate) fn language(
        &self,
        i: usize,
        language: String,
        probability: Option<f32>,
        all: Option<Vec<(String, f32)>>,
    ) {
        let Some(s) = &self.0 else { return };
        let _slots = Self::lock(s);
        s.user.emit(ProgressEvent::Language {
            input: i,
            language,
            probability,
            all,
        });
    }

    /// `segments` of input `i` are final (model times; held back when segments wait for the
    /// end of the call).
    pub(crate) fn segments(&self, i: usize, segments: Vec<Segment>) {
        let Some(s) = &self.0 else { return };
        if s.hold || segments.is_empty() {
            return;
        }
        let mut slots = Self::lock(s);
        let Some(slot) = slots.get_mut(i) else { return };
        slot.emitted += segments.len();
        s.user.emit(ProgressEvent::Segments { input: i, segments });
    }

    /// Input `i` is transcribed by its family (`t` in model times): the segments not handed
    /// over yet, and the whole audio finished (unless segments wait for the end of the call).
    pub(crate) fn finished(&self, i: usize, t: &Transcript) {
        let Some(s) = &self.0 else { return };
        if s.hold {
            self.audio(i, t.duration);
            return;
        }
        self.close(s, i, t);
    }

    /// The end of the call, with its final results: every transcript's segments not handed
    /// over yet, and its whole audio finished.
    pub(crate) fn flush(&self, results: &[Result<Transcript>]) {
        let Some(s) = &self.0 else { return };
        for (i, r) in results.iter().enumerate() {
            if let Ok(t) = r {
                self.close(s, i, t);
            }
        }
    }

    fn close(&self, s: &State, i: usize, t: &Transcript) {
        let mut slots = Self::lock(s);
        let Some(slot) = slots.get_mut(i) else { return };
        if let Some(rest) = t.segments.get(slot.emitted..).filter(|r| !r.is_empty()) {
            slot.emitted = t.segments.len();
            s.user.emit(ProgressEvent::Segments {
                input: i,
                segments: rest.to_vec(),
            });
        }
        if t.duration > slot.done {
            slot.done = t.duration;
            s.user.emit(ProgressEvent::Audio {
                input: i,
                seconds: t.duration,
            });
        }
    }

    /// `opts` with the progress hook of the group `indices` (input indices of the call), or
    /// `opts` itself when nobody listens.
    pub(crate) fn options_for<'o>(
        &self,
        opts: &'o DecodeOptions,
        indices: Vec<usize>,
    ) -> std::borrow::Cow<'o, DecodeOptions> {
        if !self.is_active() {
            return std::borrow::Cow::Borrowed(opts);
        }
        std::borrow::Cow::Owned(DecodeOptions {
            progress: self.for_group(indices),
            ..opts.clone()
        })
    }

    /// A [`Progress`] for a family's call over a group of the call's inputs (`indices[k]` is
    /// the call's index of the group's recording `k`); inactive when nobody listens.
    pub(crate) fn for_group(&self, indices: Vec<usize>) -> Progress {
        if !self.is_active() {
            return Progress::default();
        }
        let me = self.clone();
        Progress::new(move |e| match e {
            ProgressEvent::Audio { input, seconds } => {
                if let Some(&i) = indices.get(input) {
                    me.audio(i, seconds);
                }
            }
            ProgressEvent::Segments { input, segments } => {
                if let Some(&i) = indices.get(input) {
                    me.segments(i, segments);
                }
            }
            ProgressEvent::Language {
                input,
                language,
                probability,
                all,
            } => {
                if let Some(&i) = indices.get(input) {
                    me.language(i, language, probability, all);
                }
            }
            // Families never report it; the decode threads do.
            ProgressEvent::Started { .. } => {}
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder() -> (Progress, Arc<Mutex<Vec<ProgressEvent>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        (Progress::new(move |e| s.lock().unwrap().push(e)), seen)
    }

    fn transcript(duration: f64, segs: &[(f64, f64, &str)]) -> Transcript {
        Transcript {
            segments: segs
                .iter()
                .map(|&(a, b, t)| Segment::new(a, b, t.to_string()))
                .collect(),
            duration,
            ..serde_json::from_value(serde_json::json!({
                "id": "", "audio": "", "text": "", "language": null, "duration": 0.0,
                "segments": []
            }))
            .unwrap()
        }
    }

    #[test]
    fn events_are_mapped_monotonic_and_complete() {
        let (p, seen) = recorder();
        let o = Observer::new(&p, 3, false);
        o.started(2, 160_000);
        let g = o.for_group(vec![2]);
        g.audio(0, 4.0);
        g.audio(0, 3.0); // not forward: dropped
        g.audio(0, 12.0); // capped at the duration
        let t = transcript(10.0, &[(0.0, 2.0, "a"), (2.0, 4.0, "b")]);
        g.segments(0, &t.segments[..1]);
        o.finished(2, &t);
        o.flush(&[
            Err(dicta_core::Error::internal("x")),
            Err(dicta_core::Error::internal("y")),
            Ok(t.clone()),
        ]);
        let seen = seen.lock().unwrap();
        let audio: Vec<f64> = seen
            .iter()
            .filter_map(|e| match e {
                ProgressEvent::Audio { input: 2, seconds } => Some(*seconds),
                _ => None,
            })
            .collect();
        assert_eq!(audio, [4.0, 10.0]);
        let segs: Vec<Segment> = seen
            .iter()
            .filter_map(|e| match e {
                ProgressEvent::Segments { input: 2, segments } => Some(segments.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(segs, t.segments);
        assert_eq!(
            seen[0],
            ProgressEvent::Started {
                input: 2,
                duration: 10.0
            }
        );
    }

    #[test]
    fn held_segments_come_at_the_end_of_the_call() {
        let (p, seen) = recorder();
        let o = Observer::new(&p, 1, true);
        let t = transcript(5.0, &[(0.0, 2.0, "a")]);
        o.for_group(vec![0]).segments(0, &t.segments);
        o.finished(0, &t);
        assert!(!seen
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, ProgressEvent::Segments { .. })));
        o.flush(&[Ok(t.clone())]);
        assert!(seen.lock().unwrap().contains(&ProgressEvent::Segments {
            input: 0,
            segments: t.segments
        }));
        assert!(!Observer::new(&Progress::default(), 1, false).is_active());
    }
}
