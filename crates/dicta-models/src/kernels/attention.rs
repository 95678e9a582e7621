//! Fused self-attention of every frame over every frame, as in Whisper's and Moonshine's
//! encoders: `softmax(q·kᵀ)·v` per head without a score matrix in memory.
//!
//! Through candle this was two GEMM calls per head and query chunk around a softmax: the GEMM
//! packs K and V into its panels on every call, the [H, chunk, T] scores make a round trip
//! through memory, and the heads are copied into their own tensors and merged back. Here one
//! task packs a head's Kᵀ and V once (≈ 0.8 MB for 1500 frames × 64) and walks blocks of
//! [`MR`] queries: an `MR × NC` register tile of scores per step of the key loop, the softmax of
//! the block's rows while they are in cache, and an `MR × NC` tile of the output per step of the
//! value loop. q, k and v are read through their strides (so a view of a fused q/k/v projection
//! needs no copy) and the output is written with the heads merged.
//!
//! The tiles are [`super::tile`]'s, at its [`Level`]s (AVX-512F, AVX2+FMA, portable); the levels
//! differ from the two-GEMM path by float rounding only (the sums run in another order), and the
//! tests hold every level to an f64 reference.

use super::softmax_in_place;
use candle_core::{Storage, Tensor};
use rayon::prelude::*;

pub use super::tile::Level;
use super::tile::{fma_tile, OutPtr, TileArgs, MR, NC};

/// Where one of q, k, v lives: element `[n, h, t, d]` is `data[offset + n·seq + h·head + t·row + d]`.
#[derive(Debug, Clone, Copy)]
pub struct HeadsView<'a> {
    /// The storage the view reads.
    pub data: &'a [f32],
    /// Where element `[0, 0, 0, 0]` is.
    pub offset: usize,
    /// Stride between sequences (batch rows).
    pub seq: usize,
    /// Stride between heads.
    pub head: usize,
    /// Stride between frames.
    pub row: usize,
}

impl HeadsView<'_> {
    /// Row `t` of head `h` of sequence `n` (and everything after it in the storage).
    #[inline(always)]
    pub(super) fn at(&self, n: usize, h: usize, t: usize) -> &[f32] {
        let s = self.offset + n * self.seq + h * self.head + t * self.row;
        &self.data[s..]
    }
}

/// Self-attention with heads merged: q, k, v [N, H, T, Dh] (q already scaled; any strides with
/// the last dimension contiguous, e.g. views of a fused projection) → [N, T, H·Dh].
///
/// Non-CPU or non-f32 tensors take candle's matmul/softmax path.
pub fn self_attention(q: &Tensor, k: &Tensor, v: &Tensor) -> candle_core::Result<Tensor> {
    self_attention_with(q, k, v, false)
}

/// [`self_attention`] with the scores on the byte kernels ([`super::int8::attention`]) where
/// the CPU has them ([`super::int8::int8_fast`]), else the float32 kernel: the Whisper
/// encoder's attention for the int8 compute type.
pub fn self_attention_int8(q: &Tensor, k: &Tensor, v: &Tensor) -> candle_core::Result<Tensor> {
    self_attention_with(q, k, v, super::int8::int8_fast())
}

fn self_attention_with(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    int8: bool,
) -> candle_core::Result<Tensor> {
    let (n, h, t, dh) = q.dims4()?;
    if k.dims4()? != (n, h, t, dh) || v.dims4()? != (n, h, t, dh) {
        candle_core::bail!(
            "self_attention: q {:?}, k {:?}, v {:?}",
            q.dims(),
            k.dims(),
            v.dims()
        );
    }
    let fast = [q, k, v]
        .iter()
        .all(|x| super::fast_path(x) && x.stride()[3] == 1);
    if !fast || t == 0 || dh == 0 {
        let p = super::softmax_last_dim(&q.contiguous()?.matmul(&k.t()?.contiguous()?)?)?;
        let a = p.matmul(&v.contiguous()?)?;
        return a.transpose(1, 2)?.reshape((n, t, h * dh));
    }
    let (qs, ql) = q.storage_and_layout();
    let (ks, kl) = k.storage_and_layout();
    let (vs, vl) = v.storage_and_layout();
    let (qv, kv, vv) = (
        heads_view(&qs, ql)?,
        heads_view(&ks, kl)?,
        heads_view(&vs, vl)?,
    );
    let mut out = vec![0f32; n * t * h * dh];
    if int8 {
        let level = super::int8::Level::best();
        super::int8::attention::self_attention_i8_at(level, qv, kv, vv, (n, h, t, dh), &mut out);
    } else {
        self_attention_at(Level::best(), qv, kv, vv, (n, h, t, dh), &mut out);
    }
    Tensor::from_vec(out, (n, t, h * dh), q.device())
}

