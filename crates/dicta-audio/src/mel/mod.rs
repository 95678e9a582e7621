//! Whisper's log-mel front end, numerically matching openai-whisper's `log_mel_spectrogram`,
//! faster-whisper's `FeatureExtractor` and transformers' `WhisperFeatureExtractor`.
//!
//! Steps: append `padding` zero samples; centred STFT (reflect padding of `n_fft / 2` on both
//! sides, periodic Hann window, hop `hop_length`), dropping the last STFT frame so a recording of
//! `N` samples (padding included) gives `N / hop_length` frames; power spectrum; slaney mel
//! filterbank; `log10(max(x, 1e-10))`; clamp to `(max over the whole output) - 8`; `(x + 4) / 4`.
//!
//! The FFT, power, filterbank and `log10` run in `f64` (as transformers does); the `log10` result
//! is rounded to `f32` before the clamp, as every reference does.

mod filters;
mod spectrogram;

use std::sync::Arc;

use dicta_core::{Error, Result};
use rayon::prelude::*;
use realfft::num_complex::Complex;
use realfft::{RealFftPlanner, RealToComplex};

use filters::SparseFilter;
pub use spectrogram::MelSpectrogram;

/// Frames computed per parallel pass before their values are scattered into the output rows;
/// bounds the frame-major staging buffer (`BLOCK_FRAMES * n_mels` floats) for hour-long inputs.
const BLOCK_FRAMES: usize = 4096;
/// Smallest number of frames one rayon task handles, so short clips are not split needlessly.
const MIN_FRAMES_PER_TASK: usize = 64;
/// Largest accepted `n_fft` / `n_mels`: far above any speech front end, and keeps a typo from
/// allocating gigabytes.
const MAX_N_FFT: usize = 1 << 16;
const MAX_N_MELS: usize = 1024;

/// Shape of a log-mel front end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MelConfig {
    /// Number of mel bins (80 for Whisper up to large-v2, 128 for large-v3).
    pub n_mels: usize,
    /// FFT size and window length in samples.
    pub n_fft: usize,
    /// Samples between frames.
    pub hop_length: usize,
    /// Sample rate of the input in Hz; the filterbank spans 0 Hz to Nyquist.
    pub sample_rate: u32,
}

impl MelConfig {
    /// Whisper's front end: `n_fft` 400, hop 160, 16 kHz, with `n_mels` bins (80 or 128).
    pub fn whisper(n_mels: usize) -> Self {
        Self {
            n_mels,
            n_fft: 400,
            hop_length: 160,
            sample_rate: 16_000,
        }
    }
}

/// A log-mel front end with its window, sparse filterbank and FFT plan precomputed; cheap to
/// share across threads (`Send + Sync`) and reusable for any number of inputs.
pub struct LogMel {
    cfg: MelConfig,
    window: Vec<f64>,
    filters: Vec<SparseFilter>,
    fft: Arc<dyn RealToComplex<f64>>,
}

impl std::fmt::Debug for LogMel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogMel")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// Per-thread buffers, reused for every frame that thread computes.
struct FrameScratch {
    frame: Vec<f64>,
    spectrum: Vec<Complex<f64>>,
    fft_scratch: Vec<Complex<f64>>,
    power: Vec<f64>,
}

impl LogMel {
    /// Builds the front end. Fails with `invalid_input` when a size is zero or absurdly large.
    pub fn new(cfg: MelConfig) -> Result<Self> {
        if cfg.n_fft < 2 || cfg.n_fft > MAX_N_FFT {
            return Err(Error::invalid_input(format!(
                "mel n_fft must be in 2..={MAX_N_FFT}, got {}",
                cfg.n_fft
            )));
        }
        if cfg.n_mels == 0 || cfg.n_mels > MAX_N_MELS {
            return Err(Error::invalid_input(format!(
                "mel n_mels must be in 1..={MAX_N_MELS}, got {}",
                cfg.n_mels
            )));
        }
        if cfg.hop_length == 0 {
            return Err(Error::invalid_input("mel hop_length must be at least 1"));
        }
        if cfg.sample_rate == 0 {
            return Err(Error::invalid_input(
                "mel sample_rate must be at least 1 Hz",
            ));
        }
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(cfg.n_fft);
        Ok(Self {
            cfg,
            window: filters::hann_periodic(cfg.n_fft),
            filters: filters::slaney_mel_filters(cfg.sample_rate, cfg.n_fft, cfg.n_mels),
            fft,
        })
    }

    /// The configuration this front end was built with.
    pub fn config(&self) -> &MelConfig {
        &self.cfg
    }

