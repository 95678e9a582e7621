//! The decoder's cross-attention over f16 keys and values ([`super::attend_cross_f16`]).
//!
//! A decoder step's cross-attention reads every key and value of its window (tiny.en: 4 layers
//! × 2 × 1500 × 384, 18 MB in f32 per row), once per token, so it is bound by memory
//! bandwidth. The int8 compute type stores them in f16 (10 mantissa bits, far finer than the
//! int8 activations around them), which halves that traffic; values are widened to f32 in
//! registers and every sum is f32.
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

/// f16 values of one head's blocked keys: `t` keys of `d` dims, the last block zero-padded.
pub fn blocked_len(t: usize, d: usize) -> usize {
    t.div_ceil(KEY_BLOCK) * KEY_BLOCK * d
}

/// Where key `j`, dimension `c` lies in one head's blocked keys of `d` dims.
pub fn blocked_index(j: usize, c: usize, d: usize) -> usize {
    (j / KEY_BLOCK) * KEY_BLOCK * d + c * KEY_BLOCK + j % KEY_BLOCK
}

/// Writes key `j` (`key`: its `d` dims) into one head's blocked keys `head`.
pub fn put_key(head: &mut [f16], j: usize, key: &[f16]) {
    let d = key.len();
    for (c, &x) in key.iter().enumerate() {
        head[blocked_index(j, c, d)] = x;
    }
}

/// One (batch, head): q [M, D] f32, blocked keys ([`blocked_len`]`(T, D)` f16) and v [T, D]
/// f16 → probabilities [M, T] in `p` and out [M, D].
#[allow(clippy::too_many_arguments)]
pub(super) fn attend_head_f16(
    level: Level,
    q: &[f32],
    kb: &[f16],
    v: &[f16],
    t: usize,
    d: usize,
    p: &mut [f32],
    out: &mut [f32],
) {
    let m = q.len() / d;
    assert!(
        kb.len() >= blocked_len(t, d) && v.len() >= t * d && p.len() >= m * t && out.len() >= m * d
    );
    #[cfg(target_arch = "x86_64")]
    if d == HEAD && is_x86_feature_detected!("f16c") {
        match level {
            // SAFETY: the caller checked the level against the CPU's features; sizes asserted.
            Level::Avx512 => return unsafe { x86::attend(true, q, kb, v, t, p, out) },
            // SAFETY: as above.
            Level::Avx2Fma => return unsafe { x86::attend(false, q, kb, v, t, p, out) },
            Level::Scalar => {}
        }
    }
    let _ = level;
    attend_portable(q, kb, v, t, d, p, out)
}

/// The head size of the vector kernels (every Whisper size has heads of 64).
const HEAD: usize = 64;

