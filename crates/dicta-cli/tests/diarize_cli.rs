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

/// `--embeddings-dir` writes every window the turns came from, with `--speaker-window` /
/// `--speaker-step` honoured: clustering those embeddings again (as `tools/diarization/replay.py`
/// does) gives the RTTM's turns, and a broken input writes no file.
#[test]
fn embedding_windows_round_trip_to_the_turns() {
    let Some(models) = model_flags() else { return };
    let tmp = std::env::temp_dir().join(format!("dicta-diarize-emb-{}", std::process::id()));
    let sample = format!("{DATA}/pyannote_audio/sample.wav");
    let (emb_dir, rttm_dir) = (tmp.join("emb"), tmp.join("rttm"));
    let (code, _) = dicta(
        &[
            "diarize",
            &sample,
            "/nonexistent/missing.wav",
            "--output-dir",
            rttm_dir.to_str().unwrap(),
            "--embeddings-dir",
            emb_dir.to_str().unwrap(),
            "--speaker-window",
            "1",
            "--speaker-step",
            "0.5",
        ],
        &models,
    );
    assert_eq!(code, 1, "a broken input makes the exit code 1");
    assert!(!emb_dir.join("missing.json").exists());
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(emb_dir.join("sample.json")).unwrap())
            .unwrap();
    let opts: dicta_engine::diarize::DiarizeOptions =
        serde_json::from_value(v["options"].clone()).unwrap();
    assert_eq!((opts.window_seconds, opts.step_seconds), (1.0, 0.5));
    let windows: Vec<dicta_engine::diarize::SpeakerWindow> =
        serde_json::from_value(v["windows"].clone()).unwrap();
    assert!(windows.len() > 30, "{} windows", windows.len());
    for (a, b) in windows.iter().zip(&windows[1..]) {
        assert!(
            a.end - a.start <= 1.0 + 1e-9 && a.start < b.start,
            "{a:?} {b:?}"
        );
        // Within a region (owned stretches touch) windows start every 0.5 s, except the last,
        // which ends at the region's end.
        if a.own.1 == b.own.0 && (b.end - b.start - 1.0).abs() < 1e-9 && b.own.1 != b.end {
            assert!((b.start - a.start - 0.5).abs() < 1e-3, "{a:?} {b:?}");
        }
    }
    let embedded = windows.iter().filter_map(|w| w.embedding.as_ref());
    assert!(embedded.clone().count() > 30);
    for e in embedded {
        let norm = e.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!(
            e.len() == 192 && (norm - 1.0).abs() < 1e-4,
            "{} {norm}",
            e.len()
        );
    }
    let again = dicta_engine::diarize::rttm::write(
        "sample",
        &dicta_engine::diarize::turns_from_embeddings(&windows, &opts),
    );
    assert_eq!(
        again,
        std::fs::read_to_string(rttm_dir.join("sample.rttm")).unwrap()
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
