//! The softmax of the bf16 attention kernels (AMX tiles, AVX-512 BF16): one score row's
//! unnormalised probabilities `exp(s − max)`, rounded to bfloat16 for the `p·v` product, and
//! 1 / the sum of the rounded values, which the kernels divide by at the end.
//!
//! [`softmax_row_bf16_avx512`] computes the same bits as the portable [`softmax_row_bf16`]
//! (tested), so transcripts do not depend on which of the two ran: the same `exp` on 16 lanes
//! ([`crate::kernels::exp_x16`]), one `vcvtneps2bf16` for the rounding that took six integer
//! operations, and the sum in the same pass, where it took a second pass over the row. That
//! made the int8 encoder's self-attention 5% faster (docs/benchmarks.md, session 28). A
//! cheaper `exp` (a degree-6 polynomial with `vscalefps`, within 1e-5 of e^x) made it 11%
//! faster, but moved about one tiny.en dev transcript in seven, and the dev WER by up to a
//! point either way: kept out.

use super::amx;
#[cfg(target_arch = "x86_64")]
use crate::kernels::exp_x16;
use crate::kernels::{exp, max_of};

/// The unnormalised probabilities `exp(s − max)` of one score row (`row`, T keys) rounded to
/// bfloat16 into `prow` (zeros past T), and 1 / the sum of the rounded values. Inlined so that
/// it runs at the caller's instruction set.
#[inline(always)]
pub(super) fn softmax_row_bf16(row: &[f32], prow: &mut [u16]) -> f32 {
    let t = row.len();
    let m = max_of(row);
    for (pv, &x) in prow[..t].iter_mut().zip(row) {
        *pv = amx::bf16_bits(exp::<true>(x - m));
    }
    prow[t..].fill(0);
    // Sixteen partial sums over whole chunks, so that the loop vectorises; a separate pass,
    // as summing in the loop above kept the partial sums on the stack.
    let mut acc = [0f32; 16];
    let mut pc = prow[..t].chunks_exact(16);
    for c in &mut pc {
        for l in 0..16 {
            acc[l] += widen(c[l]);
        }
    }
    for &b in pc.remainder() {
        acc[0] += widen(b);
    }
    1.0 / acc.iter().sum::<f32>()
}

/// A bfloat16 (as bits) in float32.
#[inline(always)]
fn widen(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// [`softmax_row_bf16`] on AVX-512 BF16, in one pass over the row after the maximum:
/// [`exp_x16`], `vcvtneps2bf16` (nearest, ties to even, as [`amx::bf16_bits`]) and the
/// same sixteen partial sums added in the same order, so the same bits (tested).
///
/// # Safety
/// AVX-512F, BW and BF16 must be available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
pub(super) unsafe fn softmax_row_bf16_avx512(row: &[f32], prow: &mut [u16]) -> f32 {
    use std::arch::x86_64::*;
    let t = row.len();
    let (src, dst) = (row.as_ptr(), prow[..t].as_mut_ptr());
    // The maximum with four accumulators (one was latency bound); `max(x, acc)` keeps `acc`
    // when `x` is NaN, as `max_of` skips NaNs. The maximum does not depend on the order.
    let mut mv = [_mm512_set1_ps(f32::NEG_INFINITY); 4];
    let quads = t / 64;
    for c in 0..quads {
        for (a, m) in mv.iter_mut().enumerate() {
            *m = _mm512_max_ps(_mm512_loadu_ps(src.add(c * 64 + a * 16)), *m);
        }
    }
    let mut lanes = [0f32; 16];
    _mm512_storeu_ps(
        lanes.as_mut_ptr(),
        _mm512_max_ps(_mm512_max_ps(mv[0], mv[1]), _mm512_max_ps(mv[2], mv[3])),
    );
    let m = row[quads * 64..]
        .iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    let vm = _mm512_set1_ps(m);
    let mut acc = _mm512_setzero_ps();
    let full = t / 16;
    for c in 0..full {
        let e = exp_x16(_mm512_sub_ps(_mm512_loadu_ps(src.add(c * 16)), vm));
        let b: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(e));
        _mm256_storeu_si256(dst.add(c * 16) as *mut __m256i, b);
        let w = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(b));
        acc = _mm512_add_ps(acc, _mm512_castsi512_ps(w));
    }
    let mut sums = [0f32; 16];
    _mm512_storeu_ps(sums.as_mut_ptr(), acc);
    // The last t mod 16 keys as `softmax_row_bf16` does them: one at a time into sums[0].
    for j in full * 16..t {
        let b = amx::bf16_bits(exp::<true>(row[j] - m));
        prow[j] = b;
        sums[0] += widen(b);
    }
    prow[t..].fill(0);
    1.0 / sums.iter().sum::<f32>()
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::kernels::attention::tests::values;

    /// The AVX-512 BF16 softmax gives the portable bits (probabilities and 1 / sum) on rows of
    /// every length mod 16 and 64, with flat and peaked score ranges and keys far below the
    /// maximum, and zeroes the padding.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_gives_the_portable_bits() {
        if !std::arch::is_x86_feature_detected!("avx512bf16")
            || !std::arch::is_x86_feature_detected!("avx512bw")
        {
            eprintln!("no AVX-512 BF16 here: skipped");
            return;
        }
        for t in [1usize, 7, 15, 16, 17, 63, 64, 65, 100, 1500, 1501] {
            for (seed, scale) in [(1u64, 1.0f32), (2, 8.0), (3, 60.0), (4, 300.0)] {
                let row: Vec<f32> = values(t, seed).iter().map(|x| x * scale).collect();
                let tp = t.next_multiple_of(32);
                let (mut want, mut got) = (vec![7u16; tp], vec![7u16; tp]);
                let inv_want = softmax_row_bf16(&row, &mut want);
                // SAFETY: AVX-512 BF16 and BW checked above (F with them).
                let inv_got = unsafe { softmax_row_bf16_avx512(&row, &mut got) };
                assert_eq!(want, got, "t {t}, scale {scale}");
                assert_eq!(
                    inv_want.to_bits(),
                    inv_got.to_bits(),
                    "t {t}, scale {scale}"
                );
                assert!(got[t..].iter().all(|&b| b == 0));
            }
        }
    }
}
