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
//! Not wired into the Whisper encoder yet. With it, tiny.en int8 was 1.29× faster on the dev
//! set (whole process per item) at WER 18.71% (18.91% without), but the bench's `short` clips
//! at `--temperature 0 --no-condition-on-previous-text` ran for over 300 s against 90 s
//! without it: some clip decodes into a far longer loop, not yet found (docs/benchmarks.md,
//! session 16). Find that before turning it on.

use super::{quantize_rows, tile_at, Level, PackedI8, MR, NR, PANEL};
use crate::kernels::attention::{softmax_at, HeadsView};
use crate::kernels::tile::{fma_tile, Level as F32Level, OutPtr, TileArgs, NC};
use rayon::prelude::*;

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
    let (n, h, t, dh) = dims;
    assert!(
        Level::available().contains(&level),
        "this CPU cannot run {level:?}"
    );
    assert_eq!(out.len(), n * t * h * dh, "output is not [N, T, H·Dh]");
    if out.is_empty() {
        return;
    }
    for (x, name) in [(&q, "q"), (&k, "k"), (&v, "v")] {
        let last = x.offset + (n - 1) * x.seq + (h - 1) * x.head + (t - 1) * x.row + dh;
        assert!(last <= x.data.len(), "{name} view out of bounds");
    }
    // The same split as the f32 kernel: a few tasks per thread, each packing its head's k and v.
    let blocks = t.div_ceil(MR);
    let want = 4 * rayon::current_num_threads();
    let parts = want.div_ceil(n * h).clamp(1, blocks);
    let per_part = blocks.div_ceil(parts) * MR;
    let ptr = OutPtr(out.as_mut_ptr());
    (0..n * h * parts).into_par_iter().for_each(|task| {
        let (nh, part) = (task / parts, task % parts);
        let (seq, head) = (nh / h, nh % h);
        let q0 = part * per_part;
        if q0 < t {
            let q1 = (q0 + per_part).min(t);
            attend_range(
                level,
                [&q, &k, &v],
                (seq, head, q0, q1),
                (h, t, dh),
                ptr.get(),
            );
        }
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
    fn at<'a>(x: &HeadsView<'a>, seq: usize, head: usize, j: usize, dh: usize) -> &'a [f32] {
        let s = x.offset + seq * x.seq + head * x.head + j * x.row;
        &x.data[s..s + dh]
    }
    // k [T, Dh] per key row, for the byte tiles; V [T][dhp] for the f32 tiles, zero-padded to
    // whole tiles.
    let dhp = dh.next_multiple_of(NC);
    let mut kf = Vec::with_capacity(t * dh);
    let mut vp = vec![0f32; t * dhp];
    for j in 0..t {
        kf.extend_from_slice(at(k, seq, head, j, dh));
        vp[j * dhp..j * dhp + dh].copy_from_slice(at(v, seq, head, j, dh));
    }
    let pk = PackedI8::quantize(&kf, t, dh);
    let tp = pk.n_pad;
    let f32_level = F32Level::best();
    let mut qb = vec![0f32; MR * dh];
    let mut s = vec![0f32; MR * tp];
    let mut o = [0f32; MR * NC];
    let mut tile = [[0i32; NR]; MR];
    for i0 in (q0..q1).step_by(MR) {
        let rows = MR.min(q1 - i0);
        for r in 0..rows {
            qb[r * dh..(r + 1) * dh].copy_from_slice(at(q, seq, head, i0 + r, dh));
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
        for r in 0..rows {
            softmax_at(f32_level, &mut s[r * tp..r * tp + t]);
        }
        // The tile reads keys `..t` only; rows past `rows` hold stale finite values and their
        // outputs are dropped.
        for c0 in (0..dh).step_by(NC) {
            fma_tile(
                f32_level,
                TileArgs {
                    a: &s,
                    a_stride: tp,
                    rows: MR,
                    k: t,
                    b: &vp[c0..],
                    b_stride: dhp,
                    out: &mut o,
                    out_stride: NC,
                },
            );
            let cols = NC.min(dh - c0);
            for (r, orow) in o.chunks_exact(NC).enumerate().take(rows) {
                let at = ((seq * t + i0 + r) * h + head) * dh + c0;
                // SAFETY: `at..at + cols` lies inside `out` ([N, T, H·Dh], checked by the caller)
                // and belongs to this task alone (its sequence, head and query rows).
                unsafe { std::ptr::copy_nonoverlapping(orow.as_ptr(), out.add(at), cols) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::attention::{self_attention_at, Level as F32Level};

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn view(x: &[f32], (_, h, t, dh): (usize, usize, usize, usize)) -> HeadsView<'_> {
        HeadsView {
            data: x,
            offset: 0,
            seq: h * t * dh,
            head: t * dh,
            row: dh,
        }
    }

    /// Every byte level gives the same bits, within quantization error of the f32 kernel on odd
    /// shapes (rows not a multiple of 8, keys not of 32, head sizes not of 16), with scores of
    /// a few units as trained attention has.
    #[test]
    fn every_level_gives_the_same_bits_near_float32() {
        for &(n, h, t, dh) in &[
            (1, 1, 1, 1),
            (1, 2, 7, 64),
            (2, 3, 33, 36),
            (1, 6, 150, 64),
            (2, 1, 41, 20),
            (1, 2, 9, 80),
        ] {
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
                let mut got = vec![f32::NAN; len];
                self_attention_i8_at(
                    level,
                    view(&q, dims),
                    view(&k, dims),
                    view(&v, dims),
                    dims,
                    &mut got,
                );
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
            let mut got = vec![0f32; len];
            self_attention_i8_at(
                level,
                view(&q, dims),
                view(&k, dims),
                view(&v, dims),
                dims,
                &mut got,
            );
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
