//! Voice activity detection of a live stream ([`OnlineVad`]): Silero VAD run window by window
//! as audio arrives, its probabilities turned into utterance starts and ends with
//! faster-whisper's hysteresis ([`super::speech_timestamps`]'s rules, read online).
//!
//! Every decision is made at a fixed stream position (the end of the 512-sample window that
//! decided it) and kept with that position, so a session can ask "was the stream in speech at
//! sample P?" and get the same answer whatever blocks the audio came in: decisions never depend
//! on how much audio has arrived since.

use std::collections::VecDeque;

use dicta_core::{Result, VadOptions};
use dicta_models::vad::silero::{rows_with_context, SileroState, CONTEXT, WINDOW};

use super::{Vad, RATE};

/// Where the stream stands at a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// No utterance in progress.
    Quiet,
    /// Speech began at sample `start` but has not lasted longer than `min_speech_duration_ms`
    /// yet (with the default 0 ms, never seen: the first speech window starts the utterance).
    Onset {
        /// First sample of the first speech window.
        start: u64,
    },
    /// An utterance in progress since sample `start`.
    Speech {
        /// First sample of its first speech window.
        start: u64,
    },
}

/// The end of an utterance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// Where its speech ended (sample): the start of the silence that ended it, or the
    /// position where `max_speech_duration_s` cut it.
    pub speech_end: u64,
    /// Where the end was decided (sample): `min_silence_duration_ms` into that silence (at the
    /// end of the window that passed it), or `speech_end` for a cut.
    pub at: u64,
}

/// The options in samples.
#[derive(Debug, Clone, Copy)]
struct Rules {
    threshold: f64,
    neg_threshold: f64,
    min_speech: u64,
    max_speech: u64,
    min_silence: u64,
    pad: u64,
}

impl Rules {
    fn new(o: &VadOptions) -> Self {
        let samples = |ms: u32| (RATE * f64::from(ms) / 1000.0).round() as u64;
        Self {
            threshold: o.threshold,
            neg_threshold: o.effective_neg_threshold(),
            min_speech: samples(o.min_speech_duration_ms),
            max_speech: if o.max_speech_duration_s.is_finite() {
                (RATE * o.max_speech_duration_s).round().max(WINDOW as f64) as u64
            } else {
                u64::MAX
            },
            min_silence: samples(o.min_silence_duration_ms),
            pad: samples(o.speech_pad_ms),
        }
    }
}

/// The hysteresis over window probabilities, with its decisions kept by position (no model).
#[derive(Debug, Clone)]
struct Hysteresis {
    rules: Rules,
    /// Start of the current run of windows under `neg_threshold` in an utterance
    /// (faster-whisper's `temp_end`).
    silent_since: Option<u64>,
    /// Activity before the first entry of `history` (and now, when it is empty).
    base: Activity,
    /// `(decided at, activity from then on)`, in order.
    history: VecDeque<(u64, Activity)>,
    /// Utterance ends not taken yet, in order.
    ends: VecDeque<Endpoint>,
}

impl Hysteresis {
    fn new(rules: Rules) -> Self {
        Self {
            rules,
            silent_since: None,
            base: Activity::Quiet,
            history: VecDeque::new(),
            ends: VecDeque::new(),
        }
    }

    /// The activity after the last window.
    fn now(&self) -> Activity {
        self.history.back().map_or(self.base, |&(_, a)| a)
    }

    fn set(&mut self, decided: u64, a: Activity) {
        if a != self.now() {
            self.history.push_back((decided, a));
        }
    }

    /// The window of samples `pos .. pos + 512` had speech probability `p`.
    fn window(&mut self, pos: u64, p: f32) {
        let r = self.rules;
        let p = f64::from(p);
        let end = pos + WINDOW as u64;
        match self.now() {
            Activity::Quiet => {
                if p >= r.threshold {
                    self.silent_since = None;
                    self.set(end, Activity::Onset { start: pos });
                } else {
                    return;
                }
            }
            Activity::Onset { .. } | Activity::Speech { .. } => {
                if p >= r.threshold {
                    self.silent_since = None;
                } else if p < r.neg_threshold {
                    self.silent_since.get_or_insert(pos);
                }
            }
        }
        // faster-whisper ends a chunk at the first window that starts `min_silence` or more
        // after its silence began.
        let silence_over = self
            .silent_since
            .is_some_and(|s| pos.saturating_sub(s) >= r.min_silence);
        match self.now() {
            Activity::Onset { start } => {
                if silence_over {
                    // A burst too short to count: no utterance.
                    self.silent_since = None;
                    self.set(end, Activity::Quiet);
                } else if self.silent_since.is_none() && end - start > r.min_speech {
                    self.set(end, Activity::Speech { start });
                }
            }
            Activity::Speech { start } => {
                if silence_over {
                    let speech_end = self.silent_since.take().unwrap_or(pos);
                    self.ends.push_back(Endpoint {
                        speech_end,
                        at: end,
                    });
                    self.set(end, Activity::Quiet);
                } else if end - start >= r.max_speech {
                    self.silent_since = None;
                    self.ends.push_back(Endpoint {
                        speech_end: end,
                        at: end,
                    });
                    self.set(end, Activity::Quiet);
                }
            }
            Activity::Quiet => {}
        }
    }

