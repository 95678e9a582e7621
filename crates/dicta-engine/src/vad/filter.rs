//! Speech-only transcription (faster-whisper's `vad_filter`): each input's speech chunks are
//! found on the audio decode threads, joined, and only the joined speech reaches the model;
//! afterwards segment and word times are moved back to the original recording.

use std::borrow::Cow;
use std::sync::Mutex;

use dicta_core::{Error, ErrorKind, Result, Transcript};

use super::{collect_chunks, SpeechMap, Vad, VadOptions, RATE};
use crate::engine::Transform;

/// What the filter did to one input.
#[derive(Debug, Clone)]
struct Filtered {
    map: SpeechMap,
    original_samples: usize,
    speech_samples: usize,
}

/// Per-call state of the filter: the detector, its options and what it found per input.
pub(crate) struct SpeechFilter<'v> {
    vad: &'v Vad,
    opts: VadOptions,
    found: Mutex<Vec<Option<Filtered>>>,
}

/// Message of the placeholder error an input without speech carries through the model stage
/// (replaced by an empty transcript afterwards; never shown to callers).
const NO_SPEECH: &str = "no speech detected";

impl<'v> SpeechFilter<'v> {
    /// A filter for a call over `n` inputs.
    pub(crate) fn new(vad: &'v Vad, opts: VadOptions, n: usize) -> Self {
        Self {
            vad,
            opts,
            found: Mutex::new(vec![None; n]),
        }
    }

    fn record(&self, index: usize, entry: Filtered) {
        self.lock()[index] = Some(entry);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Filtered>>> {
        self.found.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The time map of input `index`, once [`Transform::apply`] has run on it.
    pub(crate) fn speech_map(&self, index: usize) -> Option<SpeechMap> {
        self.lock().get(index)?.as_ref().map(|f| f.map.clone())
    }

    /// Moves every result back to original times (see [`restore_transcript`]), turns the
    /// placeholders of inputs without speech into empty transcripts, and corrects `stats`
    /// (`audio_seconds` counts the original audio, `speech_seconds` what the model heard).
    pub(crate) fn finish(
        self,
        results: &mut [Result<Transcript>],
        language: Option<&str>,
        stats: &mut dicta_core::Stats,
    ) {
        let found = self.found.into_inner().unwrap_or_else(|p| p.into_inner());
        let mut speech_seconds = 0.0;
        for (r, f) in results.iter_mut().zip(found) {
            let Some(f) = f else { continue };
            speech_seconds += f.speech_samples as f64 / RATE;
            let duration = f.original_samples as f64 / RATE;
            match r {
                Ok(t) => {
                    stats.audio_seconds += (f.original_samples - f.speech_samples) as f64 / RATE;
                    restore_transcript(t, &f.map, duration);
                }
                Err(e) if f.speech_samples == 0 && e.message == NO_SPEECH => {
                    stats.audio_seconds += duration;
                    *r = Ok(Transcript {
                        id: String::new(),
                        audio: String::new(),
                        text: String::new(),
                        language: language.map(str::to_string),
                        language_probability: None,
                        all_language_probs: None,
                        duration,
                        segments: Vec::new(),
                        warnings: Vec::new(),
                    });
                }
                Err(_) => {}
            }
        }
        stats.speech_seconds = Some(speech_seconds);
    }
}

impl<'a> Transform<'a> for SpeechFilter<'_> {
    /// Replaces input `index`'s audio by its speech; an input without speech becomes a
    /// placeholder error so that no model time is spent on it.
    fn apply(&self, index: usize, audio: Cow<'a, [f32]>) -> Result<Cow<'a, [f32]>> {
        let chunks = self.vad.speech(&audio, &self.opts)?;
        let speech = collect_chunks(&audio, &chunks);
        let entry = Filtered {
            map: SpeechMap::new(&chunks),
            original_samples: audio.len(),
            speech_samples: speech.len(),
        };
        self.record(index, entry);
        if speech.is_empty() {
            return Err(Error::new(ErrorKind::EmptyInput, NO_SPEECH));
        }
        Ok(Cow::Owned(speech))
    }
}

/// Moves a transcript of joined speech back to the original recording's times.
pub(crate) fn restore_transcript(t: &mut Transcript, map: &SpeechMap, original_duration: f64) {
    for seg in &mut t.segments {
        map.restore(seg);
    }
    t.duration = original_duration;
}
