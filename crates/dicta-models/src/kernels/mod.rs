//! Fast CPU kernels where candle is slow: attention (the encoder's self-attention in f32 and
//! int8, the decoder's cached self-attention (f32 or f16) and cross-attention over f16 or int8
//! keys and values), the int8 and f32 matrix products, layer norm, and the element-wise functions
//! (`math`).

pub mod attention;
pub(crate) mod cross_lowp;
mod cross_rows;
pub mod int8;
pub mod lstm;
mod math;
pub mod norm;
pub mod panel;
mod self_f16;
mod tile;

use candle_core::{CpuStorage, Layout, Tensor};
use rayon::prelude::*;

pub use cross_rows::attend_cross_rows;
#[cfg(target_arch = "x86_64")]
use math::avx2_fma;
#[cfg(target_arch = "x86_64")]
use math::exp_x16;
pub(crate) use math::{dot, gelu_erf_into, widen_f16};
use math::{exp, madd, max_of, softmax_in_place};
pub use math::{exp_sub_accumulate, gelu_erf, log_sum_exp, sampling_weights, softmax_last_dim};
pub(crate) use self_f16::PutF16;
pub use self_f16::{attend_causal_f16, attend_causal_f16_at};

/// Whether Dicta's kernels may use AVX-512 on this CPU: it has AVX-512F and `DICTA_NO_AVX512` is
/// not set (or `0`). Without it every kernel takes its AVX2 level (the int8 products AVX-VNNI or
/// AVX2), as on a CPU without AVX-512, to measure that CPU's path here (candle's own float32
/// gemm still picks its widest level).
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx512() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| {
        is_x86_feature_detected!("avx512f")
            && std::env::var_os("DICTA_NO_AVX512").is_none_or(|v| v == "0")
    })
}

/// Attention of a few queries per (batch, head) over many keys, as in a decoder step's
/// cross-attention: q [B, H, M, D] (already scaled), k and v [B, H, T, D] → out [B, H, M, D],
/// plus the probabilities [B, H, M, T] when `want_probs`.
///
/// The same as `softmax(q·kᵀ)·v` through two matmuls, but each key and value row is read once
/// from memory for all M queries and nothing is packed: with M = 1 the GEMM would copy all of
/// K and V into its panel buffers every step, twice the memory traffic of the attention itself.
/// (f16 and int8 keys and values go through [`attend_cross_f16`] and [`attend_cross_rows`].)
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
    let (b, h, _, d) = q.dims4()?;
    let t = k.dim(2)?;
    if k.dims4()? != (b, h, t, d) || v.dims4()? != (b, h, t, d) {
        candle_core::bail!(
            "attend_few_queries: q {:?}, k {:?}, v {:?}",
            q.dims(),
            k.dims(),
            v.dims()
        );
    }
    // Batch row `i` attends its own K/V: the cross-attention kernel with one window per row.
    let windows: Vec<usize> = (0..b).collect();
    attend_cross_rows(q, k, v, None, &windows, want_probs)
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

/// [`attend_few_queries`] over f16 keys and values on the CPU (see [`cross_lowp`]; the int8
/// decoder stores them in int8, through [`attend_cross_rows`]): q [B, H, M, D] f32 (already
/// scaled), keys in blocks `kb` [B, H, ⌈T/16⌉, 16·D] f16 ([`block_keys_f16`]), v [B, H, T, D]
/// f16 → out [B, H, M, D] f32, plus the probabilities [B, H, M, T] when `want_probs`. Each query
/// gets the same bits whatever M.
pub fn attend_cross_f16(
    q: &Tensor,
    kb: &Tensor,
    v: &Tensor,
    want_probs: bool,
) -> candle_core::Result<(Tensor, Option<Tensor>)> {
    if v.dtype() != candle_core::DType::F16 {
        candle_core::bail!("attend_cross_f16: values are {:?}, not f16", v.dtype());
    }
    let windows: Vec<usize> = (0..q.dim(0)?).collect();
    attend_cross_rows(q, kb, v, None, &windows, want_probs)
}

/// Keys [B, H, T, D] (any float type) → the blocked f16 layout of [`attend_cross_f16`]
/// [B, H, ⌈T/16⌉, 16·D] (the last block zero-padded).
pub fn block_keys_f16(k: &Tensor) -> candle_core::Result<Tensor> {
    let (b, h, t, d) = k.dims4()?;
    let src: Vec<half::f16> = k
        .to_dtype(candle_core::DType::F16)?
        .flatten_all()?
        .to_vec1()?;
    let block = cross_lowp::blocked_len(t, d);
    let mut out = vec![half::f16::ZERO; b * h * block];
    for (dst, head) in out.chunks_exact_mut(block).zip(src.chunks_exact(t * d)) {
        for (j, key) in head.chunks_exact(d).enumerate() {
            cross_lowp::put_key(dst, j, key);
        }
    }
    let nb = t.div_ceil(cross_lowp::KEY_BLOCK);
    Tensor::from_vec(out, (b, h, nb, cross_lowp::KEY_BLOCK * d), k.device())
}

