//! A `[T, V]` matrix of per-frame token scores, and the normalisation the decoders expect.

use std::path::Path;

use dicta_core::{Error, ErrorKind, Result};

/// Smallest probability kept (as pyctcdecode's `MIN_TOKEN_CLIP_P`): log-probs are clipped at
/// `ln(1e-15)` so a malformed input cannot produce `-inf` scores.
pub const MIN_TOKEN_CLIP_P: f64 = 1e-15;

/// Row-major `[T, V]` float32 scores: `data[t * V + v]`.
#[derive(Debug, Clone, PartialEq)]
pub struct LogProbs {
    data: Vec<f32>,
    frames: usize,
    vocab: usize,
}

impl LogProbs {
    /// Wraps row-major `[frames, vocab]` data.
    pub fn new(data: Vec<f32>, frames: usize, vocab: usize) -> Result<Self> {
        if vocab == 0 || data.len() != frames * vocab {
            return Err(Error::invalid_input(format!(
                "log-probs need frames * vocab = {frames} * {vocab} values, got {}",
                data.len()
            )));
        }
        Ok(Self {
            data,
            frames,
            vocab,
        })
    }

    /// Reads a 2-D float32 (or float64, converted) C-order `.npy` file of shape `[T, V]`.
    pub fn from_npy_path(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| Error::from(e).context(path.display()))?;
        Self::from_npy_bytes(&bytes).map_err(|e| e.context(path.display()))
    }

    /// Parses `.npy` bytes; see [`LogProbs::from_npy_path`].
    pub fn from_npy_bytes(bytes: &[u8]) -> Result<Self> {
        let corrupt = |e: std::io::Error| Error::new(ErrorKind::CorruptInput, format!(".npy: {e}"));
        let npy = npyz::NpyFile::new(bytes).map_err(corrupt)?;
        let shape = npy.shape().to_vec();
        if shape.len() != 2 {
            return Err(Error::invalid_input(format!(
                ".npy log-probs must be 2-D [T, V], found shape {shape:?}"
            )));
        }
        if npy.order() != npyz::Order::C {
            return Err(Error::invalid_input(
                ".npy log-probs must be C-order (row-major)",
            ));
        }
        let (frames, vocab) = (shape[0] as usize, shape[1] as usize);
        let dtype = npy.dtype();
        let type_str = match &dtype {
            npyz::DType::Plain(ts) => ts.to_string(),
            other => format!("{other:?}"),
        };
        let data: Vec<f32> = match type_str.as_str() {
            "<f4" => npy.into_vec::<f32>().map_err(corrupt)?,
            "<f8" => npy
                .into_vec::<f64>()
                .map_err(corrupt)?
                .into_iter()
                .map(|v| v as f32)
                .collect(),
            other => {
                return Err(Error::new(
                    ErrorKind::UnsupportedFormat,
                    format!(".npy log-probs must be float32 or float64, found dtype {other}"),
                ))
            }
        };
        Self::new(data, frames, vocab)
    }

    /// Number of frames `T`.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Vocabulary size `V`.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// Row `t` (length `V`).
    #[inline]
    pub fn row(&self, t: usize) -> &[f32] {
        &self.data[t * self.vocab..(t + 1) * self.vocab]
    }

    /// All values, row-major.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }
}

/// numpy's pairwise summation (`@TYPE@_pairwise_sum`, block size 128, 8 accumulators), so sums
/// round exactly as `np.sum` does along a contiguous axis.
pub(crate) fn numpy_pairwise_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        let mut res = 0.0;
        for &v in a {
            res += v;
        }
        res
    } else if n <= 128 {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&a[..8]);
        let mut i = 8;
        while i < n - (n % 8) {
            for j in 0..8 {
                r[j] += a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        while i < n {
            res += a[i];
            i += 1;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        numpy_pairwise_sum(&a[..n2]) + numpy_pairwise_sum(&a[n2..])
    }
}

/// Produces clipped natural-log probabilities row by row, as pyctcdecode prepares its input
/// (computed in f64 as numpy does for float64 input): a matrix whose rows sum to 1 on average
/// is taken as probabilities (`ln`), anything else as logits (`log_softmax`); values are
/// clipped to `[ln 1e-15, 0]`. Log-probs pass through unchanged up to rounding. Rows are
/// computed on demand into a reused buffer, so no second `[T, V]` matrix is allocated.
pub(crate) struct RowNormalizer {
    probabilities: bool,
    floor: f64,
    row: Vec<f64>,
}

impl RowNormalizer {
    pub(crate) fn new(lp: &LogProbs) -> Self {
        let mut sums = Vec::with_capacity(lp.frames);
        let mut row = vec![0.0f64; lp.vocab];
        for t in 0..lp.frames {
            for (d, &v) in row.iter_mut().zip(lp.row(t)) {
                *d = f64::from(v);
            }
            sums.push(numpy_pairwise_sum(&row));
        }
        let mean = if sums.is_empty() {
            f64::NAN
        } else {
            numpy_pairwise_sum(&sums) / sums.len() as f64
        };
        // math.isclose(mean, 1) with its default rel_tol=1e-9
        let probabilities = (mean - 1.0).abs() <= 1e-9 * mean.abs().max(1.0);
        Self {
            probabilities,
            floor: MIN_TOKEN_CLIP_P.ln(),
            row,
        }
    }

    /// Normalised row `t` (length `V`).
    pub(crate) fn row(&mut self, lp: &LogProbs, t: usize) -> &[f64] {
        let raw = lp.row(t);
        if self.probabilities {
            for (d, &p) in self.row.iter_mut().zip(raw) {
                *d = f64::from(p).clamp(MIN_TOKEN_CLIP_P, 1.0).ln();
            }
            return &self.row;
        }
        let max = raw.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let max = if max.is_finite() { f64::from(max) } else { 0.0 };
        for (d, &v) in self.row.iter_mut().zip(raw) {
            *d = (f64::from(v) - max).exp();
        }
        let lse = numpy_pairwise_sum(&self.row).ln();
        let floor = self.floor;
        for (d, &v) in self.row.iter_mut().zip(raw) {
            let x = (f64::from(v) - max) - lse;
            *d = if x < floor {
                floor
            } else if x > 0.0 {
                0.0
            } else {
                x
            };
        }
        &self.row
    }
}
