//! onnxruntime's dynamically quantized matmul, bit for bit in its integer part: activations
//! quantized to `u8` with one scale and zero point per tensor (`DynamicQuantizeLinear`:
//! range widened to include 0, `scale = (max − min) / 255`, `zp = round(−min / scale)`,
//! `q = clamp(round(x / scale), −zp, 255 − zp) + zp`, ties to even), weights stored as 8-bit
//! `B [k, n]` with a per-tensor zero point, `y = Σ (a − za)(b − zb) · (sa · sb) + bias`.
//!
//! The sums run on the same byte dot-product tiles as [`super::matmul_i8`]: `B` is packed as
//! `b − shift` (`shift` 128 for `u8` storage, 0 for `i8`), so
//! `Σ (a − za)(b − zb) = Σ a·(b − shift) + (shift − zb)·Σ a − za·Σ (b − zb)`, all exact in
//! `i32`. A "tensor" is a group of consecutive rows chosen by the caller (one recording's
//! frames, or one decoder row), so a row's result never depends on other groups.

use super::{check_args, par_tiles, prefetches, tile_at, Level, PackedI8, MR, NR, PANEL};

/// 8-bit weights of one onnxruntime quantized matmul, packed for the byte kernels.
#[derive(Debug, Clone)]
pub struct PackedU8Asym {
    w: PackedI8,
    /// 128 when the stored bytes are `u8`, 0 for `i8`.
    shift: i32,
    /// Zero point of the weights.
    zb: i32,
    /// `Σ_k (b[k][c] − zb)` per output channel `[n_pad]`.
    colsum: Vec<i32>,
    /// Scale of the weights.
    scale: f32,
}

impl PackedU8Asym {
    /// `b`: the stored integers of `B [k, n]` (ONNX orientation, row-major): `0..=255` when
    /// `signed` is false, `-128..=127` when true; `zb` and `scale` per tensor.
    pub fn new(b: &[i16], k: usize, n: usize, signed: bool, zb: i32, scale: f32) -> Self {
        assert_eq!(b.len(), k * n, "B is not [k, n]");
        let shift = if signed { 0 } else { 128 };
        let mut q = vec![0i8; n * k];
        let mut colsum = vec![0i32; n.next_multiple_of(NR)];
        for kk in 0..k {
            for c in 0..n {
                let v = i32::from(b[kk * n + c]);
                q[c * k + kk] = (v - shift).clamp(-128, 127) as i8;
                colsum[c] += v - zb;
            }
        }
        Self {
            w: PackedI8::from_quantized(&q, &vec![1.0; n], n, k),
            shift,
            zb,
            colsum,
            scale,
        }
    }

    /// Output channels.
    pub fn n(&self) -> usize {
        self.w.n
    }

    /// Input features.
    pub fn k(&self) -> usize {
        self.w.k
    }
}

/// onnxruntime's per-tensor `u8` parameters for `x`: (scale, zero point), or `None` when the
/// scale is 0 (an all-zero tensor) or not finite.
fn params(x: &[f32]) -> Option<(f32, i32)> {
    let (mut min, mut max) = (0f32, 0f32);
    for &v in x {
        if v.is_nan() {
            return None;
        }
        min = if v < min { v } else { min };
        max = if v > max { v } else { max };
    }
    let scale = (max - min) / 255.0;
    if !(scale > 0.0 && scale.is_finite()) {
        return None;
    }
    let zp = (0.0 - min / scale).clamp(0.0, 255.0).round_ties_even();
    Some((scale, zp as i32))
}

/// Quantizes one row as `DynamicQuantizeLinear` does (`clamp(round(x / scale), −zp, 255 − zp)
/// + zp`, ties to even) into `out` and returns the row's sum of quantized values.
#[inline]
fn quantize_row(x: &[f32], scale: f32, zp: i32, out: &mut [u8]) -> i32 {
    let (lo, hi) = (-zp as f32, (255 - zp) as f32);
    // Adding and subtracting 1.5·2²³ rounds half to even for |v| ≤ 255, exactly as
    // `round_ties_even`, without a libm call per element (so the loop vectorises).
    const MAGIC: f32 = 12_582_912.0;
    let mut sum = 0i32;
    for (o, v) in out.iter_mut().zip(x) {
        let q = (((v / scale).clamp(lo, hi) + MAGIC) - MAGIC) as i32 + zp;
        *o = q as u8;
        sum += q;
    }
    sum
}

/// `out [m, n] = dequant(quant(x) · B) + bias` with `x [m, k]` quantized per group of `group`
/// consecutive rows (the last group may be shorter), at the fastest [`Level`].
pub fn matmul_u8_asym(
    x: &[f32],
    m: usize,
    group: usize,
    w: &PackedU8Asym,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    matmul_u8_asym_at(Level::best(), x, m, group, w, bias, out);
}

