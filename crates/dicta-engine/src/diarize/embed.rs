//! Speaker embeddings of audio clips: SpeechBrain's filterbanks and ECAPA-TDNN, clips of equal
//! length batched into one network call.

use std::path::Path;

use dicta_audio::fbank::Fbank;
use dicta_core::{Error, Result};
use dicta_models::speaker::{Ecapa, ECAPA_FILE, EMBEDDING, N_MELS};

/// Shortest clip (samples) the network takes: 9 frames.
pub const MIN_CLIP: usize = 8 * dicta_audio::fbank::HOP;
/// Clips per network call at most (bounds activations: ≈ 40 MB per 1.5 s clip). 8 rather than 16:
/// the same speed (seed-7 mixtures, interleaved runs) with peak RSS 259 MB instead of 316–340 MB,
/// as the im2col buffers (≈ 15 MB) stay under glibc's mmap threshold and are reused.
const BATCH: usize = 8;

/// A loaded speaker encoder (shareable).
pub struct SpeakerEncoder {
    fbank: Fbank,
    ecapa: Ecapa,
}

impl SpeakerEncoder {
    /// Loads ECAPA from `embedding_model.ckpt`, or a folder holding it, in int8 where the CPU
    /// has the int8 kernels (float32 elsewhere).
    pub fn load(path: &Path) -> Result<Self> {
        Self::load_with(path, dicta_models::kernels::int8::int8_fast())
    }

    /// [`SpeakerEncoder::load`] choosing int8 (`true`) or float32 (`false`: SpeechBrain's own
    /// numerics).
    pub fn load_with(path: &Path, int8: bool) -> Result<Self> {
        let file = if path.is_dir() {
            path.join(ECAPA_FILE)
        } else {
            path.to_path_buf()
        };
        Ok(Self {
            fbank: Fbank::new(),
            ecapa: Ecapa::load(&file, int8)?,
        })
    }

    /// Mean-normalised filterbanks of one clip, `[T, 80]`.
    pub fn features(&self, clip: &[f32]) -> Vec<f32> {
        self.fbank.compute(clip)
    }

    /// One 192-d embedding per clip (in order). Clips shorter than [`MIN_CLIP`] are refused.
    pub fn embed(&self, clips: &[&[f32]]) -> Result<Vec<Vec<f32>>> {
        if let Some(c) = clips.iter().find(|c| c.len() < MIN_CLIP) {
            return Err(Error::invalid_input(format!(
                "speaker embedding clip of {} samples is shorter than {MIN_CLIP}",
                c.len()
            )));
        }
        let mut order: Vec<usize> = (0..clips.len()).collect();
        order.sort_by_key(|&i| clips[i].len());
        let mut out = vec![Vec::new(); clips.len()];
        let mut k = 0;
        while k < order.len() {
            let len = clips[order[k]].len();
            let mut group = Vec::new();
            while k < order.len() && clips[order[k]].len() == len && group.len() < BATCH {
                group.push(order[k]);
                k += 1;
            }
            let t = Fbank::frames(len);
            let mut feats = Vec::with_capacity(group.len() * t * N_MELS);
            for &i in &group {
                feats.extend(self.features(clips[i]));
            }
            let emb = self.ecapa.forward(&feats, t)?;
            for (&i, e) in group.iter().zip(emb.chunks_exact(EMBEDDING)) {
                out[i] = e.to_vec();
            }
        }
        Ok(out)
    }
}

/// Cosine similarity of two embeddings.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        ab += f64::from(*x) * f64::from(*y);
        aa += f64::from(*x) * f64::from(*x);
        bb += f64::from(*y) * f64::from(*y);
    }
    (ab / (aa.sqrt() * bb.sqrt()).max(1e-12)) as f32
}
