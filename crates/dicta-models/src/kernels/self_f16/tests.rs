use super::*;
use candle_core::{Device, IndexOp};

/// `n` deterministic values in about [-1.5, 1.5], different per `salt`.
fn vals(n: usize, salt: f32) -> Vec<f32> {
    (0..n)
        .map(|i| (i as f32 * 0.618 + salt).sin() * (1.0 + (i % 7) as f32 * 0.08))
        .collect()
}

/// An f16 cache of `cap` positions (a multiple of 16) from f32 keys and values [B, H, T, D]:
/// (blocked keys [B, H, cap/16, 16·D], values [B, H, cap, D]), positions past T zero.
fn cache(
    k: &[f32],
    v: &[f32],
    (b, h, t, d): (usize, usize, usize, usize),
    cap: usize,
) -> (Tensor, Tensor) {
    let dev = Device::Cpu;
    let kc = Tensor::zeros((b, h, cap / KEY_BLOCK, KEY_BLOCK * d), DType::F16, &dev).unwrap();
    let vc = Tensor::zeros((b, h, cap, d), DType::F16, &dev).unwrap();
    for (c, x, blocked) in [(&kc, k, true), (&vc, v, false)] {
        c.inplace_op1(&PutF16 {
            src: x,
            dims: (b, h, t, d),
            offset: 0,
            blocked,
        })
        .unwrap();
    }
    (kc, vc)
}

/// f64 causal attention over the f16 values: q [B, H, L, D] at `offset`, rows left-padded by
/// `starts`.
fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (b, h, l, d): (usize, usize, usize, usize),
    offset: usize,
    starts: &[usize],
) -> Vec<f64> {
    let t = offset + l;
    let r = |x: f32| f16::from_f32(x).to_f64();
    let mut out = vec![0f64; b * h * l * d];
    for bh in 0..b * h {
        let start = starts.get(bh / h).copied().unwrap_or(0);
        for i in 0..l {
            let ti = offset + i + 1;
            let s0 = start.min(ti - 1);
            let qi = &q[(bh * l + i) * d..][..d];
            let s: Vec<f64> = (s0..ti)
                .map(|j| {
                    (0..d)
                        .map(|c| qi[c] as f64 * r(k[(bh * t + j) * d + c]))
                        .sum()
                })
                .collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|x| (x - mx).exp()).sum();
            for c in 0..d {
                out[(bh * l + i) * d + c] = (s0..ti)
                    .map(|j| (s[j - s0] - mx).exp() / z * r(v[(bh * t + j) * d + c]))
                    .sum();
            }
        }
    }
    out
}

fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

/// Every level is within rounding of f64 attention over the f16 values (prompts and steps,
/// left-padded rows, odd head sizes), the vector levels give the same bits, and each query
/// gets the bits of a one-token step at its position.
#[test]
fn every_level_matches_f64_and_a_prompt_equals_its_steps() {
    let dev = Device::Cpu;
    for &(b, h, l, offset, d, starts) in &[
        (2, 3, 1, 40, 64, &[][..]),
        (3, 2, 20, 0, 64, &[0, 5, 17][..]),
        (1, 2, 7, 33, 64, &[][..]),
        (2, 1, 5, 12, 13, &[3, 0][..]),
        (1, 6, 1, 0, 64, &[][..]),
    ] {
        let t = offset + l;
        let cap = (t + 5_usize).div_ceil(KEY_BLOCK) * KEY_BLOCK;
        let q = vals(b * h * l * d, 0.1);
        let (k, v) = (vals(b * h * t * d, 0.7), vals(b * h * t * d, 1.3));
        let (kc, vc) = cache(&k, &v, (b, h, t, d), cap);
        let qt = Tensor::from_vec(q.clone(), (b, h, l, d), &dev).unwrap();
        let want = reference(&q, &k, &v, (b, h, l, d), offset, starts);
        let mut vector: Option<Vec<f32>> = None;
        for &level in Level::available() {
            let out = attend_causal_f16_at(level, &qt, &kc, &vc, offset, starts, None).unwrap();
            let got = values(&out);
            let err = got
                .iter()
                .zip(&want)
                .map(|(&g, &w)| (g as f64 - w).abs())
                .fold(0f64, f64::max);
            assert!(err < 2e-5, "{level:?} {:?}: {err}", (b, h, l, offset, d));
            // Each query as a step over the positions before it.
            for i in 0..l {
                let qi = qt.i((.., .., i..i + 1, ..)).unwrap();
                let step =
                    attend_causal_f16_at(level, &qi, &kc, &vc, offset + i, starts, None).unwrap();
                assert_eq!(
                    values(&step),
                    values(&out.i((.., .., i..i + 1, ..)).unwrap()),
                    "{level:?}: query {i} differs from its step"
                );
            }
            if level != Level::Scalar && d == 64 {
                match &vector {
                    Some(first) => assert_eq!(first, &got, "{level:?} differs from AVX-512"),
                    None => vector = Some(got),
                }
            }
        }
    }
}

