//! CTC streaming: chunked inference with left context and lookahead; each chunk keeps only the
//! frames of its new region, appended to the current utterance's log-probs.
//!
//! Decoder state: dicta-decode's decoders take a whole `[T, V]` matrix, so a session keeps the
//! log-probs of the *current utterance* and re-runs its decoder (greedy, or beam + LM) on them
//! after each chunk. Endpointing bounds the utterance, so the cost per chunk stays bounded; for
//! greedy decoding the result equals decoding the joined frames of the whole stream at once.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use dicta_core::{Error, Result, Word};
use dicta_decode::{greedy_decode, BeamDecoder, Hypothesis, LogProbs, Vocabulary};
use dicta_models::ctc::CtcModel;

use super::chunker::{Chunk, ChunkGeometry, Chunker};
use super::worker::{StreamModel, Worker};
use super::{EndpointOptions, Event, EventKind, SAMPLE_RATE};

/// Log-probs of one chunk: row-major `[frames, vocab_size]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkLogProbs {
    /// Row-major `[frames, vocab_size]` log-probabilities.
    pub data: Vec<f32>,
    /// Frames in `data`.
    pub frames: usize,
    /// Vocabulary size `V`.
    pub vocab_size: usize,
}

/// A CTC model as a [`StreamModel`]: one call runs the chunks of many sessions as one batch.
pub struct CtcChunkModel {
    model: Arc<dyn CtcModel>,
}

impl CtcChunkModel {
    /// Wraps a loaded model (shared, not copied).
    pub fn new(model: Arc<dyn CtcModel>) -> Self {
        Self { model }
    }
}

impl StreamModel for CtcChunkModel {
    type Request = Chunk;
    type Output = ChunkLogProbs;

    /// `requests`: chunks of equal length (`chunk_size` samples) → log-probs `[N, T, V]` split
    /// per row.
    fn forward_chunks(&self, requests: &[Chunk]) -> Vec<Result<ChunkLogProbs>> {
        let rows: Vec<&[f32]> = requests.iter().map(|c| c.samples.as_slice()).collect();
        match self.model.forward(&rows) {
            Ok(out) => (0..requests.len())
                .map(|i| {
                    Ok(ChunkLogProbs {
                        data: out.row(i).to_vec(),
                        frames: out.lengths[i],
                        vocab_size: out.vocab_size,
                    })
                })
                .collect(),
            Err(e) => requests.iter().map(|_| Err(e.clone())).collect(),
        }
    }
}

/// Which decoder a CTC stream runs over the current utterance.
#[derive(Clone)]
pub enum CtcStreamDecoder {
    /// Best path.
    Greedy,
    /// Prefix beam search (with the decoder's LM fusion, if any).
    Beam(Arc<BeamDecoder>),
}

/// What all sessions of one CTC stream engine share.
pub(crate) struct CtcBackend {
    pub worker: Worker<Chunk, ChunkLogProbs>,
    pub geometry: ChunkGeometry,
    pub vocab: Vocabulary,
    pub decoder: CtcStreamDecoder,
}

/// Per-session CTC state: the chunker (audio cache) and the current utterance's frames.
pub(crate) struct CtcSession {
    backend: Arc<CtcBackend>,
    endpoint: EndpointOptions,
    chunker: Chunker,
    /// Row-major `[utt_frames, V]` log-probs of the current utterance.
    utterance: Vec<f32>,
    utt_frames: usize,
    /// Stream frame index of the utterance's first frame.
    utt_start: u64,
    last_partial: String,
}

impl CtcSession {
    pub fn new(backend: Arc<CtcBackend>, endpoint: EndpointOptions) -> Self {
        let chunker = Chunker::new(backend.geometry);
        Self {
            backend,
            endpoint,
            chunker,
            utterance: Vec::new(),
            utt_frames: 0,
            utt_start: 0,
            last_partial: String::new(),
        }
    }

    /// Forgets all audio and text.
    pub fn reset(&mut self) {
        self.chunker.reset();
        self.clear_utterance(0);
    }

    /// Samples held in the audio cache.
    pub fn buffered(&self) -> usize {
        self.chunker.buffered()
    }

    pub fn feed(
        &mut self,
        id: u64,
        alive: &Arc<AtomicBool>,
        samples: &[f32],
    ) -> Result<Vec<Event>> {
        let chunks = self.chunker.push(samples);
        self.run_chunks(id, alive, chunks)
    }