    fn activity_at(&self, p: u64) -> Activity {
        self.history
            .iter()
            .take_while(|(d, _)| *d <= p)
            .last()
            .map_or(self.base, |&(_, a)| a)
    }

    fn forget_before(&mut self, p: u64) {
        while let Some(&(d, a)) = self.history.front() {
            if d > p {
                break;
            }
            self.base = a;
            self.history.pop_front();
        }
    }
}

/// Silero VAD over one live stream: feed it the stream's samples as they come
/// ([`OnlineVad::push`]), then ask where the stream stood at a position
/// ([`OnlineVad::activity_at`]) and take the utterance ends in order ([`OnlineVad::next_end`],
/// [`OnlineVad::take_end`]). Positions are samples since the stream (or its last reset) began.
///
/// The probabilities are those of [`Vad::probabilities`] over the same audio (one LSTM state
/// through all windows, each window after the previous one's last 64 samples), and the rules
/// faster-whisper's, so an utterance's `speech_end` is where `get_speech_timestamps` (with
/// `speech_pad_ms` 0 and no `max_speech_duration_s`) ends that chunk.
pub struct OnlineVad {
    vad: Vad,
    state: SileroState,
    /// The previous window's last 64 samples (zeros before the first).
    context: [f32; CONTEXT],
    /// Samples not yet filling a window.
    partial: Vec<f32>,
    /// Samples consumed into whole windows.
    pos: u64,
    rules: Hysteresis,
}

impl OnlineVad {
    /// A detector for one stream with `opts` (validated here): `threshold`, `neg_threshold`,
    /// `min_silence_duration_ms` (silence that ends an utterance), `min_speech_duration_ms`
    /// (speech no longer than this starts none), `max_speech_duration_s` (an utterance is ended
    /// at this length) and `speech_pad_ms` ([`OnlineVad::pad`]).
    pub fn new(vad: Vad, opts: &VadOptions) -> Result<Self> {
        opts.validate()?;
        Ok(Self {
            vad,
            state: SileroState::default(),
            context: [0.0; CONTEXT],
            partial: Vec::with_capacity(WINDOW),
            pos: 0,
            rules: Hysteresis::new(Rules::new(opts)),
        })
    }

    /// Runs the detector on the stream's next samples (any count; whole windows are run now,
    /// the rest waits for more).
    pub fn push(&mut self, samples: &[f32]) -> Result<()> {
        let have = self.partial.len() + samples.len();
        let windows = have / WINDOW;
        if windows == 0 {
            self.partial.extend_from_slice(samples);
            return Ok(());
        }
        let mut joined = std::mem::take(&mut self.partial);
        joined.extend_from_slice(samples);
        let rows = rows_with_context(&mut self.context, &joined[..windows * WINDOW]);
        let probs = self.vad.model.forward(&rows, &mut self.state)?;
        for p in probs {
            self.rules.window(self.pos, p);
            self.pos += WINDOW as u64;
        }
        self.partial = joined.split_off(windows * WINDOW);
        Ok(())
    }

    /// The activity at sample `p`, as decided by the windows that end at or before it.
    pub fn activity_at(&self, p: u64) -> Activity {
        self.rules.activity_at(p)
    }

    /// The next utterance end not taken yet.
    pub fn next_end(&self) -> Option<Endpoint> {
        self.rules.ends.front().copied()
    }

    /// Takes the next utterance end.
    pub fn take_end(&mut self) -> Option<Endpoint> {
        self.rules.ends.pop_front()
    }

    /// Forgets decisions made at or before sample `p` (no later question asks about them).
    pub fn forget_before(&mut self, p: u64) {
        self.rules.forget_before(p);
    }

    /// Samples run so far (whole windows; the decisions reach this far).
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// `speech_pad_ms` in samples: audio kept before an utterance's first speech window and
    /// after its speech end.
    pub fn pad(&self) -> u64 {
        self.rules.rules.pad
    }

