//! The int8 decoder's cross-attention as integer dot products ([`attend_head_i8`]), over the
//! int8 keys and values that `Whisper::new_cache` stores once per window
//! ([`super::cross_lowp::quantize_head`]).
//!
//! Why: widening each int8 key and value to f32 before its multiply-add cost two or three
//! vector operations per multiply-add, so a greedy step's cross-attention (one query per head)
//! was 12% of a 1-row decoder step and 35% of an 8-row one (`perf`, session 36). `vpdpbusd`
//! multiplies 64 byte pairs and adds them in fours into 16 i32 lanes, with nothing to widen.
//!
//! So the queries and the probabilities become integers too, each in two int8 levels, which
//! keeps their rounding (about 2⁻¹⁵ of the row's largest value) far below the keys' and values'
//! own (2⁻⁸ of their channel's largest):
//! - **Scores.** A query `x` (times the key scales) becomes `a = x·127/max|x|`,
//!   `hi = round(a)` and `lo = round((a − hi)·254)`, both within ±127. Keys are stored biased,
//!   `k + 128` as u8, the unsigned operand of `vpdpbusd`: `Σ hi·(k + 128) = Σ hi·k + 128·Σ hi`,
//!   and the query's own sums remove the bias. A score is
//!   `(254·Σ hi·k + Σ lo·k) · max|x| / (127·254)`.
//! - **Output.** The f32 probabilities `p` (the softmax, returned as they are for word
//!   alignment) become 24-bit fixed point relative to the row's largest, in three unsigned
//!   levels: `a = p·255/max p`, `hi = ⌊a⌋`, `b = (a − hi)·255`, `mid = ⌊b⌋`,
//!   `lo = round((b − mid)·255)`, `P = 255²·hi + 255·mid + lo`. The output is `Σ P·v / Σ P`, so
//!   the rounded weights sum to one. Two levels (16 bits) were not enough: identical keys (a
//!   window's zero padding) round identically, and a thousand small weights each off by half
//!   a 16-bit step moved an output by 0.2% (test `many_small_weights_are_kept`).
//!
//! Every sum of products is an exact integer (i32: keys of at most 128 dims, at most 65,536
//! of them; the weights' sum in u64), so a query gets the same bits alone or among others, and the AVX-512 VNNI, AVX2
//! and portable kernels the same integers; the softmax between them uses FMA on the vector
//! levels as [`super::cross_lowp`] does.

use super::attention::Level;
use super::cross_lowp::KEY_BLOCK;
use super::{max_of, softmax_in_place};

/// Dimensions (of a key) or keys (of a value channel) that one i32 lane of `vpdpbusd` sums.
const GROUP: usize = 4;

/// Most keys per head: `t · 255 · 127` stays within i32.
pub const MAX_KEYS: usize = 65_536;

/// Where key `j`, dimension `c` lies in one head's int8 keys of `d` dims (`blocked_len(t, d)`
/// elements, [`super::cross_lowp::blocked_len`]): blocks of 16 keys, each `[⌈D/4⌉, 16, 4]`, so
/// that one 64-byte vector holds four dimensions of sixteen keys (a last group of `D mod 4`
/// dimensions is `[16, D mod 4]`).
pub fn key_index(j: usize, c: usize, d: usize) -> usize {
    let g = c / GROUP * GROUP;
    let width = (d - g).min(GROUP);
    (j / KEY_BLOCK) * KEY_BLOCK * d + g * KEY_BLOCK + (j % KEY_BLOCK) * width + (c - g)
}

/// Where value `j`, channel `c` lies in one head's int8 values (`t` keys of `d` channels, `t·d`
/// elements): the first `⌊T/4⌋·4` keys in groups of four, `[⌊T/4⌋, D, 4]` (one i32 lane holds
/// one channel of four keys), the rest row by row.
pub fn value_index(j: usize, c: usize, t: usize, d: usize) -> usize {
    let full = t / GROUP * GROUP;
    if j < full {
        (j / GROUP) * GROUP * d + c * GROUP + j % GROUP
    } else {
        j * d + c
    }
}