    pub fn end(&mut self, id: u64, alive: &Arc<AtomicBool>) -> Result<Vec<Event>> {
        let chunks = self.chunker.finish();
        let result = self.run_chunks(id, alive, chunks);
        let mut events = match result {
            Ok(e) => e,
            Err(e) => {
                self.reset();
                return Err(e);
            }
        };
        let hyp = self.decode()?;
        if !hyp.words.is_empty() {
            events.push(self.event(EventKind::Final, &hyp));
        }
        self.reset();
        Ok(events)
    }

    fn run_chunks(
        &mut self,
        id: u64,
        alive: &Arc<AtomicBool>,
        chunks: Vec<Chunk>,
    ) -> Result<Vec<Event>> {
        let mut events = Vec::new();
        for chunk in chunks {
            let owned = chunk.owned_frames(&self.backend.geometry);
            let out = self.backend.worker.call(id, Arc::clone(alive), chunk)?;
            self.append_owned(&out, owned)?;
            self.after_chunk(&mut events)?;
        }
        Ok(events)
    }

    fn append_owned(&mut self, out: &ChunkLogProbs, owned: usize) -> Result<()> {
        let first = self.backend.geometry.first_owned_frame();
        if out.vocab_size != self.backend.vocab.len() || out.frames < first + owned {
            return Err(Error::internal(format!(
                "chunk gave {} frames of {} tokens; expected {} frames of {} tokens",
                out.frames,
                out.vocab_size,
                first + owned,
                self.backend.vocab.len()
            )));
        }
        let v = out.vocab_size;
        self.utterance
            .extend_from_slice(&out.data[first * v..(first + owned) * v]);
        self.utt_frames += owned;
        Ok(())
    }

    fn decode(&self) -> Result<Hypothesis> {
        let lp = LogProbs::new(
            self.utterance.clone(),
            self.utt_frames,
            self.backend.vocab.len(),
        )?;
        match &self.backend.decoder {
            CtcStreamDecoder::Greedy => greedy_decode(&lp, &self.backend.vocab),
            CtcStreamDecoder::Beam(beam) => beam.decode(&lp),
        }
    }

    /// Decodes the utterance so far; emits a final at an endpoint, else a partial when the text
    /// changed.
    fn after_chunk(&mut self, events: &mut Vec<Event>) -> Result<()> {
        if self.utt_frames == 0 {
            return Ok(());
        }
        let hyp = self.decode()?;
        let secs_per_frame = self.backend.geometry.samples_per_frame as f64 / SAMPLE_RATE as f64;
        let frames_of = |s: Option<f32>| s.map(|s| (f64::from(s) / secs_per_frame).ceil() as usize);
        let last_end = hyp.words.last().map_or(0, |w| w.end_frame.max(0) as usize);
        let trailing = self.utt_frames.saturating_sub(last_end);
        let silence_end =
            frames_of(self.endpoint.min_trailing_silence).is_some_and(|f| trailing >= f);
        let too_long = frames_of(self.endpoint.max_utterance).is_some_and(|f| self.utt_frames >= f);
        if hyp.words.is_empty() {
            // Nothing said yet: drop the frames so silence never grows the utterance. Greedy
            // decoding restarts identically after frames that produced no token.
            if !self.last_partial.is_empty() {
                events.push(self.event(EventKind::Partial, &hyp));
            }
            let next = self.utt_start + self.utt_frames as u64;
            self.clear_utterance(next);
        } else if silence_end || too_long {
            events.push(self.event(EventKind::Final, &hyp));
            let next = self.utt_start + self.utt_frames as u64;
            self.clear_utterance(next);
        } else if hyp.text != self.last_partial {
            events.push(self.event(EventKind::Partial, &hyp));
            self.last_partial = hyp.text;
        }
        Ok(())
    }

    fn clear_utterance(&mut self, next_start: u64) {
        self.utterance.clear();
        self.utt_frames = 0;
        self.utt_start = next_start;
        self.last_partial.clear();
    }

    fn event(&self, kind: EventKind, hyp: &Hypothesis) -> Event {
        let spf = self.backend.geometry.samples_per_frame as f64 / SAMPLE_RATE as f64;
        let t = |f: i64| (self.utt_start as f64 + f.max(0) as f64) * spf;
        let words: Vec<Word> = hyp
            .words
            .iter()
            .map(|w| Word {
                speaker: None,
                word: w.word.clone(),
                start: t(w.start_frame),
                end: t(w.end_frame),
                probability: None,
            })
            .collect();
        let start = words.first().map_or(t(0), |w| w.start);
        let end = words.last().map_or(start, |w| w.end);
        Event {
            kind,
            text: hyp.text.clone(),
            start,
            end,
            words,
        }
    }
}
