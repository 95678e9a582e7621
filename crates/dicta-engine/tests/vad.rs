//! Voice activity detection on real speech: segments identical to faster-whisper's
//! `get_speech_timestamps` for several option sets, and `vad_filter` transcription identical
//! to faster-whisper's (same tiny.en weights, float32) with times in the original audio;
//! silence-only inputs give empty transcripts, a broken input fails alone.

mod whisper_common;

use std::path::PathBuf;
use std::sync::OnceLock;

use dicta_core::ErrorKind;
use dicta_engine::vad::{Vad, VadOptions};
use dicta_engine::whisper::DecodeOptions;
use dicta_engine::{Engine, EngineConfig, Input};
use dicta_models::whisper::ComputeType;
use serde_json::Value;

const SR: usize = 16_000;

fn vad() -> Option<&'static Vad> {
    static V: OnceLock<Option<Vad>> = OnceLock::new();
    V.get_or_init(|| whisper_common::vad_dir().map(|d| Vad::load(&d).expect("load Silero VAD")))
        .as_ref()
}

fn engine() -> Option<&'static Engine> {
    static E: OnceLock<Option<Engine>> = OnceLock::new();
    E.get_or_init(|| {
        let (model, vad) = (whisper_common::model_dir()?, whisper_common::vad_dir()?);
        // float32: the fixture is faster-whisper float32's output.
        let config = EngineConfig {
            vad_model: Some(vad),
            compute_type: ComputeType::Float32,
            ..EngineConfig::default()
        };
        Some(Engine::load(&model, config).expect("load tiny.en with VAD"))
    })
    .as_ref()
}

fn json(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The fixture's input: 16 kHz files and seconds of zeros, joined.
fn build(parts: &Value) -> Vec<f32> {
    let mut out = Vec::new();
    for p in parts.as_array().unwrap() {
        match p {
            Value::String(rel) => out.extend(whisper_common::load_wav(rel)),
            v => out.extend(std::iter::repeat_n(
                0.0,
                (v.as_f64().unwrap() * SR as f64) as usize,
            )),
        }
    }
    out
}

#[test]
fn segments_match_faster_whisper() {
    let Some(vad) = vad() else { return };
    let r = json(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dicta-models/tests/fixtures/silero/reference.json"
    ));
    let mut checked = 0;
    for rec in r["recordings"].as_array().unwrap() {
        let samples = whisper_common::load_wav(rec["audio"].as_str().unwrap());
        let probs = vad.probabilities(&samples).unwrap();
        for (name, opts) in r["options"].as_object().unwrap() {
            let opts: VadOptions = serde_json::from_value(opts.clone()).unwrap();
            let got: Vec<[usize; 2]> =
                dicta_engine::vad::speech_timestamps(&probs, samples.len(), &opts)
                    .iter()
                    .map(|c| [c.start, c.end])
                    .collect();
            let want: Vec<[usize; 2]> =
                serde_json::from_value(rec["segments"][name].clone()).unwrap();
            assert_eq!(got, want, "{} with {name}", rec["audio"]);
            checked += want.len();
        }
    }
    assert!(checked > 50, "{checked}");
}

#[test]
fn vad_filter_transcripts_match_faster_whisper() {
    let Some(engine) = engine() else { return };
    let r = json(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/vad/reference.json"
    ));
    for (name, want) in r.as_object().unwrap() {
        let words = name.ends_with("_words");
        let opts = DecodeOptions {
            vad: Some(VadOptions::default()),
            word_timestamps: words,
            language: Some("en".into()),
            ..DecodeOptions::default()
        };
        let input = Input::from_samples(name.clone(), build(&want["parts"]));
        let out = engine.transcribe_with(&[input], &opts);
        let t = out.results[0].as_ref().unwrap();
        assert!(
            (t.duration - want["duration"].as_f64().unwrap()).abs() < 1e-6,
            "{name}"
        );
        let speech = out.stats.speech_seconds.unwrap();
        assert!(
            (speech - want["duration_after_vad"].as_f64().unwrap()).abs() < 1e-3,
            "{name}: {speech}"
        );
        assert!(
            (out.stats.audio_seconds - t.duration).abs() < 1e-6,
            "{name}"
        );
        let want_segs = want["segments"].as_array().unwrap();
        assert_eq!(
            t.segments.len(),
            want_segs.len(),
            "{name}: {:#?}",
            t.segments
        );
        for (g, w) in t.segments.iter().zip(want_segs) {
            assert_eq!(g.text, w["text"].as_str().unwrap(), "{name}");
            assert!(
                (g.start - w["start"].as_f64().unwrap()).abs() < 1e-6,
                "{name}: {} vs {}",
                g.start,
                w["start"]
            );
            assert!(
                (g.end - w["end"].as_f64().unwrap()).abs() < 1e-6,
                "{name}: {} vs {}",
                g.end,
                w["end"]
            );
            if words {
                let ww = w["words"].as_array().unwrap();
                assert_eq!(g.words.len(), ww.len(), "{name}");
                for (a, b) in g.words.iter().zip(ww) {
                    assert_eq!(a.word.trim(), b[2].as_str().unwrap().trim(), "{name}");
                    assert!(
                        (a.start - b[0].as_f64().unwrap()).abs() < 1e-6,
                        "{name}: {a:?} vs {b}"
                    );
                    assert!(
                        (a.end - b[1].as_f64().unwrap()).abs() < 1e-6,
                        "{name}: {a:?} vs {b}"
                    );
                }
            }
        }
    }
}