/// The view of a 4-d CPU f32 tensor's storage.
fn heads_view<'a>(s: &'a Storage, l: &candle_core::Layout) -> candle_core::Result<HeadsView<'a>> {
    let Storage::Cpu(candle_core::CpuStorage::F32(data)) = s else {
        candle_core::bail!("self_attention: f32 CPU tensors expected")
    };
    let st = l.stride();
    Ok(HeadsView {
        data,
        offset: l.start_offset(),
        seq: st[0],
        head: st[1],
        row: st[2],
    })
}

/// [`self_attention`] on raw views at a given level (which the CPU must support); `out` is
/// [N, T, H·Dh].
///
/// # Panics
/// When `level` is not in [`Level::available`] or a view is too short for `dims`.
pub fn self_attention_at(
    level: Level,
    q: HeadsView,
    k: HeadsView,
    v: HeadsView,
    dims: (usize, usize, usize, usize),
    out: &mut [f32],
) {
    assert!(Level::available().contains(&level), "{level:?} unsupported");
    let (_, h, t, dh) = dims;
    split_heads(&[&q, &k, &v], dims, out, |seq, head, q0, q1, out| {
        attend_range(level, &q, &k, &v, (seq, head, q0, q1), (h, t, dh), out)
    });
}

/// Checks the views and the output [N, T, H·Dh] against `dims`, then runs `task(seq, head, q0,
/// q1, out)` in parallel over every head of every sequence, each head's queries `q0..q1` in
/// whole blocks of [`MR`]. Each head's queries are split so that there are a few tasks per
/// thread (a batch of one window has only H heads); every task packs its head's K and V
/// again, which costs 2·T·Dh copies against T²·Dh/parts multiply-adds.
pub(super) fn split_heads(
    views: &[&HeadsView; 3],
    dims: (usize, usize, usize, usize),
    out: &mut [f32],
    task: impl Fn(usize, usize, usize, usize, *mut f32) + Sync,
) {
    split_heads_by(4, views, dims, out, task)
}

/// [`split_heads`] aiming at `per_thread` tasks per thread: fewer tasks pack each head's K and V
/// fewer times, more balance the threads better.
pub(super) fn split_heads_by(
    per_thread: usize,
    views: &[&HeadsView; 3],
    (n, h, t, dh): (usize, usize, usize, usize),
    out: &mut [f32],
    task: impl Fn(usize, usize, usize, usize, *mut f32) + Sync,
) {
    assert_eq!(out.len(), n * t * h * dh, "output is not [N, T, H·Dh]");
    if out.is_empty() {
        return;
    }
    for (x, name) in views.iter().zip(["q", "k", "v"]) {
        let last = x.offset + (n - 1) * x.seq + (h - 1) * x.head + (t - 1) * x.row + dh;
        assert!(last <= x.data.len(), "{name} view out of bounds");
    }
    let blocks = t.div_ceil(MR);
    let want = per_thread * rayon::current_num_threads();
    let parts = want.div_ceil(n * h).clamp(1, blocks);
    let per_part = blocks.div_ceil(parts) * MR;
    let ptr = OutPtr(out.as_mut_ptr());
    (0..n * h * parts).into_par_iter().for_each(|i| {
        let (nh, part) = (i / parts, i % parts);
        let q0 = part * per_part;
        if q0 < t {
            task(nh / h, nh % h, q0, (q0 + per_part).min(t), ptr.get());
        }
    });
}

