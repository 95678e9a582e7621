//! Encoder self-attention for the int8 compute type: the same `softmax(q·kᵀ)·v` per head as
//! [`crate::kernels::attention::self_attention`], with the scores on the `vpdpbusd` tiles of
//! the linear layers.
//!
//! In float32 the two products of attention are about 40% of an int8 encoder's time (T² · Dh
//! multiply-adds per head each, against T · d² for a linear layer); a byte dot product does 4
//! multiply-adds per lane where an FMA does 1. The scores quantize well: q rows are quantized
//! per row (shifted to `u8`, as the linear layers' activations) and k per key row
//! (`PackedI8`, i.e. per "output channel"), so `s = (Σ q·k − comp) · s_q · s_k` exactly as in
//! [`super::matmul_i8`]. The probabilities do not: a row spreads over up to 1500 keys, and in
//! bytes every weight under 1/510 of the largest rounds to zero, which changed transcripts, so
//! the softmax and `p·v` stay in float32 (the f32 kernel's tiles).
//!
//! Integer sums are exact and the float32 part runs at the CPU's best f32 level whatever the
//! byte level, so every [`Level`] gives the same bits (tested).
//!
//! The Whisper encoder uses it for the int8 compute type on the CPU. tiny.en dev set (whole
//! process per item): WER 18.71% against 18.91% with float32 scores, 1.29× faster; base
//! (en/es/sv): 19.04% against float32's 19.54% (docs/benchmarks.md, sessions 16–17).

use super::{quantize_rows, tile_at, Level, PackedI8, MR, NR, PANEL};
use crate::kernels::attention::{pack_v, softmax_times_v, split_heads, HeadsView};
use crate::kernels::tile::Level as F32Level;

/// [`crate::kernels::attention::self_attention_at`] with int8 products at byte-kernel `level`
/// (which the CPU must support): q, k, v [N, H, T, Dh] views (q already scaled) → `out`
/// [N, T, H·Dh].
///
/// # Panics
/// When `level` is not in [`Level::available`] or a view is too short for `dims`.
pub fn self_attention_i8_at(
    level: Level,
    q: HeadsView,
    k: HeadsView,
    v: HeadsView,
    dims: (usize, usize, usize, usize),
    out: &mut [f32],
) {
    assert!(
        Level::available().contains(&level),
        "this CPU cannot run {level:?}"
    );
    let (_, h, t, dh) = dims;
    split_heads(&[&q, &k, &v], dims, out, |seq, head, q0, q1, out| {
        attend_range(level, [&q, &k, &v], (seq, head, q0, q1), (h, t, dh), out)
    });
}

