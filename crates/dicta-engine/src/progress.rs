//! Progress of a transcription call as it runs, for callers that show it (the CLI's progress
//! bar and `--print-segments`).
//!
//! The library never prints: a caller who wants progress puts a [`Progress`] callback in
//! [`crate::whisper::DecodeOptions::progress`] and the engine calls it from its worker threads
//! with [`ProgressEvent`]s. The hook only observes: results are the same with and without it.
//!
//! What [`crate::Engine::transcribe_with`] reports, per input index `i` of the call:
//! - [`ProgressEvent::Started`] once the input's audio is decoded (its length known), before
//!   any other event of that input;
//! - [`ProgressEvent::Audio`] each time more of its audio is finished (seconds of the original
//!   audio, strictly increasing; the last one equals the transcript's `duration`): after each
//!   seek window of Whisper's sequential long-form mode and each batch of windows or pieces
//!   otherwise, and when a recording is finished (CTC: whole recordings);
//! - [`ProgressEvent::Language`] once Whisper knows the language it transcribes the input in
//!   (given, the model's only one, or detected), before the input's segments (other families
//!   do not report it);
//! - [`ProgressEvent::Segments`] with the segments that are now final, in time order: their
//!   concatenation over the call is exactly the transcript's `segments`. Whisper's sequential
//!   mode hands them over window by window; other modes when the recording is finished; with
//!   a VAD filter or diarization (times moved back, speakers put on afterwards) at the end of
//!   the call.
//!
//! Events of different inputs may interleave. An input that fails after some of its events
//! (the model failed, the call was cancelled) gets no more events, and its result is the error.

use std::fmt;
use std::sync::Arc;

use dicta_core::Segment;

/// One thing a running call reports (see the module docs).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ProgressEvent {
    /// Input `input`'s audio is decoded: `duration` seconds (the transcript's `duration`).
    Started {
        /// Index of the input in the call.
        input: usize,
        /// Length of the input's audio in seconds.
        duration: f64,
    },
    /// The first `seconds` of input `input`'s audio are finished.
    Audio {
        /// Index of the input in the call.
        input: usize,
        /// Seconds of the input's audio finished (strictly increasing per input).
        seconds: f64,
    },
    /// The language input `input` is transcribed in (Whisper), before its segments.
    Language {
        /// Index of the input in the call.
        input: usize,
        /// Language code (`"en"`), the transcript's `language`.
        language: String,
        /// How sure detection was (the transcript's `language_probability`); `None` when the
        /// language was given or the model has one.
        probability: Option<f32>,
        /// Every language's probability, most likely first (the transcript's
        /// `all_language_probs`); `None` as for `probability`.
        all: Option<Vec<(String, f32)>>,
    },
    /// Segments of input `input` that are final, in time order, following those reported
    /// before.
    Segments {
        /// Index of the input in the call.
        input: usize,
        /// The segments, exactly as the transcript will hold them.
        segments: Vec<Segment>,
    },
}

/// A caller's progress callback, called from the engine's threads. [`Progress::default`]
/// reports nothing. Compares equal to every other `Progress` and is never serialized: it is
/// not part of what options mean.
#[derive(Clone, Default)]
pub struct Progress(Option<Arc<dyn Fn(ProgressEvent) + Send + Sync>>);

impl Progress {
    /// Calls `f` with every event. `f` runs on engine threads while work waits for it: keep
    /// it short and never call back into the engine from it.
    pub fn new(f: impl Fn(ProgressEvent) + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(f)))
    }

    /// Whether anyone listens (events are only built then).
    pub fn is_active(&self) -> bool {
        self.0.is_some()
    }

    /// Reports `event` (nothing when inactive).
    pub fn emit(&self, event: ProgressEvent) {
        if let Some(f) = &self.0 {
            f(event);
        }
    }

    /// Reports `segments` of `input` when there are any and someone listens.
    pub(crate) fn segments(&self, input: usize, segments: &[Segment]) {
        if self.is_active() && !segments.is_empty() {
            self.emit(ProgressEvent::Segments {
                input,
                segments: segments.to_vec(),
            });
        }
    }

    /// Reports the `language` of `input` when someone listens.
    pub(crate) fn language(
        &self,
        input: usize,
        language: &str,
        probability: Option<f32>,
        all: Option<&[(String, f32)]>,
    ) {
        if self.is_active() {
            self.emit(ProgressEvent::Language {
                input,
                language: language.to_string(),
                probability,
                all: all.map(<[_]>::to_vec),
            });
        }
    }

    /// Reports `seconds` of `input` finished when someone listens.
    pub(crate) fn audio(&self, input: usize, seconds: f64) {
        if self.is_active() {
            self.emit(ProgressEvent::Audio { input, seconds });
        }
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Progress(..)"
        } else {
            "Progress(none)"
        })
    }
}

impl PartialEq for Progress {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn progress_reports_to_its_callback_and_compares_equal() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let p = {
            let seen = Arc::clone(&seen);
            Progress::new(move |e| seen.lock().unwrap().push(e))
        };
        assert!(p.is_active() && !Progress::default().is_active());
        assert_eq!(p, Progress::default());
        p.audio(1, 2.5);
        p.segments(1, &[]);
        Progress::default().audio(0, 1.0);
        assert_eq!(
            *seen.lock().unwrap(),
            [ProgressEvent::Audio {
                input: 1,
                seconds: 2.5
            }]
        );
        assert_eq!(format!("{p:?}"), "Progress(..)");
    }
}
