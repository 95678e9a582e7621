//! The engine's offline pipeline on Whisper (tiny.en): audio decoding runs ahead of the model
//! and inputs reach the transcriber in groups of `lookahead_windows` windows. Grouping must
//! change no transcript (batched == alone), results keep input order, and a broken input in the
//! middle fails alone. Skipped (with a note) where the tiny.en weights are not set up.

use std::path::PathBuf;

use dicta_core::ErrorKind;
use dicta_engine::whisper::{DecodeOptions, LongFormMode};
use dicta_engine::{Engine, EngineConfig, Input};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data");

/// $DICTA_TEST_MODEL_DIR (which must then hold a model) or the development copy; `None` skips.
fn model_dir() -> Option<PathBuf> {
    let has_model = |d: &PathBuf| d.join("model.bin").is_file() || d.join("config.json").is_file();
    if let Some(dir) = std::env::var_os("DICTA_TEST_MODEL_DIR").map(PathBuf::from) {
        assert!(has_model(&dir), "DICTA_TEST_MODEL_DIR={}", dir.display());
        return Some(dir);
    }
    let dir = PathBuf::from("/work/models/tiny.en-ct2");
    if has_model(&dir) {
        Some(dir)
    } else {
        eprintln!(
            "note: no Whisper model at {} (set DICTA_TEST_MODEL_DIR); skipping",
            dir.display()
        );
        None
    }
}

fn wav(rel: &str) -> PathBuf {
    PathBuf::from(DATA).join(rel)
}

fn samples(rel: &str) -> Vec<f32> {
    dicta_audio::decode::load_path(&wav(rel)).unwrap()
}

#[test]
fn look_ahead_groups_change_no_transcript_and_keep_input_order() {
    let Some(dir) = model_dir() else { return };
    // A 41 s recording (two windows, sequential seeking) among short ones, a file input, an
    // empty input and a missing file in the middle.
    let mut long = Vec::new();
    for rel in [
        "coqui_tts/LJ001-0001.16k.wav",
        "coqui_tts/LJ001-0002.16k.wav",
        "coqui_tts/LJ001-0004.16k.wav",
        "coqui_tts/LJ001-0008.16k.wav",
        "openai_whisper/jfk.16k.wav",
        "coqui_tts/LJ001-0011.16k.wav",
    ]
    .iter()
    .cycle()
    {
        if long.len() >= 41 * 16_000 {
            break;
        }
        long.extend(samples(rel));
        long.extend(std::iter::repeat_n(0.0f32, 8000));
    }
    long.truncate(41 * 16_000);
    assert_eq!(long.len(), 41 * 16_000);
    let inputs = vec![
        Input::from_path(wav("openai_whisper/jfk.16k.wav")),
        Input::from_samples("cards", samples("pocketsphinx/cards_001.wav")),
        Input::from_path("/nonexistent/dicta-lookahead.wav"),
        Input::from_samples("long", long),
        Input::from_samples("empty", Vec::new()),
        Input::from_samples("spk1", samples("speechbrain/spk1_snt1.wav")),
        Input::from_samples("lj2", samples("coqui_tts/LJ001-0002.16k.wav")),
    ];
    let run = |lookahead: Option<usize>| {
        let config = EngineConfig {
            batch_size: 3,
            long_form: LongFormMode::Sequential,
            decode: DecodeOptions {
                language: Some("en".into()),
                ..DecodeOptions::greedy()
            },
            lookahead_windows: lookahead,
            threads: Some(2),
            ..EngineConfig::default()
        };
        Engine::load(&dir, config).unwrap().transcribe(&inputs)
    };
    let all = run(Some(usize::MAX));
    assert!(all.results[2].is_err());
    assert_eq!(
        all.results[4].as_ref().unwrap_err().kind,
        ErrorKind::EmptyInput
    );
    let jfk = all.results[0].as_ref().unwrap();
    assert!(
        jfk.text.contains("ask not what your country"),
        "{}",
        jfk.text
    );
    assert!(all.results[3].as_ref().unwrap().segments.len() > 1);
    // Look-ahead 1: every input is its own group (model calls of one recording each).
    let one = run(Some(1));
    for (k, (a, b)) in one.results.iter().zip(&all.results).enumerate() {
        match (a, b) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.id, inputs[k].id, "input order");
                assert_eq!(a.text, b.text, "input {k}");
                assert_eq!(a.segments.len(), b.segments.len(), "input {k}");
            }
            (Err(a), Err(b)) => assert_eq!(a.kind, b.kind),
            _ => panic!("input {k}: {a:?} vs {b:?}"),
        }
    }
    assert!(one.stats.batch_sizes.iter().all(|&b| b == 1));
    assert!(all.stats.batch_sizes.iter().any(|&b| b > 1));
    assert_eq!(one.stats.windows, all.stats.windows);
    assert!((one.stats.audio_seconds - all.stats.audio_seconds).abs() < 1e-9);
    assert!(one.stats.decode_seconds > 0.0 && one.stats.model_seconds > 0.0);
    // Whisper's stages are reported apart: log-mel, and encoder frames of real audio (50 per
    // second in each window; the windows overlap, so at least the audio's own) within the
    // windows' padded 1500 each.
    for out in [&one, &all] {
        let s = &out.stats;
        assert!(s.features_seconds > 0.0, "{s:?}");
        assert_eq!(s.padded_frames, s.windows * 1500, "{s:?}");
        assert!(s.frames <= s.padded_frames, "{s:?}");
        assert!(
            s.frames as f64 >= s.audio_seconds * 50.0 - 2.0 * s.windows as f64,
            "{s:?}"
        );
    }
    assert_eq!(one.stats.frames, all.stats.frames);
}

/// Several threads share one engine that has its own pool (`threads`), as Python threads or the
/// CLI do: every call finishes (none waits for a turn of the model on a pool worker that holds
/// the turn further down its stack) and gets the text it gets alone.
#[test]
fn concurrent_calls_on_an_engine_with_its_own_pool_finish_and_agree() {
    let Some(dir) = model_dir() else { return };
    let config = EngineConfig {
        batch_size: 2,
        decode: DecodeOptions {
            language: Some("en".into()),
            ..DecodeOptions::greedy()
        },
        threads: Some(2),
        ..EngineConfig::default()
    };
    let engine = std::sync::Arc::new(Engine::load(&dir, config).unwrap());
    let inputs = vec![
        Input::from_path(wav("openai_whisper/jfk.16k.wav")),
        Input::from_path(wav("coqui_tts/LJ001-0002.16k.wav")),
        Input::from_path(wav("coqui_tts/LJ001-0004.16k.wav")),
    ];
    let alone: Vec<String> = engine
        .transcribe(&inputs)
        .results
        .into_iter()
        .map(|r| r.unwrap().text)
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    for caller in 0..4 {
        let (engine, inputs, tx) = (engine.clone(), inputs.clone(), tx.clone());
        std::thread::spawn(move || {
            for _ in 0..2 {
                let out = engine.transcribe(&inputs);
                let texts: Vec<String> = out.results.into_iter().map(|r| r.unwrap().text).collect();
                tx.send((caller, texts)).unwrap();
            }
        });
    }
    for _ in 0..8 {
        let (caller, texts) = rx
            .recv_timeout(std::time::Duration::from_secs(300))
            .expect("a concurrent call did not finish within 300 s (deadlock?)");
        assert_eq!(texts, alone, "caller {caller}");
    }
}
