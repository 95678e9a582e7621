//! `dicta decode` end to end: a `[T, V]` float32 .npy of CTC log-probs spelling a known sentence,
//! decoded greedily and by beam search (with and without the committed test LM).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

const LABELS: [&str; 8] = ["<pad>", "|", "a", "c", "t", "h", "e", "o"];

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dicta-decode-cli-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// Writes a float32 .npy of log-probs where each frame strongly prefers the given label index.
fn write_npy(path: &Path, frames: &[usize], vocab: usize) {
    let header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}",
        frames.len(),
        vocab
    );
    let mut h = header.into_bytes();
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(b' ');
    }
    h.push(b'\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
    bytes.extend_from_slice(&h);
    let (hi, lo) = (0.9f32.ln(), (0.1f32 / (vocab as f32 - 1.0)).ln());
    for &best in frames {
        for v in 0..vocab {
            bytes.extend_from_slice(&(if v == best { hi } else { lo }).to_le_bytes());
        }
    }
    fs::write(path, bytes).unwrap();
}

fn frames_for(text: &str) -> Vec<usize> {
    // Each character for two frames, a blank between repeated letters and at the ends.
    let mut frames = vec![0];
    let mut prev = None;
    for ch in text.chars() {
        let label = if ch == ' ' {
            "|".to_string()
        } else {
            ch.to_string()
        };
        let id = LABELS.iter().position(|l| *l == label).unwrap();
        if prev == Some(id) {
            frames.push(0);
        }
        frames.extend([id, id]);
        prev = Some(id);
    }
    frames.push(0);
    frames
}

fn run(args: &[&str]) -> Vec<serde_json::Value> {
    let args: Vec<&str> = std::iter::once("decode")
        .chain(args.iter().copied())
        .collect();
    String::from_utf8(common::dicta_stdout(&args))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn greedy_and_beam_decode_saved_logprobs_one_line_per_input() {
    let dir = temp_dir("basic");
    let vocab = dir.join("vocab.json");
    let map: serde_json::Map<String, serde_json::Value> = LABELS
        .iter()
        .enumerate()
        .map(|(i, l)| (l.to_string(), serde_json::json!(i)))
        .collect();
    fs::write(&vocab, serde_json::to_string(&map).unwrap()).unwrap();
    let a = dir.join("a.npy");
    let b = dir.join("b.npy");
    write_npy(&a, &frames_for("the cat"), LABELS.len());
    write_npy(&b, &frames_for("a hot tea"), LABELS.len());
    let (a, b, vocab) = (
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        vocab.to_str().unwrap(),
    );
    for decoder in ["greedy", "beam"] {
        let lines = run(&[
            "--decoder",
            decoder,
            "--vocab",
            vocab,
            "--logprobs",
            a,
            "--logprobs",
            b,
        ]);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["text"], "the cat");
        assert_eq!(lines[1]["text"], "a hot tea");
        let words = lines[0]["words"].as_array().unwrap();
        assert_eq!(words.len(), 2);
        assert_eq!(words[0]["word"], "the");
        assert_eq!(words[1]["word"], "cat");
        let span = |w: &serde_json::Value| {
            (
                w["start_frame"].as_u64().unwrap(),
                w["end_frame"].as_u64().unwrap(),
            )
        };
        if decoder == "greedy" {
            // Half-open frame spans of the letters: "the" at 1..7, "cat" at 9..15.
            assert_eq!(span(&words[0]), (1, 7));
            assert_eq!(span(&words[1]), (9, 15));
        } else {
            // pyctcdecode's frame conventions (pinned by dicta-decode's parity tests): ordered spans.
            assert!(span(&words[0]).0 < span(&words[0]).1);
            assert!(span(&words[0]).1 <= span(&words[1]).0);
        }
    }
}

#[test]
fn missing_logprobs_file_fails_with_its_name() {
    let out = Command::new(env!("CARGO_BIN_EXE_dicta"))
        .args([
            "decode",
            "--vocab",
            "/nonexistent/vocab.json",
            "--logprobs",
            "/nonexistent/x.npy",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/"), "{err}");
}
