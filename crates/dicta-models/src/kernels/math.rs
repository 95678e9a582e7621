//! Element-wise CPU kernels for the functions that weigh most in Whisper's encoder after
//! the matrix products: the softmax of attention scores and the erf GELU.
//!
//! candle computes both one element at a time through libm (`expf`, `erff`), which profiling put
//! at about 20% of a batched tiny.en run. Here both are branch-free polynomials (Cephes' `expf`
//! and the rational `erf` approximation Eigen and TensorFlow use) that the compiler vectorises,
//! compiled once for AVX2+FMA (picked at run time) and once for the baseline target. `exp` is
//! within 3e-7 relative of libm and `erf` within 5e-7 absolute (so the GELU within about 1e-6
//! of candle's; checked in the tests), inside the error the model's float32 matrix products
//! already have. Anything but float32 on the CPU goes to candle's own implementation.
//!
//! Also the other element-wise helpers the kernels share: a vectorised dot product, `log Σ exp`,
//! the exponential ECAPA's pooling takes per channel, and the parallel float16 widening of model
//! loading.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::{f32_input, fast_path};

/// Softmax over the last dimension (any shape), as `candle_nn::ops::softmax_last_dim`.
pub fn softmax_last_dim(x: &Tensor) -> candle_core::Result<Tensor> {
    if fast_path(x) {
        x.contiguous()?.apply_op1_no_bwd(&Softmax)
    } else {
        candle_nn::ops::softmax_last_dim(x)
    }
}

/// GELU with the exact (erf) form, `0.5·x·(1 + erf(x/√2))`, as `Tensor::gelu_erf`.
pub fn gelu_erf(x: &Tensor) -> candle_core::Result<Tensor> {
    if fast_path(x) {
        x.contiguous()?.apply_op1_no_bwd(&GeluErf)
    } else {
        x.gelu_erf()
    }
}

/// Elements per parallel task of the element-wise kernels (large enough to amortise the task).
const CHUNK: usize = 1 << 15;

struct Softmax;

impl CustomOp1 for Softmax {
    fn name(&self) -> &'static str {
        "dicta-softmax-last-dim"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let dims = l.shape().dims();
        let row = dims[dims.len() - 1].max(1);
        // Copying costs what zero-filling an output would; the rows are then done in place.
        let mut dst = f32_input(s, l)?.to_vec();
        // Enough rows per task that small decoder calls do not pay for many tiny tasks.
        let rows_per_task = (CHUNK / row).max(1);
        dst.par_chunks_mut(row * rows_per_task).for_each(|d| {
            for r in d.chunks_mut(row) {
                softmax_row(r);
            }
        });
        Ok((CpuStorage::F32(dst), l.shape().clone()))
    }
}

struct GeluErf;

impl CustomOp1 for GeluErf {
    fn name(&self) -> &'static str {
        "dicta-gelu-erf"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let src = f32_input(s, l)?;
        let mut dst = vec![0f32; src.len()];
        gelu_erf_into(src, &mut dst);
        Ok((CpuStorage::F32(dst), l.shape().clone()))
    }
}

/// `dst = gelu_erf(src)` element by element (equal lengths), in parallel chunks: the same
/// values as [`gelu_erf`].
pub(crate) fn gelu_erf_into(src: &[f32], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "gelu_erf_into: lengths differ");
    src.par_chunks(CHUNK)
        .zip(dst.par_chunks_mut(CHUNK))
        .for_each(|(s, d)| gelu_slice(s, d));
}

/// float16 values widened to float32, in parallel (F16C where the CPU has it): model loading
/// widens every weight of a float16 checkpoint, which candle's `to_dtype` does one element at
/// a time on one thread.
pub(crate) fn widen_f16(src: &[half::f16]) -> Vec<f32> {
    use half::slice::HalfFloatSliceExt;
    let mut out = vec![0f32; src.len()];
    out.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(o, s)| s.convert_to_f32_slice(o));
    out
}

