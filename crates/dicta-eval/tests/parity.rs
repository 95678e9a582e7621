//! Parity with the Python reference implementations on committed fixtures.
//!
//! Fixtures come from `tests/fixtures/make_normalizer_cases.py` (whisper-normalizer 0.1.15,
//! jiwer 4.0.0); rerun it to regenerate them.

use dicta_eval::{
    char_errors, corpus_cer, corpus_wer, word_errors, BasicTextNormalizer, EnglishTextNormalizer,
};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
    let text = std::fs::read_to_string(format!("{path}{name}")).expect("fixture readable");
    serde_json::from_str(&text).expect("fixture is JSON")
}

fn report(kind: &str, total: usize, failures: &[String]) {
    for f in failures.iter().take(20) {
        eprintln!("{f}");
    }
    assert!(
        failures.is_empty(),
        "{kind}: {} of {total} cases differ from the Python reference",
        failures.len()
    );
}

#[test]
fn english_normalizer_matches_whisper_normalizer() {
    let cases = fixture("normalizer_cases.json");
    let cases = cases["english"].as_array().expect("english cases");
    assert!(cases.len() >= 300, "need at least 300 cases");
    let n = EnglishTextNormalizer::new();
    let mut failures = Vec::new();
    for c in cases {
        let input = c["input"].as_str().expect("input");
        let want = c["output"].as_str().expect("output");
        let got = n.normalize(input);
        if got != want {
            failures.push(format!("input {input:?}\n  want {want:?}\n  got  {got:?}"));
        }
    }
    report("english", cases.len(), &failures);
}

#[test]
fn basic_normalizer_matches_whisper_normalizer() {
    let cases = fixture("normalizer_cases.json");
    let cases = cases["basic"].as_array().expect("basic cases");
    let variants: Vec<BasicTextNormalizer> = (0..4)
        .map(|i| BasicTextNormalizer::new(i & 1 == 1, i & 2 == 2))
        .collect();
    let mut failures = Vec::new();
    for c in cases {
        let input = c["input"].as_str().expect("input");
        let want = c["output"].as_str().expect("output");
        let rd = c["remove_diacritics"].as_bool().expect("flag");
        let sl = c["split_letters"].as_bool().expect("flag");
        let got = variants[usize::from(rd) | usize::from(sl) << 1].normalize(input);
        if got != want {
            failures.push(format!(
                "input {input:?} (rd={rd}, sl={sl})\n  want {want:?}\n  got  {got:?}"
            ));
        }
    }
    report("basic", cases.len(), &failures);
}

#[test]
fn error_counts_match_jiwer() {
    let fx = fixture("wer_cases.json");
    let pairs = fx["pairs"].as_array().expect("pairs");
    let mut failures = Vec::new();
    let mut nonempty = Vec::new();
    for p in pairs {
        let r = p["reference"].as_str().expect("reference");
        let h = p["hypothesis"].as_str().expect("hypothesis");
        for (kind, got) in [("word", word_errors(r, h)), ("char", char_errors(r, h))] {
            let want = &p[kind];
            let want =
                [&want["S"], &want["D"], &want["I"], &want["H"]].map(|v| v.as_u64().unwrap());
            let got_arr =
                [got.substitutions, got.deletions, got.insertions, got.hits].map(|v| v as u64);
            if want != got_arr {
                failures.push(format!(
                    "{kind} ref {} / hyp {} chars: want SDIH {want:?}, got {got_arr:?}",
                    r.len(),
                    h.len()
                ));
            }
        }
        if !r.trim().is_empty() {
            nonempty.push((r.to_string(), h.to_string()));
        }
    }
    report("wer", pairs.len(), &failures);
    let want_wer = fx["corpus_wer"].as_f64().expect("corpus_wer");
    let want_cer = fx["corpus_cer"].as_f64().expect("corpus_cer");
    assert!((corpus_wer(&nonempty) - want_wer).abs() < 1e-9);
    assert!((corpus_cer(&nonempty) - want_cer).abs() < 1e-9);
}