/// [`matmul_u8_asym`] at a given level (which the CPU must support).
pub fn matmul_u8_asym_at(
    level: Level,
    x: &[f32],
    m: usize,
    group: usize,
    w: &PackedU8Asym,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let (k, n, k4) = (w.w.k, w.w.n, w.w.k4);
    check_args(level, x, m, k, n, bias, out);
    if m == 0 || n == 0 {
        return;
    }
    let group = group.clamp(1, m);
    let rows_pad = m.next_multiple_of(MR);
    // Quantized rows (zero padding: padded columns meet zero weights), their sums, and each
    // row's group parameters (`None`: the group's outputs are the bias alone, or NaN).
    let mut a = vec![0u8; rows_pad * k4];
    let mut rowsum = vec![0i32; rows_pad];
    let mut row_params: Vec<Option<(f32, i32)>> = vec![None; rows_pad];
    let mut nan_rows = vec![false; rows_pad];
    for g0 in (0..m).step_by(group) {
        let g1 = (g0 + group).min(m);
        let xs = &x[g0 * k..g1 * k];
        let p = params(xs);
        let nan = p.is_none() && xs.iter().any(|v| !v.is_finite());
        for r in g0..g1 {
            row_params[r] = p;
            nan_rows[r] = nan;
            let Some((scale, zp)) = p else { continue };
            rowsum[r] = quantize_row(
                &x[r * k..(r + 1) * k],
                scale,
                zp,
                &mut a[r * k4..r * k4 + k],
            );
        }
    }
    let base = w.shift - w.zb;
    par_tiles(out, m, n, w.w.n_pad / NR, |row0, rows, pairs, out| {
        let mut tile = [[0i32; NR]; MR];
        for pair in pairs {
            let p = 2 * pair;
            for r in (0..rows).step_by(MR) {
                tile_at(
                    level,
                    &a[(row0 + r) * k4..],
                    &w.w,
                    p,
                    (rows - r).min(MR),
                    prefetches(r, rows),
                    &mut tile,
                );
                let (c0, cols) = (p * PANEL, NR.min(n - p * PANEL));
                let colsum = &w.colsum[c0..c0 + cols];
                for (i, acc) in tile.iter().enumerate().take((rows - r).min(MR)) {
                    let row = row0 + r + i;
                    let o = out.cols(r + i, c0, cols);
                    match row_params[row] {
                        Some((sa, za)) => {
                            // Hoisted per row so the column loop vectorises.
                            let (mult, off) = (sa * w.scale, base * rowsum[row]);
                            for ((y, &a), &cs) in o.iter_mut().zip(&acc[..cols]).zip(colsum) {
                                *y = (a + off - za * cs) as f32 * mult;
                            }
                        }
                        None => o.fill(if nan_rows[row] { f32::NAN } else { 0.0 }),
                    }
                    if let Some(b) = bias {
                        for (y, &b) in o.iter_mut().zip(&b[c0..c0 + cols]) {
                            *y += b;
                        }
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// The same arithmetic written out directly (ORT's formulas, no packing).
    #[allow(clippy::too_many_arguments)]
    fn reference(
        x: &[f32],
        m: usize,
        group: usize,
        b: &[i16],
        k: usize,
        n: usize,
        zb: i32,
        sb: f32,
        bias: &[f32],
    ) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        for g0 in (0..m).step_by(group) {
            let g1 = (g0 + group).min(m);
            let (sa, za) = params(&x[g0 * k..g1 * k]).unwrap();
            for r in g0..g1 {
                let q: Vec<i32> = x[r * k..(r + 1) * k]
                    .iter()
                    .map(|v| ((v / sa).round_ties_even() as i32 + za).clamp(0, 255))
                    .collect();
                for c in 0..n {
                    let s: i32 = (0..k)
                        .map(|kk| (q[kk] - za) * (i32::from(b[kk * n + c]) - zb))
                        .sum();
                    out[r * n + c] = s as f32 * (sa * sb) + bias[c];
                }
            }
        }
        out
    }

    #[test]
    fn every_level_matches_the_formulas() {
        let mut seed = 7;
        for &(m, k, n, group, signed) in &[
            (1, 5, 3, 1, false),
            (13, 37, 45, 13, false),
            (20, 64, 33, 7, true),
            (9, 288, 40, 1, false),
        ] {
            let x: Vec<f32> = (0..m * k).map(|_| lcg(&mut seed) * 3.0 + 0.5).collect();
            let b: Vec<i16> = (0..k * n)
                .map(|_| {
                    let v = ((lcg(&mut seed) + 1.0) * 127.5) as i16;
                    if signed {
                        v - 128
                    } else {
                        v
                    }
                })
                .collect();
            let zb = if signed { 3 } else { 121 };
            let bias: Vec<f32> = (0..n).map(|_| lcg(&mut seed)).collect();
            let w = PackedU8Asym::new(&b, k, n, signed, zb, 0.01);
            let want = reference(&x, m, group, &b, k, n, zb, 0.01, &bias);
            for &level in Level::available() {
                let mut got = vec![0f32; m * n];
                matmul_u8_asym_at(level, &x, m, group, &w, Some(&bias), &mut got);
                assert_eq!(got, want, "{level:?} m={m} k={k} n={n}");
            }
        }
    }

    #[test]
    fn groups_are_independent_and_zero_groups_give_the_bias() {
        let (k, n) = (16, 4);
        let b: Vec<i16> = (0..k * n).map(|i| (i * 7 % 256) as i16).collect();
        let w = PackedU8Asym::new(&b, k, n, false, 128, 0.02);
        let row: Vec<f32> = (0..k).map(|i| (i as f32 - 7.0) * 0.3).collect();
        let mut two = row.clone();
        two.extend(vec![0.0; k]);
        let mut alone = vec![0f32; n];
        let mut both = vec![0f32; 2 * n];
        let bias = vec![0.5; n];
        matmul_u8_asym(&row, 1, 1, &w, Some(&bias), &mut alone);
        matmul_u8_asym(&two, 2, 1, &w, Some(&bias), &mut both);
        assert_eq!(&both[..n], &alone[..]);
        assert_eq!(&both[n..], &bias[..]);
    }
}
