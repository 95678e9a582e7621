//! `dicta diarize` end to end: RTTM files per input in --output-dir (parsed back), JSON output,
//! a broken file failing alone with exit code 1, silence giving an empty RTTM; and
//! `dicta transcribe --diarize` putting speakers in SRT.

mod common;

use std::process::Command;

use common::DATA;
use serde_json::Value;

/// `--vad-model DIR --speaker-model DIR` for the fetched test models; `None` skips.
fn model_flags() -> Option<Vec<String>> {
    let (vad, speaker) = (common::vad_dir()?, common::speaker_dir()?);
    Some(vec![
        "--vad-model".into(),
        vad.display().to_string(),
        "--speaker-model".into(),
        speaker.display().to_string(),
    ])
}

fn dicta(args: &[&str], models: &[String]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dicta"))
        .args(args)
        .args(models)
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
    let Some(models) = model_flags() else { return };
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
    let (code, _) = dicta(
        &[
            "diarize",
            &sample,
            silence.to_str().unwrap(),
            "/nonexistent/missing.wav",
            "--output-dir",
            out_dir.to_str().unwrap(),
        ],
        &models,
    );
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
    let (code, json) = dicta(
        &[
            "diarize",
            &sample,
            "--format",
            "json",
            "--num-speakers",
            "2",
        ],
        &models,
    );
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["results"][0]["speakers"], 2);
    assert!(v["results"][0]["turns"].as_array().unwrap().len() >= 4);
    // Bad constraints: usage error.
    let (code, _) = dicta(
        &[
            "diarize",
            &sample,
            "--min-speakers",
            "3",
            "--max-speakers",
            "2",
        ],
        &models,
    );
    assert_eq!(code, 2);
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn transcribe_diarize_prefixes_srt_cues() {
    let Some(model) = common::model_dir() else {
        return;
    };
    let Some(models) = model_flags() else { return };
    let sample = format!("{DATA}/pyannote_audio/sample.wav");
    let (code, srt) = dicta(
        &[
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
        ],
        &models,
    );
    assert_eq!(code, 0);
    let cues: Vec<&str> = srt.lines().filter(|l| l.starts_with("[SPEAKER_")).collect();
    assert!(cues.len() >= 3, "{srt}");
    assert!(srt.contains("[SPEAKER_00]"), "{srt}");
}
