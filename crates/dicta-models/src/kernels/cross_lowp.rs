//! The decoder's cross-attention over f16 or int8 keys and values ([`super::attend_cross_f16`],
//! [`super::attend_cross_rows`]).
//!
//! A decoder step's cross-attention reads every key and value of its window (tiny.en: 4 layers
//! × 2 × 1500 × 384, 18 MB in f32 per row), once per token, so it is bound by memory
//! bandwidth once a batch's windows outgrow the cache. Low-precision storage cuts that traffic:
//! f16 (10 mantissa bits) halves it, int8 with one scale per channel quarters it. Values are
//! widened to f32 in registers and every sum is f32. For int8, key `j` channel `c` is
//! `ks[c] · k8[j][c]`, so a score `Σ_c q[c]·ks[c]·k8[j][c]` takes the scale in the query, and
//! an output `Σ_j p[j]·vs[c]·v8[j][c]` takes it after the sum: the loops see plain integers.
//!
//! Keys are stored in blocks of [`KEY_BLOCK`] keys, each block dimension-major ([D, 16]): a
//! query's 16 scores of a block are the 16 lanes of one vector, D multiply-adds and no
//! horizontal sum (key-major, reducing each score across lanes cost more than computing it),
//! and up to four queries share each widened key vector (a prompt's positions, or a
//! speculative draft's). Every score is one chain of multiply-adds over the dimensions in
//! order, and every output one chain over the keys in order, whatever the number of queries:
//! a query gets the same bits alone or with others, which lossless speculative verification
//! and left-padded batches rely on.

use super::attention::Level;
use super::softmax_in_place;
use half::f16;

/// Keys per block of the blocked key layout.
pub const KEY_BLOCK: usize = 16;

/// Elements of one head's blocked keys: `t` keys of `d` dims, the last block zero-padded.
pub fn blocked_len(t: usize, d: usize) -> usize {
    t.div_ceil(KEY_BLOCK) * KEY_BLOCK * d
}

/// Where key `j`, dimension `c` lies in one head's blocked keys of `d` dims.
pub fn blocked_index(j: usize, c: usize, d: usize) -> usize {
    (j / KEY_BLOCK) * KEY_BLOCK * d + c * KEY_BLOCK + j % KEY_BLOCK
}

/// Writes key `j` (`key`: its `d` dims) into one head's blocked keys `head`.
pub fn put_key<E: Copy>(head: &mut [E], j: usize, key: &[E]) {
    let d = key.len();
    for (c, &x) in key.iter().enumerate() {
        head[blocked_index(j, c, d)] = x;
    }
}

/// One head's keys (blocked, [`blocked_len`]`(T, D)` elements) and values ([T, D]).
#[derive(Clone, Copy)]
pub(super) enum HeadKv<'a> {
    F16 {
        k: &'a [f16],
        v: &'a [f16],
    },
    /// Integers with per-channel scales: key channel `c` is `ks[c] · k[..][c]`, value channel
    /// `c` is `vs[c] · v[..][c]` (`ks`, `vs`: D each).
    I8 {
        k: &'a [i8],
        v: &'a [i8],
        ks: &'a [f32],
        vs: &'a [f32],
    },
}

/// One (batch, head): q [M, D] f32 and the head's keys and values (`t` of `d` dims) →
/// probabilities [M, T] in `p` and out [M, D].
pub(super) fn attend_head_lowp(
    level: Level,
    q: &[f32],
    kv: HeadKv,
    t: usize,
    d: usize,
    p: &mut [f32],
    out: &mut [f32],
) {
    let m = q.len() / d;
    assert!(p.len() >= m * t && out.len() >= m * d);
    match kv {
        HeadKv::F16 { k, v } => {
            assert!(k.len() >= blocked_len(t, d) && v.len() >= t * d);
            let portable = |p: &mut [f32], o: &mut [f32]| {
                attend_portable(q, |i| k[i].to_f32(), |i| v[i].to_f32(), t, d, p, o)
            };
            // SAFETY: `k` and `v` hold `t` keys of `d` dims (asserted).
            unsafe {
                run::<false>(
                    level,
                    q,
                    k.as_ptr().cast(),
                    v.as_ptr().cast(),
                    (t, d),
                    p,
                    out,
                    portable,
                )
            }
        }
        HeadKv::I8 { k, v, ks, vs } => {
            assert!(
                k.len() >= blocked_len(t, d) && v.len() >= t * d && ks.len() == d && vs.len() == d
            );
            // The key scales go into the queries, the value scales onto the outputs.
            let qs: Vec<f32> = q[..m * d]
                .iter()
                .enumerate()
                .map(|(i, &x)| x * ks[i % d])
                .collect();
            let portable = |p: &mut [f32], o: &mut [f32]| {
                attend_portable(&qs, |i| k[i] as f32, |i| v[i] as f32, t, d, p, o)
            };
            // SAFETY: as above.
            unsafe {
                run::<true>(
                    level,
                    &qs,
                    k.as_ptr().cast(),
                    v.as_ptr().cast(),
                    (t, d),
                    p,
                    out,
                    portable,
                )
            };
            for row in out[..m * d].chunks_exact_mut(d) {
                row.iter_mut().zip(vs).for_each(|(o, s)| *o *= s);
            }
        }
    }
}

