//! f32 matrix products against weights packed once, at load: Whisper's f32 linear layers.
//!
//! In a decoder step (1–40 rows; the vocabulary projection alone is 51864 × 384 for tiny, 80 MB)
//! the products are bound by reading the weights, and the GEMM repacked its operand on every
//! call, reading the weights twice and writing a copy. Here the weights sit in panels of [`NC`]
//! output channels (`[n/NC][k][NC]`, each panel one contiguous stream) and a register tile of
//! up to [`MR`] rows × `NC` channels walks `k` once: few rows split the panels across tasks, so
//! the weights cross the memory bus once per call; many rows (the encoder, 1500 per window)
//! split into blocks of rows, each cached panel serving a whole block. Each output is one FMA
//! chain over `k` in order, so a row's result does not depend on how many rows are in the call.
//!
//! The tile is [`super::tile`]'s (AVX-512F, AVX2+FMA or portable); tested against an f64
//! reference.

use super::tile::{fma_tile, Level, OutPtr, TileArgs, MR, NC};
use rayon::prelude::*;
/// Panels per parallel task: enough work (≈ 0.8 MB of weights for k = 384) to amortise a task.
const PANELS_PER_TASK: usize = 16;
/// Rows per parallel task when there are many (a panel is reused by all of them while cached).
const ROWS_PER_TASK: usize = 64;

/// Weights `[n, k]` (row-major, one row per output channel) packed into channel panels.
#[derive(Debug, Clone)]
pub struct PackedF32 {
    n: usize,
    k: usize,
    /// `[n_pad / NC][k][NC]`, zero in the padding channels.
    data: Vec<f32>,
}

impl PackedF32 {
    /// Packs `w` (`[n, k]` row-major).
    pub fn pack(w: &[f32], n: usize, k: usize) -> Self {
        assert_eq!(w.len(), n * k, "weights are not [n, k]");
        let panels = n.div_ceil(NC);
        let mut data = vec![0f32; panels * k * NC];
        for c in 0..n {
            let (p, lane) = (c / NC, c % NC);
            let base = p * k * NC + lane;
            for (kk, &x) in w[c * k..(c + 1) * k].iter().enumerate() {
                data[base + kk * NC] = x;
            }
        }
        Self { n, k, data }
    }

    /// Output channels.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input features.
    pub fn k(&self) -> usize {
        self.k
    }

    fn panel(&self, p: usize) -> &[f32] {
        &self.data[p * self.k * NC..(p + 1) * self.k * NC]
    }
}

/// `out [m, n] = x [m, k] · wᵀ + bias` at the fastest level of this CPU.
pub fn matmul_panels(x: &[f32], m: usize, w: &PackedF32, bias: Option<&[f32]>, out: &mut [f32]) {
    matmul_panels_at(Level::best(), x, m, w, bias, out)
}

/// [`matmul_panels`] at a given level (which the CPU must support).
///
/// # Panics
/// When the level is unsupported or the slices do not have the shapes above.
pub fn matmul_panels_at(
    level: Level,
    x: &[f32],
    m: usize,
    w: &PackedF32,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let (n, k) = (w.n, w.k);
    assert!(Level::available().contains(&level), "{level:?} unsupported");
    assert_eq!(x.len(), m * k, "x is not [m, k]");
    assert_eq!(out.len(), m * n, "out is not [m, n]");
    if let Some(b) = bias {
        assert_eq!(b.len(), n, "bias is not [n]");
    }
    if m == 0 || n == 0 {
        return;
    }
    let panels = n.div_ceil(NC);
    let ptr = OutPtr(out.as_mut_ptr());
    // A tile: rows r0.. (≤ MR) against panel p, bias added, written to `out`.
    let run = |r0: usize, p: usize, tile: &mut [f32; MR * NC]| {
        let c0 = p * NC;
        let cols = NC.min(n - c0);
        let rows = MR.min(m - r0);
        fma_tile(
            level,
            TileArgs {
                a: &x[r0 * k..(r0 + rows) * k],
                a_stride: k,
                rows,
                k,
                b: w.panel(p),
                b_stride: NC,
                out: tile,
                out_stride: NC,
            },
        );
        for (r, t) in tile.chunks_exact(NC).enumerate().take(rows) {
            let mut vals = [0f32; NC];
            for c in 0..cols {
                vals[c] = t[c] + bias.map_or(0.0, |b| b[c0 + c]);
            }
            // SAFETY: row r0 + r, channels c0..c0 + cols lie inside `out` ([m, n], asserted);
            // each (row block, panel) pair belongs to one task.
            unsafe {
                std::ptr::copy_nonoverlapping(vals.as_ptr(), ptr.get().add((r0 + r) * n + c0), cols)
            };
        }
    };
    if m <= ROWS_PER_TASK {
        // Few rows (decoder steps): tasks over panels, so every core streams part of the weights.
        (0..panels.div_ceil(PANELS_PER_TASK))
            .into_par_iter()
            .for_each(|task| {
                let mut tile = [0f32; MR * NC];
                for p in task * PANELS_PER_TASK..((task + 1) * PANELS_PER_TASK).min(panels) {
                    for r0 in (0..m).step_by(MR) {
                        run(r0, p, &mut tile);
                    }
                }
            });
    } else {
        // Many rows (encoder): tasks over blocks of rows; each panel, once in cache, serves
        // every row of the block.
        (0..m.div_ceil(ROWS_PER_TASK))
            .into_par_iter()
            .for_each(|task| {
                let mut tile = [0f32; MR * NC];
                let r_end = ((task + 1) * ROWS_PER_TASK).min(m);
                for p in 0..panels {
                    for r0 in (task * ROWS_PER_TASK..r_end).step_by(MR) {
                        run(r0, p, &mut tile);
                    }
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn every_level_matches_f64_and_rows_do_not_depend_on_the_batch() {
        for &(m, n, k) in &[
            (1, 1, 1),
            (3, 33, 7),
            (8, 64, 384),
            (13, 100, 50),
            (40, 70, 384),
            // Many rows: tasks over row blocks.
            (130, 40, 96),
        ] {
            let (x, w, b) = (values(m * k, 1), values(n * k, 2), values(n, 3));
            let packed = PackedF32::pack(&w, n, k);
            let want: Vec<f64> = (0..m * n)
                .map(|i| {
                    let (r, c) = (i / n, i % n);
                    b[c] as f64
                        + (0..k)
                            .map(|kk| x[r * k + kk] as f64 * w[c * k + kk] as f64)
                            .sum::<f64>()
                })
                .collect();
            for &level in Level::available() {
                let mut got = vec![0f32; m * n];
                matmul_panels_at(level, &x, m, &packed, Some(&b), &mut got);
                let err = got
                    .iter()
                    .zip(&want)
                    .map(|(g, w)| (*g as f64 - w).abs())
                    .fold(0f64, f64::max);
                assert!(err < 1e-4, "{level:?} {m}x{n}x{k}: max error {err}");
                // Each row alone gives the same bits as in the batch.
                for r in 0..m {
                    let mut one = vec![0f32; n];
                    matmul_panels_at(
                        level,
                        &x[r * k..(r + 1) * k],
                        1,
                        &packed,
                        Some(&b),
                        &mut one,
                    );
                    assert_eq!(one, got[r * n..(r + 1) * n], "{level:?} row {r} of {m}");
                }
            }
        }
    }
}
