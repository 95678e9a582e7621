//! Fast CPU kernels for the element-wise functions that weigh most in Whisper's encoder after
//! the matrix products: the softmax of attention scores and the erf GELU.
//!
//! candle computes both one element at a time through libm (`expf`, `erff`), which profiling put
//! at about 20% of a batched tiny.en run. Here both are branch-free polynomials (Cephes' `expf`
//! and the rational `erf` approximation Eigen and TensorFlow use) that the compiler vectorises,
//! compiled once for AVX2+FMA (picked at run time) and once for the baseline target. `exp` is
//! within 3e-7 relative of libm and `erf` within 5e-7 absolute (so the GELU within about 1e-6
//! of candle's; checked in the tests), inside the error the model's float32 matrix products
//! already have. Anything but float32 on the CPU goes to candle's own implementation.

pub mod attention;
pub(crate) mod cross_f16;
pub mod int8;
pub mod norm;
pub mod panel;
mod tile;

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use rayon::prelude::*;

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

/// Attention of a few queries per (batch, head) over many keys, as in a decoder step's
/// cross-attention: q [B, H, M, D] (already scaled), k and v [B, H, T, D] → out [B, H, M, D],
/// plus the probabilities [B, H, M, T] when `want_probs`.
///
/// The same as `softmax(q·kᵀ)·v` through two matmuls, but each key and value row is read once
/// from memory for all M queries and nothing is packed: with M = 1 the GEMM would copy all of
/// K and V into its panel buffers every step, twice the memory traffic of the attention itself.
/// (f16 keys and values go through [`attend_cross_f16`].)
pub fn attend_few_queries(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    want_probs: bool,
) -> candle_core::Result<(Tensor, Option<Tensor>)> {
    if !(fast_path(q) && fast_path(k) && fast_path(v)) {
        let (k, v) = (k.to_dtype(q.dtype())?, v.to_dtype(q.dtype())?);
        let p = softmax_last_dim(&q.matmul(&k.t()?)?)?;
        let out = p.matmul(&v)?;
        return Ok((out, want_probs.then_some(p)));
    }
    let (b, h, m, d) = q.dims4()?;
    let t = k.dim(2)?;
    if k.dims4()? != (b, h, t, d) || v.dims4()? != (b, h, t, d) {
        candle_core::bail!(
            "attend_few_queries: q {:?}, k {:?}, v {:?}",
            q.dims(),
            k.dims(),
            v.dims()
        );
    }
    let q = q.contiguous()?;
    let (k, v) = (head_blocks(k, t, d)?, head_blocks(v, t, d)?);
    let mut out = vec![0f32; b * h * m * d];
    let mut probs = vec![0f32; b * h * m * t];
    with_cpu(
        "attend_few_queries",
        [&q, &k, &v],
        |[(qs, ql), (ks, kl), (vs, vl)]| {
            let qd = f32_input(qs, ql)?;
            let (kd, vd) = (
                f32_storage(ks, kl, h, t * d)?,
                f32_storage(vs, vl, h, t * d)?,
            );
            let tasks = out.par_chunks_mut(m * d).zip(probs.par_chunks_mut(m * t));
            tasks.enumerate().for_each(|(bh, (o, p))| {
                let q = &qd[bh * m * d..(bh + 1) * m * d];
                let (k0, v0) = (block_start(kl, h, bh), block_start(vl, h, bh));
                let (k, v) = (&kd[k0..k0 + t * d], &vd[v0..v0 + t * d]);
                attend_head(q, k, v, d, p, o);
            });
            Ok(())
        },
    )?;
    few_queries_result(out, probs, (b, h, m, d, t), want_probs, q.device())
}

/// The output [B, H, M, D] and, when wanted, the probabilities [B, H, M, T] as tensors.
fn few_queries_result(
    out: Vec<f32>,
    probs: Vec<f32>,
    (b, h, m, d, t): (usize, usize, usize, usize, usize),
    want_probs: bool,
    dev: &candle_core::Device,
) -> candle_core::Result<(Tensor, Option<Tensor>)> {
    let out = Tensor::from_vec(out, (b, h, m, d), dev)?;
    let probs = if want_probs {
        Some(Tensor::from_vec(probs, (b, h, m, t), dev)?)
    } else {
        None
    };
    Ok((out, probs))
}

