//! Per-input work done on the audio decode threads before the model: diarization of the original
//! audio (speaker turns kept for afterwards) and the VAD filter (only speech goes on). After the
//! model, [`Preprocess::finish`] moves times back and puts speakers on segments and words.
//! With a progress callback, each decoded input's length (and VAD map) goes to the
//! [`Observer`] here too.

use std::borrow::Cow;
use std::sync::Mutex;

use dicta_core::{Result, SpeakerTurn, Stats, Transcript};

use super::observe::Observer;
use super::Transform;
use crate::diarize::{label_segments, DiarizeOptions, Diarizer};
use crate::vad::SpeechFilter;

/// The pre-model steps of one call.
pub(crate) struct Preprocess<'a> {
    filter: Option<SpeechFilter<'a>>,
    diarize: Option<(&'a Diarizer, DiarizeOptions)>,
    turns: Mutex<Vec<Option<Vec<SpeakerTurn>>>>,
    observer: Observer,
}

impl<'a> Preprocess<'a> {
    /// Steps for a call over `n` inputs.
    pub(crate) fn new(
        filter: Option<SpeechFilter<'a>>,
        diarize: Option<(&'a Diarizer, DiarizeOptions)>,
        n: usize,
    ) -> Self {
        Self {
            filter,
            diarize,
            turns: Mutex::new(vec![None; n]),
            observer: Observer::default(),
        }
    }

    /// These steps, also telling `observer` each decoded input's length.
    pub(crate) fn observed(self, observer: Observer) -> Self {
        Self { observer, ..self }
    }

    /// True when there is anything to do.
    pub(crate) fn active(&self) -> bool {
        self.filter.is_some() || self.diarize.is_some() || self.observer.is_active()
    }

    /// Finishes the results (see the module docs).
    pub(crate) fn finish(
        self,
        results: &mut [Result<Transcript>],
        language: Option<&str>,
        stats: &mut Stats,
    ) {
        if let Some(f) = self.filter {
            f.finish(results, language, stats);
        }
        let turns = self.turns.into_inner().unwrap_or_else(|p| p.into_inner());
        for (r, t) in results.iter_mut().zip(turns) {
            if let (Ok(tr), Some(turns)) = (r, t) {
                label_segments(&mut tr.segments, &turns);
            }
        }
    }
}

impl<'a> Transform<'a> for Preprocess<'_> {
    fn apply(&self, index: usize, audio: Cow<'a, [f32]>) -> Result<Cow<'a, [f32]>> {
        self.observer.started(index, audio.len());
        if let Some((d, opts)) = &self.diarize {
            let turns = d.turns(&audio, opts)?;
            self.turns.lock().unwrap_or_else(|p| p.into_inner())[index] = Some(turns);
        }
        match &self.filter {
            Some(f) => {
                let speech = f.apply(index, audio);
                if let Some(map) = self
                    .observer
                    .is_active()
                    .then(|| f.speech_map(index))
                    .flatten()
                {
                    self.observer.speech_map(index, map);
                }
                speech
            }
            None => Ok(audio),
        }
    }
}