/// The vector kernel for int8 (`I8`) or f16 storage where `level` has one, else `portable`.
///
/// # Safety
/// `k` points at one head's blocked keys and `v` at its values, `t` keys of `d` dims each, in
/// the storage `I8` names; `p` and `out` hold the sizes [`attend_head_lowp`] asserts.
#[allow(clippy::too_many_arguments)]
unsafe fn run<const I8: bool>(
    level: Level,
    q: &[f32],
    k: *const u8,
    v: *const u8,
    (t, d): (usize, usize),
    p: &mut [f32],
    out: &mut [f32],
    portable: impl FnOnce(&mut [f32], &mut [f32]),
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(avx512) = vector_level(level, d) {
        // SAFETY: the level was checked against the CPU's features; sizes as the caller says.
        return x86::attend::<I8>(avx512, q, k, v, t, p, out);
    }
    let _ = (level, q, k, v, t, d);
    portable(p, out)
}

/// Whether the vector kernels run (`Some(true)`: AVX-512, `Some(false)`: AVX2 and FMA), here
/// and in [`super::self_f16`].
#[cfg(target_arch = "x86_64")]
pub(super) fn vector_level(level: Level, d: usize) -> Option<bool> {
    if d != HEAD || !is_x86_feature_detected!("f16c") {
        return None;
    }
    match level {
        Level::Avx512 => Some(true),
        Level::Avx2Fma => Some(false),
        Level::Scalar => None,
    }
}

/// The head size of the vector kernels (every Whisper size has heads of 64).
#[cfg(target_arch = "x86_64")]
pub(super) const HEAD: usize = 64;

/// The scalar kernel over keys read through `key(i)` (blocked index) and values `val(i)`.
fn attend_portable(
    q: &[f32],
    key: impl Fn(usize) -> f32,
    val: impl Fn(usize) -> f32,
    t: usize,
    d: usize,
    p: &mut [f32],
    out: &mut [f32],
) {
    let m = q.len() / d;
    for i in 0..m {
        let qi = &q[i * d..(i + 1) * d];
        for j in 0..t {
            let mut s = 0f32;
            for (c, &x) in qi.iter().enumerate() {
                s += x * key(blocked_index(j, c, d));
            }
            p[i * t + j] = s;
        }
    }
    for r in p.chunks_exact_mut(t).take(m) {
        softmax_in_place::<false>(r);
    }
    out[..m * d].fill(0.0);
    for j in 0..t {
        for i in 0..m {
            let w = p[i * t + j];
            for (c, o) in out[i * d..(i + 1) * d].iter_mut().enumerate() {
                *o += w * val(j * d + c);
            }
        }
    }
}