/// An int8 key as stored: biased by 128 into u8.
pub fn biased(k: i8) -> u8 {
    (i16::from(k) + 128) as u8
}

/// One query in two int8 levels (module docs): `hi` and `lo` zero-padded to whole groups,
/// `bias = 128·(254·Σ hi + Σ lo)` and `scale = max|x| / (127·254)` (NaN when the query is not
/// finite, so that the output is NaN as float attention's would be).
struct QueryI8 {
    hi: Vec<i8>,
    lo: Vec<i8>,
    /// Each group's four bytes of `hi` and of `lo` as one i32, ready for a broadcast.
    #[cfg(target_arch = "x86_64")]
    words: [Vec<i32>; 2],
    bias: i32,
    scale: f32,
}

impl QueryI8 {
    /// Query `q` [D] with the key channels' scales `ks` [D] taken in.
    fn new(q: &[f32], ks: &[f32]) -> Self {
        let d4 = q.len().div_ceil(GROUP) * GROUP;
        let (mut hi, mut lo) = (vec![0i8; d4], vec![0i8; d4]);
        let x = || q.iter().zip(ks).map(|(a, s)| a * s);
        if x().any(|v| !v.is_finite()) {
            return Self::with(hi, lo, 0, f32::NAN);
        }
        let amax = x().fold(0f32, |m, v| m.max(v.abs()));
        if amax == 0.0 {
            return Self::with(hi, lo, 0, 0.0);
        }
        let inv = 127.0 / amax;
        let (mut sh, mut sl) = (0i32, 0i32);
        for ((h, l), v) in hi.iter_mut().zip(lo.iter_mut()).zip(x()) {
            // |a| ≤ 127 (up to rounding), |a − round(a)| ≤ ½: both levels fit an i8.
            let a = v * inv;
            let r = round_even(a);
            *h = r.clamp(-127.0, 127.0) as i8;
            *l = round_even((a - r) * 254.0).clamp(-127.0, 127.0) as i8;
            sh += i32::from(*h);
            sl += i32::from(*l);
        }
        Self::with(hi, lo, 128 * (254 * sh + sl), amax / (127.0 * 254.0))
    }

    fn with(hi: Vec<i8>, lo: Vec<i8>, bias: i32, scale: f32) -> Self {
        #[cfg(target_arch = "x86_64")]
        let words = [&hi, &lo].map(|level| {
            level
                .chunks_exact(GROUP)
                .map(|b| i32::from_le_bytes([b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8]))
                .collect()
        });
        Self {
            hi,
            lo,
            #[cfg(target_arch = "x86_64")]
            words,
            bias,
            scale,
        }
    }
}

/// `y` rounded to an integer, half to even, for |y| < 2²²: adding 1.5·2²³ leaves no fraction
/// bits (`round_ties_even` is a libm call per value on the baseline x86-64 target; this is two
/// additions, and the same value as the vector kernels' `cvtps2dq`).
#[inline(always)]
fn round_even(y: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0;
    (y + ROUND) - ROUND
}

/// Score of an integer sum pair: `(254·Σ hi·k + Σ lo·k − bias) · scale` (the sums include the
/// keys' bias).
#[inline(always)]
fn score(hi_sum: i64, lo_sum: i64, q: &QueryI8) -> f32 {
    (254 * hi_sum + lo_sum - i64::from(q.bias)) as f32 * q.scale
}

/// Levels of the probabilities' fixed point (module docs).
const LEVELS: usize = 3;

