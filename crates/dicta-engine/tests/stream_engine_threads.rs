//! The engine's stream worker is a real OS thread started by the first session only: counted
//! by name in /proc/self/task (Linux), in a test binary of its own so no other test's workers
//! are counted.

use std::path::PathBuf;

use dicta_engine::stream::{EndpointOptions, SessionOptions};
use dicta_engine::{Engine, EngineConfig, Input};

/// Threads of this process whose name starts with `prefix` (names are cut to 15 bytes).
fn threads_named(prefix: &str) -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end().starts_with(prefix))
        .count()
}

#[test]
fn one_worker_thread_started_by_the_first_session() {
    if !PathBuf::from("/proc/self/task").is_dir() {
        eprintln!("note: no /proc/self/task; skipping");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../dicta-models/tests/fixtures/wav2vec2/layer");
    let engine = Engine::load(&dir, EngineConfig::default()).unwrap();
    let audio = dicta_audio::decode::load_path(&PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/openai_whisper/jfk.16k.wav"
    )))
    .unwrap();
    assert!(engine
        .transcribe(&[Input::from_samples("jfk", audio.clone())])
        .results[0]
        .is_ok());
    assert_eq!(
        threads_named("dicta-stream"),
        0,
        "transcribe starts no worker"
    );

    let opts = SessionOptions {
        endpoint: EndpointOptions::none(),
        ..Default::default()
    };
    let mut sessions: Vec<_> = (0..100)
        .map(|_| engine.open_session(opts.clone()).unwrap())
        .collect();
    assert_eq!(threads_named("dicta-stream"), 1, "100 sessions, one worker");
    for s in sessions.iter_mut().take(3) {
        s.feed(&audio[..32_000]).unwrap();
        s.end().unwrap();
    }
    drop(sessions);
    assert_eq!(
        threads_named("dicta-stream"),
        1,
        "the worker outlives its sessions"
    );
    let again = engine.open_session(opts).unwrap();
    assert_eq!(threads_named("dicta-stream"), 1, "and serves new ones");
    drop(again);
    drop(engine);
    // The join returns as the thread exits; the kernel may list it a moment longer.
    let mut left = threads_named("dicta-stream");
    for _ in 0..100 {
        if left == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        left = threads_named("dicta-stream");
    }
    assert_eq!(left, 0, "dropping the engine stops it");
}
