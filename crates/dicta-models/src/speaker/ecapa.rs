//! ECAPA-TDNN speaker embeddings (SpeechBrain `spkrec-ecapa-voxceleb`: 1024 channels, 192-d
//! output), loaded from SpeechBrain's `embedding_model.ckpt` (a torch state dict).
//!
//! Layers, in SpeechBrain's order (every TDNN block is conv → ReLU → batch norm; convs pad
//! "same" by reflection):
//! 1. TDNN 80 → 1024, kernel 5.
//! 2. Three SE-Res2Net blocks (dilations 2, 3, 4): TDNN k1 → Res2Net (8 groups of 128
//!    channels, group `i ≥ 2` convolved after adding group `i − 1`'s output) → TDNN k1 →
//!    squeeze-excitation (time mean → 128 → ReLU → 1024 → sigmoid, scaling the channels) →
//!    plus the block input.
//! 3. Multi-layer aggregation: the three blocks' outputs concatenated → TDNN 3072 → 3072.
//! 4. Attentive statistics pooling with global context (attention over time from
//!    `[x, mean, std]`), giving a weighted mean and std `[6144]`; batch norm; linear → 192.
//!
//! Activations are time-major per window, `[B·T, C]`, so every k1 conv is one matmul over all
//! frames of all windows of a batch.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use dicta_core::{Error, Result};

use crate::kernels::dot;
use crate::kernels::int8::{matmul_i8, PackedI8};
use crate::layers::{reflect, sigmoid};
use rayon::prelude::*;

/// Embedding size.
pub const EMBEDDING: usize = 192;
const CHANNELS: usize = 1024;
const SCALE: usize = 8;
const MFA: usize = 3 * CHANNELS;
const BN_EPS: f32 = 1e-5;

type Weights = HashMap<String, Tensor>;

fn get(w: &Weights, name: &str, dims: &[usize]) -> Result<Vec<f32>> {
    let t = w
        .get(name)
        .ok_or_else(|| Error::model_load(format!("ECAPA: {name} missing")))?;
    if t.dims() != dims {
        return Err(Error::model_load(format!(
            "ECAPA: {name} has shape {:?}, expected {dims:?}",
            t.dims()
        )));
    }
    let mut v = t
        .to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(|e| Error::model_load(format!("ECAPA: {name}: {e}")))?;
    // The checkpoint holds ~73k subnormal weights (|w| < 1.2e-38); products with them run
    // ~10× slower on x86 FMA units and change nothing measurable, so they become 0.
    for x in &mut v {
        if x.is_subnormal() {
            *x = 0.0;
        }
    }
    Ok(v)
}

/// Where a conv's input channels lie in each row of its input: `c_in` values from `offset` of
/// rows `stride` long.
#[derive(Clone, Copy)]
struct Slice {
    stride: usize,
    offset: usize,
}

impl Slice {
    /// Rows of exactly the conv's `c_in` channels.
    fn whole(c_in: usize) -> Self {
        Self {
            stride: c_in,
            offset: 0,
        }
    }
}

/// `rows` rows of `parts` pieces of `len` values each: piece `j` of row `r` is the first `len`
/// values of `part(r, j)`. Written in parallel straight into the allocation: zero-filling it
/// first was a single-threaded memset on the critical path (≈ 3% of a diarization run).
fn gather_rows<'a>(
    rows: usize,
    parts: usize,
    len: usize,
    part: impl Fn(usize, usize) -> &'a [f32] + Sync,
) -> Vec<f32> {
    let row_len = parts * len;
    let mut out: Vec<f32> = Vec::with_capacity(rows * row_len);
    out.spare_capacity_mut()[..rows * row_len]
        .par_chunks_mut(row_len.max(1))
        .enumerate()
        .for_each(|(r, dst)| {
            for (j, dst) in dst.chunks_exact_mut(len).enumerate() {
                // Slicing to `len` panics on a short piece, so every element gets written.
                for (d, &v) in dst.iter_mut().zip(&part(r, j)[..len]) {
                    d.write(v);
                }
            }
        });
    // SAFETY: each of the `rows` chunks of `row_len = parts · len` values was split into
    // `parts` pieces of `len`, and each piece was written from a slice of exactly `len`.
    unsafe { out.set_len(rows * row_len) };
    out
}

