//! int8 matrix products for linear layers: `y = x·Wᵀ + b` with int8 weights and int8 activations.
//!
//! Weights are quantized once per output channel (symmetric, `scale = amax / 127`), as
//! CTranslate2 stores them; each activation row is quantized on the fly the same way. The
//! products are accumulated exactly in `i32` with the CPU's unsigned×signed byte dot products
//! (`vpdpbusd`), which need the activation as `u8`: rows are stored shifted by +128, and the
//! shift's contribution (`128 · Σ_k w[c][k]`) is subtracted per channel afterwards.
//!
//! Because integer accumulation is exact, every dispatch level ([`Level`]: AMX, AVX-512 VNNI,
//! AVX-VNNI, AVX2, scalar) produces the same `i32` sums, and one shared epilogue turns them
//! into `f32`, so the levels agree bit for bit (tested). The level is picked at run time.
//! Plain AVX2 has no byte dot product that cannot saturate, so its tile widens the bytes to 16
//! bits for `vpmaddwd` (exact): about half VNNI's speed here, still faster than float32 (see
//! [`int8_fast`]).
//!
//! Layout of [`PackedI8`]: output channels in panels of 16; inside a panel, for each group of
//! 4 consecutive `k`, 16 × 4 bytes (channel-major within the group), i.e. exactly one 512-bit
//! operand of `vpdpbusd` per (panel, k-group).

use rayon::prelude::*;
use std::sync::OnceLock;

mod amx;
mod asym;
pub mod attention;
mod quantize;
mod softmax_bf16;
mod tiles;
pub use asym::{matmul_u8_asym, PackedU8Asym};
use quantize::{quantize_row_fast, quantize_rows, quantize_rows_to};
use tiles::tile_scalar;
#[cfg(target_arch = "x86_64")]
use tiles::{tile_avx2, tile_avx512, tile_avxvnni};

/// Output channels per panel (one 512-bit register of `i32`).
const PANEL: usize = 16;
/// Rows per micro-tile.
const MR: usize = 8;
/// Channels per micro-tile (two panels).
const NR: usize = 2 * PANEL;
/// Rows per parallel task.
const ROWS_PER_TASK: usize = 64;

/// Kernel implementations, fastest first (the order of the variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// AMX tiles (`tdpbusd`) for blocks of 16 rows and more, else as [`Level::Avx512Vnni`]
    /// (every AMX CPU has it); see the `amx` module.
    Amx,
    /// 512-bit `vpdpbusd` (AVX512-VNNI with AVX512BW).
    Avx512Vnni,
    /// 256-bit `vpdpbusd` (AVX-VNNI).
    AvxVnni,
    /// Plain AVX2: bytes widened to 16 bits, exact pair sums with `vpmaddwd` (CPUs without
    /// VNNI, e.g. AMD Zen 2 and 3, Intel before Ice Lake and Alder Lake).
    Avx2,
    /// Portable Rust.
    Scalar,
}

