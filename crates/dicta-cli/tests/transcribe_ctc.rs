//! `dicta transcribe` on a CTC model folder: the tiny random-weight wav2vec2 fixture, beam search
//! with the committed test LM, compared with the library engine run with the same settings.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dicta_decode::{BeamConfig, Hotword, LmWeights};
use dicta_engine::{CtcDecoderKind, CtcOptions, Engine, EngineConfig, Input};

fn crates() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn model() -> PathBuf {
    crates().join("dicta-models/tests/fixtures/wav2vec2/layer")
}

fn lm() -> PathBuf {
    crates().join("dicta-decode/tests/fixtures/sub.arpa.gz")
}

fn audio(p: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data")).join(p)
}

fn dicta(args: &[&str]) -> Output {
    let home = std::env::temp_dir().join(format!("dicta-transcribe-ctc-{}", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_dicta"))
        .env("DICTA_HOME", &home)
        .args(args)
        .output()
        .unwrap()
}

/// The tiny model reads 800 frames a second; 2 s windows keep its attention small.
const WINDOWS: [&str; 4] = ["--chunk-seconds", "2", "--overlap-seconds", "0.5"];

#[test]
fn beam_with_lm_matches_the_library_engine() {
    let inputs = [
        audio("openai_whisper/jfk.16k.wav"),
        audio("coqui_tts/LJ001-0002.16k.wav"),
    ];
    let model = model();
    let lm = lm();
    let mut args = vec![
        "transcribe",
        "--model",
        model.to_str().unwrap(),
        "--decoder",
        "beam",
        "--lm",
        lm.to_str().unwrap(),
        "--lm-alpha",
        "0.7",
        "--lm-beta",
        "0.5",
        "--beam-width",
        "8",
        "--hotword",
        "THE:4",
        "--batch-size",
        "4",
        "--format",
        "verbose-json",
        "--quiet",
    ];
    args.extend(WINDOWS);
    args.extend(inputs.iter().map(|p| p.to_str().unwrap()));
    let out = dicta(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);

    let engine = Engine::load(
        &model,
        EngineConfig {
            batch_size: 4,
            chunk_seconds: 2.0,
            overlap_seconds: 0.5,
            ctc: CtcOptions {
                decoder: CtcDecoderKind::Beam,
                lm: Some(lm.clone()),
                lm_weights: LmWeights {
                    alpha: 0.7,
                    beta: 0.5,
                    ..LmWeights::default()
                },
                beam: BeamConfig {
                    beam_width: 8,
                    hotwords: vec![Hotword {
                        word: "THE".into(),
                        weight: 4.0,
                    }],
                    ..BeamConfig::default()
                },
                ..CtcOptions::default()
            },
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let lib = engine.transcribe(&inputs.iter().map(Input::from_path).collect::<Vec<_>>());
    for ((r, l), path) in results.iter().zip(&lib.results).zip(&inputs) {
        let l = l.as_ref().unwrap();
        assert_eq!(r["audio"].as_str().unwrap(), path.to_str().unwrap());
        assert_eq!(r["text"].as_str().unwrap(), l.text);
        assert!(r["error"].is_null());
        let words: usize = r["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["words"].as_array().map_or(0, Vec::len))
            .sum();
        assert_eq!(words, l.text.split_whitespace().count());
    }
    assert!(!lib.results[0].as_ref().unwrap().text.is_empty());
    let stats = &json["stats"];
    assert!(!stats["batch_sizes"].as_array().unwrap().is_empty());
    assert!(stats["frames"].as_u64().unwrap() > 0);
    for p in stats["padding_fractions"].as_array().unwrap() {
        assert!(p.as_f64().unwrap() <= 0.15);
    }
}

#[test]
fn greedy_text_output_and_usage_errors() {
    let model = model();
    let jfk = audio("openai_whisper/jfk.16k.wav");
    let mut args = vec![
        "transcribe",
        "--model",
        model.to_str().unwrap(),
        "--format",
        "text",
        "--quiet",
    ];
    args.extend(WINDOWS);
    args.push(jfk.to_str().unwrap());
    let out = dicta(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let engine = Engine::load(
        &model,
        EngineConfig {
            chunk_seconds: 2.0,
            overlap_seconds: 0.5,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let lib = engine.transcribe(&[Input::from_path(&jfk)]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        lib.results[0].as_ref().unwrap().text.trim()
    );

    // An LM without the beam decoder, and a malformed hotword, are usage errors (exit 2).
    let lm = lm();
    let mut bad = args.clone();
    bad.extend(["--lm", lm.to_str().unwrap()]);
    let out = dicta(&bad);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("beam"));
    let mut bad = args.clone();
    bad.extend(["--decoder", "beam", "--hotword", "THE:lots"]);
    let out = dicta(&bad);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("THE:lots"));
}
