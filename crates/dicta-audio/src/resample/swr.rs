//! A port of libswresample's default resampler (FFmpeg 7/8: `resample.c`, `resample_template.c`,
//! `swresample.c` and the x86 FMA3 kernel in `x86/resample.asm`) for one plane of `f32` samples.
//!
//! Options are swr's defaults: Kaiser window (beta 9), `filter_size` 32, `phase_shift` 10,
//! `cutoff` 0.97, `linear_interp` on and `exact_rational` on. For `s16`/`flt` input converted to
//! `s16` output (what faster-whisper's `decode_audio` asks PyAV for) swr filters in `float`
//! (`AV_SAMPLE_FMT_FLTP` internally), which is what this module does. The reference outputs were
//! made on x86-64 with AVX2+FMA3, where each output is a dot product accumulated in eight lanes of
//! fused multiply-adds and then summed pairwise; [`dot`] reproduces that order exactly so the
//! outputs are bit-identical, not merely close.
//!
//! Edges follow swr too: the signal is mirrored around its first sample (`invert_initial_buffer`)
//! and, at the end, half a filter of the last samples is reflected (`resample_flush`); the output
//! length is however many filter windows fit in that extended signal (see [`Swr::plan`]).
//!
//! References made on other CPUs differ by at most one 16-bit step on a few samples: FFmpeg
//! sums in another order there (plain AVX/SSE: unfused, 8 or 4 lanes; aarch64 NEON: 4 lanes).
//!
//! Provenance: re-implemented from FFmpeg's libswresample sources (LGPL-2.1-or-later, Michael
//! Niedermayer and contributors; `av_bessel_i0` constants from libavutil/mathematics.c, after
//! Blair & Edwards 1974).

use dicta_core::{Error, Result};
use rayon::prelude::*;

/// swr's `filter_size` default: taps per phase at unit ratio.
const FILTER_SIZE: f64 = 32.0;
/// swr's `phase_shift` default: at most `1 << 10` filter phases.
const PHASE_SHIFT: u32 = 10;
/// swr's `cutoff` default (fraction of the lower Nyquist frequency).
const CUTOFF: f64 = 0.97;
/// swr's `kaiser_beta` default.
const KAISER_BETA: f64 = 9.0;
/// Lanes of the FMA3 kernel (one 256-bit register of floats); filters are zero-padded to this.
const LANES: usize = 8;
/// Outputs per rayon task: large enough that scheduling is negligible.
const PAR_CHUNK: usize = 16_384;

/// A built polyphase filter bank and the position arithmetic of one rate pair.
#[derive(Debug, Clone)]
pub(crate) struct Swr {
    /// Taps per phase (`filter_length`).
    taps: usize,
    /// Row stride of the bank (`filter_alloc`, taps rounded up to [`LANES`]).
    alloc: usize,
    /// Number of filter phases (`phase_count`).
    phases: usize,
    /// `(phases + 1) * alloc` coefficients; row `phases` is row 0 shifted by one tap (for the
    /// linear interpolation between the last phase and the next input sample).
    bank: Vec<f32>,
    /// Output step in units of `1 / (phases * src_incr)` input samples.
    dst_incr: u64,
    src_incr: u64,
    /// `(filter_length - 1) / 2`: filter taps before the centre tap.
    center: usize,
    /// Whether outputs fall between phases (inexact ratios): interpolate between two phases.
    linear: bool,
}

/// Where the outputs of one signal come from (see [`Swr::plan`]).
struct Plan {
    /// Samples reflected after the end of the input.
    reflect: usize,
    /// Number of outputs.
    outputs: usize,
}