/// Dot product with eight partial sums (vectorises; the order differs from a plain loop by
/// float rounding only), the lanes' products fused into their sums when `FMA`.
#[inline(always)]
pub(crate) fn dot<const FMA: bool>(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] = madd::<FMA>(x[l], y[l], acc[l]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `x[i] = e^(x[i] − m[i])`, each result also added into `sum[i]` (the three of equal length):
/// one frame of a softmax over time taken per channel (ECAPA's attentive pooling), with the
/// same polynomial `exp` as the attention softmax, vectorised across channels instead of one
/// libm `expf` call per element.
pub fn exp_sub_accumulate(x: &mut [f32], m: &[f32], sum: &mut [f32]) {
    assert!(
        m.len() == x.len() && sum.len() == x.len(),
        "x, m and sum differ in length"
    );
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked at run time).
        return unsafe { exp_sub_accumulate_avx2(x, m, sum) };
    }
    exp_sub_accumulate_body::<false>(x, m, sum)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_sub_accumulate_avx2(x: &mut [f32], m: &[f32], sum: &mut [f32]) {
    exp_sub_accumulate_body::<true>(x, m, sum)
}

#[inline(always)]
fn exp_sub_accumulate_body<const FMA: bool>(x: &mut [f32], m: &[f32], sum: &mut [f32]) {
    for ((v, &mi), s) in x.iter_mut().zip(m).zip(sum.iter_mut()) {
        *v = exp::<FMA>(*v - mi);
        *s += *v;
    }
}

/// `log Σ exp(x)`, stable (the largest value factored out); `-inf` for an empty or fully
/// masked (`-inf`) slice. Vectorised (lane maximum, the polynomial `exp`, 16 partial sums):
/// the decoders take it over the whole vocabulary for every hypothesis at every step, where a
/// libm `expf` per element was ≈ 5% of a beam-search run. Within a few ulps of the serial
/// libm sum (tested).
pub fn log_sum_exp(x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked at run time).
        return unsafe { log_sum_exp_avx2(x) };
    }
    log_sum_exp_body::<false>(x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn log_sum_exp_avx2(x: &[f32]) -> f32 {
    log_sum_exp_body::<true>(x)
}

#[inline(always)]
fn log_sum_exp_body<const FMA: bool>(x: &[f32]) -> f32 {
    let max = max_of(x);
    if max == f32::NEG_INFINITY || max.is_nan() {
        return max;
    }
    let mut acc = [0f32; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for l in 0..16 {
            acc[l] += exp::<FMA>(c[l] - max);
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        acc[l] += exp::<FMA>(v - max);
    }
    max + acc.iter().sum::<f32>().ln()
}

/// Sampling weights at a temperature: `out[i] = e^((x[i] − max x)·inv_temperature)`, exactly 0
/// where `x[i]` is `-inf` (a masked token must never be drawn; the polynomial `exp` alone
/// would give ≈ 1e-38 there). Returns their sum (16 partial sums). `out` is resized to
/// `x.len()`. Temperature fallback draws from every hypothesis' whole vocabulary at every
/// step, where a libm `expf` per element was the largest single cost of a fallback pass.
/// An empty or fully masked `x` gives all zeros and a sum of 0.
pub fn sampling_weights(x: &[f32], inv_temperature: f32, out: &mut Vec<f32>) -> f32 {
    out.clear();
    out.resize(x.len(), 0.0);
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked at run time).
        return unsafe { sampling_weights_avx2(x, inv_temperature, out) };
    }
    sampling_weights_body::<false>(x, inv_temperature, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sampling_weights_avx2(x: &[f32], inv_temperature: f32, out: &mut [f32]) -> f32 {
    sampling_weights_body::<true>(x, inv_temperature, out)
}

#[inline(always)]
fn sampling_weights_body<const FMA: bool>(x: &[f32], inv_t: f32, out: &mut [f32]) -> f32 {
    let max = max_of(x);
    if max == f32::NEG_INFINITY || max.is_nan() {
        return 0.0;
    }
    let weight = |v: f32| {
        let w = exp::<FMA>((v - max) * inv_t);
        if v == f32::NEG_INFINITY {
            0.0
        } else {
            w
        }
    };
    let mut acc = [0f32; 16];
    let mut xs = x.chunks_exact(16);
    let mut os = out.chunks_exact_mut(16);
    for (c, o) in (&mut xs).zip(&mut os) {
        for l in 0..16 {
            o[l] = weight(c[l]);
            acc[l] += o[l];
        }
    }
    for (l, (&v, o)) in xs.remainder().iter().zip(os.into_remainder()).enumerate() {
        *o = weight(v);
        acc[l] += *o;
    }
    acc.iter().sum()
}

fn softmax_row(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked at run time).
        return unsafe { softmax_row_avx2(x) };
    }
    softmax_in_place::<false>(x)
}

