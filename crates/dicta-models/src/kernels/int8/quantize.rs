//! The int8 products' activation rows: each row quantized symmetrically on the fly
//! (`scale = amax / 127`) and shifted by +128 to the `u8` that `vpdpbusd` takes.

use super::MR;

/// Quantizes `rows` rows of `x` (`[rows, k]`) symmetrically per row to `u8` (shifted by
/// +128), padded to `k4` columns and to whole [`MR`]-row blocks (pad value 128, i.e. zero).
/// Returns the bytes `[rows_pad, k4]` and the scale of each row.
pub(super) fn quantize_rows(x: &[f32], rows: usize, k: usize, k4: usize) -> (Vec<u8>, Vec<f32>) {
    quantize_rows_to(x, rows, k, k4, MR)
}

/// [`quantize_rows`] padded to whole blocks of `block` rows.
pub(super) fn quantize_rows_to(
    x: &[f32],
    rows: usize,
    k: usize,
    k4: usize,
    block: usize,
) -> (Vec<u8>, Vec<f32>) {
    let rows_pad = rows.next_multiple_of(block);
    let mut a = vec![128u8; rows_pad * k4];
    let mut scales = vec![0f32; rows_pad];
    for r in 0..rows {
        scales[r] = quantize_row_fast(&x[r * k..(r + 1) * k], &mut a[r * k4..r * k4 + k]);
    }
    (a, scales)
}