/// A row left-padded by `s` positions gets the bits it gets alone.
#[test]
fn a_left_padded_row_equals_the_row_alone() {
    let dev = Device::Cpu;
    let (h, l, d): (usize, usize, usize) = (2, 9, 64);
    for &level in Level::available() {
        for pad in [0, 3, 16, 21] {
            let t = pad + l;
            let cap = t.div_ceil(KEY_BLOCK) * KEY_BLOCK;
            let q = vals(h * l * d, 0.2);
            let (k, v) = (vals(h * l * d, 0.9), vals(h * l * d, 1.9));
            let alone = {
                let (kc, vc) = cache(&k, &v, (1, h, l, d), l.div_ceil(KEY_BLOCK) * KEY_BLOCK);
                let qt = Tensor::from_vec(q.clone(), (1, h, l, d), &dev).unwrap();
                values(&attend_causal_f16_at(level, &qt, &kc, &vc, 0, &[], None).unwrap())
            };
            // The same keys after `pad` positions of other values, queries at the end.
            let (mut kp, mut vp, mut qp) = (Vec::new(), Vec::new(), Vec::new());
            for hh in 0..h {
                kp.extend(vals(pad * d, 5.0));
                kp.extend_from_slice(&k[hh * l * d..(hh + 1) * l * d]);
                vp.extend(vals(pad * d, 6.0));
                vp.extend_from_slice(&v[hh * l * d..(hh + 1) * l * d]);
                qp.extend(vals(pad * d, 7.0));
                qp.extend_from_slice(&q[hh * l * d..(hh + 1) * l * d]);
            }
            let (kc, vc) = cache(&kp, &vp, (1, h, t, d), cap);
            let qt = Tensor::from_vec(qp, (1, h, t, d), &dev).unwrap();
            let out = attend_causal_f16_at(level, &qt, &kc, &vc, 0, &[pad], None).unwrap();
            let got = values(&out.i((.., .., pad.., ..)).unwrap());
            assert_eq!(got, alone, "{level:?}, {pad} positions of padding");
        }
    }
}

