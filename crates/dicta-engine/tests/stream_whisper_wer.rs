//! Streaming accuracy: the final transcripts of `Engine::open_session` sessions over English
//! recordings with a reference in shared/data score within 2 WER points (absolute, Whisper's
//! English normalizer) of offline `Engine::transcribe` of the same files with the same
//! decoding options, computed in the same test: Whisper tiny.en on the first 20, Moonshine
//! tiny on all of them (its streams have no timestamps: their word times are estimates, which
//! is where pause cuts used to lose and repeat words).
//!
//! Four sessions run at once (so their decodes are batched), each fed 100 ms blocks as fast as
//! the model allows: pacing changes latency, never which audio each decode sees.
//!
//! The models: $DICTA_TEST_MODEL_DIR or /work/models/tiny.en-ct2, $DICTA_TEST_MOONSHINE_DIR or
//! the cache (each test skips without its model).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use dicta_engine::stream::{EventKind, SessionOptions, StreamConfig, WorkerConfig};
use dicta_engine::{Engine, EngineConfig, Input};
use dicta_eval::Scorer;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data");

mod whisper_common;

fn whisper_dir() -> Option<PathBuf> {
    whisper_common::model_dir()
}

/// (id, reference, 16 kHz samples) of the first `n` English items with a reference.
fn utterances(n: Option<usize>) -> Vec<(String, String, Vec<f32>)> {
    let root = Path::new(DATA);
    dicta_eval::load_manifest(&root.join("manifest.jsonl"))
        .expect("shared/data manifest")
        .into_iter()
        .filter(|i| i.language.as_deref() == Some("en") && i.text.is_some())
        .take(n.unwrap_or(usize::MAX))
        .map(|i| {
            let rel = i.audio_16k_wav.clone().unwrap_or(i.audio.clone());
            let samples = dicta_audio::decode::load_path(&root.join(rel)).expect("decode");
            (i.id, i.text.unwrap_or_default(), samples)
        })
        .collect()
}

#[test]
fn streamed_wer_is_within_two_points_of_offline() {
    let Some(dir) = whisper_dir() else { return };
    let items = utterances(Some(20));
    assert_eq!(items.len(), 20);
    check(&dir, Some(1.0), &items);
}

#[test]
fn moonshine_streamed_wer_is_within_two_points_of_offline() {
    let Some(dir) = whisper_common::fetched_model(
        "moonshine-tiny",
        "DICTA_TEST_MOONSHINE_DIR",
        "encoder_model.ort",
    ) else {
        return;
    };
    let items = utterances(None);
    assert!(items.len() > 100, "{} English items", items.len());
    check(&dir, None, &items);
}

/// Streams `items` through four sessions of the model in `dir` (steps of `step_seconds`, the
/// family's default when `None`) and compares their WER with offline transcription.
fn check(dir: &Path, step_seconds: Option<f32>, items: &[(String, String, Vec<f32>)]) {
    let config = EngineConfig {
        stream: StreamConfig {
            worker: WorkerConfig {
                max_batch: 4,
                max_wait: Duration::from_millis(20),
            },
            step_seconds,
            ..StreamConfig::default()
        },
        ..EngineConfig::default()
    };
    let engine = Engine::load(dir, config).unwrap();

    let queue: Mutex<VecDeque<usize>> = Mutex::new((0..items.len()).collect());
    let mut streamed = vec![String::new(); items.len()];
    let done: Vec<Vec<(usize, String)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (queue, engine) = (&queue, &engine);
                scope.spawn(move || {
                    let mut session = engine.open_session(SessionOptions::default()).unwrap();
                    let mut out = Vec::new();
                    while let Some(i) = {
                        let next = queue.lock().unwrap().pop_front();
                        next
                    } {
                        let mut finals = Vec::new();
                        let mut events = Vec::new();
                        for block in items[i].2.chunks(1600) {
                            events.extend(session.feed(block).unwrap());
                        }
                        events.extend(session.end().unwrap());
                        for e in events {
                            if e.kind == EventKind::Final {
                                finals.push(e.text);
                            }
                        }
                        out.push((i, finals.join(" ")));
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, text) in done.into_iter().flatten() {
        streamed[i] = text;
    }

    let inputs: Vec<Input> = items
        .iter()
        .map(|(id, _, s)| Input::from_samples(id.clone(), s.clone()))
        .collect();
    let offline = engine.transcribe_with(&inputs, &engine.stream_decode_options());
    let (mut s_score, mut o_score) = (Scorer::new(), Scorer::new());
    for ((id, reference, _), (s, o)) in items.iter().zip(streamed.iter().zip(&offline.results)) {
        let o = &o.as_ref().expect("offline transcript").text;
        s_score.add(reference, s, Some("en"));
        o_score.add(reference, o, Some("en"));
        if s_score.normalize(s, Some("en")) != s_score.normalize(o, Some("en")) {
            eprintln!("{id}\n  streamed: {s}\n  offline:  {o}");
        }
    }
    let (s_wer, o_wer) = (s_score.summary().wer(), o_score.summary().wer());
    eprintln!("WER streamed {s_wer:.4}, offline {o_wer:.4}");
    assert!(
        o_wer < 0.3,
        "offline WER {o_wer} (is the model loaded right?)"
    );
    assert!(
        s_wer <= o_wer + 0.02,
        "streamed WER {s_wer:.4} is more than 2 points above offline {o_wer:.4}"
    );
}