/// Quantizes one head's `t` keys or values of `d` channels (`row(j)`: key `j`'s `d` values) to
/// int8 with one scale per channel (its largest magnitude over the keys / 127, rounding half to
/// even): writes the scales into `scales` [D] and hands each key's integers to `put(j, ints)`.
/// A channel of zeros gets scale 0 and zeros. Both passes walk whole keys, so the work per
/// window (every layer's K and V) stays a few milliseconds.
pub fn quantize_channels<'a>(
    t: usize,
    d: usize,
    row: impl Fn(usize) -> &'a [f32],
    scales: &mut [f32],
    mut put: impl FnMut(usize, &[i8]),
) {
    let mut max = vec![0f32; d];
    for j in 0..t {
        for (m, x) in max.iter_mut().zip(&row(j)[..d]) {
            *m = m.max(x.abs());
        }
    }
    let inv: Vec<f32> = max
        .iter()
        .map(|&m| if m > 0.0 { 127.0 / m } else { 0.0 })
        .collect();
    for (s, m) in scales.iter_mut().zip(&max) {
        *s = m / 127.0;
    }
    // Adding 1.5·2²³ to |y| < 2²² rounds it to an integer, half to even (the default rounding
    // mode), held in the low bits of the sum's mantissa: unlike `round_ties_even` (a libm call
    // per value on the baseline x86-64 target) and a saturating float-to-int cast, this
    // vectorises.
    const ROUND: f32 = 12_582_912.0;
    let mut ints = vec![0i8; d];
    for j in 0..t {
        for ((o, x), f) in ints.iter_mut().zip(&row(j)[..d]).zip(&inv) {
            let y = (x * f).clamp(-127.0, 127.0) + ROUND;
            *o = (y.to_bits() as i32 - ROUND.to_bits() as i32) as i8;
        }
        put(j, &ints);
    }
}