/// One head of one sequence, queries `q0..q1`; writes `out[seq, q, head·Dh..]`.
fn attend_range(
    level: Level,
    q: &HeadsView,
    k: &HeadsView,
    v: &HeadsView,
    (seq, head, q0, q1): (usize, usize, usize, usize),
    (h, t, dh): (usize, usize, usize),
    out: *mut f32,
) {
    // Kᵀ [Dh][tp] and V [T][dhp], zero-padded to whole tiles.
    let tp = t.next_multiple_of(NC);
    let mut kt = vec![0f32; dh * tp];
    for j in 0..t {
        for (d, &x) in k.at(seq, head, j)[..dh].iter().enumerate() {
            kt[d * tp + j] = x;
        }
    }
    let vp = pack_v(v, seq, head, t, dh);
    let mut qb = vec![0f32; MR * dh];
    let mut s = vec![0f32; MR * tp];
    for i0 in (q0..q1).step_by(MR) {
        let rows = MR.min(q1 - i0);
        for r in 0..MR {
            let dst = &mut qb[r * dh..(r + 1) * dh];
            if r < rows {
                dst.copy_from_slice(&q.at(seq, head, i0 + r)[..dh]);
            } else {
                dst.fill(0.0);
            }
        }
        // Scores: the block's queries against NC keys of Kᵀ at a time.
        for j in (0..tp).step_by(NC) {
            fma_tile(
                level,
                TileArgs {
                    a: &qb,
                    a_stride: dh,
                    rows: MR,
                    k: dh,
                    b: &kt[j..],
                    b_stride: tp,
                    out: &mut s[j..],
                    out_stride: tp,
                },
            );
        }
        softmax_times_v(level, &mut s, rows, &vp, (seq, head, i0), (h, t, dh), out);
    }
}

/// V of one head [T][dhp] (dhp = Dh rounded up to [`NC`], zero-padded) for [`softmax_times_v`].
pub(super) fn pack_v(v: &HeadsView, seq: usize, head: usize, t: usize, dh: usize) -> Vec<f32> {
    let dhp = dh.next_multiple_of(NC);
    let mut vp = vec![0f32; t * dhp];
    for j in 0..t {
        vp[j * dhp..j * dhp + dh].copy_from_slice(&v.at(seq, head, j)[..dh]);
    }
    vp
}

