//! Streams that end utterances where Silero VAD hears silence (`SessionOptions::vad`), on
//! Whisper tiny.en and Moonshine tiny with real speech: three dev recordings joined by two
//! seconds of faint noise.
//!
//! Models: $DICTA_TEST_MODEL_DIR, $DICTA_TEST_MOONSHINE_DIR and $DICTA_TEST_VAD_DIR (else the
//! cache); a test skips with a note where one is missing.

use std::sync::Arc;
use std::time::Duration;

use dicta_audio::noise::faint_noise;
use dicta_core::{ErrorKind, VadOptions};
use dicta_engine::stream::{
    Event, EventKind, SessionOptions, StreamConfig, StreamEngine, WorkerConfig,
};
use dicta_engine::vad::Vad;
use dicta_engine::whisper::{DecodeOptions, LongFormMode, WhisperTranscriber};

mod whisper_common;

use whisper_common::{load_wav, wer};

const RATE: usize = 16_000;
const CLIPS: [&str; 3] = [
    "openai_whisper/jfk.16k.wav",
    "coqui_tts/LJ001-0002.16k.wav",
    "coqui_tts/LJ001-0004.16k.wav",
];

/// The recording: 1 s of noise, then each clip followed by 2 s of noise; returns it and each
/// clip's (start, end) in samples.
fn recording() -> (Vec<f32>, Vec<(usize, usize)>) {
    let mut audio = faint_noise(RATE, 1);
    let mut spans = Vec::new();
    for (i, c) in CLIPS.iter().enumerate() {
        let clip = load_wav(c);
        spans.push((audio.len(), audio.len() + clip.len()));
        audio.extend(clip);
        audio.extend(faint_noise(2 * RATE, i as u32 + 2));
    }
    (audio, spans)
}

fn vad() -> Option<Vad> {
    Some(Vad::load(&whisper_common::vad_dir()?).expect("load Silero VAD"))
}

fn config() -> StreamConfig {
    StreamConfig {
        worker: WorkerConfig {
            max_batch: 4,
            max_wait: Duration::from_millis(2),
        },
        ..StreamConfig::default()
    }
}

/// Events of one stream fed in `block`-sample blocks, each with the samples fed when it came,
/// and each block's end with the model calls made while it was fed.
struct Streamed {
    events: Vec<(usize, Event)>,
    calls: Vec<(usize, u64)>,
}

fn stream(e: &StreamEngine, audio: &[f32], block: usize, vad: bool) -> Streamed {
    let opts = SessionOptions {
        vad: vad.then(VadOptions::endpointing),
        ..SessionOptions::default()
    };
    let mut s = e.open_session(opts).unwrap();
    let (mut events, mut calls) = (Vec::new(), Vec::new());
    let mut fed = 0;
    for b in audio.chunks(block) {
        fed += b.len();
        let before = e.stats().calls;
        events.extend(s.feed(b).unwrap().into_iter().map(|ev| (fed, ev)));
        calls.push((fed, e.stats().calls - before));
    }
    events.extend(s.end().unwrap().into_iter().map(|ev| (fed, ev)));
    Streamed { events, calls }
}

/// Model calls made by blocks that end between 0.9 s after a clip and the next clip (or the
/// end): silence the detector has already ended an utterance in.
fn calls_in_silences(s: &Streamed, spans: &[(usize, usize)], len: usize) -> u64 {
    let quiet = |fed: usize| {
        spans.iter().enumerate().any(|(i, &(_, end))| {
            let next = spans.get(i + 1).map_or(len, |n| n.0);
            fed > end + RATE * 9 / 10 + RATE / 10 && fed <= next
        })
    };
    s.calls
        .iter()
        .filter(|(f, _)| quiet(*f))
        .map(|(_, c)| c)
        .sum()
}