fn gelu_slice(src: &[f32], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked at run time).
        return unsafe { gelu_slice_avx2(src, dst) };
    }
    gelu_slice_body::<false>(src, dst)
}

#[cfg(target_arch = "x86_64")]
pub(super) fn avx2_fma() -> bool {
    // std caches the CPUID result.
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// [`softmax_in_place`] compiled for AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn softmax_row_avx2(x: &mut [f32]) {
    softmax_in_place::<true>(x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_slice_avx2(src: &[f32], dst: &mut [f32]) {
    gelu_slice_body::<true>(src, dst)
}

#[inline(always)]
pub(super) fn softmax_in_place<const FMA: bool>(x: &mut [f32]) {
    let max = max_of(x);
    for v in x.iter_mut() {
        *v = exp::<FMA>(*v - max);
    }
    normalise(x);
}

/// The largest value, in eight lanes of plain comparisons so that it vectorises (`f32::max`
/// does not). The maximum does not depend on the order, so this is exactly the serial fold;
/// NaNs are skipped as `f32::max` skips them (they still poison the row through `exp`).
#[inline(always)]
pub(super) fn max_of(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    let mut m = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    for a in acc {
        m = if a > m { a } else { m };
    }
    m
}

/// Divides by the sum (of non-negative values).
#[inline(always)]
fn normalise(dst: &mut [f32]) {
    // Eight partial sums, so that the reduction vectorises too.
    let mut acc = [0f32; 8];
    let mut chunks = dst.chunks_exact(8);
    for c in &mut chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    let sum = acc.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>();
    let inv = 1.0 / sum;
    for d in dst.iter_mut() {
        *d *= inv;
    }
}

#[inline(always)]
fn gelu_slice_body<const FMA: bool>(src: &[f32], dst: &mut [f32]) {
    for (d, &x) in dst.iter_mut().zip(src) {
        *d = 0.5 * x * (1.0 + erf::<FMA>(x * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// `a·b + c`, fused when the kernel is compiled for FMA.
#[inline(always)]
pub(super) fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

// `exp`'s constants, shared with [`exp_x16`] so that both compute the same bits.
const EXP_LOG2E: f32 = std::f32::consts::LOG2_E;
// 1.5·2^23: adding it rounds to an integer held in the low mantissa bits.
const EXP_ROUND: f32 = 12_582_912.0;
// ln 2 split in two so that n·LN2_HI is exact.
const EXP_LN2_HI: f32 = 355.0 / 512.0;
const EXP_LN2_LO: f32 = -2.121_944_4e-4;
const EXP_P: [f64; 6] = [
    1.987_569_150_0e-4,
    1.398_199_950_7e-3,
    8.333_451_907_3e-3,
    4.166_579_589_4e-2,
    1.666_666_545_9e-1,
    5.000_000_120_1e-1,
];
const EXP_MIN: f32 = -87.3;
const EXP_MAX: f32 = 88.3;

/// `e^x` (Cephes `expf`): x = n·ln2 + r with |r| ≤ ln2/2, e^r by a degree-7 polynomial, 2^n
/// by building the exponent bits. Inputs are clamped to [-87.3, 88.3], where 2^n stays a
/// normal float, so far-negative inputs (masked scores) give ~1e-38 rather than 0.
#[inline(always)]
pub(super) fn exp<const FMA: bool>(x: f32) -> f32 {
    let x = x.clamp(EXP_MIN, EXP_MAX);
    let t = madd::<FMA>(x, EXP_LOG2E, EXP_ROUND);
    let n = t - EXP_ROUND;
    let r = madd::<FMA>(n, -EXP_LN2_LO, madd::<FMA>(n, -EXP_LN2_HI, x));
    let mut p = EXP_P[0] as f32;
    for c in &EXP_P[1..] {
        p = madd::<FMA>(p, r, *c as f32);
    }
    let e_r = madd::<FMA>(p, r * r, r) + 1.0;
    let n_bits = t.to_bits().wrapping_sub(EXP_ROUND.to_bits()) as i32;
    e_r * f32::from_bits(((n_bits + 127) << 23) as u32)
}

/// [`exp`]`::<true>` on 16 lanes: the same operations in the same order, so the same bits
/// (tested), NaN included (the clamp keeps it, as `f32::clamp` does).
///
/// # Safety
/// AVX-512F must be available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn exp_x16(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let ps = _mm512_set1_ps;
    // `max`/`min` return their second operand when one is NaN: NaN stays NaN.
    let x = _mm512_min_ps(ps(EXP_MAX), _mm512_max_ps(ps(EXP_MIN), x));
    let t = _mm512_fmadd_ps(x, ps(EXP_LOG2E), ps(EXP_ROUND));
    let n = _mm512_sub_ps(t, ps(EXP_ROUND));
    let r = _mm512_fmadd_ps(n, ps(-EXP_LN2_LO), _mm512_fmadd_ps(n, ps(-EXP_LN2_HI), x));
    let mut p = ps(EXP_P[0] as f32);
    for c in &EXP_P[1..] {
        p = _mm512_fmadd_ps(p, r, ps(*c as f32));
    }
    let e_r = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), ps(1.0));
    let n_bits = _mm512_sub_epi32(
        _mm512_castps_si512(t),
        _mm512_set1_epi32(EXP_ROUND.to_bits() as i32),
    );
    let scale = _mm512_slli_epi32::<23>(_mm512_add_epi32(n_bits, _mm512_set1_epi32(127)));
    _mm512_mul_ps(e_r, _mm512_castsi512_ps(scale))
}

/// erf(x) as a rational function of x on [-4, 4] (odd numerator of degree 13, even denominator
/// of degree 8; Eigen's and TensorFlow's float `erf`); outside it erf is ±1 in float32.
#[inline(always)]
fn erf<const FMA: bool>(x: f32) -> f32 {
    // Numerator coefficients of x^13, x^11, …, x^1; denominator of x^8, x^6, …, x^0.
    const ALPHA: [f64; 7] = [
        -2.726_142_258_013_06e-10,
        2.770_681_424_959_02e-8,
        -2.101_024_020_825_08e-6,
        -5.692_506_394_623_46e-5,
        -7.349_906_303_268_55e-4,
        -2.954_599_808_540_25e-3,
        -1.609_603_332_624_15e-2,
    ];
    const BETA: [f64; 5] = [
        -1.456_607_184_649_96e-5,
        -2.133_740_552_789_05e-4,
        -1.682_826_974_382_03e-3,
        -7.373_329_167_204_68e-3,
        -1.426_473_905_141_89e-2,
    ];
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = ALPHA[0] as f32;
    for c in &ALPHA[1..] {
        p = madd::<FMA>(x2, p, *c as f32);
    }
    let mut q = BETA[0] as f32;
    for c in &BETA[1..] {
        q = madd::<FMA>(x2, q, *c as f32);
    }
    x * p / q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::tests::max_abs_diff;
    use candle_core::Device;

    /// Inputs spanning the range the kernels see, plus the edges.
    fn grid(lo: f32, hi: f32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| lo + (hi - lo) * i as f32 / (n - 1) as f32)
            .collect()
    }

    fn erf_f64(x: f64) -> f64 {
        // Abramowitz-Stegun 7.1.28 is too coarse for a reference; sum the Taylor series near
        // 0 and the continued fraction of erfc beyond, both in f64.
        if x.abs() < 2.5 {
            let (mut term, mut sum, mut k) = (x, x, 0.0f64);
            while term.abs() > 1e-17 * sum.abs().max(1e-300) {
                k += 1.0;
                term *= -x * x / k;
                sum += term / (2.0 * k + 1.0);
            }
            2.0 / std::f64::consts::PI.sqrt() * sum
        } else {
            let a = x.abs();
            let mut f = 0.0f64;
            for k in (1..60).rev() {
                f = (k as f64 / 2.0) / (a + f);
            }
            let erfc = (-a * a).exp() / std::f64::consts::PI.sqrt() / (a + f);
            (1.0 - erfc).copysign(x)
        }
    }

    #[test]
    fn sampling_weights_track_libm_and_zero_the_masked() {
        for len in [0usize, 1, 7, 16, 17, 51_864] {
            for inv_t in [1.0f32, 1.0 / 0.2, 1.0 / 0.6] {
                let x: Vec<f32> = (0..len)
                    .map(|i| {
                        if i % 5 == 3 {
                            f32::NEG_INFINITY
                        } else {
                            ((i as f32) * 0.37).sin() * 12.0 - 4.0
                        }
                    })
                    .collect();
                let mut out = vec![7.0; 3];
                let total = sampling_weights(&x, inv_t, &mut out);
                assert_eq!(out.len(), len);
                let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut want_total = 0f64;
                for i in 0..len {
                    if x[i] == f32::NEG_INFINITY {
                        assert_eq!(out[i], 0.0, "{i}: a masked token has weight 0");
                        continue;
                    }
                    let want = ((x[i] - max) * inv_t).exp();
                    want_total += f64::from(want);
                    assert!(
                        (out[i] - want).abs() <= 1e-6 * want + 1e-37,
                        "{i}: {} vs {want}",
                        out[i]
                    );
                }
                assert!((f64::from(total) - want_total).abs() <= 1e-5 * want_total.max(1e-30));
                // The portable body (no FMA) agrees with the dispatched one to rounding.
                let mut plain = vec![0.0; len];
                let t2 = sampling_weights_body::<false>(&x, inv_t, &mut plain);
                assert!((t2 - total).abs() <= 1e-5 * total.max(1e-30));
                for i in 0..len {
                    assert!((plain[i] - out[i]).abs() <= 1e-6 * out[i].max(1e-30), "{i}");
                }
            }
        }
        // Everything masked: all zeros, sum 0.
        let mut out = Vec::new();
        assert_eq!(
            sampling_weights(&[f32::NEG_INFINITY; 5], 1.0, &mut out),
            0.0
        );
        assert_eq!(out, vec![0.0; 5]);
    }

    #[test]
    fn exp_sub_accumulate_tracks_libm_and_sums() {
        for len in [0usize, 1, 7, 8, 17, 3072] {
            let x0: Vec<f32> = (0..len).map(|i| ((i as f32) * 0.37).sin() * 30.0).collect();
            let m: Vec<f32> = (0..len)
                .map(|i| ((i as f32) * 0.11).cos() * 5.0 + 30.0)
                .collect();
            let mut x = x0.clone();
            let mut sum: Vec<f32> = (0..len).map(|i| i as f32 * 0.5).collect();
            exp_sub_accumulate(&mut x, &m, &mut sum);
            for i in 0..len {
                let want = (x0[i] - m[i]).exp();
                assert!(
                    (x[i] - want).abs() <= 1e-6 * want,
                    "{i}: {} vs {want}",
                    x[i]
                );
                assert_eq!(sum[i], i as f32 * 0.5 + x[i]);
            }
            // The portable body (no FMA) agrees with the dispatched one to rounding.
            let mut y = x0.clone();
            let mut s2: Vec<f32> = (0..len).map(|i| i as f32 * 0.5).collect();
            exp_sub_accumulate_body::<false>(&mut y, &m, &mut s2);
            for i in 0..len {
                assert!((y[i] - x[i]).abs() <= 1e-6 * x[i].abs(), "{i}");
            }
        }
    }

    /// `exp_x16` is `exp::<true>` lane for lane, bit for bit: across the clamp's edges, at
    /// zero, for infinities and NaN.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exp_x16_gives_the_scalar_bits() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            eprintln!("no AVX-512 here: skipped");
            return;
        }
        let mut xs = grid(-100.0, 100.0, 4001);
        xs.extend([
            0.0,
            -0.0,
            -87.3,
            88.3,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ]);
        xs.resize(xs.len().next_multiple_of(16), 1.5);
        for c in xs.chunks(16) {
            let mut got = [0f32; 16];
            // SAFETY: AVX-512F checked above; `c` and `got` hold 16 floats.
            unsafe {
                use std::arch::x86_64::*;
                _mm512_storeu_ps(got.as_mut_ptr(), exp_x16(_mm512_loadu_ps(c.as_ptr())));
            }
            for (&x, g) in c.iter().zip(got) {
                let w = exp::<true>(x);
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "exp({x}): {g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn exp_is_within_a_few_ulps_of_libm() {
        for x in grid(-87.0, 88.0, 200_001) {
            let want = (x as f64).exp();
            for got in [exp::<false>(x), exp::<true>(x)] {
                let rel = ((got as f64 - want) / want).abs();
                assert!(rel < 3e-7, "exp({x}) = {got}, want {want} (rel {rel:e})");
            }
        }
        assert!(exp::<false>(-1e30) < 1e-37);
        assert!(exp::<true>(f32::NEG_INFINITY) < 1e-37);
        assert!(exp::<false>(0.0) == 1.0);
    }

    #[test]
    fn lane_max_equals_the_serial_fold() {
        for n in [0usize, 1, 7, 8, 9, 1500, 1501] {
            let mut x: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 % 1013) as f32 - 500.0) / 7.0)
                .collect();
            if n > 3 {
                x[2] = f32::NEG_INFINITY;
                x[n - 1] = f32::NAN;
            }
            let serial = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            assert_eq!(max_of(&x).to_bits(), serial.to_bits(), "n {n}");
        }
    }

    #[test]
    fn erf_is_within_5e_7_of_the_f64_series() {
        for x in grid(-6.0, 6.0, 120_001) {
            let want = erf_f64(x as f64);
            for got in [erf::<false>(x), erf::<true>(x)] {
                let err = (got as f64 - want).abs();
                assert!(err < 5e-7, "erf({x}) = {got}, want {want} (err {err:e})");
            }
        }
    }

    /// Within a few ulps of the serial libm sum, on vocabulary-sized rows with masked (-inf)
    /// entries, and -inf for empty or fully masked rows.
    #[test]
    fn log_sum_exp_tracks_libm() {
        let serial = |x: &[f32]| {
            let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            if m == f32::NEG_INFINITY {
                return m;
            }
            m + x.iter().map(|v| f64::from((v - m).exp())).sum::<f64>().ln() as f32
        };
        for n in [1usize, 7, 16, 33, 51_864] {
            let mut x: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.37).sin() * 12.0).collect();
            for i in (0..n).step_by(5) {
                x[i] = f32::NEG_INFINITY;
            }
            if n > 1 {
                x[1] = 3.0;
            }
            let (got, want) = (log_sum_exp(&x), serial(&x));
            if want == f32::NEG_INFINITY {
                assert_eq!(got, want, "n {n}");
                continue;
            }
            assert!(
                (got - want).abs() <= 4.0 * f32::EPSILON * want.abs().max(1.0),
                "n {n}: {got} vs {want}"
            );
        }
        assert_eq!(log_sum_exp(&[]), f32::NEG_INFINITY);
        assert_eq!(log_sum_exp(&[f32::NEG_INFINITY; 40]), f32::NEG_INFINITY);
    }

    #[test]
    fn ops_match_candle_on_tensors_of_any_shape() {
        let dev = Device::Cpu;
        // Scores of every magnitude attention produces, with an odd row length and rows
        // holding -inf (masked positions).
        let n = 3 * 5 * 37;
        let vals: Vec<f32> = (0..n)
            .map(|i| {
                if i % 11 == 3 {
                    f32::NEG_INFINITY
                } else {
                    ((i * 7919 % 1000) as f32 - 500.0) / 25.0
                }
            })
            .collect();
        let x = Tensor::from_vec(vals, (3, 5, 37), &dev).unwrap();
        let ours = softmax_last_dim(&x).unwrap();
        let theirs = candle_nn::ops::softmax_last_dim(&x).unwrap();
        let diff = max_abs_diff(&ours, &theirs);
        assert!(diff < 1e-6, "softmax max diff {diff}");
        let rows = softmax_last_dim(&x).unwrap().sum(2).unwrap();
        for s in rows.flatten_all().unwrap().to_vec1::<f32>().unwrap() {
            assert!((s - 1.0).abs() < 1e-5, "row sum {s}");
        }

        let x = Tensor::from_vec(grid(-12.0, 12.0, 100_003), (100_003,), &dev).unwrap();
        let ours = gelu_erf(&x).unwrap().to_vec1::<f32>().unwrap();
        let theirs = x.gelu_erf().unwrap().to_vec1::<f32>().unwrap();
        for ((a, b), v) in ours.iter().zip(&theirs).zip(x.to_vec1::<f32>().unwrap()) {
            assert!(
                (a - b).abs() <= 1.5e-6 * b.abs().max(1.0),
                "gelu({v}) = {a}, candle {b}"
            );
        }
        // Non-contiguous input goes through a copy, not an error.
        let t = Tensor::from_vec(grid(-3.0, 3.0, 12), (3, 4), &dev)
            .unwrap()
            .t()
            .unwrap();
        let a = softmax_last_dim(&t).unwrap().to_vec2::<f32>().unwrap();
        let b = candle_nn::ops::softmax_last_dim(&t.contiguous().unwrap())
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
            assert!((x - y).abs() < 1e-6);
        }
    }
}
