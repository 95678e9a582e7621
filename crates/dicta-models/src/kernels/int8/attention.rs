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
//! byte level, so every [`Level`] gives the same bits (tested), except [`Level::Amx`] on CPUs
//! with AMX-BF16 (and heads of 64): there the probabilities and values are rounded to bfloat16
//! for the tiles (`attend_range_amx`; 8 significant bits for every probability however
//! small, unlike bytes), within ≈ 0.4% of the other levels (tested). Dev set with the rest of
//! session 19's int8 path: tiny.en 287 word errors against 289, base 286 against 287 (1523 words).
//!
//! The Whisper encoder uses it for the int8 compute type on the CPU. tiny.en dev set (whole
//! process per item): WER 18.71% against 18.91% with float32 scores, 1.29× faster; base
//! (en/es/sv): 19.04% against float32's 19.54% (docs/benchmarks.md, sessions 16–17).

use super::softmax_bf16::softmax_row_bf16;
#[cfg(target_arch = "x86_64")]
use super::softmax_bf16::softmax_row_bf16_avx512;
use super::{
    amx, quantize_channel, quantize_rows, quantize_rows_to, tile_at, Level, PackedI8, MR, NR, PANEL,
};
use crate::kernels::attention::{pack_v, softmax_times_v, split_heads_by, HeadsView};
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
    let pv = Pv::at(level, dh);
    // On AMX the products are cheap next to packing a head's K and V (≈ 20% of a task when
    // each head is split in two): one task per head where there are enough heads.
    let per_thread = if pv == Pv::AmxBf16 { 2 } else { 4 };
    split_heads_by(
        per_thread,
        &[&q, &k, &v],
        dims,
        out,
        |seq, head, q0, q1, out| {
            let (at, shape) = ((seq, head, q0, q1), (h, t, dh));
            match pv {
                // SAFETY: AMX-INT8 and AMX-BF16 are available (`Pv::at`); dh is 64.
                Pv::AmxBf16 => unsafe { attend_range_amx([&q, &k, &v], at, shape, out) },
                // SAFETY: AVX-512 VNNI and BF16 are available (`Pv::at`); dh is 64.
                #[cfg(target_arch = "x86_64")]
                Pv::Avx512Bf16 => unsafe {
                    attend_range_avx512_bf16(level, [&q, &k, &v], at, shape, out)
                },
                #[cfg(not(target_arch = "x86_64"))]
                Pv::Avx512Bf16 => unreachable!("AVX-512 BF16 outside x86-64"),
                Pv::F32 => attend_range(level, [&q, &k, &v], at, shape, out),
            }
        },
    );
}

/// How a level multiplies the probabilities by V.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pv {
    /// f32 tiles: every level gives the same bits.
    F32,
    /// bf16 probabilities and values on AMX tiles (`tdpbf16ps`), f32 sums.
    AmxBf16,
    /// The same bf16 rounding on AVX-512 BF16 (`vdpbf16ps`, e.g. AMD Zen 4), f32 sums.
    Avx512Bf16,
}

impl Pv {
    /// The fastest way `level` has for heads of `dh` (bf16 kernels are for heads of 64).
    fn at(level: Level, dh: usize) -> Pv {
        if dh != amx::PV_DH {
            return Pv::F32;
        }
        match level {
            Level::Amx if amx::bf16_available() => Pv::AmxBf16,
            Level::Amx | Level::Avx512Vnni if avx512_bf16() => Pv::Avx512Bf16,
            _ => Pv::F32,
        }
    }
}

/// Whether the CPU has AVX-512 BF16 (`vdpbf16ps`).
fn avx512_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::kernels::avx512() && is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Query rows per block of [`attend_range_amx`] (two tiles).
const AMX_ROWS: usize = 2 * amx::TILE_ROWS;

