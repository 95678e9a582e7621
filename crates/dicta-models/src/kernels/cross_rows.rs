//! Cross-attention of decoder rows that share encoder windows ([`attend_cross_rows`]).

use candle_core::{DType, Tensor};
use rayon::prelude::*;

use super::cross_lowp::{self, HeadKv};
use super::{
    attend_few_queries, attend_head, attention, block_start, f16_storage, f32_input, f32_storage,
    few_queries_result, head_blocks, i8_storage, with_cpu,
};

/// Cross-attention of `N` rows over `W` encoder windows: q [N, H, L, D] f32 (already scaled),
/// row `r` attending window `window_of[r]` of k and v → out [N, H, L, D], plus the
/// probabilities [N, H, L, T] when `want_probs`. k and v are [W, H, T, D] f32; or f16 with the
/// keys in blocks [W, H, ⌈T/16⌉, 16·D] ([`super::block_keys_f16`]) and v [W, H, T, D]; or, with
/// `scales` [W, H, 2, D] f32 (each head's key scales, then its value scales), int8 held in u8
/// tensors of those two shapes ([`super::quantize_kv_i8`]).
///
/// Consecutive rows of one window (the beams or samples of a window) are one task per head,
/// their queries side by side, so the window's keys and values are read once for all of them;
/// and since rows only name their window, dropping or reordering rows never copies the encoder
/// K/V (a batched sampling pass had copied 2 GB of it on a 10-minute recording). Each query
/// gets the same bits however rows are grouped.
pub fn attend_cross_rows(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scales: Option<&Tensor>,
    window_of: &[usize],
    want_probs: bool,
) -> candle_core::Result<(Tensor, Option<Tensor>)> {
    let (n, h, l, d) = q.dims4()?;
    let (w, t) = (v.dim(0)?, v.dim(2)?);
    if window_of.len() != n {
        candle_core::bail!(
            "attend_cross_rows: {} rows of queries, {} window indices",
            n,
            window_of.len()
        );
    }
    if let Some(&bad) = window_of.iter().find(|&&x| x >= w) {
        candle_core::bail!("attend_cross_rows: window {bad} of {w}");
    }
    let i8 = scales.is_some();
    if i8 && (!q.device().is_cpu() || q.dtype() != DType::F32 || v.dtype() != DType::U8) {
        candle_core::bail!("attend_cross_rows: int8 K/V are CPU u8 tensors (and f32 queries)");
    }
    // f16 and int8 keys come in blocks of `KEY_BLOCK`.
    let blocked = v.dtype() == DType::F16 || i8;
    if !q.device().is_cpu() || q.dtype() != DType::F32 || (!blocked && v.dtype() != DType::F32) {
        // Elsewhere (a GPU): each row's window K/V, then the plain kernel.
        let idx: Vec<u32> = window_of.iter().map(|&x| x as u32).collect();
        let idx = Tensor::new(idx.as_slice(), q.device())?;
        return attend_few_queries(
            q,
            &k.index_select(&idx, 0)?,
            &v.index_select(&idx, 0)?,
            want_probs,
        );
    }
    let key_block = if blocked {
        cross_lowp::blocked_len(t, d)
    } else {
        t * d
    };
    let k_dims = if blocked {
        (
            w,
            h,
            t.div_ceil(cross_lowp::KEY_BLOCK),
            cross_lowp::KEY_BLOCK * d,
        )
    } else {
        (w, h, t, d)
    };
    if k.dims4()? != k_dims || v.dims4()? != (w, h, t, d) || k.dtype() != v.dtype() {
        candle_core::bail!(
            "attend_cross_rows: q {:?}, k {:?} {:?}, v {:?} {:?}",
            q.dims(),
            k.dims(),
            k.dtype(),
            v.dims(),
            v.dtype()
        );
    }
    let scales = match scales {
        Some(s) if s.dims4()? == (w, h, 2, d) && s.dtype() == DType::F32 => Some(s.contiguous()?),
        Some(s) => candle_core::bail!("attend_cross_rows: int8 scales {:?}", s.dims()),
        None => None,
    };
    // The scales read in place (a model call per layer and step; no copy).
    let scale_storage = scales.as_ref().map(|s| s.storage_and_layout());
    let sc: Option<&[f32]> = match &scale_storage {
        Some((storage, layout)) => {
            let candle_core::Storage::Cpu(cpu) = &**storage else {
                candle_core::bail!("attend_cross_rows: int8 scales are a CPU tensor")
            };
            Some(f32_input(cpu, layout)?)
        }
        None => None,
    };
    // Runs of consecutive rows on one window: (window, first row, rows).
    let mut runs: Vec<(usize, usize, usize)> = Vec::new();
    for (r, &win) in window_of.iter().enumerate() {
        match runs.last_mut() {
            Some((last, _, c)) if *last == win => *c += 1,
            _ => runs.push((win, r, 1)),
        }
    }
    let q = q.contiguous()?;
    let (k, v) = if blocked {
        (k.contiguous()?, v.contiguous()?)
    } else {
        (head_blocks(k, t, d)?, head_blocks(v, t, d)?)
    };
    // One task per (run, head): its output [c·L, D] and, when wanted, probabilities [c·L, T].
    let results: Vec<(Vec<f32>, Vec<f32>)> = with_cpu(
        "attend_cross_rows",
        [&q, &k, &v],
        |[(qs, ql), (ks, kl), (vs, vl)]| {
            let qd = f32_input(qs, ql)?;
            let kv = if let Some(sc) = sc {
                Kv::I8(
                    i8_storage(ks, kl, h, key_block)?,
                    i8_storage(vs, vl, h, t * d)?,
                    sc,
                )
            } else if blocked {
                Kv::F16(
                    f16_storage(ks, kl, h, key_block)?,
                    f16_storage(vs, vl, h, t * d)?,
                )
            } else {
                Kv::F32(
                    f32_storage(ks, kl, h, t * d)?,
                    f32_storage(vs, vl, h, t * d)?,
                )
            };
            let level = attention::Level::best();
            let task = |i: usize, scratch: &mut Vec<f32>| {
                let ((win, r0, c), hh) = (runs[i / h], i % h);
                let m = c * l;
                // The run's queries of head `hh`, row after row.
                let mut qr = Vec::with_capacity(m * d);
                for r in r0..r0 + c {
                    let at = (r * h + hh) * l * d;
                    qr.extend_from_slice(&qd[at..at + l * d]);
                }
                let mut o = vec![0f32; m * d];
                let mut p = if want_probs {
                    vec![0f32; m * t]
                } else {
                    Vec::new()
                };
                let probs = if want_probs {
                    &mut p
                } else {
                    scratch.resize(m * t, 0.0);
                    scratch
                };
                let bh = win * h + hh;
                let (k0, v0) = (block_start(kl, h, bh), block_start(vl, h, bh));
                match kv {
                    Kv::F16(kd, vd) => {
                        let kv = HeadKv::F16 {
                            k: &kd[k0..k0 + key_block],
                            v: &vd[v0..v0 + t * d],
                        };
                        cross_lowp::attend_head_lowp(level, &qr, kv, t, d, probs, &mut o)
                    }
                    Kv::I8(kd, vd, sc) => {
                        let s0 = bh * 2 * d;
                        let kv = HeadKv::I8 {
                            k: &kd[k0..k0 + key_block],
                            v: &vd[v0..v0 + t * d],
                            ks: &sc[s0..s0 + d],
                            vs: &sc[s0 + d..s0 + 2 * d],
                        };
                        cross_lowp::attend_head_lowp(level, &qr, kv, t, d, probs, &mut o)
                    }
                    Kv::F32(kd, vd) => {
                        let (kk, vv) = (&kd[k0..k0 + t * d], &vd[v0..v0 + t * d]);
                        attend_head(&qr, [kk, &[]], [vv, &[]], d, probs, &mut o)
                    }
                }
                (o, p)
            };
            Ok((0..runs.len() * h)
                .into_par_iter()
                .map_init(Vec::new, |scratch, i| task(i, scratch))
                .collect())
        },
    )?;
    // Back to row order: [N, H, L, D] (and [N, H, L, T]).
    let mut out = vec![0f32; n * h * l * d];
    let mut probs = vec![0f32; if want_probs { n * h * l * t } else { 0 }];
    for (i, (o, p)) in results.iter().enumerate() {
        let ((_, r0, c), hh) = (runs[i / h], i % h);
        for j in 0..c {
            let at = ((r0 + j) * h + hh) * l;
            out[at * d..(at + l) * d].copy_from_slice(&o[j * l * d..(j + 1) * l * d]);
            if want_probs {
                probs[at * t..(at + l) * t].copy_from_slice(&p[j * l * t..(j + 1) * l * t]);
            }
        }
    }
    few_queries_result(out, probs, (n, h, l, d, t), want_probs, q.device())
}

