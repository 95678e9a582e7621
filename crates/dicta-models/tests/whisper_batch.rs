//! Batching invariances: a row gives the same encoder states and logits alone or in a batch, and cache
//! row selection (beam expansion, reordering, dropping rows) keeps each row's own state.

mod whisper_support;

use candle_core::{Device, IndexOp, Tensor};
use dicta_models::whisper::{ComputeType, LoadOptions, Whisper};
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

/// A fork (temperature fallback: one prompt pass, a search per temperature) decodes its rows as
/// `select_rows` would, and leaves the cache it came from as it was, whatever either does next.
#[test]
fn fork_copies_rows_and_leaves_the_cache() {
    let Some(m) = model() else { return };
    let (p, next) = steps(m);
    let enc = m.encode(&mel()).unwrap();
    let mut reference = m.new_cache(&enc).unwrap();
    m.decode_last(&prompt(&p, 3), &mut reference).unwrap();
    let ref_next = m
        .decode_last(&prompt(&[next[0]], 3), &mut reference)
        .unwrap();
    let ref_after = m
        .decode_last(&prompt(&[next[1]], 3), &mut reference)
        .unwrap();

    let mut cache = m.new_cache(&enc).unwrap();
    m.decode_last(&prompt(&p, 3), &mut cache).unwrap();
    // Samples of windows 2 and 0 (shrinks, expands and reorders at once).
    let mut fork = cache.fork(&[2, 2, 0]).unwrap();
    assert_eq!((fork.rows(), fork.len()), (3, cache.len()));
    let f1 = m.decode_last(&prompt(&[next[0]], 3), &mut fork).unwrap();
    for (row, src) in [2usize, 2, 0].iter().enumerate() {
        let d = max_abs_diff(&f1.i(row).unwrap(), &ref_next.i(*src).unwrap());
        assert!(d <= TOL, "forked row {row}: {d}");
    }
    // The fork's step and a reorder of the fork did not touch the cache's rows or length.
    fork.select_rows(&[2, 0]).unwrap();
    assert_eq!(cache.rows(), 3);
    let c1 = m.decode_last(&prompt(&[next[0]], 3), &mut cache).unwrap();
    assert!(max_abs_diff(&c1, &ref_next) == 0.0, "the cache changed");
    // Nor the cache's next step the fork's rows.
    let f2 = m.decode_last(&prompt(&[next[1]], 2), &mut fork).unwrap();
    for (row, src) in [0usize, 2].iter().enumerate() {
        let d = max_abs_diff(&f2.i(row).unwrap(), &ref_after.i(*src).unwrap());
        assert!(d <= TOL, "forked row {row} after a reorder: {d}");
    }
    let e = cache.fork(&[3]).unwrap_err();
    assert_eq!(e.kind, dicta_core::ErrorKind::InvalidInput);
    // The last temperature takes the cache itself: it moves, an empty one stays.
    let mut taken = cache.take();
    assert_eq!((cache.rows(), cache.len()), (0, 0));
    assert_eq!(taken.rows(), 3);
    let t1 = m.decode_last(&prompt(&[next[1]], 3), &mut taken).unwrap();
    assert!(
        max_abs_diff(&t1, &ref_after) == 0.0,
        "the taken cache changed"
    );
}

/// Speculative decoding's verification pass: several new tokens per row in one call (after a
/// rollback with `truncate`) give each position the logits single-token steps give it. Reports
/// how many positions are bitwise equal (the greedy argmax can only differ in near-ties if not).
#[test]
fn multi_token_verification_equals_single_steps() {
    let Some(m) = model() else { return };
    verification_equals_single_steps(m, "float32");
    let int8 = LoadOptions {
        compute_type: ComputeType::Int8,
    };
    let q = Whisper::load_with(&model_dir().unwrap(), &Device::Cpu, &int8).unwrap();
    verification_equals_single_steps(&q, "int8");
}

fn verification_equals_single_steps(m: &Whisper, what: &str) {
    let s = &m.config.special;
    let p = vec![s.sot, s.no_timestamps];
    let mel = mel();
    // Each row's own greedy tokens, continued with row 0's where a row ended early (teacher
    // forcing: any tokens do).
    let mut seqs = greedy(m, &mel, &p, 24);
    let n = seqs[0].len().min(16);
    assert!(n >= 8, "greedy gave too few tokens: {seqs:?}");
    let first = seqs[0].clone();
    for r in seqs.iter_mut() {
        let have = r.len();
        r.extend_from_slice(&first[have.min(n)..n]);
    }
    let column = |i: usize| -> Vec<u32> { seqs.iter().map(|r| r[i]).collect() };
    let rows = seqs.len();
    let enc = m.encode(&mel).unwrap();
    // Reference: the prompt, then one token per call; logits after each token.
    let mut c1 = m.new_cache(&enc).unwrap();
    m.decode_last(&prompt(&p, rows), &mut c1).unwrap();
    let mut single = Vec::new();
    for i in 0..n {
        let t = Tensor::from_vec(column(i), (rows, 1), &Device::Cpu).unwrap();
        single.push(m.decode_last(&t, &mut c1).unwrap());
    }
    // Verification-style calls: chunks of several tokens, each followed by a rollback of the
    // last `back` positions that the next chunk feeds again.
    let mut c2 = m.new_cache(&enc).unwrap();
    m.decode_last(&prompt(&p, rows), &mut c2).unwrap();
    let base = c2.len();
    let (mut at, mut worst, mut exact, mut total) = (0usize, 0f32, 0usize, 0usize);
    for (len, back) in [(1usize, 0usize), (5, 2), (4, 0), (6, 3), (3, 1), (8, 0)] {
        let len = len.min(n - at);
        if len == 0 {
            break;
        }
        let flat: Vec<u32> = (0..rows)
            .flat_map(|r| seqs[r][at..at + len].to_vec())
            .collect();
        let t = Tensor::from_vec(flat, (rows, len), &Device::Cpu).unwrap();
        let all = m.decode_verify(&t, &mut c2).unwrap();
        for j in 0..len {
            let got = all.i((.., j)).unwrap();
            let d = max_abs_diff(&got, &single[at + j]);
            worst = worst.max(d);
            exact += usize::from(d == 0.0);
            total += 1;
            let a = got.argmax(1).unwrap().to_vec1::<u32>().unwrap();
            let b = single[at + j].argmax(1).unwrap().to_vec1::<u32>().unwrap();
            assert_eq!(a, b, "position {}: argmax differs", at + j);
        }
        let keep = len - back.min(len - 1);
        c2.truncate(base + at + keep).unwrap();
        at += keep;
    }
    eprintln!(
        "{what}: verification pass vs single steps: {exact}/{total} positions bitwise equal, \
         max |diff| {worst:e}"
    );
    // Bitwise: a near-tie must break the same way as in plain greedy decoding.
    assert_eq!(worst, 0.0, "{what}: verification logits differ by {worst}");
    assert!(c2.truncate(c2.len() + 1).is_err());
}