/// [`attend_range`] on AMX tiles: the scores on `tdpbusd` as on the other levels (the same
/// bits), the probabilities through the same `exp` as the f32 softmax, then they and V rounded
/// to bfloat16 for `tdpbf16ps` (f32 sums), each
/// row divided by the sum of its rounded probabilities at the end. bf16 keeps 8 significant
/// bits of every probability however small (bytes zeroed those under 1/510 of the largest:
/// see the module note), so the output is within ≈ 0.4% of float32's.
///
/// # Safety
/// AMX-INT8 and AMX-BF16 must be available ([`amx::bf16_available`]) and `dh` must be
/// [`amx::PV_DH`].
#[cfg_attr(
    target_arch = "x86_64",
    target_feature(enable = "avx512f,avx512bw,avx2,fma")
)]
unsafe fn attend_range_amx(
    [q, k, v]: [&HeadsView; 3],
    (seq, head, q0, q1): (usize, usize, usize, usize),
    (h, t, dh): (usize, usize, usize),
    out: *mut f32,
) {
    let pk = pack_keys(k, seq, head, (t, dh));
    // Keys padded to whole panel pairs (32), which is also the bf16 step.
    let tp = pk.n_pad;
    debug_assert!(tp.is_multiple_of(amx::PV_KEYS));
    let vb = amx::pack_v_bf16(|j| v.at(seq, head, j), t, tp);
    let mut qb = vec![0f32; AMX_ROWS * dh];
    let mut s = vec![0f32; AMX_ROWS * tp];
    // Rows past a block's last query stay zero or hold an earlier block's finite values.
    let mut pb = vec![0u16; AMX_ROWS * tp];
    let mut inv = [0f32; AMX_ROWS];
    let mut sums = [[0i32; NR]; AMX_ROWS];
    let mut o = [[0f32; amx::PV_DH]; amx::TILE_ROWS];
    let tiles = amx::Tiles::load();
    for i0 in (q0..q1).step_by(AMX_ROWS) {
        let rows = AMX_ROWS.min(q1 - i0);
        for r in 0..rows {
            qb[r * dh..(r + 1) * dh].copy_from_slice(&q.at(seq, head, i0 + r)[..dh]);
        }
        let (a, sa) = quantize_rows_to(&qb[..rows * dh], rows, dh, pk.k4, amx::TILE_ROWS);
        let two = rows > amx::TILE_ROWS;
        for pair in 0..tp / NR {
            let p = 2 * pair;
            amx::block(&tiles, &a, &pk, p, two, &mut sums);
            scores_from_sums(&sums[..rows], &sa, &pk, p * PANEL, &mut s);
        }
        for r in 0..rows {
            inv[r] = softmax_row_bf16(&s[r * tp..r * tp + t], &mut pb[r * tp..(r + 1) * tp]);
        }
        for half in 0..rows.div_ceil(amx::TILE_ROWS) {
            let r0 = half * amx::TILE_ROWS;
            amx::pv_block(&tiles, &pb[r0 * tp..], tp, &vb, tp, &mut o);
            for (r, orow) in o.iter().enumerate().take(rows - r0) {
                let at = ((seq * t + i0 + r0 + r) * h + head) * dh;
                let sc = inv[r0 + r];
                // SAFETY: `at..at + dh` lies inside `out` ([N, T, H·Dh], checked by
                // `split_heads`) and belongs to this task alone.
                let dst = std::slice::from_raw_parts_mut(out.add(at), dh);
                for (d, &x) in dst.iter_mut().zip(orow) {
                    *d = x * sc;
                }
            }
        }
    }
    drop(tiles);
}

/// [`attend_range`] with `p·v` on AVX-512 BF16 (`vdpbf16ps`: pairs of bf16 products summed
/// into f32), as [`attend_range_amx`] rounds them: the same scores as every byte level, then
/// the probabilities and V in bfloat16, each row divided by the sum of its rounded
/// probabilities. Two bf16 products per f32 lane and instruction, against one FMA: on Zen 4
/// `p·v` was most of a head's time in f32.
///
/// # Safety
/// AVX-512 VNNI, BW and BF16 must be available, `level` one the CPU runs, and `dh`
/// [`amx::PV_DH`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512bf16,avx2,fma")]
unsafe fn attend_range_avx512_bf16(
    level: Level,
    [q, k, v]: [&HeadsView; 3],
    (seq, head, q0, q1): (usize, usize, usize, usize),
    (h, t, dh): (usize, usize, usize),
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    debug_assert_eq!(dh, amx::PV_DH);
    let pk = pack_keys(k, seq, head, (t, dh));
    // Keys padded to whole panel pairs (32), so whole key pairs.
    let tp = pk.n_pad;
    let half = tp / 2;
    let vb = amx::pack_v_bf16(|j| v.at(seq, head, j), t, tp);
    let mut qb = vec![0f32; MR * dh];
    let mut s = vec![0f32; MR * tp];
    // Rows past a block's last query stay zero or hold an earlier block's finite values.
    let mut pb = vec![0u16; MR * tp];
    let mut inv = [0f32; MR];
    for i0 in (q0..q1).step_by(MR) {
        let rows = MR.min(q1 - i0);
        score_rows(level, q, (seq, head, i0, rows), &pk, &mut qb, &mut s);
        for r in 0..rows {
            inv[r] = softmax_row_bf16_avx512(&s[r * tp..r * tp + t], &mut pb[r * tp..(r + 1) * tp]);
        }
        // Two 16-column blocks of the head at a time: 8 rows × 2 accumulators.
        for cbp in 0..dh / 32 {
            let mut acc = [[_mm512_setzero_ps(); 2]; MR];
            let b0 = vb.as_ptr().add(2 * cbp * half * 32);
            let b1 = vb.as_ptr().add((2 * cbp + 1) * half * 32);
            let pp = pb.as_ptr();
            for kk in 0..half {
                // SAFETY: `vb` holds 4 blocks of `half` key pairs × 32 bf16 (`pack_v_bf16`),
                // `pb` MR rows of `tp = 2 · half` bf16.
                let v0: __m512bh =
                    std::mem::transmute(_mm512_loadu_si512(b0.add(kk * 32) as *const _));
                let v1: __m512bh =
                    std::mem::transmute(_mm512_loadu_si512(b1.add(kk * 32) as *const _));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let pr = (pp.add(r * tp + 2 * kk) as *const i32).read_unaligned();
                    let p: __m512bh = std::mem::transmute(_mm512_set1_epi32(pr));
                    acc[0] = _mm512_dpbf16_ps(acc[0], p, v0);
                    acc[1] = _mm512_dpbf16_ps(acc[1], p, v1);
                }
            }
            for (r, acc) in acc.iter().enumerate().take(rows) {
                let at = ((seq * t + i0 + r) * h + head) * dh + cbp * 32;
                let sc = _mm512_set1_ps(inv[r]);
                // SAFETY: `at..at + 32` lies inside `out` ([N, T, H·Dh], checked by
                // `split_heads`) and belongs to this task alone.
                _mm512_storeu_ps(out.add(at), _mm512_mul_ps(acc[0], sc));
                _mm512_storeu_ps(out.add(at + 16), _mm512_mul_ps(acc[1], sc));
            }
        }
    }
}

