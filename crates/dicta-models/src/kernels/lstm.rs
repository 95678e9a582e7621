//! One step of an LSTM cell, for recurrent models that run a frame at a time (Silero VAD: one
//! step per 32 ms window, the only sequential part of the network).
//!
//! The recurrent product runs as multiply-adds across all `4H` gate units for each hidden
//! unit in turn (weights stored transposed), so every lane does useful work and no dot
//! product needs a horizontal sum; the gate activations use the kernels' vectorisable `exp`
//! (σ(x) = 1 / (1 + e^−x), tanh(x) = 2σ(2x) − 1) instead of libm's scalar `expf` and `tanhf`,
//! which were half of a VAD pass. Results agree with the f64 reference to ~1e-6.

use super::math::{exp, madd};

pub use super::tile::Level;

/// One LSTM step at the fastest level: see [`step_at`].
pub fn step(w_t: &[f32], gx: &[f32], h: &mut [f32], c: &mut [f32], g: &mut [f32]) {
    step_at(Level::best(), w_t, gx, h, c, g)
}

/// One LSTM step with ONNX's gate order (input, output, forget, cell): `g = gx + Wᵀ·h`, then
/// `c ← σ(f)·c + σ(i)·tanh(c̃)` and `h ← σ(o)·tanh(c)`.
///
/// - `w_t`: recurrent weights transposed, `[H, 4H]` (row `j` holds every gate unit's weight on
///   `h[j]`);
/// - `gx`: the input's gate pre-activations, biases included, `[4H]`;
/// - `h`, `c`: the state `[H]`, updated in place; `g`: scratch `[4H]`.
///
/// # Panics
/// On mismatched lengths, or a `level` this CPU cannot run (see [`Level::available`]).
pub fn step_at(level: Level, w_t: &[f32], gx: &[f32], h: &mut [f32], c: &mut [f32], g: &mut [f32]) {
    let hidden = h.len();
    assert!(
        c.len() == hidden
            && gx.len() == 4 * hidden
            && g.len() == 4 * hidden
            && w_t.len() == 4 * hidden * hidden,
        "LSTM step: state [{hidden}], gates {} / {}, weights {}",
        gx.len(),
        g.len(),
        w_t.len()
    );
    assert!(
        Level::available().contains(&level),
        "this CPU cannot run {level:?}"
    );
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the level is one this CPU runs (asserted above).
        Level::Avx512 => unsafe { step_avx512(w_t, gx, h, c, g) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Level::Avx2Fma => unsafe { step_avx2(w_t, gx, h, c, g) },
        _ => step_body::<false>(w_t, gx, h, c, g),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn step_avx512(w_t: &[f32], gx: &[f32], h: &mut [f32], c: &mut [f32], g: &mut [f32]) {
    step_body::<true>(w_t, gx, h, c, g)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn step_avx2(w_t: &[f32], gx: &[f32], h: &mut [f32], c: &mut [f32], g: &mut [f32]) {
    step_body::<true>(w_t, gx, h, c, g)
}

#[inline(always)]
fn sigmoid<const FMA: bool>(x: f32) -> f32 {
    1.0 / (1.0 + exp::<FMA>(-x))
}

#[inline(always)]
fn tanh<const FMA: bool>(x: f32) -> f32 {
    2.0 * sigmoid::<FMA>(2.0 * x) - 1.0
}

#[inline(always)]
fn step_body<const FMA: bool>(
    w_t: &[f32],
    gx: &[f32],
    h: &mut [f32],
    c: &mut [f32],
    g: &mut [f32],
) {
    let hidden = h.len();
    g.copy_from_slice(gx);
    for (&hj, w) in h.iter().zip(w_t.chunks_exact(4 * hidden)) {
        for (gu, &wu) in g.iter_mut().zip(w) {
            *gu = madd::<FMA>(hj, wu, *gu);
        }
    }
    let (gi, rest) = g.split_at(hidden);
    let (go, rest) = rest.split_at(hidden);
    let (gf, gc) = rest.split_at(hidden);
    for j in 0..hidden {
        let cj = sigmoid::<FMA>(gf[j]) * c[j] + sigmoid::<FMA>(gi[j]) * tanh::<FMA>(gc[j]);
        c[j] = cj;
        h[j] = sigmoid::<FMA>(go[j]) * tanh::<FMA>(cj);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cell in f64, weights in their ONNX layout `[4H, H]`.
    fn reference(w: &[f32], gx: &[f32], h: &mut [f64], c: &mut [f64]) {
        let hidden = h.len();
        let g: Vec<f64> = (0..4 * hidden)
            .map(|u| {
                gx[u] as f64
                    + (0..hidden)
                        .map(|j| w[u * hidden + j] as f64 * h[j])
                        .sum::<f64>()
            })
            .collect();
        let s = |x: f64| 1.0 / (1.0 + (-x).exp());
        for j in 0..hidden {
            let (i, o, f, cc) = (g[j], g[hidden + j], g[2 * hidden + j], g[3 * hidden + j]);
            c[j] = s(f) * c[j] + s(i) * cc.tanh();
            h[j] = s(o) * c[j].tanh();
        }
    }

    /// Every level this CPU runs follows the f64 cell over 200 steps (state carried), for a
    /// width that fills whole vectors and one that does not, with gate inputs from saturated
    /// to near zero.
    #[test]
    fn every_level_follows_the_f64_cell() {
        for hidden in [128usize, 13] {
            let mut seed = 7u64;
            let mut rnd = |scale: f32| {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
            };
            let w: Vec<f32> = (0..4 * hidden * hidden).map(|_| rnd(0.3)).collect();
            let mut w_t = vec![0f32; w.len()];
            for u in 0..4 * hidden {
                for j in 0..hidden {
                    w_t[j * 4 * hidden + u] = w[u * hidden + j];
                }
            }
            let steps: Vec<Vec<f32>> = (0..200)
                .map(|s| {
                    (0..4 * hidden)
                        .map(|_| rnd(0.5 + (s % 7) as f32 * 4.0))
                        .collect()
                })
                .collect();
            for &level in Level::available() {
                let (mut h, mut c) = (vec![0f32; hidden], vec![0f32; hidden]);
                let (mut hr, mut cr) = (vec![0f64; hidden], vec![0f64; hidden]);
                let mut g = vec![0f32; 4 * hidden];
                for gx in &steps {
                    step_at(level, &w_t, gx, &mut h, &mut c, &mut g);
                    reference(&w, gx, &mut hr, &mut cr);
                    for j in 0..hidden {
                        assert!(
                            (h[j] as f64 - hr[j]).abs() < 2e-6
                                && (c[j] as f64 - cr[j]).abs() < 2e-5 * cr[j].abs().max(1.0),
                            "{level:?} H={hidden}: h {} vs {}, c {} vs {}",
                            h[j],
                            hr[j],
                            c[j],
                            cr[j]
                        );
                    }
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "LSTM step")]
    fn mismatched_lengths_panic() {
        let mut h = vec![0f32; 4];
        let mut c = vec![0f32; 3];
        step(&[0.0; 64], &[0.0; 16], &mut h, &mut c, &mut [0.0; 16]);
    }
}
