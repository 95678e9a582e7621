//! SpeechBrain's `Fbank` front end (80 log-mel filterbanks at 16 kHz), as its speaker models
//! (ECAPA-TDNN `spkrec-ecapa-voxceleb`) were trained on, followed by the sentence-level mean
//! normalisation their `InputNormalization(norm_type="sentence", std_norm=False)` applies.
//!
//! Per chunk of samples: a centred STFT (zero padding of `n_fft / 2` each side, 400-point FFT of
//! a 400-sample periodic Hamming window, hop 160) → power spectrum → SpeechBrain's own triangular
//! mel filters (linear in mel between 0 Hz and 8 kHz, on the FFT bins' frequencies) → `10·log10`
//! floored at 1e-10, then clipped to 80 dB below the chunk's maximum → each filter's mean over the
//! chunk subtracted. `T = 1 + len / 160` frames.

use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex};

/// FFT size and window length (25 ms).
pub const N_FFT: usize = 400;
/// Hop (10 ms).
pub const HOP: usize = 160;
/// Filterbank channels.
pub const N_MELS: usize = 80;
const BINS: usize = N_FFT / 2 + 1;
const TOP_DB: f32 = 80.0;
const AMIN: f32 = 1e-10;

/// The front end with its tables (window, filters, FFT plan); cheap to share.
pub struct Fbank {
    window: Vec<f32>,
    /// `[BINS, N_MELS]`, bin-major.
    filters: Vec<f32>,
    fft: Arc<dyn RealToComplex<f32>>,
}

impl Default for Fbank {
    fn default() -> Self {
        Self::new()
    }
}

impl Fbank {
    /// Builds the tables.
    pub fn new() -> Self {
        // torch.hamming_window(400) is periodic: 0.54 − 0.46·cos(2πn/N).
        let window = (0..N_FFT)
            .map(|n| {
                (0.54 - 0.46 * (2.0 * std::f64::consts::PI * n as f64 / N_FFT as f64).cos()) as f32
            })
            .collect();
        Self {
            window,
            filters: filters(),
            fft: RealFftPlanner::<f32>::new().plan_fft_forward(N_FFT),
        }
    }

    /// Number of frames of a chunk of `len` samples.
    pub fn frames(len: usize) -> usize {
        1 + len / HOP
    }

    /// Mean-normalised log-mel features of one chunk: `[T, 80]` row-major, `T = 1 + len / 160`.
    pub fn compute(&self, samples: &[f32]) -> Vec<f32> {
        let t = Self::frames(samples.len());
        let pad = N_FFT / 2;
        let mut out = vec![0f32; t * N_MELS];
        let mut frame = vec![0f32; N_FFT];
        let mut spec = self.fft.make_output_vec();
        let mut scratch = self.fft.make_scratch_vec();
        let mut power = [0f32; BINS];
        for (f, row) in out.chunks_exact_mut(N_MELS).enumerate() {
            let start = (f * HOP) as isize - pad as isize;
            for (j, v) in frame.iter_mut().enumerate() {
                let i = start + j as isize;
                let x = if i >= 0 && (i as usize) < samples.len() {
                    samples[i as usize]
                } else {
                    0.0
                };
                *v = x * self.window[j];
            }
            self.fft
                .process_with_scratch(&mut frame, &mut spec, &mut scratch)
                .expect("FFT buffers sized by the plan");
            for (p, c) in power.iter_mut().zip(&spec) {
                *p = c.re * c.re + c.im * c.im;
            }
            for (b, p) in power.iter().enumerate() {
                let w = &self.filters[b * N_MELS..(b + 1) * N_MELS];
                for (o, wv) in row.iter_mut().zip(w) {
                    *o += p * wv;
                }
            }
        }
        let mut max = f32::NEG_INFINITY;
        for v in &mut out {
            *v = 10.0 * v.max(AMIN).log10();
            max = max.max(*v);
        }
        let floor = max - TOP_DB;
        let mut mean = [0f64; N_MELS];
        for row in out.chunks_exact_mut(N_MELS) {
            for (v, m) in row.iter_mut().zip(&mut mean) {
                *v = v.max(floor);
                *m += f64::from(*v);
            }
        }
        for m in &mut mean {
            *m /= t as f64;
        }
        for row in out.chunks_exact_mut(N_MELS) {
            for (v, m) in row.iter_mut().zip(&mean) {
                *v -= *m as f32;
            }
        }
        out
    }
}

/// SpeechBrain's `Filterbank` triangular filters, `[BINS, N_MELS]` (computed in f32 like its
/// torch tensors).
fn filters() -> Vec<f32> {
    let to_mel = |hz: f64| 2595.0 * (1.0 + hz / 700.0).log10();
    let (lo, hi) = (to_mel(0.0) as f32, to_mel(8000.0) as f32);
    // torch.linspace in f32.
    let n = N_MELS + 2;
    let step = (hi - lo) / (n - 1) as f32;
    let mel: Vec<f32> = (0..n)
        .map(|i| {
            if i < n / 2 {
                lo + step * i as f32
            } else {
                hi - step * (n - 1 - i) as f32
            }
        })
        .collect();
    let hz: Vec<f32> = mel
        .iter()
        .map(|&m| 700.0 * (10f32.powf(m / 2595.0) - 1.0))
        .collect();
    let band: Vec<f32> = (0..N_MELS).map(|i| hz[i + 1] - hz[i]).collect();
    let central = &hz[1..=N_MELS];
    let fstep = 8000.0f32 / (BINS - 1) as f32;
    let mut out = vec![0f32; BINS * N_MELS];
    for b in 0..BINS {
        let f = if b < BINS / 2 {
            fstep * b as f32
        } else {
            8000.0 - fstep * (BINS - 1 - b) as f32
        };
        for m in 0..N_MELS {
            let slope = (f - central[m]) / band[m];
            out[b * N_MELS + m] = (slope + 1.0).min(1.0 - slope).max(0.0);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_triangles_that_cover_the_band() {
        let f = filters();
        // Every filter peaks near 1 and is zero far from its centre.
        for m in 0..N_MELS {
            let col: Vec<f32> = (0..BINS).map(|b| f[b * N_MELS + m]).collect();
            let peak = col.iter().cloned().fold(0.0, f32::max);
            // The lowest filters are narrower than a bin, so their sampled peak can be small.
            assert!(peak > 0.0 && peak <= 1.0, "filter {m}: {peak}");
            assert!(col.iter().all(|&v| (0.0..=1.0).contains(&v)));
            let nonzero = col.iter().filter(|&&v| v > 0.0).count();
            assert!(nonzero < BINS / 4, "filter {m} spans {nonzero} bins");
        }
    }

    #[test]
    fn features_are_mean_normalised_with_the_expected_frames() {
        let fb = Fbank::new();
        let x: Vec<f32> = (0..16_000)
            .map(|i| (i as f32 * 0.07).sin() * 0.3 + (i as f32 * 0.011).cos() * 0.1)
            .collect();
        let f = fb.compute(&x);
        assert_eq!(f.len(), Fbank::frames(x.len()) * N_MELS);
        assert_eq!(Fbank::frames(16_000), 101);
        for m in 0..N_MELS {
            let mean: f32 = f.iter().skip(m).step_by(N_MELS).sum::<f32>() / 101.0;
            assert!(mean.abs() < 1e-3, "{m}: {mean}");
        }
    }
}
