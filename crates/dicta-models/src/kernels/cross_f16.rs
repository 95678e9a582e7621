//! The few-query attention of [`super::attend_few_queries`] over f16 keys and values.
//!
//! A decoder step's cross-attention reads every key and value of its window (tiny.en: 4 layers
//! × 2 × 1500 × 384, 18 MB in f32 per row), once per token, so at batch 8 it is bound by memory
//! bandwidth. The int8 compute type stores them in f16 (10 mantissa bits, far finer than the
//! int8 activations around them), which halves that traffic; values are widened to f32 in
//! registers and every sum is f32.

use super::attention::Level;
use super::softmax_in_place;
use half::f16;

/// One (batch, head): q [M, D] f32, k and v [T, D] f16 → probabilities [M, T] in `p` and
/// out [M, D].
pub(super) fn attend_head_f16(
    level: Level,
    q: &[f32],
    k: &[f16],
    v: &[f16],
    d: usize,
    p: &mut [f32],
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if level == Level::Avx512 && d.is_multiple_of(16) && d <= 16 * MAX_VECS {
        // SAFETY: the caller checked the level against the CPU's features.
        return unsafe { attend_avx512(q, k, v, d, p, out) };
    }
    let _ = level;
    attend_portable(q, k, v, d, p, out)
}

/// Widest head (in 16-lane vectors) of the AVX-512 kernel: 128 dims.
const MAX_VECS: usize = 8;

fn attend_portable(q: &[f32], k: &[f16], v: &[f16], d: usize, p: &mut [f32], out: &mut [f32]) {
    let (m, t) = (q.len() / d, k.len() / d);
    let mut row = vec![0f32; d];
    for j in 0..t {
        for (r, x) in row.iter_mut().zip(&k[j * d..(j + 1) * d]) {
            *r = x.to_f32();
        }
        for i in 0..m {
            p[i * t + j] = q[i * d..(i + 1) * d]
                .iter()
                .zip(&row)
                .map(|(a, b)| a * b)
                .sum();
        }
    }
    for r in p.chunks_exact_mut(t) {
        softmax_in_place::<false>(r);
    }
    out.fill(0.0);
    for j in 0..t {
        for (r, x) in row.iter_mut().zip(&v[j * d..(j + 1) * d]) {
            *r = x.to_f32();
        }
        for i in 0..m {
            let w = p[i * t + j];
            for (o, x) in out[i * d..(i + 1) * d].iter_mut().zip(&row) {
                *o += w * x;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn attend_avx512(q: &[f32], k: &[f16], v: &[f16], d: usize, p: &mut [f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let (m, t) = (q.len() / d, k.len() / d);
    let nv = d / 16;
    assert!(v.len() >= t * d && p.len() >= m * t && out.len() >= m * d && nv <= MAX_VECS);
    let (kp, vp) = (k.as_ptr() as *const u16, v.as_ptr() as *const u16);
    let widen = |ptr: *const u16| _mm512_cvtph_ps(_mm256_loadu_si256(ptr as *const __m256i));
    for j in 0..t {
        let mut kv = [_mm512_setzero_ps(); MAX_VECS];
        for (c, x) in kv.iter_mut().enumerate().take(nv) {
            // SAFETY: key row j holds d = 16·nv values (asserted through k.len() / d).
            *x = widen(kp.add(j * d + 16 * c));
        }
        for i in 0..m {
            let mut acc = _mm512_setzero_ps();
            for (c, x) in kv.iter().enumerate().take(nv) {
                // SAFETY: query row i holds d values.
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(q.as_ptr().add(i * d + 16 * c)), *x, acc);
            }
            p[i * t + j] = _mm512_reduce_add_ps(acc);
        }
    }
    for r in p.chunks_exact_mut(t).take(m) {
        softmax_in_place::<true>(r);
    }
    // Query-major: the head's values (t·d f16) stay in L2 after the first query.
    for i in 0..m {
        let mut acc = [_mm512_setzero_ps(); MAX_VECS];
        for j in 0..t {
            let w = _mm512_set1_ps(p[i * t + j]);
            for (c, a) in acc.iter_mut().enumerate().take(nv) {
                // SAFETY: value row j holds d values (asserted).
                *a = _mm512_fmadd_ps(w, widen(vp.add(j * d + 16 * c)), *a);
            }
        }
        for (c, a) in acc.iter().enumerate().take(nv) {
            // SAFETY: output row i holds d values (asserted).
            _mm512_storeu_ps(out.as_mut_ptr().add(i * d + 16 * c), *a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_matches_f32_attention_over_the_same_f16_values() {
        for &(m, t, d) in &[
            (1, 1, 16),
            (1, 37, 64),
            (5, 300, 64),
            (2, 50, 20),
            (3, 64, 128),
        ] {
            let val = |i: usize, s: f32| (i as f32 * 0.618 + s).sin() * 2.0;
            let q: Vec<f32> = (0..m * d).map(|i| val(i, 0.1)).collect();
            let k: Vec<f16> = (0..t * d).map(|i| f16::from_f32(val(i, 0.7))).collect();
            let v: Vec<f16> = (0..t * d).map(|i| f16::from_f32(val(i, 1.3))).collect();
            // Reference in f64 over the widened values.
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
                attend_head_f16(level, &q, &k, &v, d, &mut p, &mut out);
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
            }
        }
    }
}