    /// Starts over at position 0 (a new stream).
    pub fn reset(&mut self) {
        self.state = SileroState::default();
        self.context.fill(0.0);
        self.partial.clear();
        self.pos = 0;
        self.rules = Hysteresis::new(self.rules.rules);
    }
}

impl std::fmt::Debug for OnlineVad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnlineVad")
            .field("position", &self.pos)
            .field("activity", &self.rules.now())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::probs;
    use super::*;

    fn run(opts: &VadOptions, probs: &[f32]) -> Hysteresis {
        let mut h = Hysteresis::new(Rules::new(opts));
        for (i, &p) in probs.iter().enumerate() {
            h.window((i * WINDOW) as u64, p);
        }
        h
    }

    /// Utterance ends fall where faster-whisper's rules end their chunks (unpadded), and
    /// the activity history answers by position.
    #[test]
    fn ends_are_the_offline_chunk_ends() {
        let o = VadOptions {
            min_silence_duration_ms: 500,
            speech_pad_ms: 0,
            ..VadOptions::default()
        };
        // speech, a bridged gap, speech, a long gap, speech, a long gap; values between the
        // thresholds (0.4) continue whatever came before.
        let p = probs(&[
            (0.1, 5),
            (0.9, 31),
            (0.1, 10),
            (0.9, 20),
            (0.4, 5),
            (0.9, 6),
            (0.1, 62),
            (0.9, 31),
            (0.2, 40),
        ]);
        let h = run(&o, &p);
        let offline = super::super::speech_timestamps(&p, p.len() * WINDOW, &o);
        let ends: Vec<Endpoint> = h.ends.iter().copied().collect();
        assert_eq!(ends.len(), 2, "{ends:?}");
        assert_eq!(offline.len(), 2, "{offline:?}");
        for (e, c) in ends.iter().zip(&offline) {
            assert_eq!(e.speech_end as usize, c.end, "{ends:?} {offline:?}");
            // Decided once 500 ms (16 windows: 8000 samples, rounded up to whole windows) of
            // silence have passed.
            assert_eq!(e.at - e.speech_end, 16 * 512 + 512);
        }
        assert_eq!(h.activity_at(0), Activity::Quiet);
        let start = 5 * 512;
        assert_eq!(h.activity_at(start), Activity::Quiet);
        assert_eq!(h.activity_at(start + 512), Activity::Speech { start });
        assert_eq!(h.activity_at(ends[0].at - 1), Activity::Speech { start });
        assert_eq!(h.activity_at(ends[0].at), Activity::Quiet);
        let second = offline[1].start as u64;
        assert_eq!(
            h.activity_at(second + 512),
            Activity::Speech { start: second }
        );
    }

    #[test]
    fn short_bursts_start_no_utterance_and_long_ones_are_cut() {
        let o = VadOptions {
            min_speech_duration_ms: 250,
            min_silence_duration_ms: 100,
            max_speech_duration_s: 2.0,
            ..VadOptions::default()
        };
        // 160 ms of speech (too short), silence, then 5 s of speech.
        let p = probs(&[(0.9, 5), (0.0, 20), (0.9, 157), (0.0, 20)]);
        let h = run(&o, &p);
        let burst_end = 5 * 512;
        assert_eq!(h.activity_at(burst_end), Activity::Onset { start: 0 });
        assert_eq!(h.activity_at(25 * 512), Activity::Quiet);
        let start = 25 * 512u64;
        // 250 ms = 4000 samples: the eighth window (4096 samples) passes it.
        assert_eq!(h.activity_at(start + 7 * 512), Activity::Onset { start });
        assert_eq!(h.activity_at(start + 8 * 512), Activity::Speech { start });
        // 2 s cuts (at the end of the window that reaches it), then speech starts again.
        let ends: Vec<Endpoint> = h.ends.iter().copied().collect();
        assert_eq!(ends[0].speech_end, start + 63 * 512);
        assert_eq!(ends[0].at, ends[0].speech_end);
        assert_eq!(ends.len(), 3, "{ends:?}");
        assert!(ends.windows(2).all(|w| w[0].at < w[1].at));
    }

    #[test]
    fn forgetting_keeps_the_answers_after() {
        let o = VadOptions {
            min_silence_duration_ms: 100,
            ..VadOptions::default()
        };
        let p = probs(&[(0.0, 3), (0.9, 10), (0.0, 10), (0.9, 10)]);
        let mut h = run(&o, &p);
        let later: Vec<Activity> = (0..40).map(|w| h.activity_at(w * 512)).collect();
        h.forget_before(15 * 512);
        for w in 15..40u64 {
            assert_eq!(h.activity_at(w * 512), later[w as usize], "window {w}");
        }
    }
}
