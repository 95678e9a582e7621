//! Moonshine streaming sessions (buffer re-decoding with LocalAgreement-2, pause cuts) on
//! Moonshine tiny (and base) and real speech: close to offline, block size never changes the events,
//! alone == batched, long streams keep the buffer bounded.

use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use dicta_engine::stream::{
    Event, EventKind, SessionOptions, StreamConfig, StreamEngine, WorkerConfig,
};
use dicta_engine::whisper::DecodeOptions;
use dicta_models::moonshine::{is_moonshine_dir, MoonshineModel};
use dicta_models::whisper::ComputeType;

mod whisper_common;

use whisper_common::wer;

fn load_model() -> Option<Arc<MoonshineModel>> {
    load("DICTA_TEST_MOONSHINE_DIR", "moonshine-tiny")
}

/// The model named by `env` (a failure when it names no model), else `name` in the default
/// cache, else `None` (skipped).
fn load(env: &str, name: &str) -> Option<Arc<MoonshineModel>> {
    let dir = match std::env::var_os(env).map(PathBuf::from) {
        Some(d) => {
            assert!(
                is_moonshine_dir(&d),
                "{env}={} holds no Moonshine model",
                d.display()
            );
            d
        }
        None => {
            let d = PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/dicta/models")
                .join(name);
            if !is_moonshine_dir(&d) {
                eprintln!("SKIPPED: no {name} at {} (set {env})", d.display());
                return None;
            }
            d
        }
    };
    Some(Arc::new(
        MoonshineModel::load(&dir, ComputeType::Auto)
            .unwrap_or_else(|e| panic!("load {name}: {e}")),
    ))
}

fn speech(rel: &str) -> Vec<f32> {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data")).join(rel);
    dicta_audio::decode::load_path(&p).unwrap()
}

const JFK: &str = "openai_whisper/jfk.16k.wav";

fn engine(model: &Arc<MoonshineModel>, max_batch: usize, max_wait_ms: u64) -> StreamEngine {
    let cfg = StreamConfig {
        worker: WorkerConfig {
            max_batch,
            max_wait: Duration::from_millis(max_wait_ms),
        },
        ..StreamConfig::default()
    };
    StreamEngine::moonshine(Arc::clone(model), DecodeOptions::greedy(), cfg).unwrap()
}

fn stream(e: &StreamEngine, audio: &[f32], block: usize) -> Vec<Event> {
    let mut s = e.open_session(SessionOptions::default()).unwrap();
    let mut ev = Vec::new();
    for b in audio.chunks(block) {
        ev.extend(s.feed(b).unwrap());
    }
    ev.extend(s.end().unwrap());
    ev
}