/// Rows reading their shared prefix from another row's copy get the bits of reading their
/// own, and really read the other copy (their own prefix blocks hold NaN).
#[test]
fn a_shared_prefix_is_read_from_its_source_row() {
    let dev = Device::Cpu;
    let (b, h, d, shared, t): (usize, usize, usize, usize, usize) = (3, 2, 64, 37, 45);
    let cap = 48;
    // Rows 0 and 1 are one family, row 2 its own; the family agrees on `..shared`.
    let (mut k, mut v) = (vals(b * h * t * d, 0.3), vals(b * h * t * d, 0.8));
    for x in [&mut k, &mut v] {
        for hh in 0..h {
            let (r0, r1) = (hh * t * d, (h + hh) * t * d);
            let prefix = x[r0..r0 + shared * d].to_vec();
            x[r1..r1 + shared * d].copy_from_slice(&prefix);
        }
    }
    let (kc, vc) = cache(&k, &v, (b, h, t, d), cap);
    let q = Tensor::from_vec(vals(b * h * 2 * d, 0.4), (b, h, 2, d), &dev).unwrap();
    // Row 1's own copy of the whole shared blocks (2 blocks: positions ..32) spoiled.
    let mut kn = vec![0f32; b * h * t * d];
    let mut vn = kn.clone();
    for hh in 0..h {
        for (x, src) in [(&mut kn, &k), (&mut vn, &v)] {
            for r in 0..b {
                let at = (r * h + hh) * t * d;
                x[at..at + t * d].copy_from_slice(&src[at..at + t * d]);
            }
            let at = (h + hh) * t * d;
            x[at..at + 32 * d].fill(f32::NAN);
        }
    }
    let (kcn, vcn) = cache(&kn, &vn, (b, h, t, d), cap);
    let prefix = SharedPrefix {
        source: &[0, 0, 2],
        shared,
    };
    for &level in Level::available() {
        let own = values(&attend_causal_f16_at(level, &q, &kc, &vc, t - 2, &[], None).unwrap());
        let via = attend_causal_f16_at(level, &q, &kcn, &vcn, t - 2, &[], Some(prefix)).unwrap();
        assert_eq!(values(&via), own, "{level:?}");
    }
}

/// Written positions read back as the nearest f16 at the blocked index (keys) or in rows
/// (values), other positions untouched; shapes that do not fit are errors.
#[test]
fn put_f16_writes_positions_in_place() {
    let dev = Device::Cpu;
    let (b, h, l, d, cap, offset) = (2, 3, 5, 4, 32, 14);
    let src = vals(b * h * l * d, 2.0);
    let kc = Tensor::ones((b + 1, h, cap / KEY_BLOCK, KEY_BLOCK * d), DType::F16, &dev).unwrap();
    let vc = Tensor::ones((b + 1, h, cap, d), DType::F16, &dev).unwrap();
    for (c, blocked) in [(&kc, true), (&vc, false)] {
        c.inplace_op1(&PutF16 {
            src: &src,
            dims: (b, h, l, d),
            offset,
            blocked,
        })
        .unwrap();
        let got: Vec<f16> = c.flatten_all().unwrap().to_vec1().unwrap();
        let per_head = cap * d;
        for bh in 0..(b + 1) * h {
            for j in 0..cap {
                for ch in 0..d {
                    let at = bh * per_head
                        + if blocked {
                            blocked_index(j, ch, d)
                        } else {
                            j * d + ch
                        };
                    let want = if bh < b * h && (offset..offset + l).contains(&j) {
                        f16::from_f32(src[(bh * l + j - offset) * d + ch])
                    } else {
                        f16::ONE
                    };
                    assert_eq!(got[at], want, "{bh} {j} {ch} blocked {blocked}");
                }
            }
        }
        let too_far = PutF16 {
            src: &src,
            dims: (b, h, l, d),
            offset: cap - 2,
            blocked,
        };
        assert!(c.inplace_op1(&too_far).is_err());
    }
    let q = Tensor::zeros((b, h, 1, d), DType::F32, &dev).unwrap();
    // Fewer positions than asked, wrong dtype.
    assert!(
        attend_causal_f16(&q, &kc.i(..b).unwrap(), &vc.i(..b).unwrap(), cap, &[], None).is_err()
    );
    let k32 = kc.i(..b).unwrap().to_dtype(DType::F32).unwrap();
    assert!(attend_causal_f16(&q, &k32, &vc.i(..b).unwrap(), 3, &[], None).is_err());
    assert!(attend_causal_f16(&q, &kc.i(..b).unwrap(), &vc.i(..b).unwrap(), 3, &[], None).is_ok());
}