fn attend_portable(
    q: &[f32],
    kb: &[f16],
    v: &[f16],
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
                s += x * kb[blocked_index(j, c, d)].to_f32();
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
            for (o, x) in out[i * d..(i + 1) * d]
                .iter_mut()
                .zip(&v[j * d..(j + 1) * d])
            {
                *o += w * x.to_f32();
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{softmax_in_place, HEAD, KEY_BLOCK};
    use half::f16;
    use std::arch::x86_64::*;

    /// Queries per block on AVX-512: each widened key or value vector serves this many. Five, so
    /// that a beam of 5 (the default) reads its window's keys and values once per step, not
    /// twice; `p·v` then holds 5 × 4 accumulators and 4 value vectors in the 32 registers.
    const QB_AVX512: usize = 5;
    /// Queries per block on AVX2 (16 registers).
    const QB_AVX2: usize = 4;

    /// Runs the queries in blocks of up to [`QB_AVX512`] or [`QB_AVX2`] on AVX-512 (`avx512`) or
    /// AVX2 kernels.
    ///
    /// # Safety
    /// The CPU has the level's features (with F16C); `kb`, `v`, `p` and `out` hold the sizes
    /// [`super::attend_head_f16`] asserts.
    pub(super) unsafe fn attend(
        avx512: bool,
        q: &[f32],
        kb: &[f16],
        v: &[f16],
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
                block_avx512(n, qp, kb, v, t, pp, op);
            } else {
                block_avx2(n, qp, kb, v, t, pp, op);
            }
            i += n;
        }
    }

    /// `n` ≤ [`QB_AVX512`] queries: scores, softmax, and `p·v`, each widened vector serving all.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn block_avx512(
        n: usize,
        qp: *const f32,
        kb: &[f16],
        v: &[f16],
        t: usize,
        pp: *mut f32,
        op: *mut f32,
    ) {
        match n {
            5 => scores_avx512::<5>(qp, kb, t, pp),
            4 => scores_avx512::<4>(qp, kb, t, pp),
            3 => scores_avx512::<3>(qp, kb, t, pp),
            2 => scores_avx512::<2>(qp, kb, t, pp),
            _ => scores_avx512::<1>(qp, kb, t, pp),
        }
        for r in 0..n {
            softmax_in_place::<true>(std::slice::from_raw_parts_mut(pp.add(r * t), t));
        }
        match n {
            5 => pv_avx512::<5>(pp, v, t, op),
            4 => pv_avx512::<4>(pp, v, t, op),
            3 => pv_avx512::<3>(pp, v, t, op),
            2 => pv_avx512::<2>(pp, v, t, op),
            _ => pv_avx512::<1>(pp, v, t, op),
        }
    }

    /// Scores of `N` queries (rows of 64 at `q`) over all `t` keys, into rows of `t` at `p`.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn scores_avx512<const N: usize>(q: *const f32, kb: &[f16], t: usize, p: *mut f32) {
        let kp = kb.as_ptr() as *const u16;
        for b in 0..t.div_ceil(KEY_BLOCK) {
            let block = kp.add(b * KEY_BLOCK * HEAD);
            let mut acc = [_mm512_setzero_ps(); N];
            for c in 0..HEAD {
                let k = _mm512_cvtph_ps(_mm256_loadu_si256(block.add(c * KEY_BLOCK) as *const _));
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
    unsafe fn pv_avx512<const N: usize>(p: *const f32, v: &[f16], t: usize, out: *mut f32) {
        let vp = v.as_ptr() as *const u16;
        let mut acc = [[_mm512_setzero_ps(); 4]; N];
        for j in 0..t {
            let row = vp.add(j * HEAD);
            let vv: [__m512; 4] = std::array::from_fn(|c| {
                _mm512_cvtph_ps(_mm256_loadu_si256(row.add(16 * c) as *const _))
            });
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
    unsafe fn block_avx2(
        n: usize,
        qp: *const f32,
        kb: &[f16],
        v: &[f16],
        t: usize,
        pp: *mut f32,
        op: *mut f32,
    ) {
        match n {
            4 => scores_avx2::<4>(qp, kb, t, pp),
            3 => scores_avx2::<3>(qp, kb, t, pp),
            2 => scores_avx2::<2>(qp, kb, t, pp),
            _ => scores_avx2::<1>(qp, kb, t, pp),
        }
        for r in 0..n {
            softmax_in_place::<true>(std::slice::from_raw_parts_mut(pp.add(r * t), t));
            pv_avx2(pp.add(r * t), v, t, op.add(r * HEAD));
        }
    }

    /// [`scores_avx512`] on 8-lane vectors: each block is two halves of 8 keys.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scores_avx2<const N: usize>(q: *const f32, kb: &[f16], t: usize, p: *mut f32) {
        let kp = kb.as_ptr() as *const u16;
        let mut tail = [0f32; KEY_BLOCK];
        for b in 0..t.div_ceil(KEY_BLOCK) {
            let block = kp.add(b * KEY_BLOCK * HEAD);
            let mut acc = [[_mm256_setzero_ps(); 2]; N];
            for c in 0..HEAD {
                let lo = _mm256_cvtph_ps(_mm_loadu_si128(block.add(c * KEY_BLOCK) as *const _));
                let hi = _mm256_cvtph_ps(_mm_loadu_si128(block.add(c * KEY_BLOCK + 8) as *const _));
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
    unsafe fn pv_avx2(p: *const f32, v: &[f16], t: usize, out: *mut f32) {
        let vp = v.as_ptr() as *const u16;
        let mut acc = [_mm256_setzero_ps(); 8];
        for j in 0..t {
            let w = _mm256_set1_ps(*p.add(j));
            for (c, a) in acc.iter_mut().enumerate() {
                let x = _mm256_cvtph_ps(_mm_loadu_si128(vp.add(j * HEAD + 8 * c) as *const _));
                *a = _mm256_fmadd_ps(w, x, *a);
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

    fn blocked(k: &[f16], t: usize, d: usize) -> Vec<f16> {
        let mut kb = vec![f16::ZERO; blocked_len(t, d)];
        for (j, key) in k.chunks_exact(d).enumerate() {
            put_key(&mut kb, j, key);
        }
        kb
    }

    /// Every level within rounding of f64 attention over the same f16 values, and each query
    /// the same bits alone as among others (any number of queries, any block of up to five).
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
            let val = |i: usize, s: f32| (i as f32 * 0.618 + s).sin() * 2.0;
            let q: Vec<f32> = (0..m * d).map(|i| val(i, 0.1)).collect();
            let k: Vec<f16> = (0..t * d).map(|i| f16::from_f32(val(i, 0.7))).collect();
            let v: Vec<f16> = (0..t * d).map(|i| f16::from_f32(val(i, 1.3))).collect();
            let kb = blocked(&k, t, d);
            let mut want = vec![0f64; m * d];
            for i in 0..m {
                let s: Vec<f64> = (0..t)
                    .map(|j| {
                        (0..d)
                            .map(|c| q[i * d + c] as f64 * k[j * d + c].to_f64())
                            .sum()
                    })
                    .collect();
                let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = s.iter().map(|x| (x - mx).exp()).sum();
                for c in 0..d {
                    want[i * d + c] = (0..t)
                        .map(|j| (s[j] - mx).exp() / z * v[j * d + c].to_f64())
                        .sum();
                }
            }
            for &level in Level::available() {
                let (mut p, mut out) = (vec![0f32; m * t], vec![0f32; m * d]);
                attend_head_f16(level, &q, &kb, &v, t, d, &mut p, &mut out);
                let err = out
                    .iter()
                    .zip(&want)
                    .map(|(g, w)| (*g as f64 - w).abs())
                    .fold(0f64, f64::max);
                assert!(err < 1e-4, "{level:?} {m}x{t}x{d}: max error {err}");
                let psum: f32 = p[..t].iter().sum();
                assert!(
                    (psum - 1.0).abs() < 1e-5,
                    "{level:?}: probabilities sum to {psum}"
                );
                for i in 0..m {
                    let (mut p1, mut o1) = (vec![0f32; t], vec![0f32; d]);
                    let qi = &q[i * d..(i + 1) * d];
                    attend_head_f16(level, qi, &kb, &v, t, d, &mut p1, &mut o1);
                    assert_eq!(
                        o1,
                        out[i * d..(i + 1) * d],
                        "{level:?} {m}x{t}x{d} query {i}"
                    );
                    assert_eq!(
                        p1,
                        p[i * t..(i + 1) * t],
                        "{level:?} query {i} probabilities"
                    );
                }
            }
        }
    }
}
