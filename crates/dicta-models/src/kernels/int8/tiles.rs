//! The int8 micro-kernels: an `MR`-row × `NR`-channel tile of exact `i32` sums of shifted
//! `u8` activations times packed `i8` weights, per dispatch level (AVX-512 VNNI, AVX-VNNI, and
//! the scalar reference every level equals bit for bit).

use super::{PackedI8, MR, NR, PANEL};

/// Panel pairs ahead of the current one whose weights a prefetching tile (`PF`) requests, one
/// cache line per k-group and panel as it goes. A decoder step streams each weight once per
/// call, and a few rows leave the tile's sums too quick for the hardware prefetcher alone:
/// the vocabulary projection of 1–8 rows (51,865 × 384) took 28–43% less time with them
/// (docs/benchmarks.md, session 28); 1, 2 and 4 pairs ahead were within noise of each other.
#[cfg(target_arch = "x86_64")]
const PF_AHEAD: usize = 2;

/// Requests the cache lines of k-group `g` of the panel pair `PF_AHEAD` pairs after `p`, if
/// `w` has it (a prefetch never faults, but the address must stay inside `w`'s data).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn prefetch_ahead(w: &PackedI8, p: usize, g: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let ahead = p + 2 * PF_AHEAD;
    if ahead + 1 < w.n_pad / PANEL {
        _mm_prefetch::<_MM_HINT_T0>(w.group(ahead, g));
        _mm_prefetch::<_MM_HINT_T0>(w.group(ahead + 1, g));
    }
}

