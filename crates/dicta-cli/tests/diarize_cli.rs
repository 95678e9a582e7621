//! `dicta diarize` end to end: RTTM files per input in --output-dir (parsed back), JSON output,
//! a broken file failing alone with exit code 1, silence giving an empty RTTM; and
//! `dicta transcribe --diarize` putting speakers in SRT.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::DATA;
use serde_json::Value;

fn have_models() -> bool {
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/dicta/models");
    let ok = |env: &str, name: &str, file: &str| {
        std::env::var_os(env)
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(name))
            .join(file)
            .is_file()
    };
    let have = ok("DICTA_TEST_VAD_DIR", "silero-vad", "silero_vad_v6.onnx")
        && ok(
            "DICTA_TEST_SPEAKER_DIR",
            "ecapa-voxceleb",
            "embedding_model.ckpt",
        );
    if !have {
        eprintln!("note: no VAD / ECAPA models (set DICTA_TEST_VAD_DIR, DICTA_TEST_SPEAKER_DIR); skipping");
    }
    have
}

fn model_flags() -> Vec<String> {
    let mut f = Vec::new();
    if let Some(d) = std::env::var_os("DICTA_TEST_VAD_DIR") {
        f.extend(["--vad-model".to_string(), d.to_string_lossy().into_owned()]);
    }
    if let Some(d) = std::env::var_os("DICTA_TEST_SPEAKER_DIR") {
        f.extend([
            "--speaker-model".to_string(),
            d.to_string_lossy().into_owned(),
        ]);
    }
    f
}

fn dicta(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dicta"))
        .args(args)
        .args(model_flags())
        .arg("--quiet")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn rttm_files_json_and_a_broken_input() {
    if !have_models() {
        return;
    }
    let tmp = std::env::temp_dir().join(format!("dicta-diarize-cli-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let silence = tmp.join("silence.wav");
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(&silence, spec).unwrap();
    for _ in 0..48_000 {
        w.write_sample(0i16).unwrap();
    }
    w.finalize().unwrap();
    let sample = format!("{DATA}/pyannote_audio/sample.wav");
    let out_dir = tmp.join("rttm");
    let (code, _) = dicta(&[
        "diarize",
        &sample,
        silence.to_str().unwrap(),
        "/nonexistent/missing.wav",
        "--output-dir",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "a broken input makes the exit code 1");
    let text = std::fs::read_to_string(out_dir.join("sample.rttm")).unwrap();
    let turns = dicta_engine::diarize::rttm::parse(&text).unwrap();
    assert!(
        turns.len() >= 4 && turns.iter().all(|(f, t)| f == "sample" && t.end > t.start),
        "{text}"
    );
    let mut speakers: Vec<_> = turns.iter().map(|(_, t)| t.speaker.clone()).collect();
    speakers.sort();
    speakers.dedup();
    assert!((2..=3).contains(&speakers.len()), "{speakers:?}");
    assert_eq!(
        std::fs::read_to_string(out_dir.join("silence.rttm")).unwrap(),
        ""
    );
    assert!(!out_dir.join("missing.rttm").exists());

    // JSON, with the count forced.
    let (code, json) = dicta(&[
        "diarize",
        &sample,
        "--format",
        "json",
        "--num-speakers",
        "2",
    ]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["results"][0]["speakers"], 2);
    assert!(v["results"][0]["turns"].as_array().unwrap().len() >= 4);
    // Bad constraints: usage error.
    let (code, _) = dicta(&[
        "diarize",
        &sample,
        "--min-speakers",
        "3",
        "--max-speakers",
        "2",
    ]);
    assert_eq!(code, 2);
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn transcribe_diarize_prefixes_srt_cues() {
    let Some(model) = common::model_dir() else {
        return;
    };
    if !have_models() {
        return;
    }
    let sample = format!("{DATA}/pyannote_audio/sample.wav");
    let (code, srt) = dicta(&[
        "transcribe",
        &sample,
        "--model",
        model.to_str().unwrap(),
        "--diarize",
        "--num-speakers",
        "2",
        "--format",
        "srt",
        "--beam-size",
        "1",
    ]);
    assert_eq!(code, 0);
    let cues: Vec<&str> = srt.lines().filter(|l| l.starts_with("[SPEAKER_")).collect();
    assert!(cues.len() >= 3, "{srt}");
    assert!(srt.contains("[SPEAKER_00]"), "{srt}");
}
