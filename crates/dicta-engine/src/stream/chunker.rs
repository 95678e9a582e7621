//! Chunk geometry and the per-session chunker: a buffer that turns blocks of any size into whole
//! model chunks with left context and lookahead, so the block size never changes what the model
//! sees.

use dicta_core::{Error, Result};
use dicta_models::ctc::CtcModel;

/// Where a chunk's samples come from, in samples (16 kHz).
///
/// A chunk is `[left_context | step | lookahead]`; the session buffer advances by `step`, so the
/// last `left_context + lookahead` samples of one chunk are the first ones of the next. The model
/// output of a chunk is kept only for the frames of its `step` region ("owned" frames).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkGeometry {
    /// Already-owned samples at the head of each chunk (zeros before the first chunk).
    pub left_context: usize,
    /// New samples per chunk: the amount the buffer advances (`chunk_step`).
    pub step: usize,
    /// Samples after the step region the model needs so that the step's last frame is complete.
    pub lookahead: usize,
    /// Input samples per output frame.
    pub samples_per_frame: usize,
}

impl ChunkGeometry {
    /// Samples per model call (`chunk_size = left_context + step + lookahead`).
    pub fn chunk_size(&self) -> usize {
        self.left_context + self.step + self.lookahead
    }

    /// Samples one chunk shares with the next (`chunk_size - step`).
    pub fn overlap(&self) -> usize {
        self.left_context + self.lookahead
    }

    /// Output frames owned by one full chunk.
    pub fn step_frames(&self) -> usize {
        self.step / self.samples_per_frame
    }

    /// Index of the first owned frame in a chunk's output.
    pub fn first_owned_frame(&self) -> usize {
        self.left_context / self.samples_per_frame
    }

    /// Geometry of a CTC model, derived from its front end: `samples_per_frame` and the receptive
    /// field of one frame (the fewest samples that give one frame) come from the model;
    /// `step_seconds` and `left_seconds` are rounded to whole frames.
    ///
    /// Errors: `InvalidInput` when the step rounds to zero frames or the model cannot give the
    /// owned frames of a chunk.
    pub fn for_ctc(model: &dyn CtcModel, step_seconds: f32, left_seconds: f32) -> Result<Self> {
        let spf = model.samples_per_frame();
        if spf == 0 {
            return Err(Error::invalid_input("model reports 0 samples per frame"));
        }
        let to_frames = |s: f32| (f64::from(s) * 16_000.0 / spf as f64).round() as usize;
        if !(step_seconds.is_finite() && step_seconds > 0.0) {
            return Err(Error::invalid_input(format!(
                "chunk step must be > 0 s, got {step_seconds}"
            )));
        }
        if !(left_seconds.is_finite() && left_seconds >= 0.0) {
            return Err(Error::invalid_input(format!(
                "left context must be >= 0 s, got {left_seconds}"
            )));
        }
        let step_frames = to_frames(step_seconds);
        if step_frames == 0 {
            return Err(Error::invalid_input(format!(
                "chunk step {step_seconds} s is shorter than one model frame ({spf} samples)"
            )));
        }
        let receptive_field = (1..=64 * spf)
            .find(|&n| model.frames_for_samples(n) >= 1)
            .ok_or_else(|| {
                Error::invalid_input("model gives no frame for up to 64 frames of samples")
            })?;
        // The last owned frame needs `receptive_field` samples from its start.
        let lookahead = receptive_field.saturating_sub(spf).div_ceil(spf) * spf;
        let geometry = Self {
            left_context: to_frames(left_seconds) * spf,
            step: step_frames * spf,
            lookahead,
            samples_per_frame: spf,
        };
        let needed = geometry.first_owned_frame() + step_frames;
        let got = model.frames_for_samples(geometry.chunk_size());
        if got < needed {
            return Err(Error::internal(format!(
                "a chunk of {} samples gives {got} frames, fewer than the {needed} it must own",
                geometry.chunk_size()
            )));
        }
        Ok(geometry)
    }
}

/// One whole chunk ready for the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// `chunk_size` samples: left context, step region, lookahead (zero padded at the end of a
    /// stream).
    pub samples: Vec<f32>,
    /// Stream position (in samples) of the first step-region sample.
    pub start_sample: u64,
    /// Real (not padding) samples in the step region (`<= step`).
    pub new_samples: usize,
}

impl Chunk {
    /// Owned output frames of this chunk: all step frames for a full chunk, enough frames to
    /// cover the real samples for the last, padded one.
    pub fn owned_frames(&self, geometry: &ChunkGeometry) -> usize {
        if self.new_samples >= geometry.step {
            geometry.step_frames()
        } else {
            self.new_samples.div_ceil(geometry.samples_per_frame)
        }
    }
}

/// Buffers a stream and cuts it into [`Chunk`]s. After each chunk only the overlap (plus samples
/// that do not yet fill the next chunk) stays in the buffer.
#[derive(Debug, Clone)]
pub struct Chunker {
    geometry: ChunkGeometry,
    /// `buffer[..left_context]` is the context of the next chunk; the rest is not yet owned.
    buffer: Vec<f32>,
    /// Stream position of `buffer[left_context]`.
    position: u64,
}

impl Chunker {
    /// An empty chunker (left context of zeros).
    pub fn new(geometry: ChunkGeometry) -> Self {
        let mut chunker = Self {
            geometry,
            buffer: Vec::with_capacity(geometry.chunk_size() * 2),
            position: 0,
        };
        chunker.reset();
        chunker
    }