/// A conv as a matmul over (tap, c_in) columns: float32 weights, and optionally the same
/// weights quantized to int8 per output channel for the int8 kernels (VNNI or AVX2).
struct Conv {
    /// `[c_out, k·c_in]`, (tap, c_in) order per output channel: what int8 quantizes, and what
    /// the float32 matrix is made from; emptied once quantized (the float32 copy of the
    /// quantized convs, ≈ 80 MB, was never read).
    rows: Vec<f32>,
    /// `rows` as the `[k·c_in, c_out]` matrix of the float32 path, made on first use.
    w: std::sync::OnceLock<Tensor>,
    q: Option<PackedI8>,
    b: Vec<f32>,
    c_in: usize,
    c_out: usize,
    k: usize,
    dilation: usize,
}

impl Conv {
    fn load(
        w: &Weights,
        name: &str,
        c_in: usize,
        c_out: usize,
        k: usize,
        d: usize,
    ) -> Result<Self> {
        let weight = get(w, &format!("{name}.weight"), &[c_out, c_in, k])?;
        let b = get(w, &format!("{name}.bias"), &[c_out])?;
        // [c_out, c_in, k] → [c_out, k, c_in]: each channel's small transpose stays in cache.
        let mut rows = vec![0f32; weight.len()];
        rows.par_chunks_mut(k * c_in)
            .zip(weight.par_chunks(c_in * k))
            .for_each(|(dst, src)| {
                for i in 0..c_in {
                    for j in 0..k {
                        dst[j * c_in + i] = src[i * k + j];
                    }
                }
            });
        Ok(Self {
            rows,
            w: std::sync::OnceLock::new(),
            q: None,
            b,
            c_in,
            c_out,
            k,
            dilation: d,
        })
    }

    /// Quantizes the weights to int8 (per output channel) and drops the float32 ones.
    fn quantize(&mut self) {
        self.q = Some(PackedI8::quantize(
            &self.rows,
            self.c_out,
            self.k * self.c_in,
        ));
        self.rows = Vec::new();
    }

    /// The `[k·c_in, c_out]` float32 matrix (first call transposes `rows`).
    fn matrix(&self) -> candle_core::Result<&Tensor> {
        if let Some(w) = self.w.get() {
            return Ok(w);
        }
        let kc = self.k * self.c_in;
        if self.rows.len() != kc * self.c_out {
            candle_core::bail!("ECAPA conv: float32 weights dropped after int8 quantization");
        }
        let mut t = vec![0f32; self.rows.len()];
        t.par_chunks_mut(self.c_out)
            .enumerate()
            .for_each(|(r, dst)| {
                for (o, v) in dst.iter_mut().enumerate() {
                    *v = self.rows[o * kc + r];
                }
            });
        let w = Tensor::from_vec(t, (kc, self.c_out), &Device::Cpu)?;
        Ok(self.w.get_or_init(|| w))
    }

    /// `x: [b·t, c_in]` (windows of `t` frames) → `[b·t, c_out]`, reflect padding "same".
    fn forward(&self, x: &[f32], t: usize) -> candle_core::Result<Vec<f32>> {
        self.forward_strided(x, Slice::whole(self.c_in), t)
    }