impl Swr {
    /// Builds the filter bank for `from` → `to` Hz (both positive).
    pub(crate) fn new(from: u32, to: u32) -> Result<Self> {
        if from == 0 || to == 0 {
            return Err(Error::invalid_input(format!(
                "cannot resample from {from} Hz to {to} Hz: sample rates must be positive"
            )));
        }
        let factor = (to as f64 * CUTOFF / from as f64).min(1.0);
        let mut phases = 1usize << PHASE_SHIFT;
        let mut taps = ((FILTER_SIZE / factor).ceil() as usize).max(1);
        if taps > 1 {
            taps = (taps + 1) & !1;
        }
        // exact_rational: use exactly the phases the reduced ratio needs when they are few enough.
        let g = gcd(to as u64, from as u64);
        let exact = (to as u64 / g) as usize;
        if exact <= phases {
            phases = exact;
        }
        let alloc = taps.div_ceil(LANES) * LANES;
        let bank = build_bank(factor, taps, alloc, phases);

        // av_reduce(out_rate, in_rate * phase_count), then both doubled up to 2^20 as swr does.
        let num = to as u64;
        let den = from as u64 * phases as u64;
        let g = gcd(num, den);
        let (mut src_incr, mut dst_incr) = (num / g, den / g);
        if src_incr > i32::MAX as u64 / 2 || dst_incr > i32::MAX as u64 / 2 {
            return Err(Error::invalid_input(format!(
                "cannot resample from {from} Hz to {to} Hz: the rate ratio is too fine"
            )));
        }
        while dst_incr < 1 << 20 && src_incr < 1 << 20 {
            dst_incr *= 2;
            src_incr *= 2;
        }
        Ok(Self {
            taps,
            alloc,
            phases,
            bank,
            dst_incr,
            src_incr,
            center: (taps - 1) / 2,
            linear: dst_incr % src_incr != 0,
        })
    }

    /// Number of outputs for `n` input samples.
    pub(crate) fn output_len(&self, n: usize) -> usize {
        self.plan(n).map_or(0, |p| p.outputs)
    }

    /// Position of output `k` in the extended signal (whose index 0 is input sample
    /// `-center`): first window sample, filter phase and the fraction between phases
    /// (`frac / src_incr`).
    #[inline]
    fn position(&self, k: usize) -> (usize, usize, u64) {
        let t = k as u128 * self.dst_incr as u128;
        let per_sample = self.src_incr as u128 * self.phases as u128;
        let sample = (t / per_sample) as usize;
        let rem = (t % per_sample) as u64;
        (sample, (rem / self.src_incr) as usize, rem % self.src_incr)
    }

    /// Outputs whose window `[s, s + taps)` lies inside the first `end` extended samples.
    fn fitting(&self, end: usize) -> usize {
        self.fitting_width(end, self.taps)
    }

    /// Outputs whose first `width` window samples `[s, s + width)` lie inside the first `end`.
    fn fitting_width(&self, end: usize, width: usize) -> usize {
        if end < width {
            return 0;
        }
        // s_k <= end - width  <=>  k * dst_incr < (end - width + 1) * src_incr * phases.
        let limit = (end - width + 1) as u128 * self.src_incr as u128 * self.phases as u128;
        limit.div_ceil(self.dst_incr as u128) as usize
    }

    /// What swr produces for a whole signal of `n` samples fed and then flushed; `None` when it
    /// produces nothing.
    ///
    /// swr starts filtering once it holds `taps + 1` samples. Then every window that fits in
    /// the input is computed; at the flush, `(min(left, taps) + 1) / 2` of the `left` samples
    /// not yet consumed are reflected after the end, and the windows that now fit follow. A
    /// shorter input is only seen at the flush: half of it is reflected and, if that reaches
    /// `taps + 1` samples, filtered the same way.
    fn plan(&self, n: usize) -> Option<Plan> {
        let c = self.center;
        let reflect = if n > self.taps {
            let fit = self.fitting(n + c);
            let (next, _, _) = self.position(fit);
            let left = (n + c).saturating_sub(next);
            left.min(self.taps).div_ceil(2)
        } else {
            let r = n.div_ceil(2);
            if n + r < self.taps + 1 {
                return None;
            }
            r
        };
        Some(Plan {
            reflect,
            outputs: self.fitting(n + c + reflect),
        })
    }