/// Quantizes one head's `t` keys and values of `d` channels (`key(j)`, `value(j)`: position
/// `j`'s `d` values) into the int8 layout of [`HeadKv::I8`] (u8 bits): blocked keys `kh`
/// ([`blocked_len`]`(t, d)`), values `vh` [T, D], and `scales` [2, D] (the key channels'
/// scales, then the value channels', see [`quantize_channels`]).
pub fn quantize_head<'a>(
    (t, d): (usize, usize),
    key: impl Fn(usize) -> &'a [f32],
    value: impl Fn(usize) -> &'a [f32],
    kh: &mut [u8],
    vh: &mut [u8],
    scales: &mut [f32],
) {
    let (ks, vs) = scales.split_at_mut(d);
    quantize_channels(t, d, key, ks, |j, q| {
        // Keys into blocks of 16 ([`KEY_BLOCK`]), dimension-major.
        let base = blocked_index(j, 0, d);
        for (c, &x) in q.iter().enumerate() {
            kh[base + c * KEY_BLOCK] = x as u8;
        }
    });
    quantize_channels(t, d, value, vs, |j, q| {
        for (o, &x) in vh[j * d..(j + 1) * d].iter_mut().zip(q) {
            *o = x as u8;
        }
    });
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{softmax_in_place, HEAD, KEY_BLOCK};
    use std::arch::x86_64::*;

    /// Queries per block on AVX-512: each widened key or value vector serves this many. Five, so
    /// that a beam of 5 (the default) reads its window's keys and values once per step, not
    /// twice; `p·v` then holds 5 × 4 accumulators and 4 value vectors in the 32 registers.
    const QB_AVX512: usize = 5;
    /// Queries per block on AVX2 (16 registers).
    const QB_AVX2: usize = 4;

    /// 16 elements from element `i` of `p` (int8 when `I8`, else f16) widened to f32.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    #[inline]
    unsafe fn load16<const I8: bool>(p: *const u8, i: usize) -> __m512 {
        if I8 {
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(i) as *const _)))
        } else {
            _mm512_cvtph_ps(_mm256_loadu_si256(p.add(2 * i) as *const _))
        }
    }

    /// 8 elements from element `i` of `p` widened to f32 (see [`load16`]).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load8<const I8: bool>(p: *const u8, i: usize) -> __m256 {
        if I8 {
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p.add(i) as *const _)))
        } else {
            _mm256_cvtph_ps(_mm_loadu_si128(p.add(2 * i) as *const _))
        }
    }

    /// Runs the queries in blocks of up to [`QB_AVX512`] or [`QB_AVX2`] on AVX-512 (`avx512`) or
    /// AVX2 kernels; keys `kb` and values `v` are int8 when `I8`, else f16.
    ///
    /// # Safety
    /// The CPU has the level's features (with F16C); `kb` holds one head's blocked keys and `v`
    /// its values for `t` keys, `p` and `out` the sizes [`super::attend_head_lowp`] asserts.
    pub(super) unsafe fn attend<const I8: bool>(
        avx512: bool,
        q: &[f32],
        kb: *const u8,
        v: *const u8,
        t: usize,
        p: &mut [f32],
        out: &mut [f32],
    ) {
        let m = q.len() / HEAD;
        let qb = if avx512 { QB_AVX512 } else { QB_AVX2 };
        let mut i = 0;
        while i < m {
            let n = (m - i).min(qb);
            let (qp, pp, op) = (
                q.as_ptr().add(i * HEAD),
                p.as_mut_ptr().add(i * t),
                out.as_mut_ptr().add(i * HEAD),
            );
            if avx512 {
                block_avx512::<I8>(n, qp, kb, v, t, pp, op);
            } else {
                block_avx2::<I8>(n, qp, kb, v, t, pp, op);
            }
            i += n;
        }
    }

    /// `n` ≤ [`QB_AVX512`] queries: scores, softmax, and `p·v`, each widened vector serving all.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn block_avx512<const I8: bool>(
        n: usize,
        qp: *const f32,
        kb: *const u8,
        v: *const u8,
        t: usize,
        pp: *mut f32,
        op: *mut f32,
    ) {
        match n {
            5 => scores_avx512::<I8, 5>(qp, kb, t, pp),
            4 => scores_avx512::<I8, 4>(qp, kb, t, pp),
            3 => scores_avx512::<I8, 3>(qp, kb, t, pp),
            2 => scores_avx512::<I8, 2>(qp, kb, t, pp),
            _ => scores_avx512::<I8, 1>(qp, kb, t, pp),
        }
        for r in 0..n {
            softmax_in_place::<true>(std::slice::from_raw_parts_mut(pp.add(r * t), t));
        }
        match n {
            5 => pv_avx512::<I8, 5>(pp, v, t, op),
            4 => pv_avx512::<I8, 4>(pp, v, t, op),
            3 => pv_avx512::<I8, 3>(pp, v, t, op),
            2 => pv_avx512::<I8, 2>(pp, v, t, op),
            _ => pv_avx512::<I8, 1>(pp, v, t, op),
        }
    }

    /// Scores of `N` queries (rows of 64 at `q`) over all `t` keys, into rows of `t` at `p`.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn scores_avx512<const I8: bool, const N: usize>(
        q: *const f32,
        kb: *const u8,
        t: usize,
        p: *mut f32,
    ) {
        for b in 0..t.div_ceil(KEY_BLOCK) {
            let block = b * KEY_BLOCK * HEAD;
            let mut acc = [_mm512_setzero_ps(); N];
            for c in 0..HEAD {
                let k = load16::<I8>(kb, block + c * KEY_BLOCK);
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(_mm512_set1_ps(*q.add(r * HEAD + c)), k, *a);
                }
            }
            let live = (t - b * KEY_BLOCK).min(KEY_BLOCK);
            let mask: __mmask16 = if live == KEY_BLOCK {
                0xFFFF
            } else {
                (1u16 << live) - 1
            };
            for (r, a) in acc.iter().enumerate() {
                _mm512_mask_storeu_ps(p.add(r * t + b * KEY_BLOCK), mask, *a);
            }
        }
    }

    /// out rows (64 at `out`) of `N` queries = their probability rows (`t` at `p`) · v.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn pv_avx512<const I8: bool, const N: usize>(
        p: *const f32,
        v: *const u8,
        t: usize,
        out: *mut f32,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 4]; N];
        for j in 0..t {
            let vv: [__m512; 4] = std::array::from_fn(|c| load16::<I8>(v, j * HEAD + 16 * c));
            for (r, a) in acc.iter_mut().enumerate() {
                let w = _mm512_set1_ps(*p.add(r * t + j));
                for c in 0..4 {
                    a[c] = _mm512_fmadd_ps(w, vv[c], a[c]);
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            for (c, x) in a.iter().enumerate() {
                _mm512_storeu_ps(out.add(r * HEAD + 16 * c), *x);
            }
        }
    }

    /// [`block_avx512`] on AVX2: scores for the block, `p·v` query by query.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn block_avx2<const I8: bool>(
        n: usize,
        qp: *const f32,
        kb: *const u8,
        v: *const u8,
        t: usize,
        pp: *mut f32,
        op: *mut f32,
    ) {
        match n {
            4 => scores_avx2::<I8, 4>(qp, kb, t, pp),
            3 => scores_avx2::<I8, 3>(qp, kb, t, pp),
            2 => scores_avx2::<I8, 2>(qp, kb, t, pp),
            _ => scores_avx2::<I8, 1>(qp, kb, t, pp),
        }
        for r in 0..n {
            softmax_in_place::<true>(std::slice::from_raw_parts_mut(pp.add(r * t), t));
            pv_avx2::<I8>(pp.add(r * t), v, t, op.add(r * HEAD));
        }
    }

    /// [`scores_avx512`] on 8-lane vectors: each block is two halves of 8 keys.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scores_avx2<const I8: bool, const N: usize>(
        q: *const f32,
        kb: *const u8,
        t: usize,
        p: *mut f32,
    ) {
        let mut tail = [0f32; KEY_BLOCK];
        for b in 0..t.div_ceil(KEY_BLOCK) {
            let block = b * KEY_BLOCK * HEAD;
            let mut acc = [[_mm256_setzero_ps(); 2]; N];
            for c in 0..HEAD {
                let lo = load8::<I8>(kb, block + c * KEY_BLOCK);
                let hi = load8::<I8>(kb, block + c * KEY_BLOCK + 8);
                for (r, a) in acc.iter_mut().enumerate() {
                    let w = _mm256_set1_ps(*q.add(r * HEAD + c));
                    a[0] = _mm256_fmadd_ps(w, lo, a[0]);
                    a[1] = _mm256_fmadd_ps(w, hi, a[1]);
                }
            }
            let live = (t - b * KEY_BLOCK).min(KEY_BLOCK);
            for (r, a) in acc.iter().enumerate() {
                let dst = p.add(r * t + b * KEY_BLOCK);
                if live == KEY_BLOCK {
                    _mm256_storeu_ps(dst, a[0]);
                    _mm256_storeu_ps(dst.add(8), a[1]);
                } else {
                    _mm256_storeu_ps(tail.as_mut_ptr(), a[0]);
                    _mm256_storeu_ps(tail.as_mut_ptr().add(8), a[1]);
                    std::ptr::copy_nonoverlapping(tail.as_ptr(), dst, live);
                }
            }
        }
    }

    /// One query's output row (64 at `out`) = its probability row (`t` at `p`) · v.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pv_avx2<const I8: bool>(p: *const f32, v: *const u8, t: usize, out: *mut f32) {
        let mut acc = [_mm256_setzero_ps(); 8];
        for j in 0..t {
            let w = _mm256_set1_ps(*p.add(j));
            for (c, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(w, load8::<I8>(v, j * HEAD + 8 * c), *a);
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.add(8 * c), *a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked<E: Copy + Default>(k: &[E], t: usize, d: usize) -> Vec<E> {
        let mut kb = vec![E::default(); blocked_len(t, d)];
        for (j, key) in k.chunks_exact(d).enumerate() {
            put_key(&mut kb, j, key);
        }
        kb
    }

    /// f64 attention: q [M, D] over keys and values [T, D] → out [M, D].
    fn reference(q: &[f32], k: &[f64], v: &[f64], t: usize, d: usize) -> Vec<f64> {
        let m = q.len() / d;
        let mut want = vec![0f64; m * d];
        for i in 0..m {
            let s: Vec<f64> = (0..t)
                .map(|j| (0..d).map(|c| q[i * d + c] as f64 * k[j * d + c]).sum())
                .collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|x| (x - mx).exp()).sum();
            for c in 0..d {
                want[i * d + c] = (0..t).map(|j| (s[j] - mx).exp() / z * v[j * d + c]).sum();
            }
        }
        want
    }

    /// For f16 and for int8 storage, every level is within rounding of f64 attention over the
    /// values the storage holds (int8: integers times their channel's scale), and each query
    /// gets the same bits alone as among others (any number of queries, any block of up to
    /// five).
    #[test]
    fn every_level_matches_f64_and_a_query_is_the_same_alone() {
        for &(m, t, d) in &[
            (1, 1, 64),
            (1, 37, 64),
            (5, 300, 64),
            (7, 1500, 64),
            (11, 70, 64),
            (2, 50, 20),
            (3, 64, 128),
        ] {
            // Channels of different ranges, so that the int8 scales differ.
            let val =
                |i: usize, s: f32| (i as f32 * 0.618 + s).sin() * (1.0 + (i % d) as f32 * 0.05);
            let q: Vec<f32> = (0..m * d).map(|i| val(i, 0.1)).collect();
            let kf: Vec<f32> = (0..t * d).map(|i| val(i, 0.7)).collect();
            let vf: Vec<f32> = (0..t * d).map(|i| val(i, 1.3)).collect();
            // f16.
            let k16: Vec<f16> = kf.iter().map(|&x| f16::from_f32(x)).collect();
            let v16: Vec<f16> = vf.iter().map(|&x| f16::from_f32(x)).collect();
            let kb16 = blocked(&k16, t, d);
            let want16 = reference(
                &q,
                &k16.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
                &v16.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
                t,
                d,
            );
            // int8, per channel.
            let (mut ks, mut vs) = (vec![0f32; d], vec![0f32; d]);
            let (mut k8, mut v8) = (vec![0i8; t * d], vec![0i8; t * d]);
            fn rows(x: &[f32], j: usize, d: usize) -> &[f32] {
                &x[j * d..(j + 1) * d]
            }
            quantize_channels(
                t,
                d,
                |j| rows(&kf, j, d),
                &mut ks,
                |j, q| k8[j * d..(j + 1) * d].copy_from_slice(q),
            );
            quantize_channels(
                t,
                d,
                |j| rows(&vf, j, d),
                &mut vs,
                |j, q| v8[j * d..(j + 1) * d].copy_from_slice(q),
            );
            let deq = |x: &[i8], s: &[f32]| -> Vec<f64> {
                x.iter()
                    .enumerate()
                    .map(|(i, &e)| e as f64 * s[i % d] as f64)
                    .collect()
            };
            let (kd, vd) = (deq(&k8, &ks), deq(&v8, &vs));
            // Quantization keeps each value within half a step of its channel.
            for (x, (y, s)) in kf.iter().zip(kd.iter().zip(ks.iter().cycle())) {
                assert!((*x as f64 - y).abs() <= *s as f64 * 0.5 + 1e-6, "{x} → {y}");
            }
            let want8 = reference(&q, &kd, &vd, t, d);
            let kb8 = blocked(&k8, t, d);
            let cases = [
                (HeadKv::F16 { k: &kb16, v: &v16 }, &want16, "f16"),
                (
                    HeadKv::I8 {
                        k: &kb8,
                        v: &v8,
                        ks: &ks,
                        vs: &vs,
                    },
                    &want8,
                    "int8",
                ),
            ];
            for (kv, want, name) in cases {
                for &level in Level::available() {
                    let (mut p, mut out) = (vec![0f32; m * t], vec![0f32; m * d]);
                    attend_head_lowp(level, &q, kv, t, d, &mut p, &mut out);
                    let err = out
                        .iter()
                        .zip(want.iter())
                        .map(|(g, w)| (*g as f64 - w).abs())
                        .fold(0f64, f64::max);
                    assert!(err < 1e-4, "{name} {level:?} {m}x{t}x{d}: max error {err}");
                    let psum: f32 = p[..t].iter().sum();
                    assert!(
                        (psum - 1.0).abs() < 1e-5,
                        "{name} {level:?}: probabilities sum to {psum}"
                    );
                    for i in 0..m {
                        let (mut p1, mut o1) = (vec![0f32; t], vec![0f32; d]);
                        let qi = &q[i * d..(i + 1) * d];
                        attend_head_lowp(level, qi, kv, t, d, &mut p1, &mut o1);
                        assert_eq!(
                            o1,
                            out[i * d..(i + 1) * d],
                            "{name} {level:?} {m}x{t}x{d} query {i}"
                        );
                        assert_eq!(
                            p1,
                            p[i * t..(i + 1) * t],
                            "{name} {level:?} query {i} probabilities"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_channel_of_zeros_quantizes_to_zeros() {
        // Channel 0 is all zeros; channel 1 spans ±2 (1.0 and 0.5 are 63.5 and 31.75 steps:
        // half to even).
        let x = [0.0f32, 1.0, 0.0, -2.0, 0.0, 0.5];
        let mut s = [1f32; 2];
        let mut q = [9i8; 6];
        quantize_channels(
            3,
            2,
            |j| &x[j * 2..j * 2 + 2],
            &mut s,
            |j, v| q[j * 2..j * 2 + 2].copy_from_slice(v),
        );
        assert_eq!(s, [0.0, 2.0 / 127.0]);
        assert_eq!(q, [0, 64, 0, -127, 0, 32]);
    }
}
