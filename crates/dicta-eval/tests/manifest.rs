//! Manifest-driven scoring on the real development set in `shared/data`.

use std::path::Path;

use dicta_eval::{load_manifest, Scorer};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data");

#[test]
fn shared_manifest_scores_consistently() {
    let items = load_manifest(&Path::new(DATA).join("manifest.jsonl")).expect("manifest loads");
    assert_eq!(items.len(), 135, "README lists 135 items");
    let with_text: Vec<_> = items.iter().filter(|i| i.text.is_some()).collect();
    assert_eq!(
        with_text.len(),
        128,
        "README lists 128 items with a reference"
    );

    // A reference scored against itself has no errors.
    let mut same = Scorer::new();
    for it in &with_text {
        let text = it.text.as_deref().unwrap();
        same.add(text, text, it.language.as_deref());
    }
    let s = same.summary();
    assert_eq!((s.items, s.words.errors(), s.chars.errors()), (128, 0, 0));
    assert!(s.words.ref_len > 1000);

    // Dropping the last normalized word of every hypothesis costs exactly one deletion each,
    // and the corpus rate is total errors over total reference words.
    let mut dropped = Scorer::new();
    let mut expected_deletions = 0;
    for it in &with_text {
        let lang = it.language.as_deref();
        let norm = dropped.normalize(it.text.as_deref().unwrap(), lang);
        let words: Vec<&str> = norm.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        let hyp = words[..words.len() - 1].join(" ");
        let (w, _) = dropped.add(&norm, &hyp, lang);
        assert_eq!((w.deletions, w.substitutions, w.insertions), (1, 0, 0));
        expected_deletions += 1;
    }
    let d = dropped.summary();
    assert_eq!(d.words.deletions, expected_deletions);
    let want = expected_deletions as f64 / d.words.ref_len as f64;
    assert!((d.wer() - want).abs() < 1e-12);
}