    /// Frames [`LogMel::compute`] returns for `n_samples` input samples plus `padding` zeros:
    /// the centred STFT's frame count minus its last frame (`(n + padding) / hop` for even
    /// `n_fft`), and 0 for an empty input.
    pub fn n_frames(&self, n_samples: usize, padding: usize) -> usize {
        let total = n_samples.saturating_add(padding);
        let half = self.cfg.n_fft / 2;
        let padded = total.saturating_add(2 * half);
        if total == 0 || padded < self.cfg.n_fft {
            return 0;
        }
        (padded - self.cfg.n_fft) / self.cfg.hop_length
    }

    /// openai-whisper `log_mel_spectrogram(samples, padding=padding)` semantics: `padding` zero
    /// samples are appended to the whole input and the `max - 8` clamp is global over the
    /// result, so faster-whisper's call (`padding = 480000` on the full recording, then
    /// [`MelSpectrogram::window`]s of 3000 frames) is reproduced exactly.
    ///
    /// Returns `[n_mels, n_frames]` with `n_frames = self.n_frames(samples.len(), padding)`;
    /// when that is 0 the result is empty (the references raise instead).
    pub fn compute(&self, samples: &[f32], padding: usize) -> MelSpectrogram {
        let n_mels = self.cfg.n_mels;
        let n_frames = self.n_frames(samples.len(), padding);
        let mut data = vec![0.0f32; n_mels * n_frames];
        if n_frames == 0 {
            return MelSpectrogram {
                n_mels,
                n_frames,
                data,
            };
        }
        let signal = PaddedSignal {
            samples,
            total: samples.len() + padding,
            half: self.cfg.n_fft / 2,
        };

        // Frames are computed frame-major into a bounded staging block (contiguous per-frame
        // writes, parallel over frames), then scattered into the mel-major output rows
        // (contiguous per-row writes, parallel over rows).
        let mut block = vec![0.0f32; BLOCK_FRAMES.min(n_frames) * n_mels];
        let mut max = f32::NEG_INFINITY;
        for first in (0..n_frames).step_by(BLOCK_FRAMES) {
            let len = BLOCK_FRAMES.min(n_frames - first);
            let staged = &mut block[..len * n_mels];
            let block_max = staged
                .par_chunks_mut(n_mels)
                .with_min_len(MIN_FRAMES_PER_TASK)
                .enumerate()
                .map_init(
                    || self.scratch(),
                    |scratch, (j, out)| self.log_mel_frame(&signal, first + j, scratch, out),
                )
                .reduce(|| f32::NEG_INFINITY, f32::max);
            max = max.max(block_max);
            let staged = &*staged;
            data.par_chunks_mut(n_frames)
                .enumerate()
                .for_each(|(m, row)| {
                    for (dst, frame) in row[first..first + len]
                        .iter_mut()
                        .zip(staged.chunks_exact(n_mels))
                    {
                        *dst = frame[m];
                    }
                });
        }

        let floor = max - 8.0;
        data.par_chunks_mut(MIN_FRAMES_PER_TASK * 64)
            .for_each(|chunk| {
                chunk
                    .iter_mut()
                    .for_each(|v| *v = (v.max(floor) + 4.0) / 4.0)
            });
        MelSpectrogram {
            n_mels,
            n_frames,
            data,
        }
    }

    fn scratch(&self) -> FrameScratch {
        FrameScratch {
            frame: self.fft.make_input_vec(),
            spectrum: self.fft.make_output_vec(),
            fft_scratch: self.fft.make_scratch_vec(),
            power: vec![0.0; self.cfg.n_fft / 2 + 1],
        }
    }

    /// Writes `log10(max(mel, 1e-10))` of frame `t` into `out` (`n_mels` values) and returns
    /// their maximum.
    fn log_mel_frame(
        &self,
        signal: &PaddedSignal<'_>,
        t: usize,
        s: &mut FrameScratch,
        out: &mut [f32],
    ) -> f32 {
        let n_fft = self.cfg.n_fft;
        // Frame t covers [t*hop, t*hop + n_fft) of the reflect-padded signal, i.e. starts at
        // t*hop - half in the caller's samples.
        let start = t * self.cfg.hop_length;
        let interior = start
            .checked_sub(signal.half)
            .and_then(|a| signal.samples.get(a..a + n_fft));
        match interior {
            Some(src) => {
                for ((d, &x), &w) in s.frame.iter_mut().zip(src).zip(&self.window) {
                    *d = f64::from(x) * w;
                }
            }
            None => {
                for (i, (d, &w)) in s.frame.iter_mut().zip(&self.window).enumerate() {
                    *d = f64::from(signal.at(start + i)) * w;
                }
            }
        }
        // Buffer lengths come from the plan itself, so this cannot fail.
        let res = self
            .fft
            .process_with_scratch(&mut s.frame, &mut s.spectrum, &mut s.fft_scratch);
        debug_assert!(res.is_ok(), "realfft rejected plan-sized buffers: {res:?}");
        for (p, c) in s.power.iter_mut().zip(&s.spectrum) {
            *p = c.norm_sqr();
        }
        let mut max = f32::NEG_INFINITY;
        for (o, f) in out.iter_mut().zip(&self.filters) {
            let energy: f64 = f
                .weights
                .iter()
                .zip(&s.power[f.start..])
                .map(|(w, p)| w * p)
                .sum();
            let v = energy.max(1e-10).log10() as f32;
            max = max.max(v);
            *o = v;
        }
        max
    }
}