/// [`attend_few_queries`] over f16 keys and values on the CPU (the int8 decoder's
/// cross-attention, see [`cross_f16`]): q [B, H, M, D] f32 (already scaled), keys in blocks
/// `kb` [B, H, ⌈T/16⌉, 16·D] f16 ([`block_keys_f16`]), v [B, H, T, D] f16 → out [B, H, M, D]
/// f32, plus the probabilities [B, H, M, T] when `want_probs`. Each query gets the same bits
/// whatever M.
pub fn attend_cross_f16(
    q: &Tensor,
    kb: &Tensor,
    v: &Tensor,
    want_probs: bool,
) -> candle_core::Result<(Tensor, Option<Tensor>)> {
    let (b, h, m, d) = q.dims4()?;
    let t = v.dim(2)?;
    let nb = t.div_ceil(cross_f16::KEY_BLOCK);
    if !fast_path(q)
        || kb.dtype() != candle_core::DType::F16
        || v.dtype() != candle_core::DType::F16
        || kb.dims4()? != (b, h, nb, cross_f16::KEY_BLOCK * d)
        || v.dims4()? != (b, h, t, d)
    {
        candle_core::bail!(
            "attend_cross_f16: q {:?} {:?}, blocked keys {:?} {:?}, v {:?} {:?}",
            q.dims(),
            q.dtype(),
            kb.dims(),
            kb.dtype(),
            v.dims(),
            v.dtype()
        );
    }
    let q = q.contiguous()?;
    let (kb, v) = (kb.contiguous()?, v.contiguous()?);
    let block = cross_f16::blocked_len(t, d);
    let mut out = vec![0f32; b * h * m * d];
    // The probabilities of every (batch, head) only when asked for (word alignment): a prompt
    // of 8 rows × 226 tokens would otherwise allocate and fault in 65 MB per layer.
    let mut probs = vec![0f32; if want_probs { b * h * m * t } else { 0 }];
    with_cpu(
        "attend_cross_f16",
        [&q, &kb, &v],
        |[(qs, ql), (ks, kl), (vs, vl)]| {
            let qd = f32_input(qs, ql)?;
            let (kd, vd) = (
                f16_storage(ks, kl, h, block)?,
                f16_storage(vs, vl, h, t * d)?,
            );
            let level = attention::Level::best();
            let run = |bh: usize, o: &mut [f32], p: &mut [f32]| {
                let q = &qd[bh * m * d..(bh + 1) * m * d];
                let (k0, v0) = (block_start(kl, h, bh), block_start(vl, h, bh));
                let (k, v) = (&kd[k0..k0 + block], &vd[v0..v0 + t * d]);
                cross_f16::attend_head_f16(level, q, k, v, t, d, p, o);
            };
            if want_probs {
                let tasks = out.par_chunks_mut(m * d).zip(probs.par_chunks_mut(m * t));
                tasks.enumerate().for_each(|(bh, (o, p))| run(bh, o, p));
            } else {
                out.par_chunks_mut(m * d).enumerate().for_each_init(
                    Vec::new,
                    |scratch, (bh, o)| {
                        scratch.resize(m * t, 0f32);
                        run(bh, o, scratch)
                    },
                );
            }
            Ok(())
        },
    )?;
    few_queries_result(out, probs, (b, h, m, d, t), want_probs, q.device())
}

/// Keys [B, H, T, D] (any float type) → the blocked f16 layout of [`attend_cross_f16`]
/// [B, H, ⌈T/16⌉, 16·D] (the last block zero-padded).
pub fn block_keys_f16(k: &Tensor) -> candle_core::Result<Tensor> {
    let (b, h, t, d) = k.dims4()?;
    let src: Vec<half::f16> = k
        .to_dtype(candle_core::DType::F16)?
        .flatten_all()?
        .to_vec1()?;
    let block = cross_f16::blocked_len(t, d);
    let mut out = vec![half::f16::ZERO; b * h * block];
    for (dst, head) in out.chunks_exact_mut(block).zip(src.chunks_exact(t * d)) {
        for (j, key) in head.chunks_exact(d).enumerate() {
            cross_f16::put_key(dst, j, key);
        }
    }
    let nb = t.div_ceil(cross_f16::KEY_BLOCK);
    Tensor::from_vec(out, (b, h, nb, cross_f16::KEY_BLOCK * d), k.device())
}