/// Keys and values [B, H, T, D] (any float type) → the int8 layout of [`attend_cross_rows`]:
/// keys in blocks [B, H, ⌈T/16⌉, 16·D] and values [B, H, T, D], both int8 in u8 tensors, and
/// the scales [B, H, 2, D] f32 (each head's per-channel key scales, then value scales; see
/// [`cross_lowp::quantize_head`]).
pub fn quantize_kv_i8(k: &Tensor, v: &Tensor) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    let (b, h, t, d) = k.dims4()?;
    if v.dims4()? != (b, h, t, d) {
        candle_core::bail!("quantize_kv_i8: k {:?}, v {:?}", k.dims(), v.dims());
    }
    let flat = |x: &Tensor| -> candle_core::Result<Vec<f32>> {
        x.to_dtype(candle_core::DType::F32)?
            .flatten_all()?
            .to_vec1()
    };
    let (kf, vf) = (flat(k)?, flat(v)?);
    let block = cross_lowp::blocked_len(t, d);
    let mut kq = vec![0u8; b * h * block];
    let mut vq = vec![0u8; b * h * t * d];
    let mut scales = vec![0f32; b * h * 2 * d];
    for bh in 0..b * h {
        let (src_k, src_v) = (&kf[bh * t * d..], &vf[bh * t * d..]);
        cross_lowp::quantize_head(
            (t, d),
            |j| &src_k[j * d..(j + 1) * d],
            |j| &src_v[j * d..(j + 1) * d],
            &mut kq[bh * block..(bh + 1) * block],
            &mut vq[bh * t * d..(bh + 1) * t * d],
            &mut scales[bh * 2 * d..(bh + 1) * 2 * d],
        );
    }
    let nb = t.div_ceil(cross_lowp::KEY_BLOCK);
    let dev = k.device();
    Ok((
        Tensor::from_vec(kq, (b, h, nb, cross_lowp::KEY_BLOCK * d), dev)?,
        Tensor::from_vec(vq, (b, h, t, d), dev)?,
        Tensor::from_vec(scales, (b, h, 2, d), dev)?,
    ))
}

fn fast_path(x: &Tensor) -> bool {
    x.device().is_cpu() && x.dtype() == candle_core::DType::F32 && x.rank() > 0
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
    attend_causal_shared(q, k, v, offset, starts, None)
}

/// Rows of a causal attention whose first `shared` cached positions hold the same keys and values
/// as another row's (the beams of one window share their prompt): row `b` reads them from row
/// `source[b]`.
#[derive(Debug, Clone, Copy)]
pub struct SharedPrefix<'a> {
    pub source: &'a [usize],
    pub shared: usize,
}

/// [`attend_causal`] where rows share a prefix ([`SharedPrefix`]): the same bits (the same
/// values, read from one row's copy). The beams of a window then read one copy of their prompt's
/// keys and values, which stays in cache from one beam to the next, instead of five copies from
/// memory (a step's self-attention reads ≈ 3.7 MB per row over a 225-token prompt).
pub fn attend_causal_shared(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    offset: usize,
    starts: &[usize],
    prefix: Option<SharedPrefix<'_>>,
) -> candle_core::Result<Tensor> {
    let (b, h, l, d) = q.dims4()?;
    let t = offset + l;
    if k.dims4()? != (b, h, t, d)
        || v.dims4()? != (b, h, t, d)
        || !(starts.is_empty() || starts.len() == b)
        || prefix.is_some_and(|p| p.source.len() != b || p.source.iter().any(|&r| r >= b))
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
                // Where this row reads its shared positions `..shared` from, if elsewhere.
                let shared = prefix.and_then(|p| {
                    let src = p.source[bh / h];
                    let at = src * h + bh % h;
                    (src != bh / h && p.shared > 0)
                        .then(|| (block_start(kl, h, at), block_start(vl, h, at), p.shared))
                });
                let mut p = vec![0f32; t];
                for i in 0..l {
                    let ti = offset + i + 1;
                    let s = start.min(ti - 1);
                    let q = &qd[(bh * l + i) * d..(bh * l + i + 1) * d];
                    // Keys `s..m` from the shared copy (none without one), `m..ti` its own.
                    let (ks, vs, m) = match shared {
                        Some((ks, vs, n)) => (ks, vs, n.clamp(s, ti)),
                        None => (k0, v0, s),
                    };
                    attend_head(
                        q,
                        [&kd[ks + s * d..ks + m * d], &kd[k0 + m * d..k0 + ti * d]],
                        [&vd[vs + s * d..vs + m * d], &vd[v0 + m * d..v0 + ti * d]],
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

/// [`f32_storage`] for int8 held in a u8 tensor.
fn i8_storage<'a>(
    s: &'a CpuStorage,
    l: &Layout,
    h: usize,
    block: usize,
) -> candle_core::Result<&'a [i8]> {
    let CpuStorage::U8(data) = s else {
        candle_core::bail!("expected u8 storage")
    };
    check_blocks(data.len(), l, h, block)?;
    // SAFETY: i8 and u8 have the same size and alignment, and every bit pattern is valid in both.
    Ok(unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<i8>(), data.len()) })
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

