//! The f32 register tile under the encoder attention ([`super::attention`]) and the panel
//! products ([`super::panel`]): up to [`MR`] rows of `a` times [`NC`] columns of `b`, each output
//! one FMA chain over `k` in order (so every level and every row count gives the same sums).
//!
//! Levels ([`Level`]): AVX-512F intrinsics (16 accumulators: 8 rows × 2 vectors); the portable
//! tile compiled for AVX2+FMA (4 rows × 16 columns at a time, 8 accumulators); and the portable
//! tile on any CPU.

use super::madd;
use std::sync::OnceLock;

/// Rows per tile.
pub(super) const MR: usize = 8;
/// Columns per tile (two 16-lane vectors).
pub(super) const NC: usize = 32;

/// Kernel implementations, fastest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// 512-bit FMA intrinsics.
    Avx512,
    /// Portable tiles compiled for AVX2 and FMA.
    Avx2Fma,
    /// Portable Rust.
    Scalar,
}

impl Level {
    /// Every level this CPU can run, fastest first (always ends with [`Level::Scalar`]).
    pub fn available() -> &'static [Level] {
        static LEVELS: OnceLock<Vec<Level>> = OnceLock::new();
        LEVELS.get_or_init(Level::detect)
    }

    // Elsewhere than x86-64 only the scalar level is pushed.
    #[cfg_attr(not(target_arch = "x86_64"), allow(clippy::vec_init_then_push))]
    fn detect() -> Vec<Level> {
        let mut v = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if super::avx512() {
                v.push(Level::Avx512);
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                v.push(Level::Avx2Fma);
            }
        }
        v.push(Level::Scalar);
        v
    }

    /// The fastest level of this CPU.
    pub fn best() -> Level {
        Level::available()[0]
    }
}

/// A raw output pointer shared by parallel tasks that each write their own cells of it (the
/// kernels built on the tile split their outputs by rows, heads or channels).
#[derive(Clone, Copy)]
pub(super) struct OutPtr(pub *mut f32);

// SAFETY: the users hand each task disjoint cells and read the output only once every task is
// done.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Through a method, so closures capture the `Send` wrapper rather than the raw field.
    pub fn get(self) -> *mut f32 {
        self.0
    }
}

/// Where a tile reads and writes: `out[r·out_stride + c] = Σ_kk a[r·a_stride + kk] ·
/// b[kk·b_stride + c]` for rows `r < rows` (≤ [`MR`]) and columns `c < NC`.
pub(super) struct TileArgs<'a> {
    pub a: &'a [f32],
    pub a_stride: usize,
    pub rows: usize,
    pub k: usize,
    pub b: &'a [f32],
    pub b_stride: usize,
    pub out: &'a mut [f32],
    pub out_stride: usize,
}

/// One tile at `level` (which the caller checked against the CPU).
///
/// # Panics
/// When a slice is too short for its rows, `k` and strides, or `rows > MR`.
pub(super) fn fma_tile(level: Level, t: TileArgs) {
    let TileArgs {
        a,
        a_stride,
        rows,
        k,
        b,
        b_stride,
        out,
        out_stride,
    } = t;
    assert!(
        (1..=MR).contains(&rows),
        "a tile has 1..=8 rows, got {rows}"
    );
    assert!(a.len() >= (rows - 1) * a_stride + k, "a is too short");
    assert!(
        k == 0 || b.len() >= (k - 1) * b_stride + NC,
        "b is too short"
    );
    assert!(
        out.len() >= (rows - 1) * out_stride + NC,
        "out is too short"
    );
    macro_rules! by_rows {
        ($f:ident) => {
            match rows {
                1 => $f::<1>(a, a_stride, k, b, b_stride, out, out_stride),
                2 => $f::<2>(a, a_stride, k, b, b_stride, out, out_stride),
                3 => $f::<3>(a, a_stride, k, b, b_stride, out, out_stride),
                4 => $f::<4>(a, a_stride, k, b, b_stride, out, out_stride),
                5 => $f::<5>(a, a_stride, k, b, b_stride, out, out_stride),
                6 => $f::<6>(a, a_stride, k, b, b_stride, out, out_stride),
                7 => $f::<7>(a, a_stride, k, b, b_stride, out, out_stride),
                _ => $f::<8>(a, a_stride, k, b, b_stride, out, out_stride),
            }
        };
    }
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller checked the level against the CPU; the bounds are asserted above.
        Level::Avx512 => unsafe { by_rows!(tile_avx512) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Level::Avx2Fma => unsafe { by_rows!(tile_avx2) },
        _ => by_rows!(tile_portable),
    }
}