/// Normalised probabilities `p` [T] → their three u8 levels `lv` (module docs; rows of `T`
/// rounded up to a group, the padding zero), and `1 / Σ P` (NaN when `p` is). Inlined into
/// each level's kernel, whose target features vectorise it; every operation is elementwise,
/// so every level gets the same bytes.
#[inline(always)]
fn quantize_probs(p: &[f32], lv: [&mut [u8]; LEVELS]) -> f32 {
    let [hi, mid, lo] = lv;
    hi.fill(0);
    mid.fill(0);
    lo.fill(0);
    let pmax = max_of(p);
    // A NaN row is NaN everywhere (the softmax divides by its NaN sum); `max_of` skips NaNs.
    if pmax.is_nan() || p.first().is_some_and(|x| x.is_nan()) || pmax <= 0.0 {
        return f32::NAN;
    }
    let s = 255.0 / pmax;
    let mut sum = 0u64;
    for (((&x, h), m), l) in p
        .iter()
        .zip(hi.iter_mut())
        .zip(mid.iter_mut())
        .zip(lo.iter_mut())
    {
        let a = (x * s).clamp(0.0, 255.0);
        let h0 = a as i32;
        let b = (a - h0 as f32) * 255.0;
        let m0 = b as i32;
        let l0 = round_even((b - m0 as f32) * 255.0) as i32;
        *h = h0 as u8;
        *m = m0 as u8;
        *l = l0 as u8;
        sum += (65_025 * h0 + 255 * m0 + l0) as u64;
    }
    1.0 / sum as f32
}

/// One query's levels `[LEVELS, T4]` as one slice per level.
#[inline(always)]
fn split_levels(x: &mut [u8], t4: usize) -> [&mut [u8]; LEVELS] {
    let (hi, rest) = x.split_at_mut(t4);
    let (mid, lo) = rest.split_at_mut(t4);
    [hi, mid, &mut lo[..t4]]
}

/// One output channel from its integer sums per level: `(255²·Σ hi·v + 255·Σ mid·v + Σ lo·v)
/// · w`.
#[inline(always)]
fn channel(sums: [i32; LEVELS], w: f32) -> f32 {
    (sums[0] as f32 * 65_025.0 + sums[1] as f32 * 255.0 + sums[2] as f32) * w
}