    /// [`Conv::forward`] of the `c_in` channels from `offset` of each row of `x: [b·t,
    /// stride]`: a Res2Net group convolves its slice of the block's channels in place.
    fn forward_strided(&self, x: &[f32], at: Slice, t: usize) -> candle_core::Result<Vec<f32>> {
        let (stride, offset) = (at.stride, at.offset);
        let rows = x.len() / stride;
        let cols: std::borrow::Cow<[f32]> = if self.k == 1 && stride == self.c_in {
            // A 1-wide kernel reads the input as it is.
            std::borrow::Cow::Borrowed(x)
        } else {
            // (A 1-wide kernel over a slice of the channels is the same gather.)
            let pad = self.dilation * (self.k - 1) / 2;
            std::borrow::Cow::Owned(gather_rows(rows, self.k, self.c_in, |r, j| {
                let (win, ti) = (r / t, r % t);
                let src = reflect(ti as isize + (j * self.dilation) as isize - pad as isize, t);
                &x[(win * t + src) * stride + offset..]
            }))
        };
        if let Some(q) = &self.q {
            // Zeroed on both threads (the product overwrites every value).
            let mut y: Vec<f32> = Vec::with_capacity(rows * self.c_out);
            y.par_extend(rayon::iter::repeat_n(0f32, rows * self.c_out));
            matmul_i8(&cols, rows, q, Some(&self.b), &mut y);
            return Ok(y);
        }
        let kc = self.k * self.c_in;
        let y = Tensor::from_vec(cols.into_owned(), (rows, kc), &Device::Cpu)?
            .matmul(self.matrix()?)?;
        let mut y = y.flatten_all()?.to_vec1::<f32>()?;
        y.par_chunks_mut(self.c_out).for_each(|row| {
            for (v, b) in row.iter_mut().zip(&self.b) {
                *v += b;
            }
        });
        Ok(y)
    }
}

/// Inference batch norm as a per-channel affine map.
struct Norm {
    scale: Vec<f32>,
    shift: Vec<f32>,
}

impl Norm {
    fn load(w: &Weights, name: &str, c: usize) -> Result<Self> {
        let g = get(w, &format!("{name}.weight"), &[c])?;
        let b = get(w, &format!("{name}.bias"), &[c])?;
        let m = get(w, &format!("{name}.running_mean"), &[c])?;
        let v = get(w, &format!("{name}.running_var"), &[c])?;
        let scale: Vec<f32> = g
            .iter()
            .zip(&v)
            .map(|(g, v)| g / (v + BN_EPS).sqrt())
            .collect();
        let shift = b
            .iter()
            .zip(&m)
            .zip(&scale)
            .map(|((b, m), s)| b - m * s)
            .collect();
        Ok(Self { scale, shift })
    }

    fn apply(&self, x: &mut [f32], relu_first: bool) {
        let c = self.scale.len();
        x.par_chunks_mut(c).for_each(|row| {
            for ((v, s), h) in row.iter_mut().zip(&self.scale).zip(&self.shift) {
                let u = if relu_first { v.max(0.0) } else { *v };
                *v = u * s + h;
            }
        });
    }
}

/// conv → ReLU → batch norm.
struct Tdnn {
    conv: Conv,
    norm: Norm,
}

impl Tdnn {
    fn load(
        w: &Weights,
        name: &str,
        c_in: usize,
        c_out: usize,
        k: usize,
        d: usize,
    ) -> Result<Self> {
        Ok(Self {
            conv: Conv::load(w, &format!("{name}.conv.conv"), c_in, c_out, k, d)?,
            norm: Norm::load(w, &format!("{name}.norm.norm"), c_out)?,
        })
    }

    fn forward(&self, x: &[f32], t: usize) -> candle_core::Result<Vec<f32>> {
        self.forward_strided(x, Slice::whole(self.conv.c_in), t)
    }

    /// [`Conv::forward_strided`], then ReLU and batch norm.
    fn forward_strided(&self, x: &[f32], at: Slice, t: usize) -> candle_core::Result<Vec<f32>> {
        let mut y = self.conv.forward_strided(x, at, t)?;
        self.norm.apply(&mut y, true);
        Ok(y)
    }
}

/// The attention TDNN of the pooling: conv k1 over `[x, mean, std]` (`3 · 3072` channels,
/// the window's mean and std beside every frame) → ReLU → batch norm. The mean and std are the
/// same for every frame of a window, so their part of the product is a per-window bias: the
/// conv runs over `x` alone (a third of the work, and no `[b·t, 9216]` copy of the input).
struct ContextTdnn {
    x: Conv,
    /// `[c_out, 2 · 3072]`: the weights of the mean and std channels, row per output channel.
    ctx: Vec<f32>,
    norm: Norm,
}

impl ContextTdnn {
    fn load(w: &Weights, name: &str, c: usize, c_out: usize) -> Result<Self> {
        let mut x = Conv::load(w, &format!("{name}.conv.conv"), 3 * c, c_out, 1, 1)?;
        let mut ctx = Vec::with_capacity(c_out * 2 * c);
        let mut own = Vec::with_capacity(c_out * c);
        for row in x.rows.chunks_exact(3 * c) {
            own.extend_from_slice(&row[..c]);
            ctx.extend_from_slice(&row[c..]);
        }
        (x.rows, x.c_in) = (own, c);
        Ok(Self {
            x,
            ctx,
            norm: Norm::load(w, &format!("{name}.norm.norm"), c_out)?,
        })
    }