fn tile_portable<const R: usize>(
    a: &[f32],
    a_stride: usize,
    k: usize,
    b: &[f32],
    b_stride: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    tile_body::<R, false>(a, a_stride, k, b, b_stride, out, out_stride)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2<const R: usize>(
    a: &[f32],
    a_stride: usize,
    k: usize,
    b: &[f32],
    b_stride: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    tile_body::<R, true>(a, a_stride, k, b, b_stride, out, out_stride)
}

/// The portable tile: up to 4 rows × 16 columns at a time (8 AVX2 accumulators).
#[inline(always)]
fn tile_body<const R: usize, const FMA: bool>(
    a: &[f32],
    a_stride: usize,
    k: usize,
    b: &[f32],
    b_stride: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    const SUB_R: usize = 4;
    const SUB_C: usize = 16;
    for r0 in (0..R).step_by(SUB_R) {
        let rows = SUB_R.min(R - r0);
        for c0 in (0..NC).step_by(SUB_C) {
            let mut acc = [[0f32; SUB_C]; SUB_R];
            for kk in 0..k {
                let bv: &[f32; SUB_C] = b[kk * b_stride + c0..][..SUB_C].try_into().unwrap();
                for (r, acc) in acc.iter_mut().enumerate().take(rows) {
                    let x = a[(r0 + r) * a_stride + kk];
                    for c in 0..SUB_C {
                        acc[c] = madd::<FMA>(x, bv[c], acc[c]);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate().take(rows) {
                out[(r0 + r) * out_stride + c0..][..SUB_C].copy_from_slice(acc);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512<const R: usize>(
    a: &[f32],
    a_stride: usize,
    k: usize,
    b: &[f32],
    b_stride: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    for kk in 0..k {
        // SAFETY: `fma_tile` asserted that b holds k rows of NC at `b_stride` and a holds R rows
        // of k at `a_stride`.
        let b0 = _mm512_loadu_ps(bp.add(kk * b_stride));
        let b1 = _mm512_loadu_ps(bp.add(kk * b_stride + 16));
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = _mm512_set1_ps(*ap.add(r * a_stride + kk));
            acc[0] = _mm512_fmadd_ps(x, b0, acc[0]);
            acc[1] = _mm512_fmadd_ps(x, b1, acc[1]);
        }
    }
    let op = out.as_mut_ptr();
    for (r, acc) in acc.iter().enumerate() {
        // SAFETY: out holds R rows of NC at `out_stride` (asserted).
        _mm512_storeu_ps(op.add(r * out_stride), acc[0]);
        _mm512_storeu_ps(op.add(r * out_stride + 16), acc[1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every level and row count gives the f64 sums within rounding, and the FMA levels agree
    /// with each other bit for bit (one FMA chain per output in the same order).
    #[test]
    fn every_level_and_row_count_computes_the_strided_product() {
        let (k, a_stride, b_stride, out_stride) = (37, 41, 45, 50);
        let a: Vec<f32> = (0..MR * a_stride)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0)
            .collect();
        let b: Vec<f32> = (0..k * b_stride)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) / 3.0)
            .collect();
        for rows in 1..=MR {
            let mut by_level = Vec::new();
            for &level in Level::available() {
                let mut out = vec![f32::NAN; (rows - 1) * out_stride + NC];
                fma_tile(
                    level,
                    TileArgs {
                        a: &a,
                        a_stride,
                        rows,
                        k,
                        b: &b,
                        b_stride,
                        out: &mut out,
                        out_stride,
                    },
                );
                for r in 0..rows {
                    for c in 0..NC {
                        let want: f64 = (0..k)
                            .map(|kk| a[r * a_stride + kk] as f64 * b[kk * b_stride + c] as f64)
                            .sum();
                        let got = out[r * out_stride + c] as f64;
                        assert!((got - want).abs() < 1e-4, "{level:?} rows {rows} ({r},{c})");
                    }
                }
                by_level.push((level, out));
            }
            let fma: Vec<_> = by_level
                .iter()
                .filter(|(l, _)| *l != Level::Scalar)
                .collect();
            for w in fma.windows(2) {
                let same = (0..rows).all(|r| {
                    (0..NC).all(|c| {
                        w[0].1[r * out_stride + c].to_bits() == w[1].1[r * out_stride + c].to_bits()
                    })
                });
                assert!(same, "{:?} and {:?} differ at rows {rows}", w[0].0, w[1].0);
            }
        }
    }
}