/// One (batch, head): queries `q` [M, D] f32 (scaled, before the key scales), int8 keys `k`
/// ([`key_index`] layout, biased) and values `v` ([`value_index`] layout) of `t` keys, and
/// the key and value channels' scales `ks`, `vs` [D] → probabilities [M, T] in `p` and the
/// output [M, D] in `out`.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend_head_i8(
    level: Level,
    q: &[f32],
    (k, v): (&[i8], &[i8]),
    (ks, vs): (&[f32], &[f32]),
    t: usize,
    d: usize,
    p: &mut [f32],
    out: &mut [f32],
) {
    let m = q.len() / d;
    assert!(
        t <= MAX_KEYS
            && k.len() >= super::cross_lowp::blocked_len(t, d)
            && v.len() >= t * d
            && ks.len() == d
            && vs.len() == d
            && p.len() >= m * t
            && out.len() >= m * d
    );
    let queries: Vec<QueryI8> = q[..m * d]
        .chunks_exact(d)
        .map(|r| QueryI8::new(r, ks))
        .collect();
    let t4 = t.div_ceil(GROUP) * GROUP;
    // Per query, its probabilities' levels: [M, LEVELS, T4].
    let mut lv = vec![0u8; m * LEVELS * t4];
    let bytes = |x: &[i8]| -> *const u8 { x.as_ptr().cast() };
    #[cfg(target_arch = "x86_64")]
    if let Some(avx512) = x86::level(level, d) {
        // SAFETY: the CPU has the level's features; sizes as asserted, and `d` is the kernels'.
        unsafe { x86::attend(avx512, &queries, (bytes(k), bytes(v)), t, &mut lv, p, out) };
        out[..m * d]
            .chunks_exact_mut(d)
            .for_each(|row| row.iter_mut().zip(vs).for_each(|(o, s)| *o *= s));
        return;
    }
    let _ = (level, bytes);
    for (i, qi) in queries.iter().enumerate() {
        let row = &mut p[i * t..(i + 1) * t];
        for (j, s) in row.iter_mut().enumerate() {
            let (mut sh, mut sl) = (0i64, 0i64);
            for c in 0..d {
                // Stored biased (u8 bits in the i8 view).
                let key = i64::from(k[key_index(j, c, d)] as u8);
                sh += i64::from(qi.hi[c]) * key;
                sl += i64::from(qi.lo[c]) * key;
            }
            *s = score(sh, sl, qi);
        }
        softmax_in_place::<false>(row);
        let qlv = &mut lv[i * LEVELS * t4..(i + 1) * LEVELS * t4];
        let w = quantize_probs(row, split_levels(qlv, t4));
        for (c, o) in out[i * d..(i + 1) * d].iter_mut().enumerate() {
            let mut sums = [0i32; LEVELS];
            for j in 0..t {
                let x = i32::from(v[value_index(j, c, t, d)]);
                for (l, s) in sums.iter_mut().enumerate() {
                    *s += i32::from(qlv[l * t4 + j]) * x;
                }
            }
            *o = channel(sums, w) * vs[c];
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::cross_lowp::HEAD;
    use super::{max_of, softmax_in_place, split_levels, Level, QueryI8};
    use super::{GROUP, KEY_BLOCK, LEVELS};
    use std::arch::x86_64::*;

    /// `Some(true)`: AVX-512 VNNI kernels; `Some(false)`: AVX2 (their integer sums emulated
    /// with `vpmaddwd`); `None`: the portable loops.
    pub(super) fn level(level: Level, d: usize) -> Option<bool> {
        if d != HEAD {
            return None;
        }
        let vnni = is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512bw");
        match level {
            Level::Avx512 if vnni => Some(true),
            Level::Avx512 | Level::Avx2Fma => Some(false),
            Level::Scalar => None,
        }
    }

    /// Queries per block of the AVX-512 score kernel (a beam of five reads its window's keys
    /// once) and of its `p·v` kernel (32 registers: 12 accumulators per query).
    const QB_SCORES: usize = 5;
    const QB_PV: usize = 2;

    /// Scores, softmax, the probabilities' levels (`lv`: [M, LEVELS, T4], `T` rounded up to a
    /// group) and `p·v` of every query, on AVX-512 VNNI (`avx512`) or AVX2.
    ///
    /// # Safety
    /// The CPU has the level's features; `k` and `v` hold one head's keys and values of `t`
    /// keys of [`HEAD`] dims in the module's layouts; `p` and `out` the sizes the caller
    /// asserts.
    pub(super) unsafe fn attend(
        avx512: bool,
        queries: &[QueryI8],
        (k, v): (*const u8, *const u8),
        t: usize,
        lv: &mut [u8],
        p: &mut [f32],
        out: &mut [f32],
    ) {
        if avx512 {
            attend_avx512(queries, (k, v), t, lv, p, out)
        } else {
            attend_avx2(queries, (k, v), t, lv, p, out)
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
    unsafe fn attend_avx512(
        queries: &[QueryI8],
        (k, v): (*const u8, *const u8),
        t: usize,
        lv: &mut [u8],
        p: &mut [f32],
        out: &mut [f32],
    ) {
        let m = queries.len();
        let t4 = t.div_ceil(GROUP) * GROUP;
        for (i, block) in queries.chunks(QB_SCORES).enumerate() {
            let pp = p.as_mut_ptr().add(i * QB_SCORES * t);
            match block.len() {
                5 => scores_avx512::<5>(block, k, t, pp),
                4 => scores_avx512::<4>(block, k, t, pp),
                3 => scores_avx512::<3>(block, k, t, pp),
                2 => scores_avx512::<2>(block, k, t, pp),
                _ => scores_avx512::<1>(block, k, t, pp),
            }
        }
        let mut w = vec![0f32; m];
        for (i, wi) in w.iter_mut().enumerate() {
            let row = &mut p[i * t..(i + 1) * t];
            softmax_in_place::<true>(row);
            let qlv = &mut lv[i * LEVELS * t4..(i + 1) * LEVELS * t4];
            *wi = quantize_probs_avx512(row, split_levels(qlv, t4));
        }
        let tail = tail_group(v, t);
        for i in (0..m).step_by(QB_PV) {
            let levels = (lv.as_ptr().add(i * LEVELS * t4), t4);
            let op = out.as_mut_ptr().add(i * HEAD);
            if m - i >= 2 {
                pv_avx512::<2>(levels, &w[i..], v, t, &tail, op)
            } else {
                pv_avx512::<1>(levels, &w[i..], v, t, &tail, op)
            }
        }
    }

    /// `1 / Σ P` of a row whose largest weight is `pmax`, or `None` (NaN) for a NaN row, as
    /// [`super::quantize_probs`] decides; clears the levels.
    fn prepare(p: &[f32], lv: &mut [&mut [u8]; LEVELS]) -> Option<f32> {
        lv.iter_mut().for_each(|l| l.fill(0));
        let pmax = max_of(p);
        let nan = pmax.is_nan() || p.first().is_some_and(|x| x.is_nan()) || pmax <= 0.0;
        (!nan).then_some(pmax)
    }

    /// [`super::quantize_probs`] on AVX-512: the same operations, 16 lanes at a time.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn quantize_probs_avx512(p: &[f32], mut lv: [&mut [u8]; LEVELS]) -> f32 {
        let Some(pmax) = prepare(p, &mut lv) else {
            return f32::NAN;
        };
        let s = _mm512_set1_ps(255.0 / pmax);
        let (zero, k255) = (_mm512_setzero_ps(), _mm512_set1_ps(255.0));
        let (w65025, w255) = (_mm512_set1_epi32(65_025), _mm512_set1_epi32(255));
        let mut acc = [_mm512_setzero_si512(); 2];
        for j in (0..p.len()).step_by(16) {
            let n = (p.len() - j).min(16);
            let mask: __mmask16 = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
            let x = _mm512_maskz_loadu_ps(mask, p.as_ptr().add(j));
            let a = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x, s), zero), k255);
            let h = _mm512_cvttps_epi32(a);
            let b = _mm512_mul_ps(_mm512_sub_ps(a, _mm512_cvtepi32_ps(h)), k255);
            let m = _mm512_cvttps_epi32(b);
            let l =
                _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_sub_ps(b, _mm512_cvtepi32_ps(m)), k255));
            for (level, x) in lv.iter_mut().zip([h, m, l]) {
                _mm512_mask_cvtepi32_storeu_epi8(level.as_mut_ptr().add(j).cast(), mask, x);
            }
            // Lanes past the row loaded zeros and weigh zero.
            let pw = _mm512_add_epi32(
                _mm512_add_epi32(_mm512_mullo_epi32(h, w65025), _mm512_mullo_epi32(m, w255)),
                l,
            );
            acc[0] = _mm512_add_epi64(acc[0], _mm512_cvtepu32_epi64(_mm512_castsi512_si256(pw)));
            acc[1] = _mm512_add_epi64(
                acc[1],
                _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64::<1>(pw)),
            );
        }
        1.0 / _mm512_reduce_add_epi64(_mm512_add_epi64(acc[0], acc[1])) as u64 as f32
    }

    /// [`super::quantize_probs`] on AVX2: the same operations, 8 lanes at a time.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn quantize_probs_avx2(p: &[f32], mut lv: [&mut [u8]; LEVELS]) -> f32 {
        let Some(pmax) = prepare(p, &mut lv) else {
            return f32::NAN;
        };
        let s = _mm256_set1_ps(255.0 / pmax);
        let (zero, k255) = (_mm256_setzero_ps(), _mm256_set1_ps(255.0));
        let (w65025, w255) = (_mm256_set1_epi32(65_025), _mm256_set1_epi32(255));
        // i32 lanes 0..8 → their low bytes in the low 8 bytes (`vpackusdw`, `vpackuswb` work
        // within 128-bit halves; the permute joins the halves' first four bytes).
        let join = _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0);
        let bytes = |x: __m256i| {
            let w = _mm256_packus_epi32(x, x);
            _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_packus_epi16(w, w), join))
        };
        let mut acc = [_mm256_setzero_si256(); 2];
        let mut out = [0u8; 8];
        for j in (0..p.len()).step_by(8) {
            let n = (p.len() - j).min(8);
            let x = if n == 8 {
                _mm256_loadu_ps(p.as_ptr().add(j))
            } else {
                let mut tail = [0f32; 8];
                tail[..n].copy_from_slice(&p[j..]);
                _mm256_loadu_ps(tail.as_ptr())
            };
            let a = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(x, s), zero), k255);
            let h = _mm256_cvttps_epi32(a);
            let b = _mm256_mul_ps(_mm256_sub_ps(a, _mm256_cvtepi32_ps(h)), k255);
            let m = _mm256_cvttps_epi32(b);
            let l =
                _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_sub_ps(b, _mm256_cvtepi32_ps(m)), k255));
            for (level, x) in lv.iter_mut().zip([h, m, l]) {
                _mm_storel_epi64(out.as_mut_ptr().cast(), bytes(x));
                level[j..j + n].copy_from_slice(&out[..n]);
            }
            let pw = _mm256_add_epi32(
                _mm256_add_epi32(_mm256_mullo_epi32(h, w65025), _mm256_mullo_epi32(m, w255)),
                l,
            );
            acc[0] = _mm256_add_epi64(acc[0], _mm256_cvtepu32_epi64(_mm256_castsi256_si128(pw)));
            acc[1] = _mm256_add_epi64(
                acc[1],
                _mm256_cvtepu32_epi64(_mm256_extracti128_si256::<1>(pw)),
            );
        }
        let mut lanes = [0u64; 4];
        _mm256_storeu_si256(lanes.as_mut_ptr().cast(), _mm256_add_epi64(acc[0], acc[1]));
        1.0 / lanes.iter().sum::<u64>() as f32
    }

    /// The last `t mod 4` values (stored row by row) as one zero-padded group of four keys.
    unsafe fn tail_group(v: *const u8, t: usize) -> [u8; GROUP * HEAD] {
        let full = t / GROUP * GROUP;
        let mut g = [0u8; GROUP * HEAD];
        for j in full..t {
            for c in 0..HEAD {
                g[c * GROUP + (j - full)] = *v.add(j * HEAD + c);
            }
        }
        g
    }

    /// Scores of `N` queries over all `t` keys, into rows of `t` at `p`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn scores_avx512<const N: usize>(
        queries: &[QueryI8],
        kb: *const u8,
        t: usize,
        p: *mut f32,
    ) {
        let bias: [__m512i; N] = std::array::from_fn(|r| _mm512_set1_epi32(queries[r].bias));
        let scale: [__m512; N] = std::array::from_fn(|r| _mm512_set1_ps(queries[r].scale));
        let k254 = _mm512_set1_epi32(254);
        for b in 0..t.div_ceil(KEY_BLOCK) {
            let block = kb.add(b * KEY_BLOCK * HEAD);
            // Even and odd groups in separate sums: with one or two queries, four or more
            // independent `vpdpbusd` chains hide its latency.
            let (mut sh0, mut sl0) = ([_mm512_setzero_si512(); N], [_mm512_setzero_si512(); N]);
            let (mut sh1, mut sl1) = ([_mm512_setzero_si512(); N], [_mm512_setzero_si512(); N]);
            for g in (0..HEAD / GROUP).step_by(2) {
                let k0 = _mm512_loadu_si512(block.add(g * 64) as *const _);
                let k1 = _mm512_loadu_si512(block.add(g * 64 + 64) as *const _);
                for r in 0..N {
                    let [h, l] = &queries[r].words;
                    sh0[r] = _mm512_dpbusd_epi32(sh0[r], k0, _mm512_set1_epi32(h[g]));
                    sl0[r] = _mm512_dpbusd_epi32(sl0[r], k0, _mm512_set1_epi32(l[g]));
                    sh1[r] = _mm512_dpbusd_epi32(sh1[r], k1, _mm512_set1_epi32(h[g + 1]));
                    sl1[r] = _mm512_dpbusd_epi32(sl1[r], k1, _mm512_set1_epi32(l[g + 1]));
                }
            }
            let live = (t - b * KEY_BLOCK).min(KEY_BLOCK);
            let mask: __mmask16 = if live == KEY_BLOCK {
                0xFFFF
            } else {
                (1u16 << live) - 1
            };
            for r in 0..N {
                let h = _mm512_add_epi32(sh0[r], sh1[r]);
                let l = _mm512_add_epi32(sl0[r], sl1[r]);
                let s = _mm512_sub_epi32(_mm512_add_epi32(_mm512_mullo_epi32(h, k254), l), bias[r]);
                let f = _mm512_mul_ps(_mm512_cvtepi32_ps(s), scale[r]);
                _mm512_mask_storeu_ps(p.add(r * t + b * KEY_BLOCK), mask, f);
            }
        }
    }

    /// Output rows (64 at `out`) of `N` queries from their probability levels (`lv`: [N,
    /// LEVELS, t4] bytes) and weights `w`: `Σ P·v · w`, four keys per `vpdpbusd`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn pv_avx512<const N: usize>(
        (lv, t4): (*const u8, usize),
        w: &[f32],
        v: *const u8,
        t: usize,
        tail: &[u8; GROUP * HEAD],
        out: *mut f32,
    ) {
        let mut sums = [[[_mm512_setzero_si512(); 4]; LEVELS]; N];
        let full = t / GROUP;
        for g in 0..t.div_ceil(GROUP) {
            let src = if g < full {
                v.add(g * GROUP * HEAD)
            } else {
                tail.as_ptr()
            };
            let vv: [__m512i; 4] =
                std::array::from_fn(|c| _mm512_loadu_si512(src.add(64 * c) as *const _));
            for (r, sr) in sums.iter_mut().enumerate() {
                for (l, sl) in sr.iter_mut().enumerate() {
                    let at = (r * LEVELS + l) * t4 + g * GROUP;
                    let pw = _mm512_set1_epi32((lv.add(at) as *const i32).read_unaligned());
                    for c in 0..4 {
                        sl[c] = _mm512_dpbusd_epi32(sl[c], pw, vv[c]);
                    }
                }
            }
        }
        let (k65025, k255) = (_mm512_set1_ps(65_025.0), _mm512_set1_ps(255.0));
        for (r, [hi, mid, lo]) in sums.iter().enumerate() {
            let wr = _mm512_set1_ps(w[r]);
            for c in 0..4 {
                let x = _mm512_add_ps(
                    _mm512_add_ps(
                        _mm512_mul_ps(_mm512_cvtepi32_ps(hi[c]), k65025),
                        _mm512_mul_ps(_mm512_cvtepi32_ps(mid[c]), k255),
                    ),
                    _mm512_cvtepi32_ps(lo[c]),
                );
                _mm512_storeu_ps(out.add(r * HEAD + 16 * c), _mm512_mul_ps(x, wr));
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn attend_avx2(
        queries: &[QueryI8],
        (k, v): (*const u8, *const u8),
        t: usize,
        lv: &mut [u8],
        p: &mut [f32],
        out: &mut [f32],
    ) {
        let t4 = t.div_ceil(GROUP) * GROUP;
        let tail = tail_group(v, t);
        for (i, q) in queries.iter().enumerate() {
            let row = &mut p[i * t..(i + 1) * t];
            scores_avx2(q, k, t, row);
            softmax_in_place::<true>(row);
            let qlv = &mut lv[i * LEVELS * t4..(i + 1) * LEVELS * t4];
            let w = quantize_probs_avx2(row, split_levels(qlv, t4));
            pv_avx2(
                (qlv, t4),
                w,
                v,
                t,
                &tail,
                &mut out[i * HEAD..(i + 1) * HEAD],
            );
        }
    }

    /// Sums of the pairs of adjacent i32 lanes of `a` then `b`, in lane order: lanes hold the
    /// two halves of each of 4 + 4 sums.
    #[target_feature(enable = "avx2")]
    unsafe fn pair_sums(a: __m256i, b: __m256i) -> __m256i {
        // `vphaddd` works within 128-bit halves: [a01 a23 b01 b23 | a45 a67 b45 b67].
        _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(a, b))
    }

    /// [`scores_avx512`] for one query on AVX2: `vpmaddwd` of the widened keys (16 bytes: 4
    /// keys × 4 dims) and the query's group, twice repeated, gives each key's sum in two
    /// halves; exact, as `vpdpbusd`'s.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn scores_avx2(q: &QueryI8, kb: *const u8, t: usize, p: &mut [f32]) {
        // Each group's four bytes widened to i16 lanes, as `vpmaddwd` pairs them.
        let pattern = |level: &[i8], g: usize| {
            let x = |i: usize| i64::from(level[4 * g + i] as i16 as u16);
            _mm256_set1_epi64x(x(0) | x(1) << 16 | x(2) << 32 | x(3) << 48)
        };
        let hp: [__m256i; HEAD / GROUP] = std::array::from_fn(|g| pattern(&q.hi, g));
        let lp: [__m256i; HEAD / GROUP] = std::array::from_fn(|g| pattern(&q.lo, g));
        let (bias, scale) = (_mm256_set1_epi32(q.bias), _mm256_set1_ps(q.scale));
        let k254 = _mm256_set1_epi32(254);
        let mut tail = [0f32; KEY_BLOCK];
        for b in 0..t.div_ceil(KEY_BLOCK) {
            let block = kb.add(b * KEY_BLOCK * HEAD);
            let mut sh = [_mm256_setzero_si256(); 4];
            let mut sl = [_mm256_setzero_si256(); 4];
            for g in 0..HEAD / GROUP {
                for (c, (h, l)) in sh.iter_mut().zip(sl.iter_mut()).enumerate() {
                    let keys = _mm256_cvtepu8_epi16(_mm_loadu_si128(
                        block.add(g * 64 + 16 * c) as *const _
                    ));
                    *h = _mm256_add_epi32(*h, _mm256_madd_epi16(keys, hp[g]));
                    *l = _mm256_add_epi32(*l, _mm256_madd_epi16(keys, lp[g]));
                }
            }
            let live = (t - b * KEY_BLOCK).min(KEY_BLOCK);
            for half in 0..2 {
                let h = pair_sums(sh[2 * half], sh[2 * half + 1]);
                let l = pair_sums(sl[2 * half], sl[2 * half + 1]);
                let s = _mm256_sub_epi32(_mm256_add_epi32(_mm256_mullo_epi32(h, k254), l), bias);
                let f = _mm256_mul_ps(_mm256_cvtepi32_ps(s), scale);
                _mm256_storeu_ps(tail.as_mut_ptr().add(8 * half), f);
            }
            let at = b * KEY_BLOCK;
            p[at..at + live].copy_from_slice(&tail[..live]);
        }
    }

    /// [`pv_avx512`] for one query on AVX2, 8 channels at a time: `vpmaddwd` of the widened
    /// values (16 bytes: 4 channels × 4 keys) and the group's weights of a level, twice
    /// repeated, gives each channel's sum in two halves.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn pv_avx2(
        (lv, t4): (&[u8], usize),
        w: f32,
        v: *const u8,
        t: usize,
        tail: &[u8; GROUP * HEAD],
        out: &mut [f32],
    ) {
        let pattern = |l: usize, g: usize| {
            let x = |i: usize| i64::from(lv[l * t4 + 4 * g + i]);
            _mm256_set1_epi64x(x(0) | x(1) << 16 | x(2) << 32 | x(3) << 48)
        };
        let full = t / GROUP;
        let (k65025, k255, wv) = (
            _mm256_set1_ps(65_025.0),
            _mm256_set1_ps(255.0),
            _mm256_set1_ps(w),
        );
        for eighth in 0..HEAD / 8 {
            let mut sums = [[_mm256_setzero_si256(); 2]; LEVELS];
            for g in 0..t.div_ceil(GROUP) {
                let src = if g < full {
                    v.add(g * GROUP * HEAD)
                } else {
                    tail.as_ptr()
                };
                let vals: [__m256i; 2] = std::array::from_fn(|c| {
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(src.add(32 * eighth + 16 * c) as *const _))
                });
                for (l, sl) in sums.iter_mut().enumerate() {
                    let pw = pattern(l, g);
                    for c in 0..2 {
                        sl[c] = _mm256_add_epi32(sl[c], _mm256_madd_epi16(vals[c], pw));
                    }
                }
            }
            let f = |l: usize| _mm256_cvtepi32_ps(pair_sums(sums[l][0], sums[l][1]));
            let x = _mm256_add_ps(
                _mm256_add_ps(_mm256_mul_ps(f(0), k65025), _mm256_mul_ps(f(1), k255)),
                f(2),
            );
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * eighth), _mm256_mul_ps(x, wv));
        }
    }
}

#[cfg(test)]
mod tests;
