//! Loads an LM (ARPA, ARPA.gz or Sphinx `.lm.bin`), prints load time and n-gram counts, and,
//! given a second model, the largest per-word log10 difference over the sentences of
//! `tests/fixtures/lm_scores.json`.
//!
//! `cargo run --release -p dicta-decode --example lm_load -- MODEL [OTHER_MODEL]`

use std::path::PathBuf;
use std::time::Instant;

use dicta_decode::{LmState, NgramLm};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let Some(first) = args.first() else {
        return Err("usage: lm_load MODEL [OTHER_MODEL]".into());
    };
    let t0 = Instant::now();
    let a = NgramLm::from_path(first)?;
    println!(
        "{}: order {}, counts {:?}, loaded in {:.2} s",
        first.display(),
        a.order(),
        (1..=a.order())
            .map(|n| a.ngram_count(n))
            .collect::<Vec<_>>(),
        t0.elapsed().as_secs_f64()
    );
    if let Some(second) = args.get(1) {
        let b = NgramLm::from_path(second)?;
        let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/lm_scores.json"
        ))?)?;
        let (mut max_diff, mut n) = (0.0f32, 0usize);
        for case in fixture["sentences"].as_array().into_iter().flatten() {
            let s = case["sentence"].as_str().unwrap_or_default();
            let (mut sa, mut sb) = (a.begin_sentence(), b.begin_sentence());
            let (mut na, mut nb) = (LmState::null(), LmState::null());
            for w in s.split_whitespace().chain(["</s>"]) {
                let pa = a.score(&sa, a.word_id(w).unwrap_or(a.unk_id()), &mut na);
                let pb = b.score(&sb, b.word_id(w).unwrap_or(b.unk_id()), &mut nb);
                max_diff = max_diff.max((pa - pb).abs());
                n += 1;
                (sa, sb) = (na, nb);
            }
        }
        println!(
            "{n} word scores compared with {}: max |log10 diff| = {max_diff:.6}",
            second.display()
        );
    }
    Ok(())
}
