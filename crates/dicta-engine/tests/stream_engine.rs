//! `Engine::open_session`: streaming on the engine's own loaded model gives exactly what a
//! `StreamEngine` over the same weights gives, all sessions share one lazily started worker, and
//! slots are freed by dropping sessions.
//!
//! Models: the tiny random-weight wav2vec2 fixture (CTC) and Whisper tiny.en
//! ($DICTA_TEST_MODEL_DIR or /work/models/tiny.en-ct2; the Whisper tests skip without it).

use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use candle_core::Device;
use dicta_core::ErrorKind;
use dicta_engine::stream::{
    CtcStreamDecoder, EndpointOptions, Event, EventKind, Session, SessionOptions, StreamConfig,
    StreamEngine, WorkerConfig,
};
use dicta_engine::{Engine, EngineConfig, Input};
use dicta_models::ctc::load_ctc_model;
use dicta_models::whisper::{LoadOptions, Whisper};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data");

mod whisper_common;
const JFK: &str = "openai_whisper/jfk.16k.wav";

fn ctc_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dicta-models/tests/fixtures/wav2vec2/layer")
}

fn whisper_dir() -> Option<PathBuf> {
    whisper_common::model_dir()
}

fn speech(rel: &str) -> Vec<f32> {
    dicta_audio::decode::load_path(&PathBuf::from(DATA).join(rel)).expect("shared speech data")
}

fn stream_config(max_batch: usize, max_wait_ms: u64, step: f32) -> StreamConfig {
    StreamConfig {
        worker: WorkerConfig {
            max_batch,
            max_wait: Duration::from_millis(max_wait_ms),
        },
        step_seconds: Some(step),
        left_context_seconds: 0.64,
        whisper_trim_seconds: 10.0,
        ..StreamConfig::default()
    }
}

fn engine_with(dir: &std::path::Path, stream: StreamConfig) -> Engine {
    Engine::load(
        dir,
        EngineConfig {
            stream,
            ..EngineConfig::default()
        },
    )
    .expect("load engine")
}

fn no_endpoint() -> SessionOptions {
    SessionOptions {
        endpoint: EndpointOptions::none(),
        ..Default::default()
    }
}

fn run(mut s: Session, audio: &[f32], block: usize) -> Vec<Event> {
    let mut events = Vec::new();
    for b in audio.chunks(block) {
        events.extend(s.feed(b).unwrap());
    }
    events.extend(s.end().unwrap());
    events
}

fn finals(events: &[Event]) -> String {
    let f: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == EventKind::Final)
        .map(|e| e.text.as_str())
        .collect();
    f.join(" ")
}

#[test]
fn ctc_engine_session_equals_stream_engine() {
    let cfg = stream_config(8, 5, 0.32);
    let engine = engine_with(&ctc_fixture(), cfg.clone());
    assert!(!engine.stream_started());
    let model = Arc::from(load_ctc_model(&ctc_fixture(), &Device::Cpu).unwrap());
    let reference = StreamEngine::ctc(model, CtcStreamDecoder::Greedy, cfg).unwrap();
    let audio = speech(JFK);
    let opts = SessionOptions {
        endpoint: EndpointOptions {
            min_trailing_silence: Some(0.3),
            max_utterance: Some(4.0),
        },
        ..Default::default()
    };
    let got = run(engine.open_session(opts.clone()).unwrap(), &audio, 1600);
    let want = run(reference.open_session(opts).unwrap(), &audio, 1600);
    assert!(!finals(&want).is_empty(), "the fixture must say something");
    assert_eq!(got, want);
    assert!(engine.stream_started());
    let stats = engine.stream_stats().unwrap();
    assert_eq!(stats.calls, reference.stats().calls);
}

