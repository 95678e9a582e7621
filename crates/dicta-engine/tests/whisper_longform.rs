//! Long-form transcription on real speech: recordings made by concatenating utterances of
//! shared/data with known text (0.5 s pauses).
//!
//! - Both long-form modes (sequential seeking, and the batched mode's lanes, each seeking on
//!   its own) must neither drop nor double words where the batched mode cuts the recording
//!   into lanes: against the concatenated reference, no deletion or insertion may lie within
//!   3 s of a cut, and the batched mode makes at most one more edit than the sequential one.
//! - In the batched mode, short recordings and the lanes of longer ones share model calls (one
//!   scheduler over all inputs), yet every recording gets the transcript it gets alone.

mod whisper_common;

use dicta_engine::whisper::{DecodeOptions, LongFormMode, WhisperTranscriber};
use whisper_common::*;

const SR: usize = 16000;
const BATCHED: LongFormMode = LongFormMode::Batched;

/// Concatenates manifest items (by id prefix, in manifest order) with 0.5 s pauses until
/// `seconds`; returns the audio and each reference word with its approximate time (spread
/// linearly over its utterance).
fn recording(prefixes: &[&str], skip: usize, seconds: f64) -> (Vec<f32>, Vec<(String, f64)>) {
    let manifest = manifest();
    assert!(!manifest.is_empty(), "no manifest under {DATA}");
    let mut audio = Vec::new();
    let mut reference = Vec::new();
    let items = manifest
        .iter()
        .filter(|r| {
            let id = r["id"].as_str().unwrap();
            r["text"].is_string()
                && r["category"] == "short_utterance"
                && r.get("contains_markup").and_then(|m| m.as_bool()) != Some(true)
                && prefixes.iter().any(|p| id.starts_with(p))
        })
        .skip(skip);
    for r in items {
        let start = audio.len() as f64 / SR as f64;
        audio.extend(load_wav(r["audio_16k_wav"].as_str().unwrap()));
        let end = audio.len() as f64 / SR as f64;
        audio.extend(std::iter::repeat_n(0.0f32, SR / 2));
        let w = words(&r["text"].as_str().unwrap().replace('-', " "));
        let n = w.len() as f64;
        for (k, word) in w.into_iter().enumerate() {
            reference.push((word, start + (k as f64 + 0.5) / n * (end - start)));
        }
        if audio.len() as f64 >= seconds * SR as f64 {
            break;
        }
    }
    (audio, reference)
}

