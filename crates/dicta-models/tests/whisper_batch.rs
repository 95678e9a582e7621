//! Batching invariances: a row gives the same encoder states and logits alone or in a batch, and cache
//! row selection (beam expansion, reordering, dropping rows) keeps each row's own state.

mod whisper_support;

use candle_core::{Device, IndexOp, Tensor};
use whisper_support::*;

const TOL: f32 = 1e-4;

/// Teacher-forced steps shared by all rows: the prompt, then 3 single-token steps.
fn steps(m: &dicta_models::whisper::Whisper) -> (Vec<u32>, Vec<u32>) {
    let s = &m.config.special;
    (vec![s.sot, s.no_timestamps], vec![843, 523, 616])
}

#[test]
fn batched_rows_equal_rows_alone() {
    let Some(m) = model() else { return };
    let mel = mel();
    let (p, next) = steps(m);
    let enc = m.encode(&mel).unwrap();
    let mut cache = m.new_cache(&enc).unwrap();
    let mut batched = vec![m.decode(&prompt(&p, 3), &mut cache).unwrap()];
    for &t in &next {
        batched.push(m.decode(&prompt(&[t], 3), &mut cache).unwrap());
    }
    for k in 0..3 {
        let e1 = m.encode(&mel.i(k..k + 1).unwrap()).unwrap();
        let d = max_abs_diff(&e1, &enc.i(k..k + 1).unwrap());
        assert!(d <= TOL, "row {k}: encoder differs alone vs batched by {d}");
        let mut c1 = m.new_cache(&e1).unwrap();
        let mut alone = vec![m.decode(&prompt(&p, 1), &mut c1).unwrap()];
        for &t in &next {
            alone.push(m.decode(&prompt(&[t], 1), &mut c1).unwrap());
        }
        for (s, (a, b)) in alone.iter().zip(&batched).enumerate() {
            let d = max_abs_diff(a, &b.i(k..k + 1).unwrap());
            assert!(
                d <= TOL,
                "row {k} step {s}: logits differ alone vs batched by {d}"
            );
        }
    }
}

#[test]
fn one_call_prompt_equals_token_by_token() {
    let Some(m) = model() else { return };
    let mel = mel().i(1..2).unwrap();
    let enc = m.encode(&mel).unwrap();
    let (p, next) = steps(m);
    let seq: Vec<u32> = p.iter().chain(&next).copied().collect();
    let mut c_all = m.new_cache(&enc).unwrap();
    let all = m.decode(&prompt(&seq, 1), &mut c_all).unwrap();
    let mut c_one = m.new_cache(&enc).unwrap();
    for (i, &t) in seq.iter().enumerate() {
        let last = m.decode_last(&prompt(&[t], 1), &mut c_one).unwrap();
        let d = max_abs_diff(&last, &all.i((.., i)).unwrap());
        assert!(
            d <= TOL,
            "position {i}: incremental differs from one call by {d}"
        );
    }
    assert_eq!(c_one.len(), seq.len());
}

/// Beam-style expansion [0,0,1,1,2,2] (shared cross K/V), a reorder within windows, a non-uniform
/// selection [2,0,0] (materialized cross K/V) and dropping rows all keep each row's logits.
#[test]
fn select_rows_keeps_each_rows_state() {
    let Some(m) = model() else { return };
    let (p, next) = steps(m);
    let enc = m.encode(&mel()).unwrap();
    let mut reference = m.new_cache(&enc).unwrap();
    let ref_logits = m.decode_last(&prompt(&p, 3), &mut reference).unwrap();
    let ref_next = m
        .decode_last(&prompt(&[next[0]], 3), &mut reference)
        .unwrap();

    let mut cache = m.new_cache(&enc).unwrap();
    let l0 = m.decode_last(&prompt(&p, 3), &mut cache).unwrap();
    assert!(max_abs_diff(&l0, &ref_logits) == 0.0);
    cache.select_rows(&[0, 0, 1, 1, 2, 2]).unwrap();
    cache.select_rows(&[1, 0, 3, 2, 4, 5]).unwrap();
    assert_eq!(cache.rows(), 6);
    let l1 = m.decode_last(&prompt(&[next[0]], 6), &mut cache).unwrap();
    for (row, src) in [0usize, 0, 1, 1, 2, 2].iter().enumerate() {
        let d = max_abs_diff(&l1.i(row).unwrap(), &ref_next.i(*src).unwrap());
        assert!(d <= TOL, "expanded row {row}: {d}");
    }
    // Non-uniform groups: rows from windows 2, 0, 0.
    cache.select_rows(&[5, 0, 1]).unwrap();
    let l2 = m.decode_last(&prompt(&[next[1]], 3), &mut cache).unwrap();
    let mut r2 = m.new_cache(&enc).unwrap();
    m.decode_last(&prompt(&p, 3), &mut r2).unwrap();
    m.decode_last(&prompt(&[next[0]], 3), &mut r2).unwrap();
    let want = m.decode_last(&prompt(&[next[1]], 3), &mut r2).unwrap();
    for (row, src) in [2usize, 0, 0].iter().enumerate() {
        let d = max_abs_diff(&l2.i(row).unwrap(), &want.i(*src).unwrap());
        assert!(d <= TOL, "regrouped row {row}: {d}");
    }
    // Bad indices are refused, not a panic.
    let e = cache.select_rows(&[7]).unwrap_err();
    assert_eq!(e.kind, dicta_core::ErrorKind::InvalidInput);
    let e = m
        .decode_last(
            &Tensor::zeros((3, 0), candle_core::DType::U32, &Device::Cpu).unwrap(),
            &mut cache,
        )
        .unwrap_err();
    assert_eq!(e.kind, dicta_core::ErrorKind::InvalidInput);
}