#[test]
fn whisper_engine_session_equals_stream_engine() {
    let Some(dir) = whisper_dir() else { return };
    let cfg = stream_config(4, 5, 1.0);
    let engine = engine_with(&dir, cfg);
    // The engine's default compute type, so both sides run the same numbers.
    let model = Arc::new(Whisper::load_with(&dir, &Device::Cpu, &LoadOptions::default()).unwrap());
    let reference = StreamEngine::whisper(
        model,
        engine.stream_decode_options(),
        engine.stream_config(),
    )
    .unwrap();
    let audio = speech(JFK);
    let got = run(
        engine.open_session(SessionOptions::default()).unwrap(),
        &audio,
        1600,
    );
    let want = run(
        reference.open_session(SessionOptions::default()).unwrap(),
        &audio,
        1600,
    );
    eprintln!("streamed: {}", finals(&got));
    assert!(finals(&want)
        .to_lowercase()
        .contains("ask not what your country"));
    assert!(got.iter().any(|e| e.kind == EventKind::Partial));
    assert_eq!(got, want);
}

#[test]
fn a_hundred_sessions_share_one_worker() {
    // A long wait: every batch closes only when full (or when all open sessions are queued), so
    // the number of calls does not depend on thread timing.
    let engine = engine_with(&ctc_fixture(), stream_config(16, 60_000, 0.32));
    let sessions: Vec<Session> = (0..100)
        .map(|_| engine.open_session(no_endpoint()).unwrap())
        .collect();
    assert_eq!(engine.open_stream_sessions(), 100);
    assert_eq!(
        engine.stream_stats().unwrap().calls,
        0,
        "opening a session runs no model call"
    );
    let audio = speech(JFK);
    // 0.32 s step + lookahead completes exactly one chunk per session.
    let n = 16_000;
    let barrier = Barrier::new(sessions.len());
    std::thread::scope(|scope| {
        for (i, mut s) in sessions.into_iter().enumerate() {
            let (barrier, block) = (&barrier, &audio[i * 1000..i * 1000 + n]);
            scope.spawn(move || {
                barrier.wait();
                s.feed(block).unwrap();
            });
        }
    });
    let stats = engine.stream_stats().unwrap();
    let chunks_each = stats.rows / 100;
    assert!(
        chunks_each >= 1 && stats.rows.is_multiple_of(100),
        "{stats:?}"
    );
    assert!(stats.batch_sizes.iter().all(|&b| b <= 16));
    assert!(
        stats.calls < stats.rows,
        "the sessions' chunks must share calls: {stats:?}"
    );
    assert_eq!(
        engine.open_stream_sessions(),
        0,
        "dropped sessions free their slots"
    );
}

#[test]
fn dropping_sessions_frees_slots() {
    let cfg = StreamConfig {
        max_sessions: 3,
        ..stream_config(4, 5, 0.32)
    };
    let engine = engine_with(&ctc_fixture(), cfg);
    let mut open: Vec<Session> = (0..3)
        .map(|_| engine.open_session(no_endpoint()).unwrap())
        .collect();
    let err = engine.open_session(no_endpoint()).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Overloaded);
    assert!(err.message.contains('3'), "{}", err.message);
    open.pop();
    assert_eq!(engine.open_stream_sessions(), 2);
    open.push(engine.open_session(no_endpoint()).unwrap());
    assert_eq!(engine.open_stream_sessions(), 3);
    drop(open);
    assert_eq!(engine.open_stream_sessions(), 0);
}

#[test]
fn bad_session_options_are_refused() {
    let engine = engine_with(&ctc_fixture(), stream_config(4, 5, 0.32));
    let bad = SessionOptions {
        endpoint: EndpointOptions {
            min_trailing_silence: Some(-1.0),
            max_utterance: None,
        },
        ..Default::default()
    };
    assert_eq!(
        engine.open_session(bad).unwrap_err().kind,
        ErrorKind::InvalidInput
    );
}

#[test]
fn transcribing_starts_no_stream_worker() {
    let engine = engine_with(&ctc_fixture(), stream_config(4, 5, 0.32));
    let out = engine.transcribe(&[Input::from_samples("jfk", speech(JFK))]);
    assert!(out.results[0].is_ok());
    assert!(!engine.stream_started());
    assert!(engine.stream_stats().is_none());
    assert_eq!(engine.open_stream_sessions(), 0);
}
