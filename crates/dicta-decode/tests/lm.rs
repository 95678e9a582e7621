//! n-gram LM: ARPA reading, malformed-file errors with line numbers, and scoring parity with
//! KenLM on the shared English trigram model (`tests/fixtures/make_lm_scores.py`).

mod common;

use dicta_core::ErrorKind;
use dicta_decode::lm::parse_arpa;
use dicta_decode::{LmState, NgramLm};
use serde_json::Value;

const TINY: &str = "\\data\\
ngram 1=5
ngram 2=3
ngram 3=1

\\1-grams:
-1.0\t<s>\t-0.5
-0.7\t</s>
-0.8\ta\t-0.3
-0.9\tb\t-0.2
-1.2\tc\t-0.1

\\2-grams:
-0.4\t<s> a\t-0.25
-0.3\ta b\t-0.15
-0.6\tb c

\\3-grams:
-0.05\t<s> a b

\\end\\
";

fn tiny() -> NgramLm {
    parse_arpa(TINY.as_bytes()).unwrap()
}

fn score_words(lm: &NgramLm, words: &[&str]) -> Vec<f32> {
    let mut state = lm.begin_sentence();
    let mut next = LmState::null();
    words
        .iter()
        .map(|w| {
            let id = lm.word_id(w).unwrap_or(lm.unk_id());
            let s = lm.score(&state, id, &mut next);
            state = next;
            s
        })
        .collect()
}

#[test]
fn tiny_model_backs_off_like_the_arpa_definition() {
    let lm = tiny();
    assert_eq!(lm.order(), 3);
    assert_eq!(lm.vocab_size(), 6, "<unk> is added when missing");
    // <s> a: bigram hit; <s> a b: trigram hit; a b c: no trigram, bo(a b) + P(c | b) = -0.15 + -0.6
    // b c </s>: no trigram (bo(b c) absent = 0), no bigram c </s>: bo(c) + P(</s>) = -0.1 + -0.7
    let s = score_words(&lm, &["a", "b", "c", "</s>"]);
    assert_eq!(s, vec![-0.4f32, -0.05, -0.15f32 + -0.6, -0.1f32 + -0.7]);
    // unknown word: P(<unk>) = -100 after backing off through bo(<s> a) and bo(a)
    let s = score_words(&lm, &["a", "zzz"]);
    assert_eq!(s[1], -100.0f32 + -0.25 + -0.3);
    assert!(lm.contains("a") && !lm.contains("<unk>") && !lm.contains("zzz"));
}

fn err_of(text: &str) -> dicta_core::Error {
    parse_arpa(text.as_bytes()).expect_err("malformed ARPA must be refused")
}

#[test]
fn malformed_arpa_files_are_refused_with_line_numbers() {
    // more n-grams than announced
    let e = err_of(&TINY.replace("ngram 3=1", "ngram 3=0"));
    assert_eq!(e.kind, ErrorKind::CorruptInput);
    assert!(
        e.message.contains("line 19") && e.message.contains("3-grams"),
        "{e}"
    );
    // fewer n-grams than announced
    let e = err_of(&TINY.replace("ngram 2=3", "ngram 2=4"));
    assert!(e.message.contains("announced 4"), "{e}");
    assert!(e.message.contains("line 18"), "{e}"); // where the section ends
                                                   // a count that is not a number
    let e = err_of(&TINY.replace("ngram 2=3", "ngram 2=three"));
    assert!(
        e.message.contains("line 3") && e.message.contains("three"),
        "{e}"
    );
    // a probability that is not a number
    let e = err_of(&TINY.replace("-0.9\tb", "-0.x9\tb"));
    assert!(
        e.message.contains("line 10") && e.message.contains("-0.x9"),
        "{e}"
    );
    // a back-off that is not a number
    let e = err_of(&TINY.replace("a b\t-0.15", "a b\tfoo"));
    assert!(
        e.message.contains("line 15") && e.message.contains("foo"),
        "{e}"
    );
    // missing \end\
    let e = err_of(TINY.trim_end().trim_end_matches("\\end\\"));
    assert!(e.message.contains("\\end\\"), "{e}");
    // a word missing from the 1-grams
    let e = err_of(&TINY.replace("-0.6\tb c", "-0.6\tb d"));
    assert!(
        e.message.contains("line 16") && e.message.contains("\"d\""),
        "{e}"
    );
    // not an ARPA file at all
    let e = err_of("hello\n");
    assert!(
        e.message.contains("line 1") && e.message.contains("\\data\\"),
        "{e}"
    );
    // too few words on an n-gram line
    let e = err_of(&TINY.replace("-0.05\t<s> a b", "-0.05\t<s> a"));
    assert!(
        e.message.contains("line 19") && e.message.contains("3 words"),
        "{e}"
    );
}