    /// Resamples one plane. Output `k` sits at input time `k * from / to`.
    pub(crate) fn process(&self, x: &[f32]) -> Vec<f32> {
        let Some(plan) = self.plan(x.len()) else {
            return Vec::new();
        };
        let ext = self.extend(x, plan.reflect);
        let mut out = vec![0.0f32; plan.outputs];
        let fma = hardware_fma();
        out.par_chunks_mut(PAR_CHUNK)
            .enumerate()
            .for_each(|(chunk, dst)| {
                let first = chunk * PAR_CHUNK;
                self.run_any(fma, &ext, 0, first, dst);
            });
        out
    }

    /// Computes outputs `first..first + dst.len()` from `ext`, whose index 0 is extended
    /// sample `base`, with the hardware FMA kernel when `fma` (checked by [`hardware_fma`]).
    fn run_any(&self, fma: bool, ext: &[f32], base: usize, first: usize, dst: &mut [f32]) {
        if fma {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `hardware_fma` checked at run time that the CPU has AVX and FMA.
            unsafe {
                self.run_fma(ext, base, first, dst)
            }
        } else {
            self.run::<false>(ext, base, first, dst);
        }
    }

    /// The input as swr's buffer holds it: `center` mirrored samples before it, `reflect`
    /// reflected samples after it, then zeros so every kernel read of `alloc` taps is in bounds
    /// (the padding taps are zero, so what they read does not matter).
    fn extend(&self, x: &[f32], reflect: usize) -> Vec<f32> {
        let n = x.len();
        let c = self.center;
        // Sample `j` of the input followed by its reflected tail (a short input mirrors that
        // tail at the start too), zero beyond.
        let body = |j: usize| {
            if j < n {
                x[j]
            } else if j < n + reflect {
                x[2 * n - 1 - j]
            } else {
                0.0
            }
        };
        let mut ext = Vec::with_capacity(c + n + reflect + self.alloc);
        ext.extend((1..=c).rev().map(body));
        ext.extend_from_slice(x);
        ext.extend((n..n + reflect).map(body));
        ext.resize(c + n + reflect + self.alloc, 0.0);
        ext
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx,fma")]
    unsafe fn run_fma(&self, ext: &[f32], base: usize, first: usize, dst: &mut [f32]) {
        self.run::<true>(ext, base, first, dst);
    }

    #[inline(always)]
    fn run<const HW: bool>(&self, ext: &[f32], base: usize, first: usize, dst: &mut [f32]) {
        let a = self.alloc;
        let inv_src_incr = 1.0f32 / self.src_incr as f32;
        for (j, y) in dst.iter_mut().enumerate() {
            let (s, ph, frac) = self.position(first + j);
            let x = &ext[s - base..s - base + a];
            let f1 = &self.bank[ph * a..(ph + 1) * a];
            if self.linear {
                let f2 = &self.bank[(ph + 1) * a..(ph + 2) * a];
                *y = dot_linear::<HW>(x, f1, f2, frac as f32 * inv_src_incr);
            } else {
                *y = dot::<HW>(x, f1);
            }
        }
    }
}

/// [`Swr::process`] fed block by block: the same outputs, bit for bit, holding only about one
/// filter of input besides the block being fed (so a long recording is never held whole at
/// its native rate).
///
/// Each output is the same dot product over the same extended samples as in the one-shot
/// path: outputs are computed once their whole window (`alloc` samples) has arrived, and
/// [`SwrStream::finish`] appends swr's end reflection, which only depends on the last samples.
/// Inputs shorter than a few filters are kept and handed to [`Swr::process`] whole, since
/// swr's short-input rules (mirroring the reflected tail at the start) need the whole signal.
#[derive(Debug)]
pub(crate) struct SwrStream {
    swr: Swr,
    fma: bool,
    /// Extended samples from index `base` on (mirrored head, input, later the tail).
    ext: Vec<f32>,
    base: usize,
    /// Input samples fed so far.
    fed: usize,
    /// Next output to compute.
    next: usize,
    /// Whether the mirrored head has been built (the input is long enough).
    started: bool,
}

impl SwrStream {
    pub(crate) fn new(swr: Swr) -> Self {
        Self {
            swr,
            fma: hardware_fma(),
            ext: Vec::new(),
            base: 0,
            fed: 0,
            next: 0,
            started: false,
        }
    }