fn fast_path(x: &Tensor) -> bool {
    x.device().is_cpu() && x.dtype() == candle_core::DType::F32 && x.rank() > 0
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

/// The contiguous f32 data of a custom op's input.
pub(crate) fn f32_input<'a>(s: &'a CpuStorage, l: &Layout) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(data) = s else {
        candle_core::bail!("expected f32 storage")
    };
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => candle_core::bail!("input has to be contiguous"),
    }
}

/// Causal attention of `L` new positions over a cache: q [B, H, L, D] (already scaled), k and v
/// [B, H, offset + L, D] f32 views whose (batch, head) blocks have rows `D` apart (such as the
/// decoder's self-attention cache) → out [B, H, L, D]; query `i` of batch row `b` sees keys
/// `s..=offset + i` with `s = min(starts[b], offset + i)` (`starts` empty: all 0). A row
/// left-padded by `starts[b]` positions (prompts of different lengths in one batch) so gets the
/// bits it gets alone: its keys, in the same order, through the same arithmetic; a padding
/// position sees only itself, so it stays finite and is never seen by a real one.
///
/// Each query takes exactly the arithmetic of a one-query [`attend_few_queries`] call over its
/// keys (a decoder step), so a prompt fed at once gives the bits it gives fed token by token.
/// Through candle (two batched matmuls, a mask and a softmax) a 226-token prompt took ≈ 200 ms
/// of tiny.en's 4 layers.
pub fn attend_causal(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    offset: usize,
    starts: &[usize],
) -> candle_core::Result<Tensor> {
    let (b, h, l, d) = q.dims4()?;
    let t = offset + l;
    if k.dims4()? != (b, h, t, d)
        || v.dims4()? != (b, h, t, d)
        || !(starts.is_empty() || starts.len() == b)
    {
        candle_core::bail!(
            "attend_causal: q {:?}, k {:?}, v {:?}, offset {offset}, {} starts",
            q.dims(),
            k.dims(),
            v.dims(),
            starts.len()
        );
    }
    let q = q.contiguous()?;
    let (k, v) = (head_blocks(k, t, d)?, head_blocks(v, t, d)?);
    let mut out = vec![0f32; b * h * l * d];
    with_cpu(
        "attend_causal",
        [&q, &k, &v],
        |[(qs, ql), (ks, kl), (vs, vl)]| {
            let qd = f32_input(qs, ql)?;
            let (kd, vd) = (
                f32_storage(ks, kl, h, t * d)?,
                f32_storage(vs, vl, h, t * d)?,
            );
            out.par_chunks_mut(l * d).enumerate().for_each(|(bh, o)| {
                let (k0, v0) = (block_start(kl, h, bh), block_start(vl, h, bh));
                let start = starts.get(bh / h).copied().unwrap_or(0);
                let mut p = vec![0f32; t];
                for i in 0..l {
                    let ti = offset + i + 1;
                    let s = start.min(ti - 1);
                    let q = &qd[(bh * l + i) * d..(bh * l + i + 1) * d];
                    attend_head(
                        q,
                        &kd[k0 + s * d..k0 + ti * d],
                        &vd[v0 + s * d..v0 + ti * d],
                        d,
                        &mut p[..ti - s],
                        &mut o[i * d..(i + 1) * d],
                    );
                }
            });
            Ok(())
        },
    )?;
    Tensor::from_vec(out, (b, h, l, d), q.device())
}

/// K or V [B, H, T, D] as the attention kernels read it: the view itself where each (batch,
/// head) block is [T, D] with rows `D` apart (such as the decoder's self-attention cache
/// narrowed to its filled positions), read in place; a contiguous copy otherwise.
fn head_blocks(x: &Tensor, t: usize, d: usize) -> candle_core::Result<Tensor> {
    let st = x.stride();
    if st[3] == 1 && (t <= 1 || st[2] == d) {
        Ok(x.clone())
    } else {
        x.contiguous()
    }
}