#[test]
fn silence_is_an_empty_transcript_and_a_broken_input_fails_alone() {
    let Some(engine) = engine() else { return };
    let opts = DecodeOptions {
        vad: Some(VadOptions::default()),
        ..DecodeOptions::default()
    };
    let inputs = [
        Input::from_samples("silence", vec![0.0; 10 * SR]),
        Input::from_path("/nonexistent/missing.wav"),
        Input::from_path(PathBuf::from(whisper_common::DATA).join("openai_whisper/jfk.flac")),
    ];
    let out = engine.transcribe_with(&inputs, &opts);
    let silent = out.results[0].as_ref().unwrap();
    assert_eq!(silent.id, "silence");
    assert!(silent.text.is_empty() && silent.segments.is_empty());
    assert_eq!(silent.duration, 10.0);
    assert!(out.results[1].is_err());
    let jfk = out.results[2].as_ref().unwrap();
    assert!(
        jfk.text
            .contains("ask not what your country can do for you"),
        "{}",
        jfk.text
    );
    // Silence and jfk counted whole; the model heard only jfk's speech.
    assert!(
        (out.stats.audio_seconds - 21.0).abs() < 1e-6,
        "{}",
        out.stats.audio_seconds
    );
    assert!(out.stats.speech_seconds.unwrap() <= 11.0);
}

#[test]
fn vad_filter_without_a_detector_is_refused() {
    let Some(model) = whisper_common::model_dir() else {
        return;
    };
    let engine = Engine::load(&model, EngineConfig::default()).unwrap();
    let opts = DecodeOptions {
        vad: Some(VadOptions::default()),
        ..DecodeOptions::default()
    };
    let out = engine.transcribe_with(&[Input::from_samples("x", vec![0.0; SR])], &opts);
    let e = out.results[0].as_ref().unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidInput);
    assert!(e.message.contains("vad_model"), "{}", e.message);
    let bad = DecodeOptions {
        vad: Some(VadOptions {
            threshold: 1.5,
            ..VadOptions::default()
        }),
        ..DecodeOptions::default()
    };
    assert!(bad.validate().is_err());
}

/// The turn detector over a live stream: its speech starts and stops are faster-whisper's
/// speech chunks of the same audio (`get_speech_timestamps` without padding), every `Stopped`
/// after its `Started`, and the same whatever blocks the audio comes in.
#[test]
fn turns_are_the_speech_chunks_in_any_blocks() {
    use dicta_engine::vad::{Turn, TurnDetector};
    let Some(vad) = vad() else { return };
    let r = json(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dicta-models/tests/fixtures/silero/reference.json"
    ));
    let opts = VadOptions {
        speech_pad_ms: 0,
        min_silence_duration_ms: 500,
        ..VadOptions::default()
    };
    let mut checked = 0;
    for rec in r["recordings"].as_array().unwrap() {
        let mut samples = whisper_common::load_wav(rec["audio"].as_str().unwrap());
        // Silence at the end closes the last utterance.
        samples.extend(std::iter::repeat_n(0.0, SR));
        let probs = vad.probabilities(&samples).unwrap();
        let chunks: Vec<(u64, u64)> =
            dicta_engine::vad::speech_timestamps(&probs, samples.len(), &opts)
                .iter()
                .map(|c| (c.start as u64, c.end as u64))
                .collect();
        let mut runs = Vec::new();
        for block in [samples.len(), 512, 1000, 4801] {
            let mut d = TurnDetector::new(vad.clone(), &opts).unwrap();
            let mut turns = Vec::new();
            for b in samples.chunks(block) {
                turns.extend(d.push(b).unwrap());
            }
            runs.push(turns);
        }
        assert!(runs.iter().all(|t| *t == runs[0]), "{}", rec["audio"]);
        let turns = &runs[0];
        let mut open = None;
        let mut stopped = Vec::new();
        for t in turns {
            match *t {
                Turn::Started { start } => {
                    assert!(open.is_none(), "two starts in a row");
                    open = Some(start);
                }
                Turn::Stopped {
                    start,
                    speech_end,
                    at,
                } => {
                    assert_eq!(open.take(), Some(start), "a stop after its start");
                    assert!(
                        speech_end < at && at - speech_end >= 8000,
                        "{speech_end} {at}"
                    );
                    stopped.push((start, speech_end));
                }
            }
        }
        assert_eq!(stopped, chunks, "{}", rec["audio"]);
        checked += chunks.len();
    }
    assert!(checked > 10, "{checked}");
}