/// The input as the STFT sees it: `samples`, then zeros up to `total`, reflect-padded by
/// `half` on both sides (numpy/torch `mode="reflect"`: the edge sample is not repeated).
struct PaddedSignal<'a> {
    samples: &'a [f32],
    total: usize,
    half: usize,
}

impl PaddedSignal<'_> {
    /// Sample `p` of the reflect-padded signal, `p` in `[0, total + 2 * half)`.
    fn at(&self, p: usize) -> f32 {
        let j = p as isize - self.half as isize;
        let n = self.total;
        let idx = if n == 1 {
            0
        } else {
            // Reflection is periodic with period 2(n - 1); numpy's repeated reflection for pads
            // longer than the signal gives the same sequence.
            let period = 2 * (n - 1);
            let r = j.unsigned_abs() % period;
            if r >= n {
                period - r
            } else {
                r
            }
        };
        self.samples.get(idx).copied().unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_mel_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<LogMel>();
    }

    #[test]
    fn reflect_padding_matches_numpy_for_short_and_long_signals() {
        // np.pad(np.arange(5.), 7, mode="reflect")
        let x = [0.0, 1.0, 2.0, 3.0, 4.0];
        let s = PaddedSignal {
            samples: &x,
            total: 5,
            half: 7,
        };
        let got: Vec<f32> = (0..19).map(|p| s.at(p)).collect();
        let want = [
            1., 2., 3., 4., 3., 2., 1., 0., 1., 2., 3., 4., 3., 2., 1., 0., 1., 2., 3.,
        ];
        assert_eq!(got, want);
        // Appended zeros are part of what gets reflected.
        let s = PaddedSignal {
            samples: &x,
            total: 7,
            half: 2,
        };
        let got: Vec<f32> = (0..11).map(|p| s.at(p)).collect();
        assert_eq!(got, [2., 1., 0., 1., 2., 3., 4., 0., 0., 0., 4.]);
    }

    #[test]
    fn frame_count_is_len_over_hop_and_empty_input_gives_no_frames() {
        let mel = LogMel::new(MelConfig::whisper(80)).unwrap();
        assert_eq!(mel.n_frames(16_000, 0), 100);
        assert_eq!(mel.n_frames(16_159, 0), 100);
        assert_eq!(mel.n_frames(16_000, 480_000), 3100);
        assert_eq!(mel.n_frames(0, 0), 0);
        assert_eq!(mel.n_frames(159, 0), 0);
        let out = mel.compute(&[], 0);
        assert_eq!((out.n_mels, out.n_frames, out.data.len()), (80, 0, 0));
        let out = mel.compute(&[], 320);
        assert_eq!((out.n_frames, out.data.len()), (2, 160));
    }

    #[test]
    fn invalid_configs_are_rejected() {
        for cfg in [
            MelConfig {
                n_mels: 0,
                ..MelConfig::whisper(80)
            },
            MelConfig {
                n_fft: 1,
                ..MelConfig::whisper(80)
            },
            MelConfig {
                hop_length: 0,
                ..MelConfig::whisper(80)
            },
            MelConfig {
                sample_rate: 0,
                ..MelConfig::whisper(80)
            },
            MelConfig {
                n_fft: usize::MAX,
                ..MelConfig::whisper(80)
            },
        ] {
            let err = LogMel::new(cfg).unwrap_err();
            assert_eq!(err.kind, dicta_core::ErrorKind::InvalidInput, "{cfg:?}");
        }
    }

    #[test]
    fn silence_is_the_clamp_floor_everywhere() {
        // All-zero input: every value is log10(1e-10) = -10, max - 8 does not bite.
        let mel = LogMel::new(MelConfig::whisper(80)).unwrap();
        let out = mel.compute(&vec![0.0; 3200], 0);
        assert!(out
            .data
            .iter()
            .all(|&v| (v - (-10.0 + 4.0) / 4.0).abs() < 1e-6));
    }
}