#[test]
fn gzip_and_plain_arpa_give_the_same_model() {
    let dir = std::env::temp_dir().join(format!("dicta-decode-lm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plain = dir.join("tiny.arpa");
    std::fs::write(&plain, TINY).unwrap();
    let gz = dir.join("tiny.arpa.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut enc, TINY.as_bytes()).unwrap();
    std::fs::write(&gz, enc.finish().unwrap()).unwrap();
    let a = NgramLm::from_arpa_path(&plain).unwrap();
    let b = NgramLm::from_arpa_path(&gz).unwrap();
    for s in ["a b c", "c b a", "b b zzz a"] {
        assert_eq!(
            a.sentence_log10(s, true, true),
            b.sentence_log10(s, true, true)
        );
    }
    let missing = NgramLm::from_arpa_path(&dir.join("nope.arpa")).unwrap_err();
    assert_eq!(missing.kind, ErrorKind::Io);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn english_trigram_scores_match_kenlm() {
    let lm = common::english_lm();
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixtures().join("lm_scores.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(lm.order(), fixture["order"].as_u64().unwrap() as usize);
    let mut checked = 0;
    for case in fixture["sentences"].as_array().unwrap() {
        let sentence = case["sentence"].as_str().unwrap();
        for (key, bos_eos) in [("bos_eos", true), ("plain", false)] {
            let expected: Vec<f32> = case[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect();
            let mut state = if bos_eos {
                lm.begin_sentence()
            } else {
                LmState::null()
            };
            let mut next = LmState::null();
            let mut ids: Vec<u32> = sentence
                .split_whitespace()
                .map(|w| lm.word_id(w).unwrap_or(lm.unk_id()))
                .collect();
            if bos_eos {
                ids.push(lm.eos_id());
            }
            let got: Vec<f32> = ids
                .iter()
                .map(|&id| {
                    let s = lm.score(&state, id, &mut next);
                    state = next;
                    s
                })
                .collect();
            assert_eq!(got, expected, "{key}: {sentence:?}");
            checked += got.len();
        }
    }
    assert!(checked > 2000, "only {checked} word scores compared");
}

fn gunzip(path: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()),
        &mut out,
    )
    .unwrap();
    out
}

/// `sub.lm.bin.gz` is pocketsphinx 5.1.1's binary trie conversion of `sub.arpa.gz`
/// (`tests/fixtures/make_sphinx_bin.py`): both must give the same model.
#[test]
fn sphinx_binary_trie_matches_its_arpa_source() {
    let dir = common::fixtures();
    let arpa = NgramLm::from_arpa_path(&dir.join("sub.arpa.gz")).unwrap();
    let bin = dicta_decode::lm::parse_sphinx_bin(&gunzip(&dir.join("sub.lm.bin.gz"))).unwrap();
    assert_eq!(bin.order(), 3);
    for n in 1..=3 {
        assert_eq!(bin.ngram_count(n), arpa.ngram_count(n), "{n}-grams");
    }
    let words: Vec<&str> = arpa
        .words()
        .filter(|w| !w.starts_with('<'))
        .take(20)
        .collect();
    let mut max_diff = 0.0f32;
    for a in &words {
        for b in &words {
            for c in &words {
                let s = format!("{a} {b} {c}");
                let (x, y) = (
                    arpa.sentence_log10(&s, true, true),
                    bin.sentence_log10(&s, true, true),
                );
                max_diff = max_diff.max((x - y).abs());
            }
        }
    }
    // The binary file stores log-base-1.0001 floats; converting back costs ~1e-6 (log10).
    assert!(max_diff < 1e-4, "max |log10 difference| {max_diff}");
    eprintln!("Sphinx binary vs ARPA over 8000 sentences: max |log10 diff| = {max_diff:e}");

    let bytes = gunzip(&dir.join("sub.lm.bin.gz"));
    let e = dicta_decode::lm::parse_sphinx_bin(&bytes[..bytes.len() / 2]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::CorruptInput);
    assert!(e.message.contains("ends at byte"), "{e}");
    let e = dicta_decode::lm::parse_sphinx_bin(b"Darpa Trigram LM....").unwrap_err();
    assert!(e.message.contains("header"), "{e}");
}