/// The end of attention for one block of query rows `i0..i0 + rows` of (`seq`, `head`): the
/// softmax of their scores (`s`, [`MR`] rows of `s.len() / MR`, keys `..t`), then the
/// probabilities times V ([`pack_v`]), stored into `out` [N, T, H·Dh] with the heads merged.
/// Rows past `rows` may hold anything finite (their outputs are dropped).
pub(super) fn softmax_times_v(
    level: Level,
    s: &mut [f32],
    rows: usize,
    vp: &[f32],
    (seq, head, i0): (usize, usize, usize),
    (h, t, dh): (usize, usize, usize),
    out: *mut f32,
) {
    let tp = s.len() / MR;
    let dhp = dh.next_multiple_of(NC);
    let mut o = [0f32; MR * NC];
    for r in 0..rows {
        softmax_at(level, &mut s[r * tp..r * tp + t]);
    }
    // Output: the probabilities against NC value columns at a time.
    for c0 in (0..dh).step_by(NC) {
        fma_tile(
            level,
            TileArgs {
                a: s,
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
            // SAFETY: `at..at + cols` lies inside `out` ([N, T, H·Dh], checked by
            // `split_heads`) and belongs to this task alone (its sequence, head and query rows).
            unsafe { std::ptr::copy_nonoverlapping(orow.as_ptr(), out.add(at), cols) };
        }
    }
}

pub(super) fn softmax_at(level: Level, row: &mut [f32]) {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller checked the level against the CPU (AVX-512 CPUs have AVX2 and FMA).
        Level::Avx512 => unsafe { softmax_avx512(row) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Level::Avx2Fma => unsafe { super::math::softmax_row_avx2(row) },
        _ => softmax_in_place::<false>(row),
    }
}

/// The same code as [`super::math::softmax_row_avx2`], given 512-bit registers: every element
/// sees the same operations (the partial sums keep their eight lanes), so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn softmax_avx512(row: &mut [f32]) {
    softmax_in_place::<true>(row)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use candle_core::{Device, IndexOp};

    /// Deterministic values in [-1, 1) (SplitMix64).
    pub(crate) fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// softmax(q·kᵀ)·v in f64, heads merged: q, k, v [N, H, T, Dh] contiguous → [N, T, H·Dh].
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        (n, h, t, dh): (usize, usize, usize, usize),
    ) -> Vec<f64> {
        let mut out = vec![0f64; n * t * h * dh];
        let at = |x: &[f32], a: usize, b: usize, i: usize, d: usize| {
            x[((a * h + b) * t + i) * dh + d] as f64
        };
        for a in 0..n {
            for b in 0..h {
                for i in 0..t {
                    let s: Vec<f64> = (0..t)
                        .map(|j| (0..dh).map(|d| at(q, a, b, i, d) * at(k, a, b, j, d)).sum())
                        .collect();
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for d in 0..dh {
                        let o: f64 = (0..t).map(|j| e[j] / z * at(v, a, b, j, d)).sum();
                        out[((a * t + i) * h + b) * dh + d] = o;
                    }
                }
            }
        }
        out
    }

    /// A view of contiguous q, k or v [N, H, T, Dh].
    pub(crate) fn contiguous<'a>(
        x: &'a [f32],
        (_, h, t, dh): (usize, usize, usize, usize),
    ) -> HeadsView<'a> {
        HeadsView {
            data: x,
            offset: 0,
            seq: h * t * dh,
            head: t * dh,
            row: dh,
        }
    }

    /// (N, H, T, Dh): rows not a multiple of 8, keys not of 32, head sizes not of 16.
    pub(crate) const ODD_SHAPES: &[(usize, usize, usize, usize)] = &[
        (1, 1, 1, 1),
        (1, 2, 7, 64),
        (2, 3, 33, 36),
        (1, 6, 100, 64),
        (2, 1, 41, 20),
        (1, 2, 9, 80),
    ];

    #[test]
    fn every_level_matches_the_f64_reference_on_odd_shapes() {
        for &(n, h, t, dh) in ODD_SHAPES {
            let len = n * h * t * dh;
            // Scores of a few units, as trained attention has, so the softmax is not flat.
            let q: Vec<f32> = values(len, 1).iter().map(|x| x * 3.0).collect();
            let (k, v) = (values(len, 2), values(len, 3));
            let want = reference(&q, &k, &v, (n, h, t, dh));
            for &level in Level::available() {
                let mut got = vec![0f32; len];
                let dims = (n, h, t, dh);
                self_attention_at(
                    level,
                    contiguous(&q, dims),
                    contiguous(&k, dims),
                    contiguous(&v, dims),
                    dims,
                    &mut got,
                );
                let err = got
                    .iter()
                    .zip(&want)
                    .map(|(g, w)| (*g as f64 - w).abs())
                    .fold(0f64, f64::max);
                assert!(err < 2e-5, "{level:?} {:?}: max error {err}", (n, h, t, dh));
            }
        }
    }

    #[test]
    fn the_softmax_levels_give_the_same_bits() {
        let row: Vec<f32> = values(1503, 5).iter().map(|x| x * 20.0).collect();
        let mut want = row.clone();
        softmax_at(Level::Scalar, &mut want);
        for &level in Level::available() {
            let mut got = row.clone();
            softmax_at(level, &mut got);
            let close = got
                .iter()
                .zip(&want)
                .all(|(a, b)| (a - b).abs() <= 1e-6 * b.max(1e-30));
            assert!(
                close,
                "{level:?} is not within rounding of the portable softmax"
            );
        }
        if Level::available().contains(&Level::Avx512) {
            let (mut a, mut b) = (row.clone(), row);
            softmax_at(Level::Avx512, &mut a);
            softmax_at(Level::Avx2Fma, &mut b);
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
        }
    }

    #[test]
    fn strided_views_of_a_fused_projection_equal_contiguous_heads() {
        // qkv [N, T, 3·H·Dh] as the fused projection writes it; q/k/v are views of it.
        let (n, h, t, dh) = (2, 3, 21, 16);
        let d = h * dh;
        let qkv =
            Tensor::from_vec(values(n * t * 3 * d, 9), (n, t, 3, h, dh), &Device::Cpu).unwrap();
        let part = |i: usize| qkv.i((.., .., i)).unwrap().transpose(1, 2).unwrap();
        let (q, k, v) = (part(0), part(1), part(2));
        assert_ne!(q.stride()[2], dh, "the test needs a strided view");
        let got = self_attention(&q, &k, &v).unwrap();
        let (qc, kc, vc) = (
            q.contiguous().unwrap(),
            k.contiguous().unwrap(),
            v.contiguous().unwrap(),
        );
        let flat = |x: &Tensor| x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let want = reference(&flat(&qc), &flat(&kc), &flat(&vc), (n, h, t, dh));
        let got = flat(&got);
        let err = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (*g as f64 - w).abs())
            .fold(0f64, f64::max);
        assert!(err < 2e-5, "max error {err}");
        // And the tensor path equals the two-matmul formula it replaces.
        let two = crate::kernels::softmax_last_dim(&qc.matmul(&kc.t().unwrap()).unwrap())
            .unwrap()
            .matmul(&vc)
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .reshape((n, t, d))
            .unwrap();
        let diff = flat(&two)
            .iter()
            .zip(&got)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff < 1e-5, "two-matmul path differs by {diff}");
    }
}
