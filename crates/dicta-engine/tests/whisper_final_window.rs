//! The last window of a recording finished in place (`FinalWindow::Finish`) against
//! faster-whisper's seek loop (`FinalWindow::Seek`), on real speech: recordings of 20–28 s made
//! by joining utterances of shared/data with known text (0.3 s pauses), where Whisper often
//! ends the window's text a few seconds early and the seek loop spends another window on the
//! rest.
//!
//! - Finishing takes fewer windows over the set, and its text stays as good: against the
//!   references, at most a quarter more edits than the seek loop's. (The int8 text moves with
//!   any change of bits, so this guards against runaway text, not for equality; what finishing
//!   does to WER is measured in docs/benchmarks.md, session 30: no worse on 40 fresh joined
//!   recordings, the bench workloads and the dev set.)
//! - Float32 (the reference path) keeps the seek loop under `Auto`: identical segments.
//! - A recording finished in a batch gets the transcript it gets alone.

mod whisper_common;

use dicta_engine::whisper::{
    DecodeOptions, FinalWindow, LongFormMode, TranscribeOutput, WhisperTranscriber,
};
use whisper_common::*;

const SR: usize = 16000;

/// Utterances of the manifest (id prefix, in manifest order from `skip`) joined with 0.3 s
/// pauses while the total stays under `seconds`; the audio and the reference words.
fn recording(prefix: &str, skip: usize, seconds: f64) -> (Vec<f32>, Vec<String>) {
    let mut audio = Vec::new();
    let mut reference = Vec::new();
    for r in manifest()
        .iter()
        .filter(|r| {
            r["text"].is_string()
                && r["category"] == "short_utterance"
                && r.get("contains_markup").and_then(|m| m.as_bool()) != Some(true)
                && r["id"].as_str().unwrap().starts_with(prefix)
        })
        .skip(skip)
    {
        let clip = load_wav(r["audio_16k_wav"].as_str().unwrap());
        if (audio.len() + clip.len()) as f64 > seconds * SR as f64 {
            break;
        }
        audio.extend(clip);
        audio.extend(std::iter::repeat_n(0.0f32, SR * 3 / 10));
        reference.extend(words(&r["text"].as_str().unwrap().replace('-', " ")));
    }
    (audio, reference)
}

fn greedy(final_window: FinalWindow) -> DecodeOptions {
    DecodeOptions {
        language: Some("en".into()),
        final_window,
        ..DecodeOptions::greedy()
    }
}

/// Greedy decoding with the default temperature fallback (`dicta transcribe --beam-size 1`).
/// Without it a single repetition loop decides the comparison: when the int8 decoder's cross
/// K/V went from f16 to int8, one MFA clip's 1.5 s last window looped in the finishing run
/// (65 edits seeking, 170 finishing), which the compression-ratio fallback is there to catch.
fn greedy_fallback(final_window: FinalWindow) -> DecodeOptions {
    DecodeOptions {
        temperatures: DecodeOptions::default().temperatures,
        ..greedy(final_window)
    }
}

fn text(out: &TranscribeOutput, i: usize) -> Vec<String> {
    let t = out.transcripts[i].as_ref().expect("transcribed");
    words(
        &t.segments
            .iter()
            .map(|s| s.text.as_str())
            .collect::<String>(),
    )
}

/// The recordings: several speakers and lengths.
fn set() -> Vec<(Vec<f32>, Vec<String>)> {
    [
        ("coqui_tts/", 0, 28.0),
        ("coqui_tts/", 4, 27.0),
        ("coqui_tts/", 9, 26.0),
        ("mfa/", 0, 28.0),
        ("mfa/", 10, 25.0),
        ("mfa/", 20, 22.0),
        ("speechbrain/", 0, 24.0),
        ("coqui_tts/", 14, 21.0),
    ]
    .iter()
    .map(|&(p, s, sec)| recording(p, s, sec))
    .filter(|(a, r)| !r.is_empty() && a.len() > 15 * SR)
    .collect()
}