fn finals(events: &[Event]) -> String {
    events
        .iter()
        .filter(|e| e.kind == EventKind::Final)
        .map(|e| e.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn offline(model: &MoonshineModel, audio: &[f32]) -> String {
    dicta_engine::moonshine::transcribe(model, &[audio], &DecodeOptions::greedy(), 1)
        .transcripts
        .remove(0)
        .unwrap()
        .text
}

#[test]
fn jfk_streams_close_to_offline_and_block_size_never_changes_it() {
    let Some(model) = load_model() else { return };
    jfk_streams_close_to_offline(&model);
}

/// Moonshine base (weights stored as 8 bits, multiplied in float by its export) streams as tiny.
#[test]
fn base_streams_close_to_offline_and_block_size_never_changes_it() {
    let Some(model) = load("DICTA_TEST_MOONSHINE_BASE_DIR", "moonshine-base") else {
        return;
    };
    assert_eq!(model.model.config().d_model, 416, "not base");
    jfk_streams_close_to_offline(&model);
}

fn jfk_streams_close_to_offline(model: &Arc<MoonshineModel>) {
    let e = engine(model, 4, 5);
    let audio = speech(JFK);
    let small = stream(&e, &audio, 160);
    let text = finals(&small);
    let off = offline(model, &audio);
    assert!(
        wer(&off, &text) <= 0.15,
        "streamed {text:?} vs offline {off:?}"
    );
    let f: Vec<&Event> = small
        .iter()
        .filter(|e| e.kind == EventKind::Final)
        .collect();
    assert!(f.len() >= 2, "finals {f:?}");
    assert!(small.iter().any(|e| e.kind == EventKind::Partial));
    // The first partial comes from the first step (0.5 s of audio), long before the end.
    let first_partial = small
        .iter()
        .position(|e| e.kind == EventKind::Partial)
        .unwrap();
    assert!(small[first_partial].end < 3.0, "{:?}", small[first_partial]);
    assert_eq!(
        stream(&e, &audio, 100_000),
        small,
        "160-sample and 100000-sample blocks differ"
    );
}

#[test]
fn transcripts_are_the_same_alone_or_batched() {
    let Some(model) = load_model() else { return };
    let clips = [
        "pocketsphinx/cards_001.wav",
        "speechbrain/spk1_snt1.wav",
        JFK,
    ];
    let alone_engine = engine(&model, 1, 0);
    let alone: Vec<Vec<Event>> = clips
        .iter()
        .map(|c| stream(&alone_engine, &speech(c), 800))
        .collect();
    let e = Arc::new(engine(&model, 8, 50));
    let barrier = Arc::new(Barrier::new(clips.len()));
    let handles: Vec<_> = clips
        .iter()
        .map(|c| {
            let (e, b, audio) = (Arc::clone(&e), Arc::clone(&barrier), speech(c));
            std::thread::spawn(move || {
                b.wait();
                stream(&e, &audio, 800)
            })
        })
        .collect();
    let together: Vec<Vec<Event>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(together, alone);
    let stats = e.stats();
    assert!(
        stats.batch_sizes.iter().any(|&b| b > 1),
        "never batched: {stats:?}"
    );
}

#[test]
fn long_streams_keep_the_buffer_bounded() {
    let Some(model) = load_model() else { return };
    let e = engine(&model, 4, 5);
    let mut audio = Vec::new();
    for _ in 0..4 {
        audio.extend(speech(JFK));
        audio.extend(vec![0.0; 8000]);
    }
    let mut s = e.open_session(SessionOptions::default()).unwrap();
    let mut events = Vec::new();
    let mut most = 0;
    for b in audio.chunks(16_000) {
        events.extend(s.feed(b).unwrap());
        most = most.max(s.buffered_samples());
    }
    events.extend(s.end().unwrap());
    let geometry = e.whisper_geometry().unwrap();
    assert!(
        most <= geometry.max_buffer + 16_000,
        "buffer grew to {most}"
    );
    let text = finals(&events);
    assert_eq!(text.to_lowercase().matches("country").count(), 8, "{text}");
}

#[test]
fn silence_costs_no_model_call() {
    let Some(model) = load_model() else { return };
    let e = engine(&model, 4, 5);
    let mut s = e.open_session(SessionOptions::default()).unwrap();
    let mut events = Vec::new();
    for _ in 0..30 {
        events.extend(s.feed(&vec![0.0; 16_000]).unwrap());
        assert!(
            s.buffered_samples() < 16_000,
            "silence is held: {}",
            s.buffered_samples()
        );
    }
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(e.stats().calls, 0, "silence ran the model");
    // Speech after it is heard as usual, with times from the start of the stream.
    for b in speech(JFK).chunks(1600) {
        events.extend(s.feed(b).unwrap());
    }
    events.extend(s.end().unwrap());
    let text = finals(&events);
    assert!(
        text.to_lowercase()
            .contains("what your country can do for you"),
        "{text}"
    );
    let first = events.iter().find(|e| e.kind == EventKind::Final).unwrap();
    assert!(first.start >= 30.0, "{first:?}");
}

/// Moonshine has no prompt and knows only English: sessions asking otherwise are refused when
/// they open; language "en" is accepted.
#[test]
fn sessions_refuse_what_moonshine_cannot_honour() {
    use dicta_engine::whisper::InputOptions;
    let Some(model) = load_model() else { return };
    let e = engine(&model, 4, 5);
    let open = |decode: InputOptions| {
        e.open_session(SessionOptions {
            decode,
            ..Default::default()
        })
    };
    for bad in [
        InputOptions {
            initial_prompt: Some("Hello".into()),
            ..Default::default()
        },
        InputOptions {
            hotwords: Some("Americans".into()),
            ..Default::default()
        },
        InputOptions {
            language: Some("fr".into()),
            ..Default::default()
        },
    ] {
        let Err(err) = open(bad.clone()) else {
            panic!("{bad:?} was accepted")
        };
        assert_eq!(
            err.kind,
            dicta_core::ErrorKind::InvalidInput,
            "{bad:?}: {err}"
        );
    }
    let mut s = open(InputOptions {
        language: Some("en".into()),
        ..Default::default()
    })
    .unwrap();
    let mut events = Vec::new();
    for b in speech(JFK).chunks(16_000) {
        events.extend(s.feed(b).unwrap());
    }
    events.extend(s.end().unwrap());
    assert!(finals(&events).to_lowercase().contains("country"));
}