    /// `x: [b·t, c]`, `stats[w] = (mean, std)` of window `w` → `[b·t, c_out]`.
    fn forward(
        &self,
        x: &[f32],
        stats: &[(Vec<f32>, Vec<f32>)],
        t: usize,
    ) -> candle_core::Result<Vec<f32>> {
        let c_out = self.x.c_out;
        let bias: Vec<Vec<f32>> = stats
            .par_iter()
            .map(|(mean, std)| {
                self.ctx
                    .chunks_exact(mean.len() + std.len())
                    .map(|w| {
                        let (wm, ws) = w.split_at(mean.len());
                        dot::<false>(wm, mean) + dot::<false>(ws, std)
                    })
                    .collect()
            })
            .collect();
        let mut y = self.x.forward(x, t)?;
        y.par_chunks_exact_mut(c_out)
            .enumerate()
            .for_each(|(r, row)| row.iter_mut().zip(&bias[r / t]).for_each(|(v, b)| *v += b));
        self.norm.apply(&mut y, true);
        Ok(y)
    }
}

struct SeRes2Net {
    tdnn1: Tdnn,
    res: Vec<Tdnn>,
    tdnn2: Tdnn,
    se1: Conv,
    se2: Conv,
}

impl SeRes2Net {
    fn load(w: &Weights, name: &str, dilation: usize) -> Result<Self> {
        let g = CHANNELS / SCALE;
        Ok(Self {
            tdnn1: Tdnn::load(w, &format!("{name}.tdnn1"), CHANNELS, CHANNELS, 1, 1)?,
            res: (0..SCALE - 1)
                .map(|i| {
                    Tdnn::load(
                        w,
                        &format!("{name}.res2net_block.blocks.{i}"),
                        g,
                        g,
                        3,
                        dilation,
                    )
                })
                .collect::<Result<_>>()?,
            tdnn2: Tdnn::load(w, &format!("{name}.tdnn2"), CHANNELS, CHANNELS, 1, 1)?,
            se1: Conv::load(
                w,
                &format!("{name}.se_block.conv1.conv"),
                CHANNELS,
                128,
                1,
                1,
            )?,
            se2: Conv::load(
                w,
                &format!("{name}.se_block.conv2.conv"),
                128,
                CHANNELS,
                1,
                1,
            )?,
        })
    }

    fn forward(&self, x: &[f32], t: usize) -> candle_core::Result<Vec<f32>> {
        // The Res2Net groups work in place on `h`: group `i ≥ 1` is replaced by the conv of
        // itself plus group `i − 1`'s output (from `i ≥ 2`); group 0 passes through. Copying
        // each group out and back was ≈ 5% of a diarization run, on one thread.
        let mut h = self.tdnn1.forward(x, t)?;
        let rows = h.len() / CHANNELS;
        let g = CHANNELS / SCALE;
        let mut prev: Vec<f32> = Vec::new();
        for i in 1..SCALE {
            let cols = i * g..(i + 1) * g;
            if i >= 2 {
                h.par_chunks_exact_mut(CHANNELS)
                    .zip(prev.par_chunks_exact(g))
                    .for_each(|(row, p)| {
                        row[cols.clone()]
                            .iter_mut()
                            .zip(p)
                            .for_each(|(a, b)| *a += b);
                    });
            }
            let at = Slice {
                stride: CHANNELS,
                offset: i * g,
            };
            let yi = self.res[i - 1].forward_strided(&h, at, t)?;
            h.par_chunks_exact_mut(CHANNELS)
                .zip(yi.par_chunks_exact(g))
                .for_each(|(row, y)| row[cols.clone()].copy_from_slice(y));
            prev = yi;
        }
        let mut y = self.tdnn2.forward(&h, t)?;
        // Squeeze-excitation per window.
        let windows = rows / t;
        let mut means = vec![0f32; windows * CHANNELS];
        for (w, m) in means.chunks_exact_mut(CHANNELS).enumerate() {
            for row in y[w * t * CHANNELS..(w + 1) * t * CHANNELS].chunks_exact(CHANNELS) {
                for (a, b) in m.iter_mut().zip(row) {
                    *a += b;
                }
            }
            for a in m.iter_mut() {
                *a /= t as f32;
            }
        }
        let mut s = self.se1.forward(&means, 1)?;
        s.iter_mut().for_each(|v| *v = v.max(0.0));
        let s = self.se2.forward(&s, 1)?;
        y.par_chunks_mut(CHANNELS).enumerate().for_each(|(r, row)| {
            let gate = &s[(r / t) * CHANNELS..(r / t + 1) * CHANNELS];
            for ((v, g), res) in row
                .iter_mut()
                .zip(gate)
                .zip(&x[r * CHANNELS..(r + 1) * CHANNELS])
            {
                *v = *v * sigmoid(*g) + res;
            }
        });
        Ok(y)
    }
}

