use super::*;
use crate::kernels::cross_lowp::{blocked_len, quantize_head};

/// Deterministic values in about ±1 (a hash of `i` and `seed`).
fn noise(i: usize, seed: u64) -> f32 {
    let mut x =
        (i as u64 ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 31;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 29;
    (x % 20_001) as f32 / 10_000.0 - 1.0
}

/// One head of `t` keys of `d` dims quantized as the model does, with keys and values as f64
/// (the integers times their channel scales) for the reference.
struct Head {
    k: Vec<i8>,
    v: Vec<i8>,
    scales: Vec<f32>,
    kd: Vec<f64>,
    vd: Vec<f64>,
}

fn head(t: usize, d: usize, seed: u64) -> Head {
    // Channels of different ranges, so that their scales differ.
    let kf: Vec<f32> = (0..t * d)
        .map(|i| noise(i, seed) * (1.0 + (i % d) as f32 * 0.1))
        .collect();
    let vf: Vec<f32> = (0..t * d)
        .map(|i| noise(i, seed + 1) * (0.5 + (i % d) as f32 * 0.05))
        .collect();
    let (mut kb, mut vb) = (vec![0u8; blocked_len(t, d)], vec![0u8; t * d]);
    let mut scales = vec![0f32; 2 * d];
    quantize_head(
        (t, d),
        |j| &kf[j * d..(j + 1) * d],
        |j| &vf[j * d..(j + 1) * d],
        &mut kb,
        &mut vb,
        &mut scales,
    );
    let (ks, vs) = scales.split_at(d);
    let kd = (0..t * d)
        .map(|i| {
            let (j, c) = (i / d, i % d);
            (i32::from(kb[key_index(j, c, d)]) - 128) as f64 * ks[c] as f64
        })
        .collect();
    let vd = (0..t * d)
        .map(|i| {
            let (j, c) = (i / d, i % d);
            vb[value_index(j, c, t, d)] as i8 as f64 * vs[c] as f64
        })
        .collect();
    Head {
        k: kb.iter().map(|&x| x as i8).collect(),
        v: vb.iter().map(|&x| x as i8).collect(),
        scales,
        kd,
        vd,
    }
}

fn run(level: Level, q: &[f32], h: &Head, t: usize, d: usize) -> (Vec<f32>, Vec<f32>) {
    let m = q.len() / d;
    let (mut p, mut out) = (vec![0f32; m * t], vec![0f32; m * d]);
    let (ks, vs) = h.scales.split_at(d);
    attend_head_i8(level, q, (&h.k, &h.v), (ks, vs), t, d, &mut p, &mut out);
    (p, out)
}

/// f64 attention over the stored keys and values: (probabilities [M, T], out [M, D]).
fn reference(q: &[f32], h: &Head, t: usize, d: usize) -> (Vec<f64>, Vec<f64>) {
    let m = q.len() / d;
    let (mut probs, mut out) = (vec![0f64; m * t], vec![0f64; m * d]);
    for i in 0..m {
        let s: Vec<f64> = (0..t)
            .map(|j| (0..d).map(|c| q[i * d + c] as f64 * h.kd[j * d + c]).sum())
            .collect();
        let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = s.iter().map(|x| (x - mx).exp()).sum();
        for j in 0..t {
            probs[i * t + j] = (s[j] - mx).exp() / z;
        }
        for c in 0..d {
            out[i * d + c] = (0..t).map(|j| probs[i * t + j] * h.vd[j * d + c]).sum();
        }
    }
    (probs, out)
}

#[test]
fn the_layouts_place_every_element_once() {
    for &(t, d) in &[
        (1, 64),
        (3, 64),
        (17, 64),
        (1500, 64),
        (1501, 64),
        (37, 6),
        (5, 20),
    ] {
        let mut keys = vec![false; blocked_len(t, d)];
        let mut values = vec![false; t * d];
        for j in 0..t {
            for c in 0..d {
                let (ki, vi) = (key_index(j, c, d), value_index(j, c, t, d));
                assert!(!keys[ki] && !values[vi], "{t}x{d}: ({j}, {c}) placed twice");
                keys[ki] = true;
                values[vi] = true;
            }
        }
        assert!(values.iter().all(|&x| x), "{t}x{d}: a value slot is unused");
        // Keys fill whole blocks of 16 (the last one zero-padded).
        assert_eq!(keys.iter().filter(|&&x| x).count(), t * d);
    }
    // `quantize_head` places each key and value where the index functions say: integer inputs
    // with every channel reaching ±127 quantize to themselves.
    for &(t, d) in &[(3, 64), (37, 6), (21, 20), (18, 1)] {
        let x = |j: usize, c: usize| -> f32 {
            if j == 0 {
                127.0
            } else {
                ((j * 7 + c * 3) % 255) as f32 - 127.0
            }
        };
        let rows: Vec<Vec<f32>> = (0..t).map(|j| (0..d).map(|c| x(j, c)).collect()).collect();
        let (mut kb, mut vb) = (vec![0u8; blocked_len(t, d)], vec![0u8; t * d]);
        let mut scales = vec![0f32; 2 * d];
        quantize_head(
            (t, d),
            |j| &rows[j],
            |j| &rows[j],
            &mut kb,
            &mut vb,
            &mut scales,
        );
        for j in 0..t {
            for c in 0..d {
                let want = x(j, c) as i8;
                assert_eq!(
                    kb[key_index(j, c, d)],
                    biased(want),
                    "{t}x{d} key ({j}, {c})"
                );
                assert_eq!(
                    vb[value_index(j, c, t, d)] as i8,
                    want,
                    "{t}x{d} value ({j}, {c})"
                );
            }
        }
    }
    assert_eq!(biased(-127), 1);
    assert_eq!(biased(0), 128);
    assert_eq!(biased(127), 255);
}

/// Every level is within 2.5·10⁻⁴ of the values' range (times the queries' sharpness, as the
/// queries round relative to their largest element) of f64 attention over the stored keys and
/// values, for sharp and for flat attention: the queries' and probabilities' rounding (2⁻¹⁵
/// and 2⁻²⁴ of their largest) is far below the stored integers' own (a score moves by about
/// 10⁻⁴ at sharpness 1, against about 0.05 from rounding the keys to int8). The vector levels
/// agree bit for bit, and a query gets the same bits alone as among others.
#[test]
fn every_level_matches_f64_over_the_stored_values_and_queries_are_independent() {
    let d = 64;
    for &(m, t, sharp) in &[
        (1, 1, 1.0),
        (1, 3, 1.0),
        (2, 17, 4.0),
        (5, 300, 1.0),
        (7, 1500, 0.05),
        (11, 1501, 2.0),
        (3, 1499, 8.0),
    ] {
        let h = head(t, d, t as u64);
        let q: Vec<f32> = (0..m * d).map(|i| noise(i, 99) * sharp).collect();
        let (want_p, want) = reference(&q, &h, t, d);
        let vmax = h.vd.iter().fold(0f64, |m, x| m.max(x.abs()));
        let mut vector: Option<(Vec<f32>, Vec<f32>)> = None;
        for &level in Level::available() {
            let (p, out) = run(level, &q, &h, t, d);
            let err = out
                .iter()
                .zip(&want)
                .map(|(g, w)| (*g as f64 - w).abs())
                .fold(0f64, f64::max);
            assert!(
                err < 2.5e-4 * vmax * f64::from(sharp.max(1.0)),
                "{level:?} {m}x{t} ×{sharp}: max error {err} (values within ±{vmax})"
            );
            let perr = p
                .iter()
                .zip(&want_p)
                .map(|(g, w)| (*g as f64 - w).abs())
                .fold(0f64, f64::max);
            assert!(
                perr < 2e-4 * f64::from(sharp.max(1.0)),
                "{level:?} {m}x{t}: probability error {perr}"
            );
            for i in 0..m {
                let (p1, o1) = run(level, &q[i * d..(i + 1) * d], &h, t, d);
                assert_eq!(o1, out[i * d..(i + 1) * d], "{level:?} {m}x{t} query {i}");
                assert_eq!(
                    p1,
                    p[i * t..(i + 1) * t],
                    "{level:?} query {i} probabilities"
                );
            }
            if level != Level::Scalar {
                match &vector {
                    Some((vp, vo)) => {
                        assert_eq!(vo, &out, "{level:?} {m}x{t}: differs from AVX-512");
                        assert_eq!(vp, &p, "{level:?} {m}x{t}: probabilities");
                    }
                    None => vector = Some((p, out)),
                }
            }
        }
    }
}

/// The two-level rounding matters: one int8 level of the probabilities would lose the many
/// small weights of a flat row; here a thousand keys each below 1/510 of the largest weight
/// hold half of the mass, and the output still matches f64.
#[test]
fn many_small_weights_are_kept() {
    let (t, d) = (1001, 64);
    let mut h = head(t, d, 5);
    // Key 0 scores 7 (weight e⁷ ≈ 1097), the other thousand 0 (weight 1 each): each is below
    // 1/510 of the largest, together about half of the mass. Keys: channel 0 only.
    for j in 0..t {
        for c in 0..d {
            let x = if c == 0 && j == 0 { 127 } else { 0 };
            h.k[key_index(j, c, d)] = biased(x) as i8;
            h.kd[j * d + c] = x as f64 * h.scales[c] as f64;
        }
    }
    let mut q = vec![0f32; d];
    q[0] = 7.0 / (127.0 * h.scales[0]);
    let (_, want) = reference(&q, &h, t, d);
    for &level in Level::available() {
        let (_, out) = run(level, &q, &h, t, d);
        for (c, (g, w)) in out.iter().zip(&want).enumerate() {
            assert!(
                (*g as f64 - w).abs() < 1e-4,
                "{level:?} channel {c}: {g} vs {w}"
            );
        }
    }
}

#[test]
fn a_zero_query_averages_and_a_nan_query_stays_nan_alone() {
    let (t, d) = (40, 64);
    let h = head(t, d, 3);
    let mut q = vec![0f32; 2 * d];
    q[d] = f32::NAN;
    for &level in Level::available() {
        let (p, out) = run(level, &q, &h, t, d);
        assert!(p[..t].iter().all(|&x| (x - 1.0 / t as f32).abs() < 1e-7));
        for (c, &o) in out[..d].iter().enumerate() {
            let mean = (0..t).map(|j| h.vd[j * d + c]).sum::<f64>() / t as f64;
            assert!((o as f64 - mean).abs() < 1e-5, "{level:?} channel {c}");
        }
        assert!(out[d..].iter().all(|x| x.is_nan()), "{level:?}: NaN query");
    }
}