impl Level {
    /// Every level this CPU can run, fastest first (always ends with [`Level::Scalar`]);
    /// detected once. `DICTA_INT8_LEVEL` (`avx512vnni`, `avxvnni`, `avx2` or `scalar`) drops the
    /// levels faster than the one it names, to measure what a CPU without them runs.
    pub fn available() -> &'static [Level] {
        static LEVELS: OnceLock<Vec<Level>> = OnceLock::new();
        LEVELS.get_or_init(|| {
            let mut levels = Level::detect();
            if let Some(cap) = std::env::var("DICTA_INT8_LEVEL")
                .ok()
                .and_then(|v| Level::named(&v))
            {
                levels.retain(|&l| l >= cap);
            }
            tracing::debug!(?levels, "int8 kernel levels");
            levels
        })
    }

    /// The level `DICTA_INT8_LEVEL` names (`None` for an unknown name).
    fn named(name: &str) -> Option<Level> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "amx" => Level::Amx,
            "avx512vnni" => Level::Avx512Vnni,
            "avxvnni" => Level::AvxVnni,
            "avx2" => Level::Avx2,
            "scalar" => Level::Scalar,
            _ => return None,
        })
    }

    // Elsewhere than x86-64 only the scalar level is pushed.
    #[cfg_attr(not(target_arch = "x86_64"), allow(clippy::vec_init_then_push))]
    fn detect() -> Vec<Level> {
        let mut v = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if super::avx512()
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vnni")
            {
                if amx::available() {
                    v.push(Level::Amx);
                }
                v.push(Level::Avx512Vnni);
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("avxvnni") {
                v.push(Level::AvxVnni);
            }
            if is_x86_feature_detected!("avx2") {
                v.push(Level::Avx2);
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

/// Whether this CPU has a vector int8 kernel (VNNI or AVX2), so int8 is faster than float32
/// here. On AVX2 without VNNI (AMD Zen 2 and 3, Intel before Ice Lake), emulated on a Zen 4
/// (`DICTA_NO_AVX512=1`): Whisper tiny.en 1.5–2.0× float32's speed; with the int8 tiles alone
/// held to AVX2, ECAPA (diarization) 1.4×, Moonshine tiny 1.2× (docs/benchmarks.md, session 38).
pub fn int8_fast() -> bool {
    Level::best() != Level::Scalar
}

/// Weights `[n, k]` quantized per output channel and packed for the kernels.
#[derive(Debug, Clone)]
pub struct PackedI8 {
    n: usize,
    k: usize,
    /// `k` rounded up to a multiple of 4.
    k4: usize,
    /// `n` rounded up to a multiple of [`NR`].
    n_pad: usize,
    /// `[n_pad / 16][k4 / 4][16][4]`, zero in the padding.
    data: Vec<i8>,
    /// Dequantization scale per channel `[n_pad]` (0 in the padding).
    scales: Vec<f32>,
    /// `128 · Σ_k q[c][k]` per channel `[n_pad]`: the activation shift's contribution.
    comp: Vec<i32>,
}

impl PackedI8 {
    /// Quantizes f32 weights `w` (`[n, k]` row-major) per output channel: `q = round(w · 127 /
    /// amax)`, as CTranslate2's converter does.
    pub fn quantize(w: &[f32], n: usize, k: usize) -> Self {
        assert_eq!(w.len(), n * k, "weights are not [n, k]");
        let mut q = vec![0i8; n * k];
        let mut scales = vec![0f32; n];
        if k == 0 {
            return Self::from_quantized(&q, &scales, n, k);
        }
        // Channels are independent: quantized in parallel (model loading), the same bytes.
        q.par_chunks_mut(k)
            .zip(scales.par_iter_mut())
            .zip(w.par_chunks(k))
            .for_each_init(
                || vec![0u8; k],
                |bytes, ((q, scale), row)| *scale = quantize_channel(row, q, bytes),
            );
        Self::from_quantized(&q, &scales, n, k)
    }

    /// Packs already quantized weights `q` (`[n, k]`) with their per-channel `scales` `[n]`.
    pub fn from_quantized(q: &[i8], scales: &[f32], n: usize, k: usize) -> Self {
        assert_eq!(q.len(), n * k, "weights are not [n, k]");
        assert_eq!(scales.len(), n, "one scale per output channel");
        let k4 = k.next_multiple_of(4);
        let n_pad = n.next_multiple_of(NR);
        let mut data = vec![0i8; n_pad * k4];
        let mut comp = vec![0i32; n_pad];
        // One panel of PANEL channels is one contiguous block of `data`: packed in parallel
        // (nothing to pack without inputs).
        data.par_chunks_mut((PANEL * k4).max(1))
            .zip(comp.par_chunks_mut(PANEL))
            .enumerate()
            .for_each(|(panel, (block, comp))| {
                for (lane, comp) in comp.iter_mut().enumerate() {
                    let c = panel * PANEL + lane;
                    if c >= n {
                        break;
                    }
                    let row = &q[c * k..(c + 1) * k];
                    // Whole groups of four as fixed-size copies: a `copy_from_slice` of a
                    // run-time length was a `memmove` call per group, most of the time of
                    // packing an attention head's keys (the encoder packs them per head).
                    let mut groups = row.chunks_exact(4);
                    for (g, four) in (&mut groups).enumerate() {
                        let at = lane * 4 + g * PANEL * 4;
                        let four: &[i8; 4] = four.try_into().expect("a group of four");
                        block[at..at + 4].copy_from_slice(four);
                    }
                    let tail = groups.remainder();
                    if !tail.is_empty() {
                        let at = lane * 4 + (k / 4) * PANEL * 4;
                        block[at..at + tail.len()].copy_from_slice(tail);
                    }
                    *comp = 128 * row.iter().map(|&v| i32::from(v)).sum::<i32>();
                }
            });
        let mut s = scales.to_vec();
        s.resize(n_pad, 0.0);
        Self {
            n,
            k,
            k4,
            n_pad,
            data,
            scales: s,
            comp,
        }
    }

    /// Output channels.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input features.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The 64 bytes of panel `p`, k-group `g`.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn group(&self, p: usize, g: usize) -> *const i8 {
        debug_assert!(p < self.n_pad / PANEL && g < self.k4 / 4);
        // SAFETY: in bounds by the layout (`data.len() == n_pad * k4`).
        unsafe { self.data.as_ptr().add((p * (self.k4 / 4) + g) * PANEL * 4) }
    }
}

/// Quantizes one weight channel `row` into `q` (`bytes`: scratch of `row.len()`) as
/// [`PackedI8::quantize`] describes; returns its scale: `q = round(w · 127 / amax)`, as
/// CTranslate2's converter does.
fn quantize_channel(row: &[f32], q: &mut [i8], bytes: &mut [u8]) -> f32 {
    // The activations' vectorised quantizer gives the same bytes (the same scale, and
    // round-half-even through a magic constant); rows it flags (zero, non-finite) take
    // the plain loop below. (It also quantizes the int8 attention's keys per call.)
    let scale = quantize_row_fast(row, bytes);
    if scale.is_finite() && scale > 0.0 {
        for (o, &b) in q.iter_mut().zip(bytes.iter()) {
            *o = (i32::from(b) - 128) as i8;
        }
        return scale;
    }
    let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
    // An all-zero channel quantizes to zeros (any scale will do).
    let (scale, inv) = if amax > 0.0 {
        (amax / 127.0, 127.0 / amax)
    } else {
        (1.0, 0.0)
    };
    for (o, v) in q.iter_mut().zip(row) {
        *o = (v * inv).round_ties_even().clamp(-127.0, 127.0) as i8;
    }
    scale
}

/// `out [m, n] = x [m, k] · Wᵀ + bias`, with `x` quantized per row on the fly, at the
/// fastest [`Level`] of this CPU.
pub fn matmul_i8(x: &[f32], m: usize, w: &PackedI8, bias: Option<&[f32]>, out: &mut [f32]) {
    matmul_i8_at(Level::best(), x, m, w, bias, out);
}

/// [`matmul_i8`] at a given level (which the CPU must support: see [`Level::available`]).
pub fn matmul_i8_at(
    level: Level,
    x: &[f32],
    m: usize,
    w: &PackedI8,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let (k, n) = (w.k, w.n);
    check_args(level, x, m, k, n, bias, out);
    if m == 0 || n == 0 {
        return;
    }
    if level == Level::Amx && w.k4.is_multiple_of(amx::TILE_K) {
        par_tiles(out, m, n, w.n_pad / NR, |row0, rows, pairs, out| {
            let x = &x[row0 * k..(row0 + rows) * k];
            let (a, sa) = quantize_rows_to(x, rows, k, w.k4, amx::TILE_ROWS);
            let mut sums = [[0i32; NR]; 2 * amx::TILE_ROWS];
            // SAFETY: `Level::Amx` is only listed where `amx::available()` said yes.
            let tiles = unsafe { amx::Tiles::load() };
            for pair in pairs {
                let p = 2 * pair;
                for r in (0..rows).step_by(2 * amx::TILE_ROWS) {
                    let two = r + amx::TILE_ROWS < rows;
                    // SAFETY: `a` holds whole 16-row blocks of k4 bytes (k4 a multiple of 64)
                    // and `w` whole panel pairs.
                    unsafe { amx::block(&tiles, &a[r * w.k4..], w, p, two, &mut sums) };
                    epilogue_fast(&sums, w, p * PANEL, &sa[r..], bias, out, r, rows, n);
                }
            }
        });
        return;
    }
    par_tiles(out, m, n, w.n_pad / NR, |row0, rows, pairs, out| {
        let (a, sa) = quantize_rows(&x[row0 * k..(row0 + rows) * k], rows, k, w.k4);
        let mut tile = [[0i32; NR]; MR];
        for pair in pairs {
            let p = 2 * pair;
            for r in (0..rows).step_by(MR) {
                let pf = prefetches(r, rows);
                tile_at(
                    level,
                    &a[r * w.k4..],
                    w,
                    p,
                    (rows - r).min(MR),
                    pf,
                    &mut tile,
                );
                epilogue_fast(&tile, w, p * PANEL, &sa[r..], bias, out, r, rows, n);
            }
        }
    });
}

/// Disjoint parts of an output `[m, n]` written from parallel tasks.
#[derive(Clone, Copy)]
pub(super) struct OutRows {
    ptr: *mut f32,
    row0: usize,
    rows: usize,
    n: usize,
}

// SAFETY: tasks write disjoint (row, channel) cells (see `par_tiles`) and nothing reads them
// until every task is done.
unsafe impl Send for OutRows {}
unsafe impl Sync for OutRows {}

impl OutRows {
    /// Row `r` (counted from the task's first row), channels `c0..c0 + len`.
    ///
    /// # Panics
    /// Outside the task's rows or the output's channels.
    pub(super) fn cols(&mut self, r: usize, c0: usize, len: usize) -> &mut [f32] {
        assert!(r < self.rows && c0 + len <= self.n, "tile outside its task");
        // SAFETY: in bounds (asserted; the task's rows lie inside `out`), and `par_tiles`
        // gives these cells to this task alone; `&mut self` keeps one slice alive at a time.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add((self.row0 + r) * self.n + c0), len) }
    }
}

/// Runs `f(row0, rows, pairs, out)` over tasks that cover `out [m, n]`: blocks of
/// [`ROWS_PER_TASK`] rows, and when there are too few of those for the threads (a decoder
/// step has 1–40 rows), ranges of panel pairs too, so that every core streams part of the
/// weights. Every output cell is computed the same way whatever the split.
pub(super) fn par_tiles(
    out: &mut [f32],
    m: usize,
    n: usize,
    pairs: usize,
    f: impl Fn(usize, usize, std::ops::Range<usize>, &mut OutRows) + Sync,
) {
    assert_eq!(out.len(), m * n, "out is not [m, n]");
    let row_blocks = m.div_ceil(ROWS_PER_TASK);
    let want = 4 * rayon::current_num_threads();
    // At least 8 panel pairs (256 channels) per task, so a task amortises its quantization.
    let splits = want.div_ceil(row_blocks).clamp(1, pairs.div_ceil(8).max(1));
    let per_split = pairs.div_ceil(splits);
    let ptr = out.as_mut_ptr() as usize;
    (0..row_blocks * splits).into_par_iter().for_each(|task| {
        let (block, split) = (task / splits, task % splits);
        let row0 = block * ROWS_PER_TASK;
        let rows = ROWS_PER_TASK.min(m - row0);
        let p0 = split * per_split;
        let p1 = (p0 + per_split).min(pairs);
        if p0 >= p1 {
            return;
        }
        let mut o = OutRows {
            ptr: ptr as *mut f32,
            row0,
            rows,
            n,
        };
        f(row0, rows, p0..p1, &mut o);
    });
}

/// Panics unless `x` is `[m, k]`, `out` `[m, n]`, `bias` (if any) `[n]` and this CPU runs
/// `level`: the contract of every matmul entry point of this module.
fn check_args(
    level: Level,
    x: &[f32],
    m: usize,
    k: usize,
    n: usize,
    bias: Option<&[f32]>,
    out: &[f32],
) {
    assert_eq!(x.len(), m * k, "x is not [m, k]");
    assert_eq!(out.len(), m * n, "out is not [m, n]");
    if let Some(b) = bias {
        assert_eq!(b.len(), n, "one bias per output channel");
    }
    assert!(
        Level::available().contains(&level),
        "this CPU cannot run {level:?}"
    );
}

/// The sums of the first `rows` (1..=MR) rows of `a` (whole MR-row blocks of `k4` bytes) with
/// panels `p, p + 1` at `level`, into the first `rows` rows of `tile` (the others are left as
/// they were).
///
/// Only the rows asked for are computed: a decoder step has 1–8 rows, and always doing 8 made
/// a one-row step's products (the 51,864-channel vocabulary projection above all) compute
/// bound on rows nobody reads, where they should be limited by streaming the weights. With
/// `prefetch` ([`prefetches`]), the tile also requests a later panel pair's weights.
#[inline(always)]
fn tile_at(
    level: Level,
    a: &[u8],
    w: &PackedI8,
    p: usize,
    rows: usize,
    prefetch: bool,
    tile: &mut [[i32; NR]; MR],
) {
    debug_assert!(rows >= 1);
    #[cfg(target_arch = "x86_64")]
    macro_rules! by_rows {
        ($f:ident, $pf:literal $(, $r:literal)*) => {
            match rows {
                1 => $f::<1, $pf>(a, w, p, tile),
                2 => $f::<2, $pf>(a, w, p, tile),
                3 => $f::<3, $pf>(a, w, p, tile),
                4 => $f::<4, $pf>(a, w, p, tile),
                $($r => $f::<$r, $pf>(a, w, p, tile),)*
                _ => $f::<MR, $pf>(a, w, p, tile),
            }
        };
    }
    match (level, prefetch) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: callers check the level against the CPU's features (`Level::available`);
        // `a` holds whole MR-row blocks of k4 bytes and `w` whole panel pairs. 5–7 rows (a
        // beam of 5 on one window) fit AVX-512's registers as well.
        (Level::Amx | Level::Avx512Vnni, true) => unsafe { by_rows!(tile_avx512, true, 5, 6, 7) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Level::Amx | Level::Avx512Vnni, false) => unsafe { by_rows!(tile_avx512, false, 5, 6, 7) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Level::AvxVnni, true) => unsafe { by_rows!(tile_avxvnni, true) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Level::AvxVnni, false) => unsafe { by_rows!(tile_avxvnni, false) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Level::Avx2, true) => unsafe { by_rows!(tile_avx2, true, 5, 6, 7) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Level::Avx2, false) => unsafe { by_rows!(tile_avx2, false, 5, 6, 7) },
        _ => tile_scalar(a, w, p, rows, tile),
    }
}

/// Whether the tile of row block `r` (of a task's `rows`) prefetches the weights of a later
/// panel pair: in decoder steps, whose few rows (at most two blocks: a beam of 5 on three
/// windows is 15) use each panel pair once and stream the weights from memory; the first
/// block fetches for the next pairs. The encoder's tasks of up to [`ROWS_PER_TASK`] rows reuse
/// each pair from cache.
fn prefetches(r: usize, rows: usize) -> bool {
    r == 0 && rows <= 2 * MR
}

/// [`epilogue`] compiled for the widest vectors the CPU has (the callers' closures are
/// compiled for baseline x86-64, i.e. 4-lane SSE). The arithmetic is element-wise without
/// fused multiply-adds, so every width gives the same bits.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn epilogue_fast(
    tile: &[[i32; NR]],
    w: &PackedI8,
    c0: usize,
    sa: &[f32],
    bias: Option<&[f32]>,
    out: &mut OutRows,
    r0: usize,
    rows: usize,
    n: usize,
) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn wide(
            tile: &[[i32; NR]],
            w: &PackedI8,
            c0: usize,
            sa: &[f32],
            bias: Option<&[f32]>,
            out: &mut OutRows,
            r0: usize,
            rows: usize,
            n: usize,
        ) {
            epilogue(tile, w, c0, sa, bias, out, r0, rows, n)
        }
        #[target_feature(enable = "avx2")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn mid(
            tile: &[[i32; NR]],
            w: &PackedI8,
            c0: usize,
            sa: &[f32],
            bias: Option<&[f32]>,
            out: &mut OutRows,
            r0: usize,
            rows: usize,
            n: usize,
        ) {
            epilogue(tile, w, c0, sa, bias, out, r0, rows, n)
        }
        if super::avx512() {
            // SAFETY: AVX-512F was detected.
            return unsafe { wide(tile, w, c0, sa, bias, out, r0, rows, n) };
        }
        if is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 was detected.
            return unsafe { mid(tile, w, c0, sa, bias, out, r0, rows, n) };
        }
    }
    epilogue(tile, w, c0, sa, bias, out, r0, rows, n)
}