/// The keys and values of every window, in the storage of either kind.
#[derive(Clone, Copy)]
enum Kv<'a> {
    F16(&'a [half::f16], &'a [half::f16]),
    /// Keys, values, and the scales [W, H, 2, D].
    I8(&'a [i8], &'a [i8], &'a [f32]),
    F32(&'a [f32], &'a [f32]),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::tests::{max_abs_diff, vals};
    use crate::kernels::{attend_cross_f16, block_keys_f16, quantize_kv_i8};
    use candle_core::{Device, IndexOp};

    fn bits(t: &Tensor) -> Vec<u32> {
        t.flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    }

    /// Every row gets the bits of attending its own window alone, whatever the runs (repeated,
    /// unsorted, windows skipped), for f32, f16 blocked and int8 K/V, with probabilities.
    #[test]
    fn rows_sharing_windows_equal_each_row_alone() {
        let dev = Device::Cpu;
        let window_of = [2usize, 2, 0, 1, 1, 1, 0, 2];
        for (w, h, t, d) in [(3, 2, 37, 13), (3, 2, 40, 64)] {
            let n = window_of.len();
            let k = Tensor::from_vec(vals(w * h * t * d, 2), (w, h, t, d), &dev).unwrap();
            let v = Tensor::from_vec(vals(w * h * t * d, 3), (w, h, t, d), &dev).unwrap();
            let kb = block_keys_f16(&k).unwrap();
            let v16 = v.to_dtype(DType::F16).unwrap();
            let (k8, v8, s8) = quantize_kv_i8(&k, &v).unwrap();
            let kinds: [(&str, &Tensor, &Tensor, Option<&Tensor>); 3] = [
                ("f32", &k, &v, None),
                ("f16", &kb, &v16, None),
                ("int8", &k8, &v8, Some(&s8)),
            ];
            for l in [1, 3] {
                let q = Tensor::from_vec(vals(n * h * l * d, 1), (n, h, l, d), &dev).unwrap();
                for (kind, kk, vv, sc) in kinds {
                    let (out, probs) = attend_cross_rows(&q, kk, vv, sc, &window_of, true).unwrap();
                    let (plain, _) = attend_cross_rows(&q, kk, vv, sc, &window_of, false).unwrap();
                    assert_eq!(bits(&out), bits(&plain), "probabilities change nothing");
                    let probs = probs.unwrap();
                    assert_eq!(probs.dims4().unwrap(), (n, h, l, t));
                    for (r, &win) in window_of.iter().enumerate() {
                        let qr = q.i(r..r + 1).unwrap();
                        let (kw, vw) = (kk.i(win..win + 1).unwrap(), vv.i(win..win + 1).unwrap());
                        let (want, want_p) = match kind {
                            "f32" => attend_few_queries(&qr, &kw, &vw, true).unwrap(),
                            "f16" => attend_cross_f16(&qr, &kw, &vw, true).unwrap(),
                            _ => {
                                let sw = s8.i(win..win + 1).unwrap();
                                attend_cross_rows(&qr, &kw, &vw, Some(&sw), &[0], true).unwrap()
                            }
                        };
                        let got = out.i(r..r + 1).unwrap();
                        assert_eq!(bits(&got), bits(&want), "row {r}, L {l}, {kind}, d {d}");
                        let got_p = probs.i(r..r + 1).unwrap();
                        assert_eq!(
                            bits(&got_p),
                            bits(&want_p.unwrap()),
                            "row {r} probabilities"
                        );
                    }
                }
            }
            // int8 stays close to f32 attention (per-channel scales, 127 steps a side).
            let q = Tensor::from_vec(vals(n * h * d, 1), (n, h, 1, d), &dev).unwrap();
            let (exact, _) = attend_cross_rows(&q, &k, &v, None, &window_of, false).unwrap();
            let (quant, _) = attend_cross_rows(&q, &k8, &v8, Some(&s8), &window_of, false).unwrap();
            let err = max_abs_diff(&exact, &quant);
            assert!(err < 0.05, "int8 against f32: max error {err}");
        }
    }

    #[test]
    fn int8_scales_of_the_wrong_shape_are_an_error() {
        let dev = Device::Cpu;
        let (w, h, t, d) = (2, 1, 5, 4);
        let k = Tensor::from_vec(vals(w * h * t * d, 2), (w, h, t, d), &dev).unwrap();
        let (k8, v8, s8) = quantize_kv_i8(&k, &k).unwrap();
        let q = Tensor::zeros((2, h, 1, d), DType::F32, &dev).unwrap();
        assert!(attend_cross_rows(&q, &k8, &v8, Some(&s8), &[0, 1], false).is_ok());
        let short = s8.narrow(0, 0, 1).unwrap();
        assert!(attend_cross_rows(&q, &k8, &v8, Some(&short), &[0, 1], false).is_err());
        // f32 K/V with scales are not int8.
        assert!(attend_cross_rows(&q, &k, &k, Some(&s8), &[0, 1], false).is_err());
    }

    #[test]
    fn a_window_out_of_range_or_a_wrong_count_is_an_error() {
        let dev = Device::Cpu;
        let (w, h, t, d) = (2, 1, 5, 4);
        let k = Tensor::zeros((w, h, t, d), DType::F32, &dev).unwrap();
        let q = Tensor::zeros((2, h, 1, d), DType::F32, &dev).unwrap();
        assert!(attend_cross_rows(&q, &k, &k, None, &[0, 2], false).is_err());
        assert!(attend_cross_rows(&q, &k, &k, None, &[0], false).is_err());
        assert!(attend_cross_rows(&q, &k, &k, None, &[1, 1], false).is_ok());
    }
}