    /// Feeds the next input samples and appends every output whose window is complete.
    pub(crate) fn feed(&mut self, x: &[f32], out: &mut Vec<f32>) {
        self.fed += x.len();
        self.ext.extend_from_slice(x);
        let (taps, c, a) = (self.swr.taps, self.swr.center, self.swr.alloc);
        if !self.started {
            // The head mirrors input samples 1..=c, and short-input rules apply below taps + 1
            // samples: wait until neither can come into play.
            if self.fed <= 2 * (taps + a) {
                return;
            }
            let head: Vec<f32> = (1..=c).rev().map(|j| self.ext[j]).collect();
            self.ext.splice(0..0, head);
            self.started = true;
        }
        // Output k is computable once every sample its kernel reads, [s_k, s_k + alloc), has
        // arrived.
        let ready = self.swr.fitting_width(self.base + self.ext.len(), a);
        self.emit(ready, out);
        // Drop what no later output reads (amortised: only once it is a sizeable prefix).
        let (s_next, _, _) = self.swr.position(self.next);
        let used = s_next - self.base;
        if used > 1 << 16 && used * 2 > self.ext.len() {
            self.ext.drain(..used);
            self.base = s_next;
        }
    }

    /// Ends the input: appends the remaining outputs, those of swr's flush (end reflection)
    /// included; for an input short enough to have been kept whole, all of its outputs.
    pub(crate) fn finish(mut self, out: &mut Vec<f32>) {
        if !self.started {
            out.extend(self.swr.process(&self.ext));
            return;
        }
        let n = self.fed;
        let Some(plan) = self.swr.plan(n) else {
            return;
        };
        // Extended index of input sample j is c + j; the reflection after the end repeats
        // x[n-1], x[n-2], ... as in `Swr::extend`.
        let c = self.swr.center;
        let end = c + n - self.base;
        for r in 0..plan.reflect {
            let v = self.ext[end - 1 - r];
            self.ext.push(v);
        }
        self.ext.resize(self.ext.len() + self.swr.alloc, 0.0);
        self.emit(plan.outputs, out);
    }