#[test]
fn finishing_the_last_window_saves_windows_and_keeps_the_text() {
    let Some(model) = load_int8() else { return };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let set = set();
    assert!(set.len() >= 6, "recordings: {}", set.len());
    let (mut windows, mut errors) = ([0usize; 2], [0usize; 2]);
    for (audio, reference) in &set {
        for (k, mode) in [FinalWindow::Seek, FinalWindow::Finish]
            .into_iter()
            .enumerate()
        {
            let out = tr
                .transcribe(
                    &[audio],
                    &greedy_fallback(mode),
                    LongFormMode::Sequential,
                    8,
                )
                .unwrap();
            let (s, d, i) = edit_ops(reference, &text(&out, 0));
            windows[k] += out.windows;
            errors[k] += s + d + i;
        }
    }
    eprintln!("seek / finish: windows {windows:?}, edits {errors:?}");
    assert!(windows[1] < windows[0], "windows {windows:?}");
    assert!(errors[1] <= errors[0] + errors[0] / 4, "edits {errors:?}");
}

#[test]
fn float32_keeps_the_seek_loop_under_auto() {
    let Some(model) = load_model() else { return };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let (audio, _) = recording("coqui_tts/", 0, 28.0);
    let run = |mode| {
        tr.transcribe(&[&audio], &greedy(mode), LongFormMode::Sequential, 8)
            .unwrap()
    };
    let (auto, seek, finish) = (
        run(FinalWindow::Auto),
        run(FinalWindow::Seek),
        run(FinalWindow::Finish),
    );
    let segs = |o: &TranscribeOutput| o.transcripts[0].as_ref().unwrap().segments.clone();
    assert_eq!(segs(&auto), segs(&seek));
    assert_eq!(auto.windows, seek.windows);
    // This recording's first window leaves its last seconds to a second one.
    assert!(
        finish.windows < seek.windows,
        "{} / {}",
        seek.windows,
        finish.windows
    );
}

#[test]
fn a_recording_finished_in_a_batch_gets_what_it_gets_alone() {
    let Some(model) = load_int8() else { return };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let set = set();
    let views: Vec<&[f32]> = set.iter().take(4).map(|(a, _)| a.as_slice()).collect();
    let opts = DecodeOptions {
        language: Some("en".into()),
        final_window: FinalWindow::Finish,
        ..DecodeOptions::default()
    };
    let batch = tr
        .transcribe(&views, &opts, LongFormMode::Sequential, 8)
        .unwrap();
    // Some window was held (finishing saved a window over the seek loop).
    let seek = DecodeOptions {
        final_window: FinalWindow::Seek,
        ..opts.clone()
    };
    let seek = tr
        .transcribe(&views, &seek, LongFormMode::Sequential, 8)
        .unwrap();
    assert!(
        batch.windows < seek.windows,
        "{} / {}",
        seek.windows,
        batch.windows
    );
    for (i, v) in views.iter().enumerate() {
        let alone = tr
            .transcribe(&[v], &opts, LongFormMode::Sequential, 8)
            .unwrap();
        assert_eq!(
            batch.transcripts[i].as_ref().unwrap().segments,
            alone.transcripts[0].as_ref().unwrap().segments,
            "recording {i}"
        );
    }
}

#[test]
fn assisted_greedy_finishes_as_greedy_does() {
    let Some(model) = load_int8() else { return };
    let Some(assistant) = load_int8() else { return };
    let set = set();
    let views: Vec<&[f32]> = set.iter().take(4).map(|(a, _)| a.as_slice()).collect();
    let opts = DecodeOptions {
        beam_size: 1,
        language: Some("en".into()),
        final_window: FinalWindow::Finish,
        ..DecodeOptions::default()
    };
    let plain = WhisperTranscriber::new(&model).unwrap();
    let assisted = WhisperTranscriber::new(&model)
        .unwrap()
        .with_assistant(&assistant, 5)
        .unwrap();
    let want = plain
        .transcribe(&views, &opts, LongFormMode::Sequential, 4)
        .unwrap();
    let got = assisted
        .transcribe(&views, &opts, LongFormMode::Sequential, 4)
        .unwrap();
    assert_eq!(want.windows, got.windows);
    for i in 0..views.len() {
        assert_eq!(
            want.transcripts[i].as_ref().unwrap().segments,
            got.transcripts[i].as_ref().unwrap().segments,
            "recording {i}"
        );
    }
    assert!(
        assisted.assistant_counts().unwrap().1 > 0,
        "nothing drafted"
    );
}