/// Start of the [T, D] block of (batch, head) `bh` in the storage of a view with `h` heads.
fn block_start(l: &Layout, h: usize, bh: usize) -> usize {
    let st = l.stride();
    l.start_offset() + (bh / h) * st[0] + (bh % h) * st[1]
}

/// Runs `f` on the CPU storages and layouts of q, k and v; errors (naming `op`) when one is
/// not on the CPU.
fn with_cpu<R>(
    op: &str,
    [q, k, v]: [&Tensor; 3],
    f: impl FnOnce([(&CpuStorage, &Layout); 3]) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    let (qs, ql) = q.storage_and_layout();
    let (ks, kl) = k.storage_and_layout();
    let (vs, vl) = v.storage_and_layout();
    let (
        candle_core::Storage::Cpu(qs),
        candle_core::Storage::Cpu(ks),
        candle_core::Storage::Cpu(vs),
    ) = (&*qs, &*ks, &*vs)
    else {
        candle_core::bail!("{op}: CPU tensors expected")
    };
    f([(qs, ql), (ks, kl), (vs, vl)])
}

/// The f32 storage under a 4-d view [B, H, T, D] whose (batch, head) blocks are `block`
/// contiguous elements, checked to hold the last block.
fn f32_storage<'a>(
    s: &'a CpuStorage,
    l: &Layout,
    h: usize,
    block: usize,
) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(data) = s else {
        candle_core::bail!("expected f32 storage")
    };
    check_blocks(data.len(), l, h, block)?;
    Ok(data)
}

/// [`f32_storage`] for f16.
fn f16_storage<'a>(
    s: &'a CpuStorage,
    l: &Layout,
    h: usize,
    block: usize,
) -> candle_core::Result<&'a [half::f16]> {
    let CpuStorage::F16(data) = s else {
        candle_core::bail!("expected f16 storage")
    };
    check_blocks(data.len(), l, h, block)?;
    Ok(data)
}

/// Errors unless every (batch, head) block of `block` elements of the view `l` lies inside a
/// storage of `len` elements (the blocks' starts grow with the batch and head indices).
fn check_blocks(len: usize, l: &Layout, h: usize, block: usize) -> candle_core::Result<()> {
    let (dims, st) = (l.dims(), l.stride());
    let last =
        l.start_offset() + dims[0].saturating_sub(1) * st[0] + h.saturating_sub(1) * st[1] + block;
    if dims[0] * h > 0 && last > len {
        candle_core::bail!("attention: a K/V view reaches past its storage")
    }
    Ok(())
}