/// Keys or values of one head in two parts, read as their concatenation (the same bits however
/// they are split): a row whose prompt is shared reads it from another row's copy
/// ([`SharedPrefix`]).
type Parts<'a> = [&'a [f32]; 2];

/// One (batch, head): q [M, D], k and v [T, D] → probabilities [M, T] (in `p`) and out [M, D].
fn attend_head(q: &[f32], k: Parts, v: Parts, d: usize, p: &mut [f32], out: &mut [f32]) {
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
    k: Parts,
    v: Parts,
    d: usize,
    p: &mut [f32],
    out: &mut [f32],
) {
    attend_head_body::<true>(q, k, v, d, p, out)
}

#[inline(always)]
fn attend_head_body<const FMA: bool>(
    q: &[f32],
    k: Parts,
    v: Parts,
    d: usize,
    p: &mut [f32],
    out: &mut [f32],
) {
    let m = q.len() / d;
    let t = (k[0].len() + k[1].len()) / d;
    let keys = k[0].chunks_exact(d).chain(k[1].chunks_exact(d));
    for (j, key) in keys.enumerate() {
        for (i, query) in q.chunks_exact(d).enumerate() {
            p[i * t + j] = dot::<FMA>(query, key);
        }
    }
    for row in p.chunks_exact_mut(t) {
        softmax_in_place::<FMA>(row);
    }
    out.fill(0.0);
    let values = v[0].chunks_exact(d).chain(v[1].chunks_exact(d));
    for (j, value) in values.enumerate() {
        for i in 0..m {
            let w = p[i * t + j];
            for (o, x) in out[i * d..(i + 1) * d].iter_mut().zip(value) {
                *o = madd::<FMA>(w, *x, *o);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// `n` deterministic values in [-1.43, 1.43], different per `salt`.
    pub(super) fn vals(n: usize, salt: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 7919 + salt * 104_729) % 2001) as f32 - 1000.0) / 700.0)
            .collect()
    }

    pub(super) fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .and_then(|d| d.abs())
            .and_then(|d| d.flatten_all())
            .and_then(|d| d.max(0))
            .and_then(|d| d.to_scalar::<f32>())
            .unwrap()
    }

    #[test]
    fn few_query_attention_matches_two_matmuls() {
        let dev = Device::Cpu;
        // M = 1 (greedy), M = 3 (rows sharing a window), odd D and T.
        for (b, h, m, t, d) in [(2, 3, 1, 1500, 64), (1, 2, 3, 37, 13)] {
            let q = Tensor::from_vec(vals(b * h * m * d, 1), (b, h, m, d), &dev).unwrap();
            let k = Tensor::from_vec(vals(b * h * t * d, 2), (b, h, t, d), &dev).unwrap();
            let v = Tensor::from_vec(vals(b * h * t * d, 3), (b, h, t, d), &dev).unwrap();
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
        for (b, h, l, offset, d, cap) in [(2, 3, 5, 7, 64, 20), (1, 2, 4, 0, 13, 4)] {
            let t = offset + l;
            let q = Tensor::from_vec(vals(b * h * l * d, 1), (b, h, l, d), &dev).unwrap();
            let kb = Tensor::from_vec(vals(b * h * cap * d, 2), (b, h, cap, d), &dev).unwrap();
            let vb = Tensor::from_vec(vals(b * h * cap * d, 3), (b, h, cap, d), &dev).unwrap();
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

    /// Rows reading a shared prefix from another row give the bits of reading their own copy:
    /// rows 1 and 2 take positions `..shared` from row 0 (their own copies are garbage there),
    /// row 3 is its own source; with left padding, one new position and several, and a
    /// prefix longer than the keys a query sees.
    #[test]
    fn a_shared_prefix_is_read_from_its_source_row() {
        let dev = Device::Cpu;
        let (b, h, d, cap) = (4, 2, 64, 24);
        for (l, offset, shared, starts) in [
            (1, 9, 6, vec![]),
            (3, 9, 6, vec![2, 2, 2, 0]),
            (2, 3, 8, vec![]),
        ] {
            let t = offset + l;
            let q = Tensor::from_vec(vals(b * h * l * d, 1), (b, h, l, d), &dev).unwrap();
            // Every row equals row 0 on positions `..shared`.
            let same = |salt: usize| -> Vec<f32> {
                let mut x = vals(b * h * cap * d, salt);
                for r in 1..b {
                    for hh in 0..h {
                        for j in 0..shared * d {
                            x[(r * h + hh) * cap * d + j] = x[hh * cap * d + j];
                        }
                    }
                }
                x
            };
            let (kx, vx) = (same(2), same(3));
            let want = {
                let kb = Tensor::from_vec(kx.clone(), (b, h, cap, d), &dev).unwrap();
                let vb = Tensor::from_vec(vx.clone(), (b, h, cap, d), &dev).unwrap();
                let (k, v) = (kb.narrow(2, 0, t).unwrap(), vb.narrow(2, 0, t).unwrap());
                attend_causal(&q, &k, &v, offset, &starts).unwrap()
            };
            let garbage = |mut x: Vec<f32>| {
                for r in 1..3 {
                    for hh in 0..h {
                        for j in 0..shared * d {
                            x[(r * h + hh) * cap * d + j] = 1e30;
                        }
                    }
                }
                x
            };
            let kb = Tensor::from_vec(garbage(kx), (b, h, cap, d), &dev).unwrap();
            let vb = Tensor::from_vec(garbage(vx), (b, h, cap, d), &dev).unwrap();
            let (k, v) = (kb.narrow(2, 0, t).unwrap(), vb.narrow(2, 0, t).unwrap());
            let prefix = SharedPrefix {
                source: &[0, 0, 0, 3],
                shared,
            };
            let got = attend_causal_shared(&q, &k, &v, offset, &starts, Some(prefix)).unwrap();
            assert_eq!(max_abs_diff(&got, &want), 0.0, "l {l}, shared {shared}");
            let bad = SharedPrefix {
                source: &[0, 0, 4, 3],
                shared,
            };
            assert!(attend_causal_shared(&q, &k, &v, offset, &starts, Some(bad)).is_err());
        }
    }

    /// Keys and values split in two parts give the bits of one part, at both arithmetic levels
    /// (plain multiply-add and fused), whatever the split (also empty parts).
    #[test]
    fn a_split_head_equals_one_block_at_each_arithmetic() {
        let (d, t) = (64, 37);
        let (q, k, v) = (vals(d, 1), vals(t * d, 2), vals(t * d, 3));
        for cut in [0, 1, 16, 36, 37] {
            let parts_k = [&k[..cut * d], &k[cut * d..]];
            let parts_v = [&v[..cut * d], &v[cut * d..]];
            let (mut p1, mut o1, mut p2, mut o2) =
                (vec![0f32; t], vec![0f32; d], vec![0f32; t], vec![0f32; d]);
            attend_head_body::<false>(&q, [&k, &[]], [&v, &[]], d, &mut p1, &mut o1);
            attend_head_body::<false>(&q, parts_k, parts_v, d, &mut p2, &mut o2);
            assert_eq!((&p1, &o1), (&p2, &o2), "plain, cut {cut}");
            attend_head_body::<true>(&q, [&k, &[]], [&v, &[]], d, &mut p1, &mut o1);
            attend_head_body::<true>(&q, parts_k, parts_v, d, &mut p2, &mut o2);
            assert_eq!((&p1, &o1), (&p2, &o2), "fused, cut {cut}");
        }
    }

    /// A batch row left-padded by `starts[b]` positions gives, at each of its real positions,
    /// the bits of the same row unpadded (its keys shifted to the front); padding positions
    /// see only themselves.
    #[test]
    fn left_padded_rows_equal_their_unpadded_selves() {
        let dev = Device::Cpu;
        let (b, h, d, cap) = (3, 2, 64, 24);
        let starts = [0usize, 3, 9];
        for (l, offset) in [(12, 0), (1, 11), (4, 8)] {
            let t = offset + l;
            let q = Tensor::from_vec(vals(b * h * l * d, 1), (b, h, l, d), &dev).unwrap();
            let kb = Tensor::from_vec(vals(b * h * cap * d, 2), (b, h, cap, d), &dev).unwrap();
            let vb = Tensor::from_vec(vals(b * h * cap * d, 3), (b, h, cap, d), &dev).unwrap();
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
}