/// The ECAPA-TDNN network; immutable and shareable.
pub struct Ecapa {
    block0: Tdnn,
    blocks: Vec<SeRes2Net>,
    mfa: Tdnn,
    asp_tdnn: ContextTdnn,
    asp_conv: Conv,
    asp_bn: Norm,
    fc: Conv,
}

impl Ecapa {
    /// Loads SpeechBrain's `embedding_model.ckpt`. `int8`: the convs over all frames run on
    /// int8 weights (per output channel) and activations (per row) through the int8 kernels (VNNI or AVX2);
    /// otherwise float32 (SpeechBrain's numerics). Errors (`ModelLoad`) name the tensor that is
    /// missing or misshapen.
    pub fn load(path: &Path, int8: bool) -> Result<Self> {
        let w: Weights = candle_core::pickle::read_all(path)
            .map_err(|e| Error::model_load(format!("{}: {e}", path.display())))?
            .into_iter()
            .collect();
        let mut m = Self::from_weights(&w).map_err(|e| e.context(path.display()))?;
        if int8 {
            m.quantize();
        }
        Ok(m)
    }

    /// int8 copies of every conv that runs over all frames (the pooled head stays float32).
    fn quantize(&mut self) {
        self.block0.conv.quantize();
        for b in &mut self.blocks {
            b.tdnn1.conv.quantize();
            b.tdnn2.conv.quantize();
            for r in &mut b.res {
                r.conv.quantize();
            }
        }
        self.mfa.conv.quantize();
        self.asp_tdnn.x.quantize();
        self.asp_conv.quantize();
    }

    fn from_weights(w: &Weights) -> Result<Self> {
        Ok(Self {
            block0: Tdnn::load(w, "blocks.0", crate::speaker::N_MELS, CHANNELS, 5, 1)?,
            blocks: (1..=3)
                .map(|i| SeRes2Net::load(w, &format!("blocks.{i}"), i + 1))
                .collect::<Result<_>>()?,
            mfa: Tdnn::load(w, "mfa", MFA, MFA, 1, 1)?,
            asp_tdnn: ContextTdnn::load(w, "asp.tdnn", MFA, 128)?,
            asp_conv: Conv::load(w, "asp.conv.conv", 128, MFA, 1, 1)?,
            asp_bn: Norm::load(w, "asp_bn.norm", 2 * MFA)?,
            fc: Conv::load(w, "fc.conv", 2 * MFA, EMBEDDING, 1, 1)?,
        })
    }

    /// Embeddings of `b` windows of `t` frames each: `feats: [b, t, 80]` (mean-normalised
    /// filterbanks) → `[b, 192]`. `t` must be at least 9 (the widest reflect padding).
    pub fn forward(&self, feats: &[f32], t: usize) -> Result<Vec<f32>> {
        if t < 9 || !feats.len().is_multiple_of(t * crate::speaker::N_MELS) {
            return Err(Error::invalid_input(format!(
                "ECAPA input of {} values is not whole windows of {t} ≥ 9 frames",
                feats.len()
            )));
        }
        self.run(feats, t)
            .map_err(|e| Error::internal(format!("ECAPA: {e}")))
    }