fn finals(events: &[(usize, Event)]) -> String {
    events
        .iter()
        .filter(|(_, e)| e.kind == EventKind::Final)
        .map(|(_, e)| e.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every word of each clip is final within 0.9 s of the clip's end (600 ms of silence, one
/// VAD window, and the 100 ms block that brings it); the finals say what offline
/// transcription of each clip alone says; the silences cost no model call; and the block size
/// changes nothing.
fn check_endpointing(
    e: &StreamEngine,
    offline: &[String],
    spans: &[(usize, usize)],
    audio: &[f32],
) {
    let streamed = stream(e, audio, RATE / 10, true);
    let events = &streamed.events;
    for (i, &(_, end)) in spans.iter().enumerate() {
        let limit = end + RATE * 9 / 10;
        let late: Vec<String> = events
            .iter()
            .filter(|(fed, ev)| {
                ev.kind == EventKind::Final
                    && *fed > limit
                    && ev
                        .words
                        .iter()
                        .any(|w| w.start * (RATE as f64) < end as f64)
            })
            .map(|(fed, ev)| format!("{:.2} s: {}", *fed as f64 / RATE as f64, ev.text))
            .collect();
        assert!(
            late.is_empty(),
            "clip {i} ends at {end}: late finals {late:?}"
        );
    }
    // Each clip's final words say what offline transcription of the clip alone says. Streams
    // confirm words from partial buffers and Moonshine hears a short utterance ("ask not")
    // worse than a sentence, so a word or two may differ ("so am I fellow" for "so my
    // fellow"); a lost or repeated utterance costs far more.
    for (i, &(start, end)) in spans.iter().enumerate() {
        let got: Vec<&str> = events
            .iter()
            .filter(|(_, e)| e.kind == EventKind::Final)
            .flat_map(|(_, e)| &e.words)
            .filter(|w| {
                let t = w.start * RATE as f64;
                t >= start as f64 - 0.35 * RATE as f64 && t <= (end + RATE) as f64
            })
            .map(|w| w.word.as_str())
            .collect();
        let got = got.join(" ");
        let w = wer(&offline[i], &got);
        assert!(w <= 0.2, "clip {i}: WER {w:.3}: {got:?} / {:?}", offline[i]);
    }
    let want = offline.join(" ");
    // Word times start in their clip (or its pad before), never in the silences between.
    for (_, ev) in events {
        for w in &ev.words {
            let t = w.start * RATE as f64;
            assert!(
                spans
                    .iter()
                    .any(|&(s, e)| t >= s as f64 - 0.35 * RATE as f64 && t <= e as f64),
                "{w:?} lies in a silence"
            );
        }
    }
    // Silence after an utterance ends costs no model call; without the detector it does.
    assert_eq!(calls_in_silences(&streamed, spans, audio.len()), 0);
    let plain = stream(e, audio, RATE / 10, false);
    assert!(calls_in_silences(&plain, spans, audio.len()) > 0);
    assert!(wer(&want, &finals(&plain.events)) <= 0.2);
    // Any block size gives the same events.
    let strip = |ev: &[(usize, Event)]| ev.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>();
    for block in [4_000 + 37, audio.len()] {
        assert_eq!(
            strip(&stream(e, audio, block, true).events),
            strip(events),
            "block of {block} samples"
        );
    }
    // Noise alone: no model call, no event.
    let before = e.stats().calls;
    assert!(stream(e, &faint_noise(6 * RATE, 9), RATE / 10, true)
        .events
        .is_empty());
    assert_eq!(e.stats().calls, before, "noise alone was decoded");
}

#[test]
fn whisper_streams_end_utterances_on_silence() {
    let (Some(model), Some(vad)) = (whisper_common::load_model().map(Arc::new), vad()) else {
        return;
    };
    let (audio, spans) = recording();
    let opts = DecodeOptions::greedy();
    let t = WhisperTranscriber::new(&model).unwrap();
    let offline: Vec<String> = CLIPS
        .iter()
        .map(|c| {
            let a = load_wav(c);
            t.transcribe(&[&a], &opts, LongFormMode::Sequential, 1)
                .unwrap()
                .transcripts
                .remove(0)
                .unwrap()
                .text
        })
        .collect();
    let e = StreamEngine::whisper(Arc::clone(&model), opts, config())
        .unwrap()
        .with_vad(vad);
    check_endpointing(&e, &offline, &spans, &audio);
}

#[test]
fn moonshine_streams_end_utterances_on_silence() {
    use dicta_models::moonshine::MoonshineModel;
    let Some(dir) = whisper_common::fetched_model(
        "moonshine-tiny",
        "DICTA_TEST_MOONSHINE_DIR",
        "tokenizer.json",
    ) else {
        return;
    };
    let Some(vad) = vad() else { return };
    let model =
        Arc::new(MoonshineModel::load(&dir, dicta_models::whisper::ComputeType::Auto).unwrap());
    let (audio, spans) = recording();
    let opts = DecodeOptions::greedy();
    let offline: Vec<String> = CLIPS
        .iter()
        .map(|c| {
            let a = load_wav(c);
            dicta_engine::moonshine::transcribe(&model, &[&a], &opts, 1)
                .transcripts
                .remove(0)
                .unwrap()
                .text
        })
        .collect();
    let e = StreamEngine::moonshine(Arc::clone(&model), opts, config())
        .unwrap()
        .with_vad(vad);
    check_endpointing(&e, &offline, &spans, &audio);
}

#[test]
fn endpointing_without_a_detector_is_refused() {
    let Some(model) = whisper_common::load_model().map(Arc::new) else {
        return;
    };
    let e = StreamEngine::whisper(model, DecodeOptions::greedy(), config()).unwrap();
    let opts = SessionOptions {
        vad: Some(VadOptions::endpointing()),
        ..SessionOptions::default()
    };
    let err = e.open_session(opts.clone()).unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidInput);
    assert!(err.message.contains("voice activity detector"), "{err}");
    assert_eq!(e.open_sessions(), 0);
    let Some(vad) = vad() else { return };
    let e = e.with_vad(vad);
    let bad = SessionOptions {
        vad: Some(VadOptions {
            threshold: 1.5,
            ..VadOptions::endpointing()
        }),
        ..SessionOptions::default()
    };
    let err = e.open_session(bad).unwrap_err();
    assert!(err.message.contains("threshold"), "{err}");
    assert!(e.open_session(opts).is_ok());
}