    /// The geometry.
    pub fn geometry(&self) -> &ChunkGeometry {
        &self.geometry
    }

    /// Forgets all audio: the next sample is stream position 0.
    pub fn reset(&mut self) {
        self.buffer.clear();
        self.buffer.resize(self.geometry.left_context, 0.0);
        self.position = 0;
    }

    /// Samples held (context + pending).
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// Samples received but not yet owned by any chunk.
    pub fn pending(&self) -> usize {
        self.buffer.len() - self.geometry.left_context
    }

    /// Appends samples and returns every chunk that is now whole, in order.
    pub fn push(&mut self, samples: &[f32]) -> Vec<Chunk> {
        let mut out = Vec::new();
        let size = self.geometry.chunk_size();
        let mut rest = samples;
        // Append at most one chunk's worth at a time so the buffer stays bounded for any block.
        while !rest.is_empty() || self.buffer.len() >= size {
            if self.buffer.len() >= size {
                out.push(self.cut(self.geometry.step));
                continue;
            }
            let take = (size - self.buffer.len()).min(rest.len());
            self.buffer.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
        }
        out
    }

    /// Flushes the stream: zero-pads what is pending to whole chunks. Returns nothing when only
    /// context (already owned audio) remains. Resets the chunker.
    pub fn finish(&mut self) -> Vec<Chunk> {
        let mut out = Vec::new();
        let left = self.geometry.left_context;
        let mut real = self.buffer.len();
        while real > left {
            let new = (real - left).min(self.geometry.step);
            self.buffer.resize(self.geometry.chunk_size(), 0.0);
            out.push(self.cut(new));
            real -= new;
        }
        self.reset();
        out
    }

    fn cut(&mut self, new_samples: usize) -> Chunk {
        let chunk = Chunk {
            samples: self.buffer[..self.geometry.chunk_size()].to_vec(),
            start_sample: self.position,
            new_samples,
        };
        self.buffer.drain(..self.geometry.step);
        self.position += self.geometry.step as u64;
        chunk
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> ChunkGeometry {
        ChunkGeometry {
            left_context: 4,
            step: 6,
            lookahead: 2,
            samples_per_frame: 2,
        }
    }

    fn ramp(n: usize) -> Vec<f32> {
        (1..=n).map(|i| i as f32).collect()
    }

    #[test]
    fn chunks_overlap_by_context_and_lookahead() {
        let mut c = Chunker::new(geo());
        let chunks = c.push(&ramp(20));
        // 4 zeros + 20 samples: chunks need 12 samples, advance 6 → 3 whole chunks.
        assert_eq!(chunks.len(), 3);
        assert_eq!(
            chunks[0].samples,
            [0., 0., 0., 0., 1., 2., 3., 4., 5., 6., 7., 8.]
        );
        assert_eq!(
            chunks[1].samples,
            [3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14.]
        );
        assert_eq!(chunks[1].start_sample, 6);
        assert_eq!(chunks[2].start_sample, 12);
        // Only the overlap remains (the lookahead samples are not owned yet).
        assert_eq!(c.buffered(), 4 + 20 - 3 * 6);
        assert_eq!(c.pending(), 2);
    }

    #[test]
    fn after_whole_chunks_only_overlap_stays() {
        let g = geo();
        let mut c = Chunker::new(g);
        // Exactly one chunk's worth of new audio plus lookahead.
        let chunks = c.push(&ramp(g.step + g.lookahead));
        assert_eq!(chunks.len(), 1);
        assert_eq!(c.buffered(), g.overlap());
    }

    #[test]
    fn block_size_never_changes_chunks() {
        let audio = ramp(101);
        let whole = {
            let mut c = Chunker::new(geo());
            let mut v = c.push(&audio);
            v.extend(c.finish());
            v
        };
        for block in [1, 3, 7, 12, 50] {
            let mut c = Chunker::new(geo());
            let mut v = Vec::new();
            for b in audio.chunks(block) {
                v.extend(c.push(b));
            }
            v.extend(c.finish());
            assert_eq!(v, whole, "block {block}");
        }
    }

    #[test]
    fn finish_flushes_only_new_audio() {
        let g = geo();
        let mut c = Chunker::new(g);
        assert!(c.finish().is_empty(), "nothing fed, nothing flushed");
        let mut c = Chunker::new(g);
        let chunks = c.push(&ramp(g.step + g.lookahead));
        assert_eq!(chunks.len(), 1);
        // The 2 lookahead samples are not yet owned: they are flushed once, padded.
        let tail = c.finish();
        assert_eq!(tail.len(), 1);
        assert_eq!(tail[0].new_samples, 2);
        assert_eq!(tail[0].owned_frames(&g), 1);
        assert_eq!(
            tail[0].samples,
            [3., 4., 5., 6., 7., 8., 0., 0., 0., 0., 0., 0.]
        );
        // A finished chunker is reset: finishing again flushes nothing.
        assert!(c.finish().is_empty());
    }

    #[test]
    fn finish_splits_pending_longer_than_a_step() {
        let g = geo();
        let mut c = Chunker::new(g);
        // 7 pending samples < chunk needs (step 6 + lookahead 2): one full + one partial.
        assert!(c.push(&ramp(7)).is_empty());
        let tail = c.finish();
        assert_eq!(
            tail.iter().map(|c| c.new_samples).collect::<Vec<_>>(),
            [6, 1]
        );
        assert_eq!(tail[1].start_sample, 6);
    }
}
