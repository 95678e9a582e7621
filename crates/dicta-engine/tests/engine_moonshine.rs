//! The engine's Moonshine path on real speech: batched == alone, long recordings cut at pauses
//! into ≤ 20 s timed segments (base: at every pause), English-only option checks, broken and tiny inputs.

use std::path::PathBuf;
use std::sync::OnceLock;

use dicta_core::ErrorKind;
use dicta_engine::moonshine::{MAX_PIECE_SECONDS, MIN_PIECE_SECONDS, WIDE_PAUSE_AFTER_SECONDS};
use dicta_engine::whisper::{DecodeOptions, Task};
use dicta_engine::{Engine, EngineConfig, Input, ModelFamily};
use dicta_models::moonshine::is_moonshine_dir;

const SR: usize = 16_000;

/// `DICTA_TEST_MOONSHINE_DIR` (a failure when it names no model), else the default cache.
fn model_dir() -> Option<PathBuf> {
    model_dir_of("DICTA_TEST_MOONSHINE_DIR", "moonshine-tiny")
}

/// The folder `env` names (a failure when it holds no model), else `name` in the default cache.
fn model_dir_of(env: &str, name: &str) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(env).map(PathBuf::from) {
        assert!(
            is_moonshine_dir(&dir),
            "{env}={} holds no Moonshine model",
            dir.display()
        );
        return Some(dir);
    }
    let dir = PathBuf::from(std::env::var("HOME").unwrap_or_default())
        .join(".cache/dicta/models")
        .join(name);
    if is_moonshine_dir(&dir) {
        Some(dir)
    } else {
        eprintln!("SKIPPED: no {name} at {} (set {env})", dir.display());
        None
    }
}

fn engine(batch_size: usize) -> Option<Engine> {
    engine_at(&model_dir()?, batch_size)
}

fn engine_at(dir: &std::path::Path, batch_size: usize) -> Option<Engine> {
    Some(
        Engine::load(
            dir,
            EngineConfig {
                batch_size,
                ..EngineConfig::default()
            },
        )
        .expect("load a Moonshine model"),
    )
}

fn shared_engine() -> Option<&'static Engine> {
    static E: OnceLock<Option<Engine>> = OnceLock::new();
    E.get_or_init(|| engine(4)).as_ref()
}

fn data(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data")).join(rel)
}

fn samples(rel: &str) -> Vec<f32> {
    dicta_audio::decode::load_path(&data(rel)).unwrap()
}

fn greedy() -> DecodeOptions {
    DecodeOptions {
        beam_size: 1,
        ..DecodeOptions::default()
    }
}

const CLIPS: &[&str] = &[
    "openai_whisper/jfk.16k.wav",
    "pocketsphinx/cards_001.wav",
    "speechbrain/spk1_snt1.wav",
    "speechbrain/spk2_snt3.wav",
    "pocketsphinx/cards_004.wav",
];

#[test]
fn detected_and_batched_equals_alone() {
    let Some(e) = shared_engine() else { return };
    assert_eq!(e.family(), ModelFamily::Moonshine);
    let inputs: Vec<Input> = CLIPS
        .iter()
        .map(|c| Input::from_samples(*c, samples(c)))
        .collect();
    let together = e.transcribe_with(&inputs, &greedy());
    // `default` runs the stored 8-bit weights where the CPU has int8 kernels, and says so.
    let ct = if dicta_models::kernels::int8::int8_fast() {
        "int8"
    } else {
        "float32"
    };
    assert_eq!(together.stats.compute_type.as_deref(), Some(ct));
    let alone = engine(1).unwrap();
    for (i, input) in inputs.iter().enumerate() {
        let a = alone
            .transcribe_with(std::slice::from_ref(input), &greedy())
            .results
            .remove(0)
            .unwrap();
        let t = together.results[i].as_ref().unwrap();
        assert_eq!(t.text, a.text, "{}", CLIPS[i]);
        assert_eq!(t.segments, a.segments, "{}", CLIPS[i]);
        assert!(!t.text.is_empty(), "{}", CLIPS[i]);
        assert_eq!(t.id, CLIPS[i]);
    }
    let jfk = together.results[0].as_ref().unwrap();
    assert!(
        jfk.text
            .contains("ask not what your country can do for you"),
        "{}",
        jfk.text
    );
    assert_eq!(jfk.language.as_deref(), Some("en"));
}

#[test]
fn long_recordings_are_cut_at_pauses() {
    let Some(e) = shared_engine() else { return };
    let phrase = "ask not what your country can do for you";
    cut_at_pauses_into(e, CLIPS, (MIN_PIECE_SECONDS, MAX_PIECE_SECONDS), phrase);
}