/// One (batch, head): q [M, D], k and v [T, D] → probabilities [M, T] (in `p`) and out [M, D].
fn attend_head(q: &[f32], k: &[f32], v: &[f32], d: usize, p: &mut [f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked at run time).
        return unsafe { attend_head_avx2(q, k, v, d, p, out) };
    }
    attend_head_body::<false>(q, k, v, d, p, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_head_avx2(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d: usize,
    p: &mut [f32],
    out: &mut [f32],
) {
    attend_head_body::<true>(q, k, v, d, p, out)
}

#[inline(always)]
fn attend_head_body<const FMA: bool>(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d: usize,
    p: &mut [f32],
    out: &mut [f32],
) {
    let m = q.len() / d;
    let t = k.len() / d;
    for (j, key) in k.chunks_exact(d).enumerate() {
        for (i, query) in q.chunks_exact(d).enumerate() {
            p[i * t + j] = dot::<FMA>(query, key);
        }
    }
    for row in p.chunks_exact_mut(t) {
        softmax_in_place::<FMA>(row);
    }
    out.fill(0.0);
    for (j, value) in v.chunks_exact(d).enumerate() {
        for i in 0..m {
            let w = p[i * t + j];
            for (o, x) in out[i * d..(i + 1) * d].iter_mut().zip(value) {
                *o = madd::<FMA>(w, *x, *o);
            }
        }
    }
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
fn avx2_fma() -> bool {
    // std caches the CPUID result.
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_row_avx2(x: &mut [f32]) {
    softmax_in_place::<true>(x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_slice_avx2(src: &[f32], dst: &mut [f32]) {
    gelu_slice_body::<true>(src, dst)
}

#[inline(always)]
fn softmax_in_place<const FMA: bool>(x: &mut [f32]) {
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
fn max_of(x: &[f32]) -> f32 {
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
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `e^x` (Cephes `expf`): x = n·ln2 + r with |r| ≤ ln2/2, e^r by a degree-7 polynomial, 2^n
/// by building the exponent bits. Inputs are clamped to [-87.3, 88.3], where 2^n stays a
/// normal float, so far-negative inputs (masked scores) give ~1e-38 rather than 0.
#[inline(always)]
fn exp<const FMA: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // 1.5·2^23: adding it rounds to an integer held in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    // ln 2 split in two so that n·LN2_HI is exact.
    const LN2_HI: f32 = 355.0 / 512.0;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const P: [f64; 6] = [
        1.987_569_150_0e-4,
        1.398_199_950_7e-3,
        8.333_451_907_3e-3,
        4.166_579_589_4e-2,
        1.666_666_545_9e-1,
        5.000_000_120_1e-1,
    ];
    let x = x.clamp(-87.3, 88.3);
    let t = madd::<FMA>(x, LOG2E, ROUND);
    let n = t - ROUND;
    let r = madd::<FMA>(n, -LN2_LO, madd::<FMA>(n, -LN2_HI, x));
    let mut p = P[0] as f32;
    for c in &P[1..] {
        p = madd::<FMA>(p, r, *c as f32);
    }
    let e_r = madd::<FMA>(p, r * r, r) + 1.0;
    let n_bits = t.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    e_r * f32::from_bits(((n_bits + 127) << 23) as u32)
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
    use candle_core::Device;

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .and_then(|d| d.abs())
            .and_then(|d| d.flatten_all())
            .and_then(|d| d.max(0))
            .and_then(|d| d.to_scalar::<f32>())
            .unwrap()
    }

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

    #[test]
    fn few_query_attention_matches_two_matmuls() {
        let dev = Device::Cpu;
        let val = |n: usize, salt: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * 7919 + salt * 104_729) % 2001) as f32 - 1000.0) / 700.0)
                .collect()
        };
        // M = 1 (greedy), M = 3 (rows sharing a window), odd D and T.
        for (b, h, m, t, d) in [(2, 3, 1, 1500, 64), (1, 2, 3, 37, 13)] {
            let q = Tensor::from_vec(val(b * h * m * d, 1), (b, h, m, d), &dev).unwrap();
            let k = Tensor::from_vec(val(b * h * t * d, 2), (b, h, t, d), &dev).unwrap();
            let v = Tensor::from_vec(val(b * h * t * d, 3), (b, h, t, d), &dev).unwrap();
            let (out, probs) = attend_few_queries(&q, &k, &v, true).unwrap();
            let p = candle_nn::ops::softmax_last_dim(&q.matmul(&k.t().unwrap()).unwrap()).unwrap();
            let want = p.matmul(&v).unwrap();
            assert!(max_abs_diff(&out, &want) < 1e-5, "out");
            assert!(max_abs_diff(&probs.unwrap(), &p) < 1e-6, "probs");
            let (_, none) = attend_few_queries(&q, &k, &v, false).unwrap();
            assert!(none.is_none());
        }
    }

    /// Causal attention over a cache view (narrowed from a larger buffer, as the decoder's
    /// cache is): each query equals a one-query `attend_few_queries` call over its prefix bit
    /// for bit, and the masked two-matmul softmax within rounding.
    #[test]
    fn causal_attention_equals_steps_and_masked_matmuls() {
        let dev = Device::Cpu;
        let val = |n: usize, salt: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * 7919 + salt * 104_729) % 2001) as f32 - 1000.0) / 700.0)
                .collect()
        };
        for (b, h, l, offset, d, cap) in [(2, 3, 5, 7, 64, 20), (1, 2, 4, 0, 13, 4)] {
            let t = offset + l;
            let q = Tensor::from_vec(val(b * h * l * d, 1), (b, h, l, d), &dev).unwrap();
            let kb = Tensor::from_vec(val(b * h * cap * d, 2), (b, h, cap, d), &dev).unwrap();
            let vb = Tensor::from_vec(val(b * h * cap * d, 3), (b, h, cap, d), &dev).unwrap();
            let (k, v) = (kb.narrow(2, 0, t).unwrap(), vb.narrow(2, 0, t).unwrap());
            let out = attend_causal(&q, &k, &v, offset, &[]).unwrap();
            for i in 0..l {
                let qi = q.narrow(2, i, 1).unwrap();
                let (ki, vi) = (
                    k.narrow(2, 0, offset + i + 1).unwrap(),
                    v.narrow(2, 0, offset + i + 1).unwrap(),
                );
                let (step, _) = attend_few_queries(&qi, &ki, &vi, false).unwrap();
                let got = out.narrow(2, i, 1).unwrap();
                assert_eq!(
                    max_abs_diff(&got, &step),
                    0.0,
                    "query {i} differs from its step"
                );
            }
            let mask: Vec<f32> = (0..l)
                .flat_map(|i| {
                    (0..t).map(move |j| {
                        if j > offset + i {
                            f32::NEG_INFINITY
                        } else {
                            0.0
                        }
                    })
                })
                .collect();
            let mask = Tensor::from_vec(mask, (l, t), &dev).unwrap();
            let (kc, vc) = (k.contiguous().unwrap(), v.contiguous().unwrap());
            let s = q
                .matmul(&kc.t().unwrap())
                .unwrap()
                .broadcast_add(&mask)
                .unwrap();
            let want = candle_nn::ops::softmax_last_dim(&s)
                .unwrap()
                .matmul(&vc)
                .unwrap();
            assert!(max_abs_diff(&out, &want) < 1e-5, "vs masked matmuls");
        }
    }

    /// A batch row left-padded by `starts[b]` positions gives, at each of its real positions,
    /// the bits of the same row unpadded (its keys shifted to the front); padding positions
    /// see only themselves.
    #[test]
    fn left_padded_rows_equal_their_unpadded_selves() {
        let dev = Device::Cpu;
        let val = |n: usize, salt: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * 7919 + salt * 104_729) % 2001) as f32 - 1000.0) / 700.0)
                .collect()
        };
        let (b, h, d, cap) = (3, 2, 64, 24);
        let starts = [0usize, 3, 9];
        for (l, offset) in [(12, 0), (1, 11), (4, 8)] {
            let t = offset + l;
            let q = Tensor::from_vec(val(b * h * l * d, 1), (b, h, l, d), &dev).unwrap();
            let kb = Tensor::from_vec(val(b * h * cap * d, 2), (b, h, cap, d), &dev).unwrap();
            let vb = Tensor::from_vec(val(b * h * cap * d, 3), (b, h, cap, d), &dev).unwrap();
            let (k, v) = (kb.narrow(2, 0, t).unwrap(), vb.narrow(2, 0, t).unwrap());
            let out = attend_causal(&q, &k, &v, offset, &starts).unwrap();
            for (r, &s) in starts.iter().enumerate() {
                let row = |x: &Tensor| x.narrow(0, r, 1).unwrap();
                for i in 0..l {
                    let qi = row(&q).narrow(2, i, 1).unwrap();
                    let got = row(&out).narrow(2, i, 1).unwrap();
                    // Real position: the unpadded row's keys; padding: itself alone.
                    let from = s.min(offset + i);
                    let (ki, vi) = (
                        row(&k).narrow(2, from, offset + i + 1 - from).unwrap(),
                        row(&v).narrow(2, from, offset + i + 1 - from).unwrap(),
                    );
                    let (ko, vo) = (ki.contiguous().unwrap(), vi.contiguous().unwrap());
                    let want = attend_causal(&qi, &ko, &vo, ko.dim(2).unwrap() - 1, &[]).unwrap();
                    assert_eq!(max_abs_diff(&got, &want), 0.0, "row {r} query {i}");
                }
            }
            assert!(attend_causal(&q, &k, &v, offset, &starts[..2]).is_err());
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