/// [`quantize_row`] compiled for the widest vectors the CPU has (std caches the detection).
/// The arithmetic is element-wise and the maximum exact in any order, so every width gives
/// the same bits (tested).
#[inline(always)]
pub(super) fn quantize_row_fast(row: &[f32], out: &mut [u8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::kernels::avx512() && is_x86_feature_detected!("avx512bw") {
            // SAFETY: AVX-512F and BW were detected.
            return unsafe { quantize_row_avx512(row, out) };
        }
        if is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 was detected.
            return unsafe { quantize_row_avx2(row, out) };
        }
    }
    quantize_row(row, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize_row_avx2(row: &[f32], out: &mut [u8]) -> f32 {
    quantize_row(row, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn quantize_row_avx512(row: &[f32], out: &mut [u8]) -> f32 {
    quantize_row(row, out)
}

/// One row: its scale (`amax / 127`; 0 for a zero row, NaN for a non-finite one, which then
/// poisons its outputs as in f32), and the shifted bytes in `out`.
#[inline(always)]
pub(super) fn quantize_row(row: &[f32], out: &mut [u8]) -> f32 {
    // Eight lanes of plain comparisons, so that the scan vectorises (a serial fold, or
    // `f32::max`, does not). The maximum is exact in any order; a NaN fails every comparison,
    // so it is flagged apart (`v != v`).
    let (mut amax, mut nan) = ([0f32; 8], [false; 8]);
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for l in 0..8 {
            let a = c[l].abs();
            amax[l] = if a > amax[l] { a } else { amax[l] };
            nan[l] |= c[l].is_nan();
        }
    }
    let mut m = 0f32;
    let mut any_nan = nan.iter().any(|&b| b);
    for &v in chunks.remainder() {
        m = if v.abs() > m { v.abs() } else { m };
        any_nan |= v.is_nan();
    }
    for a in amax {
        m = if a > m { a } else { m };
    }
    if !m.is_finite() || any_nan {
        return f32::NAN;
    }
    if m == 0.0 {
        return 0.0;
    }
    let inv = 127.0 / m;
    // Adding and subtracting 1.5·2²³ rounds half to even (|v| ≤ 127 here), as
    // `round_ties_even` does, without a libm call per element.
    const MAGIC: f32 = 12_582_912.0;
    if !inv.is_finite() {
        // A tiny subnormal maximum: 0 · ∞ would be NaN, which `as` maps to 0 (the old path).
        for (o, v) in out.iter_mut().zip(row) {
            let q = ((v * inv) + MAGIC) - MAGIC;
            *o = (q.clamp(-127.0, 127.0) as i32 + 128) as u8;
        }
        return m / 127.0;
    }
    for (o, v) in out.iter_mut().zip(row) {
        let q = (((v * inv) + MAGIC) - MAGIC).clamp(-127.0, 127.0);
        // SAFETY: v and inv are finite and |v · inv| ≤ 127 (up to rounding, then clamped), so
        // q is a finite integer within ±127; unchecked, the conversion vectorises (`as` adds
        // per-element NaN checks).
        *o = (unsafe { q.to_int_unchecked::<i32>() } + 128) as u8;
    }
    m / 127.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::int8::tests::lcg;

    /// The vectorised quantizer gives the formula's bytes and scale: `round_ties_even(v · 127
    /// / amax)` shifted by 128; NaN for rows with NaN or infinity; 0 for zero rows; and rows
    /// whose maximum is so small that 127 / amax overflows.
    #[test]
    fn row_quantization_follows_the_formula() {
        let mut seed = 3u64;
        let mut rows: Vec<Vec<f32>> = vec![
            (0..37).map(|_| lcg(&mut seed) * 4.0).collect(),
            vec![0.0; 19],
            vec![
                0.5,
                -0.5,
                1.5 / 127.0,
                2.5 / 127.0,
                1.0,
                -1.0,
                0.25,
                0.0,
                3.0 / 254.0,
            ],
            vec![1e-40, 0.0, -1e-40, 5e-41, 0.0, 0.0, 0.0, 0.0, 1e-45],
        ];
        let mut with_nan: Vec<f32> = (0..20).map(|_| lcg(&mut seed)).collect();
        with_nan[13] = f32::NAN;
        rows.push(with_nan);
        let mut with_inf: Vec<f32> = (0..9).map(|_| lcg(&mut seed)).collect();
        with_inf[8] = f32::NEG_INFINITY;
        rows.push(with_inf);
        // Longer rows, for the vector bodies of the wider builds.
        rows.push((0..389).map(|_| lcg(&mut seed) * 9.0).collect());
        rows.push((0..1024).map(|i| (i as f32 - 511.5) / 255.0).collect());
        for (i, row) in rows.iter().enumerate() {
            let mut got = vec![128u8; row.len()];
            let scale = quantize_row(row, &mut got);
            // Every build the CPU runs gives the same bits.
            #[cfg(target_arch = "x86_64")]
            {
                type Build = unsafe fn(&[f32], &mut [u8]) -> f32;
                let mut builds: Vec<(&str, Build)> = Vec::new();
                if is_x86_feature_detected!("avx2") {
                    builds.push(("avx2", quantize_row_avx2));
                }
                if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
                    builds.push(("avx512", quantize_row_avx512));
                }
                for (name, f) in builds {
                    let mut other = vec![128u8; row.len()];
                    // SAFETY: the CPU has the features `f` was compiled for (checked above).
                    let s2 = unsafe { f(row, &mut other) };
                    assert_eq!(other, got, "row {i}, {name}");
                    assert!(
                        s2 == scale || (s2.is_nan() && scale.is_nan()),
                        "row {i}, {name}"
                    );
                }
            }
            let amax = row
                .iter()
                .fold(0f32, |m, v| if v.abs() > m { v.abs() } else { m });
            if !amax.is_finite() || row.iter().any(|v| v.is_nan()) {
                assert!(scale.is_nan(), "row {i}");
                continue;
            }
            if amax == 0.0 {
                assert_eq!(scale, 0.0, "row {i}");
                continue;
            }
            let inv = 127.0 / amax;
            let want: Vec<u8> = row
                .iter()
                .map(|v| ((v * inv).round_ties_even().clamp(-127.0, 127.0) as i32 + 128) as u8)
                .collect();
            assert_eq!(got, want, "row {i}");
            assert_eq!(scale, amax / 127.0, "row {i}");
        }
    }
}
