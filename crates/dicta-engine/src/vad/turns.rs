//! Turn detection over a live stream ([`TurnDetector`]): where speech starts and where it
//! stops, as a voice agent's "server VAD" reports them (OpenAI's realtime `server_vad`), read
//! from [`OnlineVad`]'s decisions. Every position is fixed by the stream's samples, so the
//! turns are the same whatever blocks the audio comes in.

use dicta_core::{Result, VadOptions};

use super::online::{Activity, OnlineVad};
use super::Vad;

/// A change of a stream's voice activity; positions in samples since the detector opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// An utterance began: its first speech window starts at `start` (reported once speech
    /// has lasted `min_speech_duration_ms`).
    Started {
        /// First sample of its first speech window.
        start: u64,
    },
    /// The utterance that began at `start` is over: its speech ended at `speech_end`, and
    /// `min_silence_duration_ms` of silence after it (or `max_speech_duration_s`, which cuts
    /// at `speech_end`) decided so at `at`.
    Stopped {
        /// First sample of its first speech window.
        start: u64,
        /// Where its speech ended.
        speech_end: u64,
        /// Where the end was decided (`speech_end` plus the silence that ended it).
        at: u64,
    },
}

/// Speech starts and stops of one live stream.
#[derive(Debug)]
pub struct TurnDetector {
    vad: OnlineVad,
    /// A `Started` was reported and its `Stopped` not yet.
    in_speech: bool,
}

impl TurnDetector {
    /// A detector with `opts` (validated; `speech_pad_ms` is not used: the caller pads).
    pub fn new(vad: Vad, opts: &VadOptions) -> Result<Self> {
        Ok(Self {
            vad: OnlineVad::new(vad, opts)?,
            in_speech: false,
        })
    }

    /// Runs the detector on the stream's next samples (any count) and returns the turns they
    /// decided, in order: every `Stopped` follows its `Started`.
    pub fn push(&mut self, samples: &[f32]) -> Result<Vec<Turn>> {
        self.vad.push(samples)?;
        let mut out = Vec::new();
        while let Some(end) = self.vad.take_end() {
            // The utterance this end closes: where the stream was in speech just before it.
            let start = match self.vad.activity_at(end.at.saturating_sub(1)) {
                Activity::Speech { start } | Activity::Onset { start } => start,
                Activity::Quiet => end.speech_end,
            };
            if !self.in_speech {
                out.push(Turn::Started { start });
            }
            out.push(Turn::Stopped {
                start,
                speech_end: end.speech_end,
                at: end.at,
            });
            self.in_speech = false;
            self.vad.forget_before(end.at);
        }
        if !self.in_speech {
            if let Activity::Speech { start } = self.vad.activity_at(self.vad.position()) {
                out.push(Turn::Started { start });
                self.in_speech = true;
            }
        }
        Ok(out)
    }
}