/// `out = (acc - comp) · scale_row · scale_channel + bias` for one tile, shared by every
/// level so they agree bit for bit.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn epilogue(
    tile: &[[i32; NR]],
    w: &PackedI8,
    c0: usize,
    sa: &[f32],
    bias: Option<&[f32]>,
    out: &mut OutRows,
    r0: usize,
    rows: usize,
    n: usize,
) {
    let cols = NR.min(n.saturating_sub(c0));
    for (i, acc) in tile
        .iter()
        .enumerate()
        .take(rows.saturating_sub(r0).min(tile.len()))
    {
        let o = out.cols(r0 + i, c0, cols);
        let (comp, scales) = (&w.comp[c0..c0 + cols], &w.scales[c0..c0 + cols]);
        let s = sa[i];
        // One loop per case, over slices, so that each vectorises.
        match bias {
            Some(b) => {
                let b = &b[c0..c0 + cols];
                for j in 0..cols {
                    o[j] = (acc[j] - comp[j]) as f32 * (s * scales[j]) + b[j];
                }
            }
            None => {
                for j in 0..cols {
                    o[j] = (acc[j] - comp[j]) as f32 * (s * scales[j]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }

    fn f32_ref(x: &[f32], m: usize, w: &[f32], n: usize, k: usize, b: &[f32]) -> Vec<f32> {
        let mut y = vec![0f32; m * n];
        for r in 0..m {
            for c in 0..n {
                let dot: f64 = (0..k)
                    .map(|i| f64::from(x[r * k + i]) * f64::from(w[c * k + i]))
                    .sum();
                y[r * n + c] = dot as f32 + b[c];
            }
        }
        y
    }

    /// Every level the CPU has gives the scalar reference's outputs bit for bit, on odd
    /// shapes (tails in m, n and k), and all track the f32 product within int8 error.
    #[test]
    fn every_level_equals_scalar_and_tracks_f32() {
        let mut seed = 42u64;
        for &(m, n, k) in &[
            (1usize, 1usize, 1usize),
            // Decoder steps: 1–7 rows take the narrower tiles of `tile_at`.
            (1, 70, 384),
            // One row with an odd number of k-groups (the two-group loop's tail).
            (1, 50, 20),
            (1, 2000, 132),
            (5, 40, 384),
            (6, 33, 20),
            (7, 64, 96),
            (2, 33, 40),
            (4, 64, 96),
            (3, 17, 5),
            (8, 32, 64),
            (9, 33, 67),
            (70, 100, 384),
            (130, 48, 1536),
            (65, 1152, 384),
            // Few rows, many channels: tasks split the channels too (`par_tiles`), and tiles
            // prefetch later panel pairs (`prefetches`: one and two row blocks).
            (5, 2000, 96),
            (12, 700, 64),
            // Whole and partial AMX blocks (16 and 32 rows; k a multiple of 64 or not).
            (16, 64, 64),
            (32, 96, 128),
            (47, 40, 192),
            (64, 32, 100),
        ] {
            let x: Vec<f32> = (0..m * k).map(|_| lcg(&mut seed)).collect();
            let w: Vec<f32> = (0..n * k).map(|_| lcg(&mut seed) * 0.2).collect();
            let b: Vec<f32> = (0..n).map(|_| lcg(&mut seed)).collect();
            let packed = PackedI8::quantize(&w, n, k);
            let mut want = vec![0f32; m * n];
            matmul_i8_at(Level::Scalar, &x, m, &packed, Some(&b), &mut want);
            for &level in Level::available() {
                let mut got = vec![f32::NAN; m * n];
                matmul_i8_at(level, &x, m, &packed, Some(&b), &mut got);
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{level:?} differs from scalar at m {m} n {n} k {k}");
            }
            let exact = f32_ref(&x, m, &w, n, k, &b);
            // Two 8-bit roundings per term, random over k terms: error ~ sqrt(k) · 1e-4 here;
            // a wrong kernel is off by O(1).
            let tol = 1.2e-3 * (k as f32).sqrt() + 1e-6;
            let worst = want
                .iter()
                .zip(&exact)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < tol, "m {m} n {n} k {k}: max error {worst} > {tol}");
        }
    }

    /// At the ends of the byte ranges (activations quantized to 255 and 0 after the shift,
    /// weights to ±127) the sums stay exact at every level: AVX2's 16-bit pair products must
    /// not saturate (as `vpmaddubsw` would), nor the 32-bit sums over a long `k` overflow.
    #[test]
    fn extreme_bytes_give_exact_sums_at_every_level() {
        let (n, k) = (40usize, 4100usize);
        // Channel c: all +0.5 or all −0.5, so every weight quantizes to ±127.
        let w: Vec<f32> = (0..n * k)
            .map(|i| if (i / k) % 2 == 0 { 0.5 } else { -0.5 })
            .collect();
        let packed = PackedI8::quantize(&w, n, k);
        // Rows of +1 (bytes 255), −1 (bytes 1) and alternating signs, 9 rows (a whole tile and
        // one more).
        let m = 9;
        let x: Vec<f32> = (0..m * k)
            .map(|i| match (i / k) % 3 {
                0 => 1.0,
                1 => -1.0,
                _ => {
                    if i % 2 == 0 {
                        1.0
                    } else {
                        -1.0
                    }
                }
            })
            .collect();
        for &level in Level::available() {
            let mut got = vec![f32::NAN; m * n];
            matmul_i8_at(level, &x, m, &packed, None, &mut got);
            for r in 0..m {
                for c in 0..n {
                    let sign = if c % 2 == 0 { 1.0 } else { -1.0 };
                    let want = match r % 3 {
                        0 => sign * 0.5 * k as f32,
                        1 => -sign * 0.5 * k as f32,
                        _ => 0.0,
                    };
                    let y = got[r * n + c];
                    assert!(
                        (y - want).abs() <= 1e-3 * (k as f32),
                        "{level:?} row {r} channel {c}: {y}, want {want}"
                    );
                }
            }
        }
    }

    /// Each row's result is the same whatever else shares the call, bit for bit, including
    /// calls whose tasks split the channels.
    #[test]
    fn rows_alone_equal_rows_in_a_call() {
        let mut seed = 7u64;
        let (n, k) = (3000, 64);
        let w: Vec<f32> = (0..n * k).map(|_| lcg(&mut seed) * 0.2).collect();
        let packed = PackedI8::quantize(&w, n, k);
        for m in [2usize, 9, 70] {
            let x: Vec<f32> = (0..m * k).map(|_| lcg(&mut seed)).collect();
            let mut all = vec![0f32; m * n];
            matmul_i8(&x, m, &packed, None, &mut all);
            for r in [0, m - 1] {
                let mut one = vec![0f32; n];
                matmul_i8(&x[r * k..(r + 1) * k], 1, &packed, None, &mut one);
                assert_eq!(one, all[r * n..(r + 1) * n], "row {r} of {m}");
            }
        }
    }

    #[test]
    fn zero_rows_and_columns_give_the_bias() {
        let (m, n, k) = (3, 5, 8);
        let x = vec![0f32; m * k];
        let w = vec![0f32; n * k];
        let b = [1.0, -2.0, 3.0, 0.5, 0.0];
        let packed = PackedI8::quantize(&w, n, k);
        let mut y = vec![9f32; m * n];
        matmul_i8(&x, m, &packed, Some(&b), &mut y);
        for r in 0..m {
            assert_eq!(&y[r * n..(r + 1) * n], &b);
        }
        // No inputs at all (k = 0): packs, and gives the bias too.
        let packed = PackedI8::quantize(&[], n, 0);
        matmul_i8(&[], m, &packed, Some(&b), &mut y);
        for r in 0..m {
            assert_eq!(&y[r * n..(r + 1) * n], &b);
        }
    }

    #[test]
    fn prequantized_weights_pack_like_quantized_ones() {
        // k not a multiple of 4; a zero row and one of tiny values (the vectorised quantizer's
        // special cases) among ordinary rows.
        let (n, k) = (20, 13);
        let mut seed = 7u64;
        let mut w: Vec<f32> = (0..n * k).map(|_| lcg(&mut seed)).collect();
        w[3 * k..4 * k].fill(0.0);
        for v in &mut w[5 * k..6 * k] {
            *v *= 1e-30;
        }
        let a = PackedI8::quantize(&w, n, k);
        let q: Vec<i8> = (0..n)
            .flat_map(|c| {
                let row = &w[c * k..(c + 1) * k];
                let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
                row.iter()
                    .map(move |v| (v * 127.0 / amax).round_ties_even() as i8)
                    .collect::<Vec<_>>()
            })
            .collect();
        let b = PackedI8::from_quantized(&q, &a.scales[..n], n, k);
        assert_eq!(a.data, b.data);
        assert_eq!(a.comp, b.comp);
        for c in 0..n {
            let amax = w[c * k..(c + 1) * k]
                .iter()
                .fold(0f32, |m, v| m.max(v.abs()));
            let want = if amax > 0.0 { amax / 127.0 } else { 1.0 };
            assert_eq!(a.scales[c], want, "scale of channel {c}");
        }
    }
}
