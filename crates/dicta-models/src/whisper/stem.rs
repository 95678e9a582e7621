//! Whisper's convolution stem (conv1 → GELU → conv2, stride 2 → GELU) on Dicta's f32 panel
//! kernel, frame-major, for the int8 compute type on the CPU.
//!
//! Through candle the two convolutions took ≈ 65 ms of a ≈ 225 ms int8 window (one window,
//! 2 threads): its im2col and gemm, then the channel-major output transposed to the encoder's
//! frame-major layout. Here each convolution is one [`matmul_panels`] over frame-major im2col
//! rows, and the output is frame-major from the start: ≈ 20 ms. (On the byte kernels it was no
//! faster, and the dev set lost a few words, so the stem stays in f32.) The sums run in
//! another order than candle's, so the float32 compute type, the token-parity reference, keeps
//! candle's convolutions.
//!
//! The weights are stored with the kernel tap outermost (`[d, 3, c_in]` instead of candle's
//! `[d, c_in, 3]`), so that a frame's im2col row is three contiguous input rows.

use super::model::ce;
use crate::kernels::gelu_erf_into;
use crate::kernels::panel::{matmul_panels, PackedF32};
use candle_core::Tensor;
use candle_nn::Conv1d;
use dicta_core::Result;
use rayon::prelude::*;

/// Kernel width of both convolutions.
const TAPS: usize = 3;

/// One convolution (padding 1) as a matmul over im2col rows.
struct Conv {
    /// `[d, TAPS · c_in]`, tap-major within a row.
    w: PackedF32,
    bias: Vec<f32>,
    c_in: usize,
    stride: usize,
}

impl Conv {
    fn new(conv: &Conv1d, stride: usize) -> Result<Self> {
        let (d, c_in, taps) = conv.weight().dims3().map_err(ce)?;
        if taps != TAPS {
            return Err(dicta_core::Error::invalid_input(format!(
                "whisper conv stem: kernel width {taps}, expected {TAPS}"
            )));
        }
        let w: Vec<f32> = conv
            .weight()
            .flatten_all()
            .and_then(|t| t.to_vec1())
            .map_err(ce)?;
        let mut perm = vec![0f32; w.len()];
        for o in 0..d {
            for c in 0..c_in {
                for k in 0..TAPS {
                    perm[(o * TAPS + k) * c_in + c] = w[(o * c_in + c) * TAPS + k];
                }
            }
        }
        let bias = match conv.bias() {
            Some(b) => b.to_vec1().map_err(ce)?,
            None => vec![0.0; d],
        };
        Ok(Self {
            w: PackedF32::pack(&perm, d, TAPS * c_in),
            bias,
            c_in,
            stride,
        })
    }

    /// x [frames, c_in] frame-major → GELU(conv(x)) [frames / stride, d].
    fn forward(&self, x: &[f32], frames: usize) -> Vec<f32> {
        self.forward_with(x, frames, true)
    }

    /// [`Conv::forward`]; `dedup` computes the trailing rows equal to the last one once.
    fn forward_with(&self, x: &[f32], frames: usize, dedup: bool) -> Vec<f32> {
        let c = self.c_in;
        let out_frames = frames.div_ceil(self.stride);
        let row = TAPS * c;
        let mut col = vec![0f32; out_frames * row];
        col.par_chunks_mut(row).enumerate().for_each(|(t, dst)| {
            for k in 0..TAPS {
                // Input frame of tap k (padding 1 on both sides gives zeros).
                let src = (t * self.stride + k).checked_sub(1).filter(|&f| f < frames);
                if let Some(f) = src {
                    dst[k * c..(k + 1) * c].copy_from_slice(&x[f * c..(f + 1) * c]);
                }
            }
        });
        // The trailing frames whose im2col rows are the last frame's, bit for bit (the zero
        // padding of a window shorter than 30 s, and what conv1 makes of it), are computed
        // once: the panel kernel computes every row on its own, so copies of that row's output
        // are the bits each would get.
        let same = |a: usize, b: usize| {
            col[a * row..(a + 1) * row]
                .iter()
                .zip(&col[b * row..(b + 1) * row])
                .all(|(x, y)| x.to_bits() == y.to_bits())
        };
        if out_frames == 0 {
            return Vec::new();
        }
        let mut uniq = out_frames;
        while dedup && uniq > 1 && same(uniq - 2, out_frames - 1) {
            uniq -= 1;
        }
        let d = self.w.n();
        let mut y = vec![0f32; uniq * d];
        matmul_panels(&col[..uniq * row], uniq, &self.w, Some(&self.bias), &mut y);
        // GELU through the shared kernel (needs distinct source and destination).
        let mut g = col;
        g.truncate(0);
        g.resize(out_frames * d, 0.0);
        gelu_erf_into(&y, &mut g[..uniq * d]);
        let (done, rest) = g.split_at_mut(uniq * d);
        let last = &done[(uniq - 1) * d..];
        rest.par_chunks_mut(d).for_each(|r| r.copy_from_slice(last));
        g
    }
}

/// The stem: mel → the encoder's first hidden states, before the positional embedding.
pub(crate) struct Stem {
    conv1: Conv,
    conv2: Conv,
}