/// The reference: the same sums in plain Rust.
pub(super) fn tile_scalar(
    a: &[u8],
    w: &PackedI8,
    p: usize,
    rows: usize,
    tile: &mut [[i32; NR]; MR],
) {
    let groups = w.k4 / 4;
    for (i, acc) in tile.iter_mut().enumerate().take(rows) {
        let row = &a[i * w.k4..(i + 1) * w.k4];
        for (half, accs) in acc.chunks_exact_mut(PANEL).enumerate() {
            let panel =
                &w.data[(p + half) * groups * PANEL * 4..(p + half + 1) * groups * PANEL * 4];
            accs.fill(0);
            for g in 0..groups {
                let av = &row[g * 4..g * 4 + 4];
                let wg = &panel[g * PANEL * 4..(g + 1) * PANEL * 4];
                for (lane, s) in accs.iter_mut().enumerate() {
                    let wl = &wg[lane * 4..lane * 4 + 4];
                    *s += (0..4)
                        .map(|t| i32::from(av[t]) * i32::from(wl[t]))
                        .sum::<i32>();
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn tile_avx512<const R: usize, const PF: bool>(
    a: &[u8],
    w: &PackedI8,
    p: usize,
    tile: &mut [[i32; NR]; MR],
) {
    use std::arch::x86_64::*;
    let k4 = w.k4;
    let ap = a.as_ptr();
    // One row (a greedy decoder step, the vocabulary projection above all): two
    // accumulators per panel, even and odd k-groups, so that four independent `vpdpbusd`
    // chains hide its latency instead of two (the weights stream from cache; 10-15% faster
    // on an L3-resident 51,864 × 384 projection, best of 12 interleaved runs). The sums are
    // exact integers, so the order does not change them.
    if R == 1 {
        let groups = k4 / 4;
        let mut s = [_mm512_setzero_si512(); 4];
        let mut g = 0;
        while g + 2 <= groups {
            if PF {
                prefetch_ahead(w, p, g);
                prefetch_ahead(w, p, g + 1);
            }
            let a0 = _mm512_set1_epi32((ap.add(g * 4) as *const i32).read_unaligned());
            let a1 = _mm512_set1_epi32((ap.add(g * 4 + 4) as *const i32).read_unaligned());
            s[0] = _mm512_dpbusd_epi32(s[0], a0, _mm512_loadu_si512(w.group(p, g) as *const _));
            s[1] = _mm512_dpbusd_epi32(s[1], a0, _mm512_loadu_si512(w.group(p + 1, g) as *const _));
            s[2] = _mm512_dpbusd_epi32(s[2], a1, _mm512_loadu_si512(w.group(p, g + 1) as *const _));
            s[3] = _mm512_dpbusd_epi32(
                s[3],
                a1,
                _mm512_loadu_si512(w.group(p + 1, g + 1) as *const _),
            );
            g += 2;
        }
        if g < groups {
            let a0 = _mm512_set1_epi32((ap.add(g * 4) as *const i32).read_unaligned());
            s[0] = _mm512_dpbusd_epi32(s[0], a0, _mm512_loadu_si512(w.group(p, g) as *const _));
            s[1] = _mm512_dpbusd_epi32(s[1], a0, _mm512_loadu_si512(w.group(p + 1, g) as *const _));
        }
        let t = &mut tile[0];
        _mm512_storeu_si512(t.as_mut_ptr() as *mut _, _mm512_add_epi32(s[0], s[2]));
        _mm512_storeu_si512(
            t.as_mut_ptr().add(PANEL) as *mut _,
            _mm512_add_epi32(s[1], s[3]),
        );
        return;
    }
    let mut acc = [[_mm512_setzero_si512(); 2]; R];
    for g in 0..k4 / 4 {
        if PF {
            prefetch_ahead(w, p, g);
        }
        let b0 = _mm512_loadu_si512(w.group(p, g) as *const _);
        let b1 = _mm512_loadu_si512(w.group(p + 1, g) as *const _);
        for (i, acc) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_epi32((ap.add(i * k4 + g * 4) as *const i32).read_unaligned());
            acc[0] = _mm512_dpbusd_epi32(acc[0], av, b0);
            acc[1] = _mm512_dpbusd_epi32(acc[1], av, b1);
        }
    }
    for (t, acc) in tile.iter_mut().zip(&acc) {
        _mm512_storeu_si512(t.as_mut_ptr() as *mut _, acc[0]);
        _mm512_storeu_si512(t.as_mut_ptr().add(PANEL) as *mut _, acc[1]);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avxvnni")]
pub(super) unsafe fn tile_avxvnni<const R: usize, const PF: bool>(
    a: &[u8],
    w: &PackedI8,
    p: usize,
    tile: &mut [[i32; NR]; MR],
) {
    use std::arch::x86_64::*;
    let k4 = w.k4;
    let ap = a.as_ptr();
    // 16 ymm registers: up to four rows × four 8-channel quarters at a time.
    const { assert!(R <= 4 || R == MR) };
    let (passes, per_pass) = if R <= 4 { (1, R) } else { (2, 4) };
    for half_rows in 0..passes {
        let mut acc = [[_mm256_setzero_si256(); 4]; 4];
        let acc = &mut acc[..per_pass];
        for g in 0..k4 / 4 {
            if PF && half_rows == 0 {
                prefetch_ahead(w, p, g);
            }
            let g0 = w.group(p, g);
            let g1 = w.group(p + 1, g);
            let b = [
                _mm256_loadu_si256(g0 as *const _),
                _mm256_loadu_si256(g0.add(32) as *const _),
                _mm256_loadu_si256(g1 as *const _),
                _mm256_loadu_si256(g1.add(32) as *const _),
            ];
            for (i, acc) in acc.iter_mut().enumerate() {
                let row = half_rows * (MR / 2) + i;
                let av =
                    _mm256_set1_epi32((ap.add(row * k4 + g * 4) as *const i32).read_unaligned());
                for q in 0..4 {
                    acc[q] = _mm256_dpbusd_avx_epi32(acc[q], av, b[q]);
                }
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            let t = &mut tile[half_rows * (MR / 2) + i];
            for (q, v) in acc.iter().enumerate() {
                _mm256_storeu_si256(t.as_mut_ptr().add(q * 8) as *mut _, *v);
            }
        }
    }
}

/// Plain AVX2, which has no byte dot product that cannot saturate (`vpmaddubsw` clips pairs
/// of `u8 · i8` products to `i16`): bytes are widened to 16 bits and `vpmaddwd` sums each
/// pair of products into an `i32` lane exactly (|u8 · i8| ≤ 32 640, so a pair fits), so the
/// sums are the other levels' to the bit. A 4-channel quarter of a panel's k-group (16 bytes)
/// widens to one register whose lanes hold each channel's two pair sums; `vphaddd` joins them
/// at the end. The weights still stream as bytes, a quarter of float32's: decoder steps, which
/// wait on them, gain most.
///
/// 16 registers hold `ROWS × CH` sums, the rows' activations and a weight register, so a tile
/// runs as passes of (1 row × 32 channels), (2 × 16) or (up to 4 × 8): every weight is read
/// once per tile, the activations (a few KB, in L1) once per pass.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn tile_avx2<const R: usize, const PF: bool>(
    a: &[u8],
    w: &PackedI8,
    p: usize,
    tile: &mut [[i32; NR]; MR],
) {
    use std::arch::x86_64::*;
    debug_assert!(a.len() >= R * w.k4, "a tile's rows are whole");
    // One or two rows (decoder steps) run one or two passes, which widen a k-group's bytes
    // as they go: widening the rows first would redo it for every panel pair (the vocabulary
    // projection of one row calls 1621 tiles; 5% of a short-clip run went there).
    match R {
        1 => return pass_avx2::<1, 8, PF>(Rows::Bytes(a), w, p, 0, 0, tile),
        2 => {
            pass_avx2::<2, 4, PF>(Rows::Bytes(a), w, p, 0, 0, tile);
            return pass_avx2::<2, 4, false>(Rows::Bytes(a), w, p, 0, 4, tile);
        }
        _ => {}
    }
    thread_local! {
        static WIDE: std::cell::RefCell<Vec<i16>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let k4 = w.k4;
    WIDE.with_borrow_mut(|wide| {
        // From 3 rows a tile runs 4 or 8 passes: its rows are widened to 16 bits once, so a
        // pass broadcasts a k-group's four activations with one load (12% faster on 1500-row
        // products here).
        wide.resize(R * k4, 0);
        let (src, dst) = (a.as_ptr(), wide.as_mut_ptr());
        let mut i = 0;
        while i + 16 <= R * k4 {
            let v = _mm_loadu_si128(src.add(i) as *const _);
            _mm256_storeu_si256(dst.add(i) as *mut _, _mm256_cvtepu8_epi16(v));
            i += 16;
        }
        for j in i..R * k4 {
            *dst.add(j) = i16::from(*src.add(j));
        }
        let a = Rows::Wide(&wide[..]);
        for ch0 in (0..NR / 4).step_by(2) {
            let pf = PF && ch0 == 0;
            macro_rules! rows {
                ($rows:literal, $row0:expr) => {
                    if pf {
                        pass_avx2::<$rows, 2, true>(a, w, p, $row0, ch0, tile)
                    } else {
                        pass_avx2::<$rows, 2, false>(a, w, p, $row0, ch0, tile)
                    }
                };
            }
            match R {
                3 => rows!(3, 0),
                _ => rows!(4, 0),
            }
            match R.saturating_sub(4) {
                0 => {}
                1 => rows!(1, 4),
                2 => rows!(2, 4),
                3 => rows!(3, 4),
                _ => rows!(4, 4),
            }
        }
    });
}

/// A tile's activation rows for [`pass_avx2`]: the shifted bytes, or them widened to `i16`.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
enum Rows<'a> {
    Bytes(&'a [u8]),
    Wide(&'a [i16]),
}

/// One pass of [`tile_avx2`]: rows `row0..row0 + ROWS` × the `CH` 4-channel quarters from
/// quarter `q0` (quarter `q` is channels `4q..4q + 4` of the panel pair; `CH` even).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn pass_avx2<const ROWS: usize, const CH: usize, const PF: bool>(
    a: Rows,
    w: &PackedI8,
    p: usize,
    row0: usize,
    q0: usize,
    tile: &mut [[i32; NR]; MR],
) {
    use std::arch::x86_64::*;
    const { assert!(CH.is_multiple_of(2) && CH <= NR / 4 && ROWS <= MR) };
    let k4 = w.k4;
    // Sums by quarter, then row.
    let mut acc = [[_mm256_setzero_si256(); ROWS]; CH];
    for g in 0..k4 / 4 {
        if PF {
            prefetch_ahead(w, p, g);
        }
        // Each row's four activations of this k-group, repeated for the four channels of a
        // quarter: [a0, a1, a2, a3] × 4 as i16.
        let mut av = [_mm256_setzero_si256(); ROWS];
        for (r, v) in av.iter_mut().enumerate() {
            let at = (row0 + r) * k4 + g * 4;
            *v = match a {
                Rows::Bytes(b) => {
                    debug_assert!(at + 4 <= b.len());
                    let four = (b.as_ptr().add(at) as *const i32).read_unaligned();
                    _mm256_cvtepu8_epi16(_mm_set1_epi32(four))
                }
                Rows::Wide(h) => {
                    debug_assert!(at + 4 <= h.len());
                    _mm256_set1_epi64x((h.as_ptr().add(at) as *const i64).read_unaligned())
                }
            };
        }
        for (c, sums) in acc.iter_mut().enumerate() {
            let q = q0 + c;
            let at = w.group(p + q / 4, g).add((q % 4) * 16);
            let b = _mm256_cvtepi8_epi16(_mm_loadu_si128(at as *const _));
            for (s, a) in sums.iter_mut().zip(&av) {
                *s = _mm256_add_epi32(*s, _mm256_madd_epi16(*a, b));
            }
        }
    }
    for r in 0..ROWS {
        for c in (0..CH).step_by(2) {
            // hadd: [A0, A1, B0, B1 | A2, A3, B2, B3] (channels of quarters A = c, B = c + 1);
            // the qword permute puts them in channel order.
            let s = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(
                acc[c][r],
                acc[c + 1][r],
            ));
            let dst = tile[row0 + r].as_mut_ptr().add((q0 + c) * 4);
            _mm256_storeu_si256(dst as *mut _, s);
        }
    }
}