    fn emit(&mut self, upto: usize, out: &mut Vec<f32>) {
        if upto <= self.next {
            return;
        }
        let start = out.len();
        out.resize(start + upto - self.next, 0.0);
        self.swr
            .run_any(self.fma, &self.ext, self.base, self.next, &mut out[start..]);
        self.next = upto;
    }
}

/// `a * b + c` rounded once, as `vfmadd` does. Without hardware FMA the exact product is
/// formed in `f64` and the sum rounded to `f32` from there; that differs from a true fused
/// operation only when the `f64` sum lands exactly on an `f32` rounding tie (vanishingly rare).
#[inline(always)]
fn fma<const HW: bool>(a: f32, b: f32, c: f32) -> f32 {
    if HW {
        a.mul_add(b, c)
    } else {
        (a as f64 * b as f64 + c as f64) as f32
    }
}

/// Eight-lane accumulation of `x · f` (lane `l` takes taps `l`, `l + 8`, ...).
#[inline(always)]
fn lanes<const HW: bool>(x: &[f32], f: &[f32]) -> [f32; LANES] {
    let mut acc = [0.0f32; LANES];
    for (xc, fc) in x.chunks_exact(LANES).zip(f.chunks_exact(LANES)) {
        for l in 0..LANES {
            acc[l] = fma::<HW>(xc[l], fc[l], acc[l]);
        }
    }
    acc
}

/// `resample_common_float_fma3`: lanes folded 8 → 4 → 2 → 1.
#[inline(always)]
fn dot<const HW: bool>(x: &[f32], f: &[f32]) -> f32 {
    let a = lanes::<HW>(x, f);
    let h = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// `resample_linear_float_fma3`: both phases folded to four lanes, interpolated per lane with
/// one fused multiply-add, then folded to one.
#[inline(always)]
fn dot_linear<const HW: bool>(x: &[f32], f1: &[f32], f2: &[f32], t: f32) -> f32 {
    let a = lanes::<HW>(x, f1);
    let b = lanes::<HW>(x, f2);
    let mut h = [0.0f32; 4];
    for l in 0..4 {
        let v1 = a[l] + a[l + 4];
        let v2 = b[l] + b[l + 4];
        h[l] = fma::<HW>(v2 - v1, t, v1);
    }
    (h[0] + h[2]) + (h[1] + h[3])
}

fn hardware_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// swr's `build_filter` for float coefficients: Kaiser-windowed sinc phases, all normalised by
/// the sum of phase 0, the second half of the phases mirrored from the first (for an even
/// count), then the extra row `phases` filled as swr's `resample_init` does.
fn build_bank(factor: f64, taps: usize, alloc: usize, phases: usize) -> Vec<f32> {
    use std::f64::consts::PI;
    let mut bank = vec![0.0f32; alloc * (phases + 1)];
    let center = (taps - 1) / 2;
    let computed = if !phases.is_multiple_of(2) {
        phases
    } else {
        phases / 2 + 1
    };
    let sign = if center & 1 == 1 { 1.0 } else { -1.0 };
    let mut tab = vec![0.0f64; taps];
    let mut norm = 0.0f64;
    for ph in 0..computed {
        // At unit ratio sin(x) only flips sign from tap to tap, so swr tabulates it per phase.
        let mut s = if factor == 1.0 {
            (PI * ph as f64 / phases as f64).sin() * sign
        } else {
            0.0
        };
        for (i, t) in tab.iter_mut().enumerate() {
            let x = PI * ((i as f64 - center as f64) - ph as f64 / phases as f64) * factor;
            let mut y = if x == 0.0 {
                1.0
            } else if factor == 1.0 {
                s / x
            } else {
                x.sin() / x
            };
            let w = 2.0 * x / (factor * taps as f64 * PI);
            y *= bessel_i0(KAISER_BETA * (1.0 - w * w).max(0.0).sqrt());
            *t = y;
            s = -s;
            if ph == 0 {
                norm += y;
            }
        }
        for (i, t) in tab.iter().enumerate() {
            bank[ph * alloc + i] = (*t / norm) as f32;
        }
        if phases.is_multiple_of(2) {
            // In place and in this order, exactly as swr (matters for the middle phase).
            for i in 0..taps {
                bank[(phases - ph) * alloc + taps - 1 - i] = bank[ph * alloc + i];
            }
        }
    }
    let last = alloc * phases;
    bank.copy_within(0..alloc - 1, last + 1);
    bank[last] = bank[alloc - 1];
    bank
}

/// `av_bessel_i0` (libavutil/mathematics.c) on the range swr uses it (`|x| <= 9`): the
/// Blair & Edwards rational approximation, evaluated in the same order. The constants are
/// FFmpeg's decimal strings verbatim, so the compiler rounds them to the same doubles.
#[allow(clippy::excessive_precision)]
fn bessel_i0(x: f64) -> f64 {
    const P1: [f64; 15] = [
        -2.2335582639474375249e+15,
        -5.5050369673018427753e+14,
        -3.2940087627407749166e+13,
        -8.4925101247114157499e+11,
        -1.1912746104985237192e+10,
        -1.0313066708737980747e+08,
        -5.9545626019847898221e+05,
        -2.4125195876041896775e+03,
        -7.0935347449210549190e+00,
        -1.5453977791786851041e-02,
        -2.5172644670688975051e-05,
        -3.0517226450451067446e-08,
        -2.6843448573468483278e-11,
        -1.5982226675653184646e-14,
        -5.2487866627945699800e-18,
    ];
    const Q1: [f64; 6] = [
        -2.2335582639474375245e+15,
        7.8858692566751002988e+12,
        -1.2207067397808979846e+10,
        1.0377081058062166144e+07,
        -4.8527560179962773045e+03,
        1.0,
    ];
    if x == 0.0 {
        return 1.0;
    }
    let y = x * x;
    poly(&P1, y) / poly(&Q1, y)
}

/// Horner evaluation from the highest coefficient down (libavutil's `eval_poly`).
fn poly(c: &[f64], x: f64) -> f64 {
    let mut sum = c[c.len() - 1];
    for &v in c[..c.len() - 1].iter().rev() {
        sum = sum * x + v;
    }
    sum
}

pub(crate) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, mut seed: u32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// Streaming in blocks of any size gives the one-shot outputs bit for bit, for short
    /// inputs (swr's special cases), inputs near the start threshold and long ones.
    #[test]
    fn streamed_blocks_equal_one_shot_bit_for_bit() {
        let lengths = [
            0usize, 1, 5, 40, 99, 100, 101, 250, 333, 401, 402, 403, 1000, 70_001, 150_000,
        ];
        for from in [
            8000u32, 11_025, 22_050, 32_000, 44_100, 48_000, 12_345, 96_000,
        ] {
            let swr = Swr::new(from, 16_000).unwrap();
            for (li, &n) in lengths.iter().enumerate() {
                let x = noise(n, from ^ li as u32);
                let want = swr.process(&x);
                for block in [1usize, 7, 512, 4096, 65_537, usize::MAX] {
                    if block == 1 && n > 5000 {
                        continue;
                    }
                    let mut st = SwrStream::new(swr.clone());
                    let mut got = Vec::new();
                    // Vary the block size a little so boundaries fall everywhere.
                    let mut at = 0;
                    let mut k = 0;
                    while at < n {
                        let len = block.saturating_add(k % 3).min(n - at);
                        st.feed(&x[at..at + len], &mut got);
                        at += len;
                        k += 1;
                    }
                    st.finish(&mut got);
                    assert_eq!(got.len(), want.len(), "{from} Hz, n {n}, block {block}");
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{from} Hz, n {n}, block {block}: outputs differ");
                }
            }
        }
    }

    #[test]
    fn filter_geometry_matches_swr_for_common_rates() {
        // (from, taps, phases): taps = ceil(32 / (16000 * 0.97 / from)) rounded up to even.
        for (from, taps, phases) in [
            (22_050u32, 46usize, 320usize),
            (44_100, 92, 160),
            (48_000, 100, 1),
            (8000, 32, 2),
            (32_000, 66, 1),
            (12_345, 32, 1024),
        ] {
            let s = Swr::new(from, 16_000).unwrap();
            assert_eq!((s.taps, s.phases), (taps, phases), "{from} Hz");
            assert_eq!(s.linear, from == 12_345, "{from} Hz");
        }
    }

    #[test]
    fn every_phase_sums_to_about_one() {
        for from in [22_050u32, 44_100, 8000] {
            let s = Swr::new(from, 16_000).unwrap();
            for ph in 0..s.phases {
                let sum: f32 = s.bank[ph * s.alloc..(ph + 1) * s.alloc].iter().sum();
                assert!((sum - 1.0).abs() < 2e-3, "{from} Hz phase {ph}: {sum}");
            }
        }
    }

    #[test]
    fn bessel_matches_the_series() {
        for x in [0.5f64, 3.0, 9.0] {
            let series: f64 = (0..60)
                .map(|k| {
                    let f: f64 = (1..=k).map(|i| i as f64).product();
                    (x / 2.0).powi(2 * k) / (f * f)
                })
                .sum();
            assert!((bessel_i0(x) / series - 1.0).abs() < 1e-14, "{x}");
        }
    }

    #[test]
    fn emulated_and_hardware_fma_agree() {
        let s = Swr::new(22_050, 16_000).unwrap();
        let x: Vec<f32> = (0..5000)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let plan = s.plan(x.len()).unwrap();
        let ext = s.extend(&x, plan.reflect);
        let mut soft = vec![0.0; plan.outputs];
        s.run::<false>(&ext, 0, 0, &mut soft);
        assert_eq!(s.process(&x), soft);
    }
}