impl Stem {
    /// Packs the two convolutions (weights `[d, c_in, 3]`, biases `[d]`).
    pub fn new(conv1: &Conv1d, conv2: &Conv1d) -> Result<Self> {
        Ok(Self {
            conv1: Conv::new(conv1, 1)?,
            conv2: Conv::new(conv2, 2)?,
        })
    }

    /// mel [N, n_mels, 2·T] → [N, T, d] (GELU after each convolution).
    pub fn forward(&self, mel: &Tensor) -> candle_core::Result<Tensor> {
        let (n, m, frames) = mel.dims3()?;
        if m != self.conv1.c_in {
            candle_core::bail!("conv stem: {m} mel bins, expected {}", self.conv1.c_in);
        }
        // Frame-major input rows for the first im2col.
        let x: Vec<f32> = mel
            .transpose(1, 2)?
            .contiguous()?
            .flatten_all()?
            .to_vec1()?;
        let d = self.conv2.w.n();
        let t_out = frames.div_ceil(2);
        let mut out = Vec::with_capacity(n * t_out * d);
        for r in 0..n {
            let h = self
                .conv1
                .forward(&x[r * frames * m..(r + 1) * frames * m], frames);
            out.extend(self.conv2.forward(&h, frames));
        }
        Tensor::from_vec(out, (n, t_out, d), mel.device())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Module};
    use candle_nn::Conv1dConfig;

    /// Deterministic test values.
    fn val(i: usize, s: f32) -> f32 {
        ((i as f32) * 0.377 + s).sin()
    }

    /// A candle convolution of `c_in` → `d` channels (padding 1) with weights and bias from
    /// [`val`] at offset `s`.
    fn conv1d(c_in: usize, d: usize, s: f32, stride: usize) -> Conv1d {
        let dev = Device::Cpu;
        let w: Vec<f32> = (0..d * c_in * TAPS).map(|i| val(i, s) * 0.3).collect();
        let b: Vec<f32> = (0..d).map(|i| val(i, s + 1.0) * 0.1).collect();
        Conv1d::new(
            Tensor::from_vec(w, (d, c_in, TAPS), &dev).unwrap(),
            Some(Tensor::from_vec(b, d, &dev).unwrap()),
            Conv1dConfig {
                padding: 1,
                stride,
                ..Default::default()
            },
        )
    }

    /// A window's zero padding (trailing all-zero mel frames, as `pad_or_trim` leaves them) is
    /// convolved once per convolution and copied: the same bits as computing every frame.
    #[test]
    fn padding_frames_are_computed_once_with_the_same_bits() {
        let (m, frames, d, content) = (5usize, 40usize, 24usize, 13usize);
        let mk = |c_in: usize, s: f32, stride: usize| {
            Conv::new(&conv1d(c_in, d, s, stride), stride).unwrap()
        };
        let (c1, c2) = (mk(m, 0.2, 1), mk(d, 0.9, 2));
        // Frame-major: `content` frames of signal, then zeros; an even frame count, as
        // Whisper's 3000 (the stride-2 convolution's last frame then reads no padding).
        let x: Vec<f32> = (0..frames * m)
            .map(|i| if i < content * m { val(i, 2.0) } else { 0.0 })
            .collect();
        let run = |dedup: bool| {
            let h = c1.forward_with(&x, frames, dedup);
            c2.forward_with(&h, frames, dedup)
        };
        let (got, want) = (run(true), run(false));
        assert_eq!(got.len(), frames.div_ceil(2) * d);
        assert!(got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        // A window full of signal has no trailing run to share.
        let full: Vec<f32> = (0..frames * m).map(|i| val(i, 3.0)).collect();
        assert_eq!(
            c1.forward_with(&full, frames, true),
            c1.forward_with(&full, frames, false)
        );
    }

    /// The stem gives candle's convolutions up to f32 rounding, frame-major, on odd sizes (an
    /// odd frame count for the stride-2 convolution).
    #[test]
    fn tracks_candle_f32() {
        let dev = Device::Cpu;
        let (n, m, frames, d) = (2usize, 5usize, 19usize, 24usize);
        let (c1, c2) = (conv1d(m, d, 0.2, 1), conv1d(d, d, 0.9, 2));
        let mel = Tensor::from_vec(
            (0..n * m * frames)
                .map(|i| val(i, 2.0))
                .collect::<Vec<f32>>(),
            (n, m, frames),
            &dev,
        )
        .unwrap();
        let want = c2
            .forward(&c1.forward(&mel).unwrap().gelu_erf().unwrap())
            .unwrap()
            .gelu_erf()
            .unwrap()
            .transpose(1, 2)
            .unwrap();
        let got = Stem::new(&c1, &c2).unwrap().forward(&mel).unwrap();
        assert_eq!(got.dims(), want.dims());
        let (g, w): (Vec<f32>, Vec<f32>) = (
            got.flatten_all().unwrap().to_vec1().unwrap(),
            want.flatten_all().unwrap().to_vec1().unwrap(),
        );
        let scale = w.iter().fold(0f32, |a, v| a.max(v.abs()));
        let worst = g
            .iter()
            .zip(&w)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        // Sums in another order: 1e-6 of the range; a shifted tap or frame is off by O(range).
        assert!(worst < 1e-5 * scale, "max error {worst} (range {scale})");
    }
}