    fn run(&self, feats: &[f32], t: usize) -> candle_core::Result<Vec<f32>> {
        let x = self.block0.forward(feats, t)?;
        let rows = x.len() / CHANNELS;
        let x1 = self.blocks[0].forward(&x, t)?;
        drop(x);
        let x2 = self.blocks[1].forward(&x1, t)?;
        let x3 = self.blocks[2].forward(&x2, t)?;
        // The three outputs side by side.
        let cat = gather_rows(rows, 3, CHANNELS, |r, j| {
            &[&x1, &x2, &x3][j][r * CHANNELS..]
        });
        drop((x1, x2, x3));
        let x = self.mfa.forward(&cat, t)?;
        drop(cat);
        let pooled = self.pool(&x, t)?;
        let mut pooled = pooled;
        self.asp_bn.apply(&mut pooled, false);
        self.fc.forward(&pooled, 1)
    }

    /// Attentive statistics pooling: `[b·t, 3072]` → `[b, 6144]` (weighted mean, then std).
    fn pool(&self, x: &[f32], t: usize) -> candle_core::Result<Vec<f32>> {
        let windows = x.len() / (t * MFA);
        // Global context: each window's plain mean and std, beside every frame.
        let stats: Vec<(Vec<f32>, Vec<f32>)> = (0..windows)
            .into_par_iter()
            .map(|w| uniform_stats(&x[w * t * MFA..(w + 1) * t * MFA], t))
            .collect();
        let mut a = self.asp_tdnn.forward(x, &stats, t)?;
        a.par_iter_mut().for_each(|v| *v = v.tanh());
        let mut a = self.asp_conv.forward(&a, t)?;
        let mut out = vec![0f32; windows * 2 * MFA];
        out.par_chunks_mut(2 * MFA)
            .zip(a.par_chunks_mut(t * MFA))
            .enumerate()
            .for_each(|(w, (dst, att))| {
                let xs = &x[w * t * MFA..(w + 1) * t * MFA];
                // Softmax over time per channel, then the weighted mean and std. The frames are
                // walked in rows (all channels of a frame at once; a channel's column would
                // touch one cache line per frame), each channel's sums still in frame order.
                let mut m = vec![f32::NEG_INFINITY; MFA];
                for row in att.chunks_exact(MFA) {
                    m.iter_mut().zip(row).for_each(|(m, &a)| *m = m.max(a));
                }
                let mut sum = vec![0f32; MFA];
                for row in att.chunks_exact_mut(MFA) {
                    crate::kernels::exp_sub_accumulate(row, &m, &mut sum);
                }
                let mut mean = vec![0f32; MFA];
                for (row, xr) in att.chunks_exact_mut(MFA).zip(xs.chunks_exact(MFA)) {
                    for (((a, s), mu), v) in row.iter_mut().zip(&sum).zip(&mut mean).zip(xr) {
                        *a /= s;
                        *mu += *a * v;
                    }
                }
                let mut var = vec![0f32; MFA];
                for (row, xr) in att.chunks_exact(MFA).zip(xs.chunks_exact(MFA)) {
                    for (((a, va), mu), v) in row.iter().zip(&mut var).zip(&mean).zip(xr) {
                        let d = v - mu;
                        *va += a * d * d;
                    }
                }
                dst[..MFA].copy_from_slice(&mean);
                for (d, v) in dst[MFA..].iter_mut().zip(&var) {
                    *d = v.max(1e-12).sqrt();
                }
            });
        Ok(out)
    }
}

/// Mean and std over the `t` frames of one window `[t, 3072]` (uniform weights).
fn uniform_stats(x: &[f32], t: usize) -> (Vec<f32>, Vec<f32>) {
    let mut mean = vec![0f32; MFA];
    for row in x.chunks_exact(MFA) {
        for (m, v) in mean.iter_mut().zip(row) {
            *m += v / t as f32;
        }
    }
    let mut var = vec![0f32; MFA];
    for row in x.chunks_exact(MFA) {
        for ((s, v), m) in var.iter_mut().zip(row).zip(&mean) {
            let d = v - m;
            *s += d * d / t as f32;
        }
    }
    (mean, var.into_iter().map(|v| v.max(1e-12).sqrt()).collect())
}
