//! Fuzz harnesses for the language-model loaders (see the `dicta-fuzz` crate): ARPA text and
//! Sphinx binary tries, as users hand them to `--lm`. Ignored by default; run
//! `cargo test --release -p dicta-decode --test fuzz -- --ignored`. Seeds: a small ARPA model
//! written here, the head of the committed fixtures, and tests/fuzz_corpus/lm.

use std::io::Read;
use std::path::Path;

use dicta_decode::lm::{parse_arpa, parse_sphinx_bin};

const SMALL_ARPA: &str = "\\data\\
ngram 1=5
ngram 2=4
ngram 3=2

\\1-grams:
-1.0 <s> -0.3
-1.0 </s>
-0.7 hello -0.2
-0.9 world -0.1
-1.2 there

\\2-grams:
-0.2 <s> hello -0.1
-0.3 hello world -0.2
-0.4 hello there
-0.5 world </s>

\\3-grams:
-0.1 <s> hello world
-0.2 hello world </s>

\\end\\
";

fn gunzip(path: &Path, keep: usize) -> Vec<u8> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(file)
        .take(keep as u64)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn seeds() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut seeds = vec![
        SMALL_ARPA.as_bytes().to_vec(),
        // Truncated mid-section: a broken file to start from.
        SMALL_ARPA.as_bytes()[..SMALL_ARPA.len() / 2].to_vec(),
        // The heads of real models (cut, so each run stays fast).
        gunzip(&root.join("fixtures/sub.arpa.gz"), 64 << 10),
        gunzip(&root.join("fixtures/sub.lm.bin.gz"), 256 << 10),
    ];
    seeds.extend(dicta_fuzz::seeds_from(root.join("fuzz_corpus/lm")));
    seeds
}

#[test]
#[ignore = "fuzzing: run with --ignored"]
fn fuzz_lm_loaders() {
    dicta_fuzz::fuzz("lm_loaders", &seeds(), |bytes| {
        if let Ok(lm) = parse_arpa(bytes) {
            assert!(lm.order() >= 1);
        }
        if let Ok(lm) = parse_sphinx_bin(bytes) {
            assert!(lm.order() >= 1);
        }
    });
}

/// Found by `fuzz_lm_loaders`: a header count of 10^11 unigrams reserved 1.6 TB up front and
/// aborted the process; now the file is read (and refused) with memory to match its size.
#[test]
fn huge_header_counts_are_refused_without_reserving_them() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_corpus/lm");
    for name in ["huge-unigram-count.arpa", "max-bigram-count.arpa"] {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let e = parse_arpa(&bytes[..]).expect_err(name);
        assert_eq!(e.kind, dicta_core::ErrorKind::CorruptInput, "{name}: {e}");
    }
    // A Sphinx trie whose unigram count (after the magic and the order byte) is 2^32 - 1.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut bin = gunzip(&root.join("sub.lm.bin.gz"), 1 << 16);
    bin[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = parse_sphinx_bin(&bin).expect_err("a count past the file");
    assert!(e.message.contains("n-grams"), "{e}");
}
