//! Long-form transcription: a ~4-minute recording made by concatenating LJ Speech utterances
//! is transcribed sequentially (seeking by timestamps) and in the batched mode (fixed 30 s
//! windows with 5 s overlap, merged at the overlaps). Against the concatenated reference text,
//! the batched mode must not drop or double words at the cuts: its deletions + insertions and
//! its WER stay close to the sequential mode's.

mod whisper_common;

use dicta_engine::whisper::{DecodeOptions, LongFormMode, WhisperTranscriber};
use whisper_common::*;

fn lj_recording() -> (Vec<f32>, String) {
    let manifest = std::fs::read_to_string(format!("{DATA}/manifest.jsonl")).unwrap();
    let mut audio = Vec::new();
    let mut text = Vec::new();
    for line in manifest.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        if !r["id"].as_str().unwrap().starts_with("coqui_tts/LJ") {
            continue;
        }
        audio.extend(load_wav(r["audio_16k_wav"].as_str().unwrap()));
        audio.extend(std::iter::repeat_n(0.0f32, 9600)); // 0.6 s pause
        text.push(r["text"].as_str().unwrap().to_string());
        if audio.len() >= 240 * 16000 {
            break;
        }
    }
    (audio, text.join(" "))
}

#[test]
fn batched_long_form_matches_sequential_without_dropped_or_doubled_words() {
    let Some(model) = load_model() else { return };
    let (audio, reference) = lj_recording();
    assert!(audio.len() >= 225 * 16000, "{} s", audio.len() / 16000);
    let tr = WhisperTranscriber::new(&model).unwrap();
    let opts = DecodeOptions {
        beam_size: 1,
        language: Some("en".into()),
        ..DecodeOptions::default()
    };
    let rw = words(&reference);
    let mut report = Vec::new();
    for mode in [
        LongFormMode::Sequential,
        LongFormMode::Batched {
            overlap_seconds: 5.0,
        },
    ] {
        let out = tr.transcribe(&[&audio], &opts, mode, 8).unwrap();
        assert_eq!(out.long_form_mode, mode);
        let t = out.transcripts[0].as_ref().unwrap();
        for s in t.segments.windows(2) {
            assert!(
                s[0].start <= s[1].start + 1e-6,
                "segments out of order: {:?} {:?}",
                s[0],
                s[1]
            );
        }
        let (s, d, i) = edit_ops(&rw, &words(&t.text));
        let wer = (s + d + i) as f64 / rw.len() as f64;
        eprintln!(
            "{}: {} windows, WER {:.3} (sub {s} del {d} ins {i}, {} ref words)",
            mode.as_str(),
            out.windows,
            wer,
            rw.len()
        );
        report.push((wer, d + i));
    }
    let (seq, bat) = (report[0], report[1]);
    assert!(seq.0 < 0.2, "sequential WER {:.3} is implausible", seq.0);
    // 9 cuts in 4 minutes: allow about one extra word per two cuts.
    assert!(
        bat.1 <= seq.1 + 5,
        "batched drops/doubles words: {} vs {}",
        bat.1,
        seq.1
    );
    assert!(
        bat.0 <= seq.0 + 0.02,
        "batched WER {:.3} vs sequential {:.3}",
        bat.0,
        seq.0
    );
}
