//! `dicta decode`'s library side: .npy + vocab.json in, one JSON line per input out, and the
//! same texts as the parity references.

mod common;

use std::path::{Path, PathBuf};

use dicta_decode::job::{parse_hotword, run_decode_job, DecodeJob, DecoderKind};
use dicta_decode::{BeamConfig, LmWeights, LogProbs};
use serde_json::Value;

/// Writes a float32 C-order .npy (format 1.0) by hand, as numpy would.
fn write_npy(path: &Path, lp: &LogProbs) {
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}",
        lp.frames(),
        lp.vocab()
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for v in lp.as_slice() {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dicta-decode-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn decode_job_prints_one_json_line_per_input() {
    let c = common::cases();
    let dir = temp_dir("job");
    let vocab: serde_json::Map<String, Value> = c.meta["labels"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, l)| (l.as_str().unwrap().to_string(), Value::from(i)))
        .collect();
    std::fs::write(dir.join("vocab.json"), Value::Object(vocab).to_string()).unwrap();
    let inputs: Vec<PathBuf> = (0..3)
        .map(|i| {
            let p = dir.join(format!("case{i}.npy"));
            write_npy(&p, &c.matrices[i]);
            p
        })
        .collect();
    let mut job = DecodeJob {
        logprobs: inputs,
        vocab: dir.join("vocab.json"),
        lm: None,
        unigrams: None,
        decoder: DecoderKind::Beam,
        beam: BeamConfig::default(),
        weights: LmWeights::default(),
    };
    for (decoder, key) in [(DecoderKind::Beam, "nolm"), (DecoderKind::Greedy, "greedy")] {
        job.decoder = decoder;
        let mut out = Vec::new();
        run_decode_job(&job, &mut out).unwrap();
        let lines: Vec<Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        for (i, line) in lines.iter().enumerate() {
            let reference = &c.list[i][key];
            let expected = reference.get("text").unwrap_or(reference);
            assert_eq!(line["text"], *expected, "{key} case {i}");
            let words = line["words"].as_array().unwrap();
            assert_eq!(words.len(), expected.as_str().unwrap().split(' ').count());
            for w in words {
                assert!(w["start_frame"].as_i64().unwrap() < w["end_frame"].as_i64().unwrap());
            }
        }
    }
    // bad inputs give typed errors, not panics
    job.logprobs = vec![dir.join("missing.npy")];
    assert!(run_decode_job(&job, &mut Vec::new()).is_err());
    std::fs::write(dir.join("bad.npy"), b"not an npy").unwrap();
    job.logprobs = vec![dir.join("bad.npy")];
    assert!(run_decode_job(&job, &mut Vec::new()).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hotword_specs_parse() {
    let h = parse_hotword("montreal:7.5").unwrap();
    assert_eq!((h.word.as_str(), h.weight), ("montreal", 7.5));
    let h = parse_hotword("aligner").unwrap();
    assert_eq!((h.word.as_str(), h.weight), ("aligner", 10.0));
    assert!(parse_hotword("word:heavy").is_err());
    assert!(parse_hotword(":3").is_err());
}
