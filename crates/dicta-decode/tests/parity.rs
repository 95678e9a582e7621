//! Decoder parity with pyctcdecode 0.5.0 on 50 synthetic CTC cases (see
//! `tests/fixtures/make_cases.py`): greedy, beam without LM, beam with the English trigram ARPA
//! (alpha 0.5, beta 1.0, beam 25) and beam + LM + hotwords.

mod common;

use std::sync::Arc;

use common::{bpe_cases, cases, english_lm, ref_words, Cases};
use dicta_decode::{
    greedy_decode, BeamConfig, BeamDecoder, Hotword, Hypothesis, LmFusion, LmWeights, Unigrams,
};
use serde_json::Value;

/// Compares every case; returns (text matches, word-span matches, total) and prints mismatches.
/// Also checks that the best beam's scores (acoustic and fused) equal pyctcdecode's.
fn compare(
    c: &Cases,
    key: &str,
    decode: impl Fn(usize, &Value) -> Option<Hypothesis>,
) -> (usize, usize, usize) {
    let (mut text_ok, mut spans_ok, mut total) = (0, 0, 0);
    for (i, case) in c.list.iter().enumerate() {
        let Some(hyp) = decode(i, case) else { continue };
        let reference = &case[key];
        total += 1;
        if hyp.text == reference["text"].as_str().unwrap() {
            text_ok += 1;
        } else {
            eprintln!(
                "[{key}] {}: text differs\n  dicta: {}\n  pyctc: {}\n  dicta score {:.6} / pyctc {:.6}",
                case["id"], hyp.text, reference["text"], hyp.score, reference["lm_score"]
            );
        }
        let ours: Vec<(String, i64, i64)> = hyp
            .words
            .iter()
            .map(|w| (w.word.clone(), w.start_frame, w.end_frame))
            .collect();
        if ours == ref_words(reference) {
            spans_ok += 1;
        }
        if hyp.text == reference["text"].as_str().unwrap() {
            // the same beam must carry the same scores (f64 sums in the same order)
            let logit = reference["logit_score"].as_f64().unwrap();
            let fused = reference["lm_score"].as_f64().unwrap();
            assert!(
                (hyp.logit_score - logit).abs() <= 1e-9 * logit.abs().max(1.0),
                "{}: acoustic score {} vs {logit}",
                case["id"],
                hyp.logit_score
            );
            assert!(
                (hyp.score - fused).abs() <= 1e-9 * fused.abs().max(1.0),
                "{}: fused score {} vs {fused}",
                case["id"],
                hyp.score
            );
        }
    }
    eprintln!("[{key}] identical text {text_ok}/{total}, identical word spans {spans_ok}/{total}");
    (text_ok, spans_ok, total)
}

fn lm_decoder(c: &Cases, hotwords: Vec<Hotword>) -> BeamDecoder {
    let meta = &c.meta;
    let weights = LmWeights {
        alpha: meta["alpha"].as_f64().unwrap(),
        beta: meta["beta"].as_f64().unwrap(),
        ..LmWeights::default()
    };
    let fusion = Arc::new(LmFusion::new(english_lm(), weights, Unigrams::FromLm));
    let config = BeamConfig {
        beam_width: meta["beam_width"].as_u64().unwrap() as usize,
        hotwords,
        ..BeamConfig::default()
    };
    BeamDecoder::new(c.vocab.clone(), Some(fusion), config).unwrap()
}

#[test]
fn greedy_matches_best_path_reference() {
    let c = cases();
    for (i, case) in c.meta["cases"].as_array().unwrap().iter().enumerate() {
        let hyp = greedy_decode(&c.matrices[i], &c.vocab).unwrap();
        assert_eq!(hyp.text, case["greedy"].as_str().unwrap(), "{}", case["id"]);
    }
}

#[test]
fn beam_without_lm_matches_pyctcdecode() {
    let c = cases();
    let config = BeamConfig {
        beam_width: c.meta["beam_width"].as_u64().unwrap() as usize,
        ..BeamConfig::default()
    };
    let dec = BeamDecoder::new(c.vocab.clone(), None, config).unwrap();
    let (text_ok, spans_ok, total) =
        compare(c, "nolm", |i, _| Some(dec.decode(&c.matrices[i]).unwrap()));
    assert_eq!(total, 50);
    assert!(
        text_ok * 100 >= total * 98,
        "{text_ok}/{total} identical texts"
    );
    assert!(
        spans_ok * 100 >= total * 98,
        "{spans_ok}/{total} identical word spans"
    );
}

#[test]
fn beam_with_arpa_lm_matches_pyctcdecode() {
    let c = cases();
    let dec = lm_decoder(c, Vec::new());
    let (text_ok, spans_ok, total) =
        compare(c, "lm", |i, _| Some(dec.decode(&c.matrices[i]).unwrap()));
    assert_eq!(total, 50);
    assert!(
        text_ok * 100 >= total * 98,
        "{text_ok}/{total} identical texts"
    );
    assert!(
        spans_ok * 100 >= total * 98,
        "{spans_ok}/{total} identical word spans"
    );
}

#[test]
fn beam_with_lm_and_hotwords_matches_pyctcdecode() {
    let c = cases();
    let weight = c.meta["hotword_weight"].as_f64().unwrap() as f32;
    let (text_ok, _, total) = compare(c, "lm_hot", |i, case| {
        let hot = case["hotwords"].as_array()?;
        let hotwords = hot
            .iter()
            .map(|w| Hotword {
                word: w.as_str().unwrap().to_string(),
                weight,
            })
            .collect();
        Some(lm_decoder(c, hotwords).decode(&c.matrices[i]).unwrap())
    });
    assert_eq!(total, 10);
    assert_eq!(text_ok, total);
}

#[test]
fn bpe_beam_with_and_without_lm_matches_pyctcdecode() {
    let c = bpe_cases();
    let config = BeamConfig {
        beam_width: c.meta["beam_width"].as_u64().unwrap() as usize,
        ..BeamConfig::default()
    };
    let plain = BeamDecoder::new(c.vocab.clone(), None, config).unwrap();
    let (text_ok, spans_ok, total) = compare(c, "nolm", |i, _| {
        Some(plain.decode(&c.matrices[i]).unwrap())
    });
    assert_eq!((text_ok, spans_ok, total), (10, 10, 10));
    let dec = lm_decoder(c, Vec::new());
    let (text_ok, spans_ok, total) =
        compare(c, "lm", |i, _| Some(dec.decode(&c.matrices[i]).unwrap()));
    assert_eq!((text_ok, spans_ok, total), (10, 10, 10));
}