/// The scores of one head's queries `i0..i0 + rows` (at most [`MR`]) against all its keys
/// `pk`, into the first `rows` rows of `s` (rows `pk.n_pad` long), at byte level `level`;
/// `qb` is scratch of `MR · Dh`. Inlined so that it runs at the caller's instruction set.
#[inline(always)]
fn score_rows(
    level: Level,
    q: &HeadsView,
    (seq, head, i0, rows): (usize, usize, usize, usize),
    pk: &PackedI8,
    qb: &mut [f32],
    s: &mut [f32],
) {
    let dh = pk.k();
    for r in 0..rows {
        qb[r * dh..(r + 1) * dh].copy_from_slice(&q.at(seq, head, i0 + r)[..dh]);
    }
    let (a, sa) = quantize_rows(&qb[..rows * dh], rows, dh, pk.k4);
    let mut tile = [[0i32; NR]; MR];
    for pair in 0..pk.n_pad / NR {
        let p = 2 * pair;
        tile_at(level, &a, pk, p, rows, false, &mut tile);
        scores_from_sums(&tile[..rows], &sa, pk, p * PANEL, s);
    }
}

/// One head's keys k [T, Dh] quantized per key row (the "output channels" of the score
/// product), padded to whole panels for the byte tiles: [`PackedI8::quantize`]'s bytes and
/// scales, read from the head's rows in place rather than from a contiguous copy (that copy
/// was most of the `memmove` time of an int8 encoder pass).
fn pack_keys(k: &HeadsView, seq: usize, head: usize, (t, dh): (usize, usize)) -> PackedI8 {
    let mut q = vec![0i8; t * dh];
    let mut scales = vec![0f32; t];
    let mut bytes = vec![0u8; dh];
    for (j, (qj, scale)) in q.chunks_exact_mut(dh.max(1)).zip(&mut scales).enumerate() {
        *scale = quantize_channel(&k.at(seq, head, j)[..dh], qj, &mut bytes);
    }
    PackedI8::from_quantized(&q, &scales, t, dh)
}

/// Scores `(Σ q·k − comp) · s_q · s_k` (the linear layers' epilogue without a bias) of
/// `sums.len()` query rows (row scales `sa`) against the `NR` keys from `c0`, into rows of
/// `s` that are `pk.n_pad` long. Inlined so that it runs at the caller's instruction set.
#[inline(always)]
fn scores_from_sums(sums: &[[i32; NR]], sa: &[f32], pk: &PackedI8, c0: usize, s: &mut [f32]) {
    let tp = pk.n_pad;
    let (comp, scales) = (&pk.comp[c0..c0 + NR], &pk.scales[c0..c0 + NR]);
    for (r, acc) in sums.iter().enumerate() {
        let o = &mut s[r * tp + c0..r * tp + c0 + NR];
        let sr = sa[r];
        for j in 0..NR {
            o[j] = (acc[j] - comp[j]) as f32 * (sr * scales[j]);
        }
    }
}