/// Base ends a piece at the first pause once it is a second long (it drops utterances from
/// pieces that hold several): each clip becomes its own segment, every sentence is kept.
#[test]
fn base_ends_pieces_at_pauses() {
    let Some(dir) = model_dir_of("DICTA_TEST_MOONSHINE_BASE_DIR", "moonshine-base") else {
        return;
    };
    let e = engine_at(&dir, 4).unwrap();
    let phrase = "the child almost hurt the small dog";
    let t = cut_at_pauses_into(
        &e,
        CLIPS,
        (WIDE_PAUSE_AFTER_SECONDS, MAX_PIECE_SECONDS),
        phrase,
    );
    assert_eq!(t.segments.len(), 2 * CLIPS.len(), "{:?}", t.segments);
}

/// `clips` twice over, with 0.6 s of silence after each, are cut only in those pauses into pieces
/// of `min..=max` seconds (the last may be shorter), whose texts make the recording's and say
/// `phrase` (lower case, no punctuation) twice.
fn cut_at_pauses_into(
    e: &Engine,
    clips: &[&str],
    (min, max): (f32, f32),
    phrase: &str,
) -> dicta_core::Transcript {
    let mut long = Vec::new();
    let mut bounds = Vec::new();
    for _ in 0..2 {
        for c in clips {
            long.extend(samples(c));
            bounds.push(long.len());
            long.extend(vec![0.0; SR * 6 / 10]);
        }
    }
    let t = e
        .transcribe_with(&[Input::from_samples("long", long.clone())], &greedy())
        .results
        .remove(0)
        .unwrap();
    assert!((t.duration - long.len() as f64 / SR as f64).abs() < 1e-9);
    assert!(
        t.segments.len() >= 3,
        "{} segments: {:?}",
        t.segments.len(),
        t.segments
    );
    let mut prev_end = 0.0;
    for (i, s) in t.segments.iter().enumerate() {
        assert!(
            s.start >= prev_end - 1e-9,
            "segments overlap: {:?}",
            t.segments
        );
        assert!(
            s.end - s.start <= f64::from(max) + 1e-9,
            "segment {i} too long: {s:?}"
        );
        if i + 1 < t.segments.len() {
            assert!(
                s.end - s.start >= f64::from(min) - 1e-9,
                "segment {i} too short: {s:?}"
            );
            // Each cut lies in one of the silences.
            let cut = (s.end * SR as f64) as usize;
            assert!(
                bounds.iter().any(|&b| cut >= b && cut <= b + SR * 6 / 10),
                "cut at {cut} is not in a pause"
            );
        }
        prev_end = s.end;
    }
    let plain: String = t
        .text
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || c.is_whitespace())
        .collect();
    assert_eq!(plain.matches(phrase).count(), 2, "{}", t.text);
    assert_eq!(
        t.text,
        t.segments
            .iter()
            .map(|s| s.text.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );
    t
}

#[test]
fn english_only_options_are_refused_per_input() {
    let Some(e) = shared_engine() else { return };
    let inputs = [Input::from_samples("a", samples(CLIPS[1]))];
    for (opts, what) in [
        (
            DecodeOptions {
                language: Some("de".into()),
                ..greedy()
            },
            "English-only",
        ),
        (
            DecodeOptions {
                task: Task::Translate,
                ..greedy()
            },
            "translate",
        ),
        (
            DecodeOptions {
                word_timestamps: true,
                ..greedy()
            },
            "word timestamps",
        ),
        (
            DecodeOptions {
                clip_timestamps: vec![0.5, 1.5],
                ..greedy()
            },
            "clip_timestamps",
        ),
        (
            DecodeOptions {
                prefix: Some("So".into()),
                ..greedy()
            },
            "prefix",
        ),
        (
            DecodeOptions {
                token_logprobs: true,
                ..greedy()
            },
            "token_logprobs",
        ),
    ] {
        let err = e
            .transcribe_with(&inputs, &opts)
            .results
            .remove(0)
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidInput);
        assert!(err.message.contains(what), "{err}");
    }
    let ok = e.transcribe_with(
        &inputs,
        &DecodeOptions {
            language: Some("en".into()),
            ..greedy()
        },
    );
    assert!(ok.results[0].is_ok());
}

#[test]
fn broken_and_tiny_inputs_fail_or_pass_alone() {
    let Some(e) = shared_engine() else { return };
    let inputs = vec![
        Input::from_samples("good", samples(CLIPS[2])),
        Input {
            id: "broken".into(),
            audio: "broken".into(),
            source: dicta_engine::AudioSource::Bytes(b"not audio".to_vec()),
        },
        Input::from_samples("empty", Vec::new()),
        Input::from_samples("tiny", vec![0.01; 200]),
    ];
    let out = e.transcribe_with(&inputs, &greedy());
    assert!(out.results[0]
        .as_ref()
        .unwrap()
        .text
        .to_lowercase()
        .contains("dog"));
    assert!(out.results[1].is_err());
    // As for every family: no samples is a typed error of that input alone.
    assert_eq!(
        out.results[2].as_ref().unwrap_err().kind,
        ErrorKind::EmptyInput
    );
    assert!(out.results[3].is_ok());
}