/// Deleted reference words and inserted hypothesis words, each with the time of the
/// reference position where the edit happens (minimum edit distance alignment).
fn dels_and_inserts(reference: &[(String, f64)], hyp: &[String]) -> Vec<(char, String, f64)> {
    let (n, m) = (reference.len(), hyp.len());
    let mut d = vec![vec![0usize; m + 1]; n + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=n {
        for j in 1..=m {
            let sub = d[i - 1][j - 1] + usize::from(reference[i - 1].0 != hyp[j - 1]);
            d[i][j] = sub.min(d[i - 1][j] + 1).min(d[i][j - 1] + 1);
        }
    }
    let mut out = Vec::new();
    let (mut i, mut j) = (n, m);
    while i > 0 || j > 0 {
        let t = reference[i.min(n).saturating_sub(1)].1;
        if i > 0
            && j > 0
            && d[i][j] == d[i - 1][j - 1] + usize::from(reference[i - 1].0 != hyp[j - 1])
        {
            i -= 1;
            j -= 1;
        } else if i > 0 && d[i][j] == d[i - 1][j] + 1 {
            out.push(('-', reference[i - 1].0.clone(), reference[i - 1].1));
            i -= 1;
        } else {
            out.push(('+', hyp[j - 1].clone(), t));
            j -= 1;
        }
    }
    out.reverse();
    out
}

fn opts() -> DecodeOptions {
    DecodeOptions {
        beam_size: 1,
        temperatures: vec![0.0],
        language: Some("en".into()),
        ..DecodeOptions::default()
    }
}

#[test]
fn long_form_drops_and_doubles_no_words_at_lane_cuts() {
    let Some(model) = load_model() else { return };
    // ~4 min of LJ Speech and the other clean English sources: four lanes of about a minute.
    let (audio, reference) = recording(
        &[
            "coqui_tts/",
            "openai_whisper/",
            "faster_whisper/",
            "pocketsphinx/",
        ],
        0,
        240.0,
    );
    let dur = audio.len() as f64 / SR as f64;
    assert!((240.0..300.0).contains(&dur), "{dur} s");
    let tr = WhisperTranscriber::new(&model).unwrap();
    let ref_words: Vec<String> = reference.iter().map(|r| r.0.clone()).collect();
    let frames = audio.len() / 160;
    let lanes = dicta_engine::whisper::lanes::lanes(
        &audio,
        frames,
        8,
        dicta_engine::whisper::lanes::MIN_LANE_FRAMES,
    );
    assert_eq!(lanes.len(), 4, "{lanes:?}");
    let cuts: Vec<f64> = lanes.iter().skip(1).map(|l| l.0 as f64 / 100.0).collect();
    let mut totals = Vec::new();
    for mode in [LongFormMode::Sequential, BATCHED] {
        let out = tr.transcribe(&[&audio], &opts(), mode, 8).unwrap();
        let t = out.transcripts[0].as_ref().unwrap();
        for s in t.segments.windows(2) {
            assert!(
                s[0].start <= s[1].start + 1e-6,
                "segments out of order: {s:?}"
            );
        }
        // Each segment names the window it was decoded in (`seek`, 10 ms frames): it lies
        // within that window, the windows are no more than were decoded, and in the batched
        // mode every lane's first window is one of them.
        let seeks: Vec<u32> = t.segments.iter().map(|s| s.seek.unwrap()).collect();
        for (s, &k) in t.segments.iter().zip(&seeks) {
            let from = f64::from(k) / 100.0;
            assert!(from <= s.start + 0.01 && s.end <= from + 30.01, "{s:?}");
        }
        let mut windows = seeks.clone();
        windows.dedup();
        assert!(windows.len() <= out.windows, "{windows:?}");
        if mode == BATCHED {
            for l in &lanes {
                assert!(seeks.contains(&(l.0 as u32)), "lane {l:?}: {windows:?}");
            }
        }
        let edits = dels_and_inserts(&reference, &words(&t.text.replace('-', " ")));
        eprintln!(
            "{}: {} windows, {} ref words, edits {edits:?}",
            mode.as_str(),
            out.windows,
            ref_words.len()
        );
        let at_cuts: Vec<_> = edits
            .iter()
            .filter(|e| cuts.iter().any(|&c| (e.2 - c).abs() < 3.0))
            .collect();
        assert!(
            at_cuts.is_empty(),
            "{}: words dropped (-) or doubled (+) at the cuts {cuts:?}: {at_cuts:?}\n{}",
            mode.as_str(),
            t.text
        );
        totals.push(edits.len());
    }
    // The references spell out years ("fourteen sixty") that Whisper writes in digits.
    assert!(
        totals[0] <= 8,
        "sequential: {} deletions + insertions",
        totals[0]
    );
    assert!(
        totals[1] <= totals[0] + 1,
        "batched {} vs sequential {} deletions + insertions",
        totals[1],
        totals[0]
    );
}

#[test]
fn short_and_long_recordings_share_batches_in_batched_mode() {
    let Some(model) = load_model() else { return };
    // Over 2 minutes: two lanes.
    let (long, _) = recording(&["coqui_tts/"], 0, 125.0);
    let short_a = load_wav("openai_whisper/jfk.16k.wav");
    let short_b = load_wav("faster_whisper/stereo_diarization.ch0.16k.wav");
    let inputs: Vec<&[f32]> = vec![&short_a, &long, &short_b];
    let tr = WhisperTranscriber::new(&model).unwrap();
    // With word timestamps: each lane aligns its own windows, in recording time.
    let opts = DecodeOptions {
        word_timestamps: true,
        ..opts()
    };
    let mixed = tr.transcribe(&inputs, &opts, BATCHED, 8).unwrap();
    let mut unshared_batches = 0;
    for (i, audio) in inputs.iter().enumerate() {
        let alone = tr.transcribe(&[audio], &opts, BATCHED, 8).unwrap();
        unshared_batches += alone.batch_sizes.len();
        let a = alone.transcripts[0].as_ref().unwrap();
        let m = mixed.transcripts[i].as_ref().unwrap();
        assert_eq!(m.id, i.to_string(), "results in input order");
        assert_eq!(
            m.text, a.text,
            "input {i}: mixed batches changed the transcript"
        );
        let spans = |t: &dicta_core::Transcript| {
            t.segments
                .iter()
                .map(|s| (s.start, s.end, s.text.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(spans(m), spans(a), "input {i}");
        // Words lie in their segments, in time order, and spell the text.
        let mut last = 0.0;
        for seg in &m.segments {
            let squeeze = |s: &str| s.split_whitespace().collect::<String>();
            let joined: String = seg.words.iter().map(|w| squeeze(&w.word)).collect();
            assert_eq!(joined, squeeze(&seg.text), "input {i}");
            for w in &seg.words {
                assert!(w.start + 1e-6 >= last && w.start <= w.end + 1e-6, "{w:?}");
                assert!(
                    w.start + 0.5 >= seg.start && w.end <= seg.end + 0.5,
                    "{w:?} {seg:?}"
                );
                last = w.start;
            }
        }
        assert!(
            m.segments.last().unwrap().end > 100.0 || i != 1,
            "input {i}"
        );
    }
    // A recording without lanes in batched mode is the seek loop: the same transcript as
    // sequential.
    let seq = tr
        .transcribe(&[&short_a], &opts, LongFormMode::Sequential, 8)
        .unwrap();
    assert_eq!(
        seq.transcripts[0].as_ref().unwrap().text,
        mixed.transcripts[0].as_ref().unwrap().text
    );
    assert!(
        mixed.batch_sizes.len() < unshared_batches,
        "shared batches {:?} vs {unshared_batches} unshared",
        mixed.batch_sizes
    );
    assert!(mixed.batch_sizes.iter().all(|&n| (1..=8).contains(&n)));
}

/// int8: windows whose previous-text prompts differ in length share decoder calls
/// (left-padded rows), yet each recording gets, token for token, the transcript it gets alone —
/// with beam search and the default fallback, which regroup rows as they go.
#[test]
fn int8_windows_with_prompts_of_different_lengths_batch_as_alone() {
    let Some(model) = load_int8() else { return };
    assert!(model.supports_left_padding());
    // Two recordings of three windows each, of different speakers and texts (so their prompts
    // differ in length from the second window on), and a short clip.
    let (a, _) = recording(&["mfa/"], 0, 70.0);
    let (b, _) = recording(&["coqui_tts/"], 3, 65.0);
    let jfk = load_wav("openai_whisper/jfk.16k.wav");
    let inputs: Vec<&[f32]> = vec![&a, &b, &jfk];
    let tr = WhisperTranscriber::new(&model).unwrap();
    let opts = opts_en();
    let together = tr
        .transcribe(&inputs, &opts, LongFormMode::Sequential, 8)
        .unwrap();
    assert!(
        together.batch_sizes.iter().any(|&n| n >= 2),
        "{:?}",
        together.batch_sizes
    );
    for (i, audio) in inputs.iter().enumerate() {
        let alone = tr
            .transcribe(&[audio], &opts, LongFormMode::Sequential, 8)
            .unwrap();
        let (t, a) = (
            together.transcripts[i].as_ref().unwrap(),
            alone.transcripts[0].as_ref().unwrap(),
        );
        assert_eq!(timed_tokens(t), timed_tokens(a), "input {i}");
        assert!(!t.text.trim().is_empty(), "input {i}");
    }
}

/// The automatic mode conditioning on previous text: a recording under 12 minutes is decoded
/// as `Sequential` (the same tokens, and the stats say "sequential"); one of 12 minutes is cut
/// into two lanes of 6 minutes, reported as "batched", and speech at both ends is transcribed at
/// its own time. Without conditioning it is `Batched`: the same recording under 12 minutes is
/// cut into lanes of 60 s.
#[test]
fn auto_mode_is_sequential_below_12_minutes_and_lanes_of_6_minutes_above() {
    let Some(model) = load_int8() else { return };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let (long, _) = recording(&["coqui_tts/"], 0, 125.0);
    let auto = tr
        .transcribe(&[&long], &opts_en(), LongFormMode::Auto, 8)
        .unwrap();
    let seq = tr
        .transcribe(&[&long], &opts_en(), LongFormMode::Sequential, 8)
        .unwrap();
    assert_eq!(auto.long_form_mode, LongFormMode::Sequential);
    assert_eq!(
        timed_tokens(auto.transcripts[0].as_ref().unwrap()),
        timed_tokens(seq.transcripts[0].as_ref().unwrap())
    );
    let free = DecodeOptions {
        condition_on_previous_text: false,
        ..opts_en()
    };
    let auto = tr
        .transcribe(&[&long], &free, LongFormMode::Auto, 8)
        .unwrap();
    let batched = tr
        .transcribe(&[&long], &free, LongFormMode::Batched, 8)
        .unwrap();
    assert_eq!(auto.long_form_mode, LongFormMode::Batched);
    assert_eq!(auto.batch_sizes[0], 2, "{:?}", auto.batch_sizes);
    assert_eq!(
        timed_tokens(auto.transcripts[0].as_ref().unwrap()),
        timed_tokens(batched.transcripts[0].as_ref().unwrap())
    );
    // 12 minutes: JFK at the start and 11 minutes in, silence between.
    let jfk = load_wav("openai_whisper/jfk.16k.wav");
    let mut audio = vec![0f32; 720 * SR];
    audio[..jfk.len()].copy_from_slice(&jfk);
    audio[660 * SR..660 * SR + jfk.len()].copy_from_slice(&jfk);
    let out = tr
        .transcribe(&[&audio], &opts_en(), LongFormMode::Auto, 8)
        .unwrap();
    assert_eq!(out.long_form_mode, LongFormMode::Batched);
    assert_eq!(out.batch_sizes[0], 2, "{:?}", out.batch_sizes);
    let t = out.transcripts[0].as_ref().unwrap();
    let asks: Vec<f64> = t
        .segments
        .iter()
        .filter(|s| s.text.to_lowercase().contains("ask not"))
        .map(|s| s.start)
        .collect();
    assert_eq!(asks.len(), 2, "{:?}", t.segments);
    assert!(
        asks[0] < 10.0 && (655.0..675.0).contains(&asks[1]),
        "{asks:?}"
    );
}

/// Each segment's times and tokens.
fn timed_tokens(t: &dicta_core::Transcript) -> Vec<(f64, f64, Vec<u32>)> {
    t.segments
        .iter()
        .map(|s| (s.start, s.end, s.tokens.clone()))
        .collect()
}

/// Faster-whisper's default decoding, in English.
fn opts_en() -> DecodeOptions {
    DecodeOptions {
        language: Some("en".into()),
        ..DecodeOptions::default()
    }
}

/// `prompt_every_window` (faster-whisper's batched pipeline): every window starts from the
/// initial prompt alone, so each window of a recording decodes exactly as the first window of
/// a run that starts at its seek (a clip from there, where the initial prompt is the first
/// window's prompt anyway); without the option the later windows differ; and it is refused
/// together with previous-text conditioning.
#[test]
fn prompt_every_window_decodes_each_window_as_a_first_window() {
    let Some(model) = load_int8() else { return };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let (audio, _) = recording(&["mfa/"], 0, 70.0);
    // A leading space and nothing to trim: tokenized as given or as `" " + trim`, the same tokens.
    let prompt = " hello, um, this is, uh, all lowercase, no caps at all, you know";
    let first_only = DecodeOptions {
        condition_on_previous_text: false,
        initial_prompt: Some(prompt.into()),
        ..opts()
    };
    let every = DecodeOptions {
        prompt_every_window: true,
        ..first_only.clone()
    };
    let run = |o: &DecodeOptions| {
        let out = tr
            .transcribe(&[&audio], o, LongFormMode::Sequential, 8)
            .unwrap();
        out.transcripts.into_iter().next().unwrap().unwrap()
    };
    let window = |t: &dicta_core::Transcript, seek: u32| {
        t.segments
            .iter()
            .filter(|s| s.seek == Some(seek))
            .map(|s| (s.start, s.end, s.tokens.clone()))
            .collect::<Vec<_>>()
    };
    let all = run(&every);
    let mut seeks: Vec<u32> = all.segments.iter().filter_map(|s| s.seek).collect();
    seeks.dedup();
    assert!(seeks.len() >= 3, "{seeks:?}");
    for &seek in &seeks[1..] {
        // A quarter frame past the seek: the clip starts at that frame however seconds round.
        let from_here = run(&DecodeOptions {
            clip_timestamps: vec![(f64::from(seek) + 0.25) / 100.0],
            ..first_only.clone()
        });
        assert_eq!(
            window(&all, seek),
            window(&from_here, seek),
            "window at {seek}"
        );
    }
    assert_ne!(timed_tokens(&all), timed_tokens(&run(&first_only)));
    let e = tr
        .transcribe(
            &[&audio],
            &DecodeOptions {
                condition_on_previous_text: true,
                ..every.clone()
            },
            LongFormMode::Sequential,
            8,
        )
        .unwrap_err();
    assert!(e.message.contains("prompt_every_window"), "{e}");
}