/// One head of one sequence, queries `q0..q1`; writes `out[seq, q, head·Dh..]`.
fn attend_range(
    level: Level,
    [q, k, v]: [&HeadsView; 3],
    (seq, head, q0, q1): (usize, usize, usize, usize),
    (h, t, dh): (usize, usize, usize),
    out: *mut f32,
) {
    let vp = pack_v(v, seq, head, t, dh);
    let pk = pack_keys(k, seq, head, (t, dh));
    let tp = pk.n_pad;
    let f32_level = F32Level::best();
    let mut qb = vec![0f32; MR * dh];
    let mut s = vec![0f32; MR * tp];
    for i0 in (q0..q1).step_by(MR) {
        let rows = MR.min(q1 - i0);
        score_rows(level, q, (seq, head, i0, rows), &pk, &mut qb, &mut s);
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

    /// V in the bf16 pair layout: for each 16-column block and key pair, the 16 columns of the
    /// even key interleaved with the odd key's, each rounded to nearest (ties to even), keys
    /// past `t` zero.
    #[test]
    fn v_packs_into_bf16_pairs_rounded_to_nearest_even() {
        use super::amx::{bf16_bits, pack_v_bf16, PV_DH};
        let t = 37;
        let kp = 64;
        // Ties both ways, negatives, tiny and large magnitudes.
        let v: Vec<f32> = (0..t * PV_DH)
            .map(|i| match i % 5 {
                0 => f32::from_bits(0x3F80_8000 + ((i as u32 & 2) << 15)),
                1 => -(i as f32) * 1.000_1,
                2 => 1e-30 * i as f32,
                3 => 3.0e30 / (i as f32 + 1.0),
                _ => ((i * 7919) % 1000) as f32 / 333.0 - 1.5,
            })
            .collect();
        let packed = pack_v_bf16(|j| &v[j * PV_DH..(j + 1) * PV_DH], t, kp);
        assert_eq!(packed.len(), PV_DH * kp);
        let half = kp / 2;
        for cb in 0..PV_DH / 16 {
            for kk in 0..half {
                for l in 0..16 {
                    let at = (cb * half + kk) * 32 + 2 * l;
                    for (slot, key) in [(at, 2 * kk), (at + 1, 2 * kk + 1)] {
                        let want = if key < t {
                            bf16_bits(v[key * PV_DH + cb * 16 + l])
                        } else {
                            0
                        };
                        assert_eq!(packed[slot], want, "block {cb}, key {key}, column {l}");
                    }
                }
            }
        }
        // Ties go to even: halfway above 0x3F80 (even) stays, halfway above 0x3F81 rounds up.
        assert_eq!(bf16_bits(f32::from_bits(0x3F80_8000)), 0x3F80);
        assert_eq!(bf16_bits(f32::from_bits(0x3F81_8000)), 0x3F82);
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
                if Pv::at(level, dh) != Pv::F32 {
                    // bf16 probabilities: `bf16_levels_track_the_f32_levels` checks these.
                    continue;
                }
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

    /// A bf16 level's `p·v` (AMX tiles, AVX-512 BF16) is the f32 levels' result (the same
    /// scores) up to bfloat16 rounding of the probabilities and values: a few 1e-3 at worst for
    /// |v| < 1, where a mixed-up key, column or row is off by ≈ 0.5. Shapes with partial query
    /// blocks (8, 16 and 32 rows) and key steps (32 keys).
    #[test]
    fn bf16_levels_track_the_f32_levels() {
        let mut checked = 0;
        for dims @ (n, h, t, dh) in [(1, 2, 7, 64), (2, 3, 47, 64), (1, 2, 300, 64)] {
            let len = n * h * t * dh;
            let q: Vec<f32> = values(len, 31).iter().map(|x| x * 3.0).collect();
            let (k, v) = (values(len, 32), values(len, 33));
            let want = attend(Level::Scalar, [&q, &k, &v], dims);
            for &level in Level::available() {
                if Pv::at(level, dh) == Pv::F32 {
                    continue;
                }
                checked += 1;
                let got = attend(level, [&q, &k, &v], dims);
                let (mut max, mut sum) = (0f32, 0f64);
                for (g, w) in got.iter().zip(&want) {
                    let e = (g - w).abs();
                    assert!(e.is_finite(), "{level:?} {dims:?}: {g} vs {w}");
                    max = max.max(e);
                    sum += f64::from(e);
                }
                let mean = sum / len as f64;
                assert!(
                    max < 0.01 && mean < 1e-3,
                    "{level:?} {dims:?}: max error {max}, mean {mean}"
                );
            }
        }
        if checked == 0 {
            eprintln!("no bf16 level here (AMX-BF16 or AVX-512 BF16): skipped");
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