/// One head of one sequence, queries `q0..q1`; writes `out[seq, q, head·Dh..]`.
fn attend_range(
    level: Level,
    [q, k, v]: [&HeadsView; 3],
    (seq, head, q0, q1): (usize, usize, usize, usize),
    (h, t, dh): (usize, usize, usize),
    out: *mut f32,
) {
    // k [T, Dh] per key row, for the byte tiles.
    let mut kf = Vec::with_capacity(t * dh);
    for j in 0..t {
        kf.extend_from_slice(&k.at(seq, head, j)[..dh]);
    }
    let vp = pack_v(v, seq, head, t, dh);
    let pk = PackedI8::quantize(&kf, t, dh);
    let tp = pk.n_pad;
    let f32_level = F32Level::best();
    let mut qb = vec![0f32; MR * dh];
    let mut s = vec![0f32; MR * tp];
    let mut tile = [[0i32; NR]; MR];
    for i0 in (q0..q1).step_by(MR) {
        let rows = MR.min(q1 - i0);
        for r in 0..rows {
            qb[r * dh..(r + 1) * dh].copy_from_slice(&q.at(seq, head, i0 + r)[..dh]);
        }
        let (a, sa) = quantize_rows(&qb[..rows * dh], rows, dh, pk.k4);
        for pair in 0..tp / NR {
            let p = 2 * pair;
            tile_at(level, &a, &pk, p, &mut tile);
            let c0 = p * PANEL;
            let (comp, scales) = (&pk.comp[c0..c0 + NR], &pk.scales[c0..c0 + NR]);
            for (r, acc) in tile.iter().enumerate().take(rows) {
                let o = &mut s[r * tp + c0..r * tp + c0 + NR];
                for j in 0..NR {
                    o[j] = (acc[j] - comp[j]) as f32 * (sa[r] * scales[j]);
                }
            }
        }
        softmax_times_v(
            f32_level,
            &mut s,
            rows,
            &vp,
            (seq, head, i0),
            (h, t, dh),
            out,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::attention::tests::{contiguous as view, values, ODD_SHAPES};
    use crate::kernels::attention::{self_attention_at, Level as F32Level};

    /// [`self_attention_i8_at`] on contiguous q, k, v at `level`.
    fn attend(
        level: Level,
        [q, k, v]: [&[f32]; 3],
        dims: (usize, usize, usize, usize),
    ) -> Vec<f32> {
        let mut out = vec![f32::NAN; q.len()];
        self_attention_i8_at(
            level,
            view(q, dims),
            view(k, dims),
            view(v, dims),
            dims,
            &mut out,
        );
        out
    }

    /// Every byte level gives the same bits, within quantization error of the f32 kernel on odd
    /// shapes, with scores of a few units as trained attention has.
    #[test]
    fn every_level_gives_the_same_bits_near_float32() {
        for &(n, h, t, dh) in ODD_SHAPES {
            let dims = (n, h, t, dh);
            let len = n * h * t * dh;
            let q: Vec<f32> = values(len, 11).iter().map(|x| x * 3.0).collect();
            let (k, v) = (values(len, 12), values(len, 13));
            let mut want = vec![0f32; len];
            self_attention_at(
                F32Level::best(),
                view(&q, dims),
                view(&k, dims),
                view(&v, dims),
                dims,
                &mut want,
            );
            let mut first: Option<Vec<f32>> = None;
            for &level in Level::available() {
                let got = attend(level, [&q, &k, &v], dims);
                let (mut max, mut sum) = (0f32, 0f64);
                for (g, w) in got.iter().zip(&want) {
                    let e = (g - w).abs();
                    assert!(e.is_finite(), "{level:?} {dims:?}: {g} vs {w}");
                    max = max.max(e);
                    sum += e as f64;
                }
                let mean = sum / len as f64;
                // |v| < 1: under 1% of the value range on average; at worst ≈ 8% where two
                // keys nearly tie in a softmax this peaked (score std ≈ 8) and rounding shifts
                // weight between them. A mixed-up row, key or head is off by ≈ 0.5.
                assert!(
                    max < 0.1 && mean < 0.01,
                    "{level:?} {dims:?}: max error {max}, mean {mean}"
                );
                match &first {
                    None => first = Some(got),
                    Some(f) => assert!(
                        f.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{level:?} {dims:?} differs from {:?}",
                        Level::available()[0]
                    ),
                }
            }
        }
    }

    /// A key that dominates one query's scores gets (nearly) all of its weight: the output is
    /// that key's value within its quantization step, so rows, keys and heads are not mixed up.
    #[test]
    fn a_dominant_key_passes_its_value_through() {
        let dims @ (n, h, t, dh) = (2, 3, 45, 24);
        let len = n * h * t * dh;
        let k = values(len, 21);
        let v = values(len, 22);
        let mut q = vec![0f32; len];
        // Query i of head b attends to key (7·i + b) mod T: q = 40 · that key.
        for a in 0..n {
            for b in 0..h {
                for i in 0..t {
                    let j = (7 * i + b) % t;
                    for d in 0..dh {
                        q[((a * h + b) * t + i) * dh + d] =
                            40.0 * k[((a * h + b) * t + j) * dh + d];
                    }
                }
            }
        }
        for &level in Level::available() {
            let got = attend(level, [&q, &k, &v], dims);
            for a in 0..n {
                for b in 0..h {
                    for i in 0..t {
                        let j = (7 * i + b) % t;
                        for d in 0..dh {
                            let g = got[((a * t + i) * h + b) * dh + d];
                            let w = v[((a * h + b) * t + j) * dh + d];
                            assert!(
                                (g - w).abs() < 0.02,
                                "{level:?} ({a},{b},{i},{d}): {g} vs {w}"
                            );
                        }
                    }
                }
            }
        }
    }
}
