//! Language detection of multilingual Whisper models, in parity with transformers.
//!
//! No multilingual weights can be fetched where the tests run, so the fixture is a tiny randomly
//! initialised multilingual Whisper (Hugging Face folder, 51865-token vocabulary, 99 language
//! tokens) made by fixtures/whisper_multilingual/make_fixture.py, which also records
//! transformers' logits of the language tokens after `<|startoftranscript|>` on four real
//! recordings. The random model picks a different language for each recording with a clear
//! margin, so a wrong token id, language order, window or batch row changes the answer.

mod whisper_common;

use candle_core::{Device, Tensor};
use dicta_audio::mel::{LogMel, MelConfig};
use dicta_core::ErrorKind;
use dicta_engine::whisper::{DecodeOptions, LongFormMode, WhisperTranscriber};
use dicta_models::whisper::Whisper;
use serde_json::Value;
use whisper_common::load_wav;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/whisper_multilingual"
);

fn reference() -> Value {
    let s = std::fs::read_to_string(format!("{FIXTURE}/reference.json")).expect("reference.json");
    serde_json::from_str(&s).unwrap()
}

fn load_model() -> Whisper {
    Whisper::load(format!("{FIXTURE}/model").as_ref(), &Device::Cpu).expect("load fixture model")
}

fn recordings(r: &Value) -> &Vec<Value> {
    r["recordings"].as_array().unwrap()
}

fn audios(r: &Value) -> Vec<Vec<f32>> {
    recordings(r)
        .iter()
        .map(|it| load_wav(it["wav"].as_str().unwrap()))
        .collect()
}

/// Few tokens per window: only the language is under test, and the random model's text is noise.
fn opts(language: Option<&str>) -> DecodeOptions {
    DecodeOptions {
        language: language.map(String::from),
        without_timestamps: true,
        condition_on_previous_text: false,
        max_new_tokens: Some(4),
        ..DecodeOptions::greedy()
    }
}

#[test]
fn config_has_the_multilingual_layout() {
    let model = load_model();
    let c = &model.config;
    let r = reference();
    assert!(c.is_multilingual);
    assert_eq!(c.n_vocab, 51865);
    let sp = &c.special;
    assert_eq!(
        (
            sp.eot,
            sp.sot,
            sp.translate,
            sp.transcribe,
            sp.sot_lm,
            sp.sot_prev
        ),
        (50257, 50258, 50358, 50359, 50360, 50361)
    );
    assert_eq!(
        (sp.no_speech, sp.no_timestamps, sp.timestamp_begin),
        (50362, 50363, 50364)
    );
    let want: Vec<(String, u32)> = r["languages"]
        .as_array()
        .unwrap()
        .iter()
        .zip(50259u32..)
        .map(|(l, id)| (l.as_str().unwrap().to_string(), id))
        .collect();
    assert_eq!(want.len(), 99);
    assert_eq!(c.lang_ids, want);
}

/// Dicta's encoder + first decoder step on Dicta's log-mel give transformers' language logits.
#[test]
fn language_logits_match_transformers() {
    let model = load_model();
    let r = reference();
    let mel = LogMel::new(MelConfig::whisper(80)).unwrap();
    let frames = model.config.n_frames();
    for (it, audio) in recordings(&r).iter().zip(audios(&r)) {
        // faster-whisper's detection window: the first 3000 frames of the whole recording's
        // log-mel (every frame, the padding's last one included), zero-filled to 3000.
        let window = mel.compute(&audio, 160).window(0, frames);
        let x = Tensor::from_vec(window, (1, 80, frames), &Device::Cpu).unwrap();
        let enc = model.encode(&x).unwrap();
        let mut cache = model.new_cache(&enc).unwrap();
        let sot = Tensor::from_vec(vec![model.config.special.sot], (1, 1), &Device::Cpu).unwrap();
        let logits: Vec<f32> = model
            .decode_last(&sot, &mut cache)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let want: Vec<f64> = it["lang_logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        // Relative to 1 + |x|: the logits are O(1) (±3).
        let mut worst = 0.0f64;
        for (&(_, id), w) in model.config.lang_ids.iter().zip(&want) {
            let got = logits[id as usize] as f64;
            worst = worst.max((got - w).abs() / (1.0 + w.abs()));
        }
        eprintln!("{}: worst relative logit error {worst:.2e}", it["id"]);
        assert!(
            worst < 1e-4,
            "{}: language logits differ ({worst:.2e})",
            it["id"]
        );
    }
}

/// The engine's detection (no language option) picks transformers' language for each recording,
/// whether the recordings share one batch or go one at a time.
#[test]
fn detected_language_matches_transformers() {
    let model = load_model();
    let r = reference();
    let audios = audios(&r);
    let views: Vec<&[f32]> = audios.iter().map(|a| a.as_slice()).collect();
    let want: Vec<&str> = recordings(&r)
        .iter()
        .map(|it| it["language"].as_str().unwrap())
        .collect();
    let tr = WhisperTranscriber::new(&model).unwrap();
    for batch in [4, 1] {
        let out = tr
            .transcribe(&views, &opts(None), LongFormMode::Sequential, batch)
            .unwrap();
        let got: Vec<String> = out
            .transcripts
            .iter()
            .map(|t| t.as_ref().unwrap().language.clone().unwrap())
            .collect();
        assert_eq!(got, want, "batch size {batch}");
    }
}

#[test]
fn forced_language_is_kept() {
    let model = load_model();
    let r = reference();
    let audios = audios(&r);
    let views: Vec<&[f32]> = audios.iter().map(|a| a.as_slice()).collect();
    let tr = WhisperTranscriber::new(&model).unwrap();
    let out = tr
        .transcribe(&views, &opts(Some("fr")), LongFormMode::Sequential, 4)
        .unwrap();
    for t in &out.transcripts {
        assert_eq!(t.as_ref().unwrap().language.as_deref(), Some("fr"));
    }
}

#[test]
fn unknown_language_is_invalid_input() {
    let model = load_model();
    let tr = WhisperTranscriber::new(&model).unwrap();
    let audio = vec![0.0f32; 16_000];
    let err = tr
        .transcribe(&[&audio], &opts(Some("xx")), LongFormMode::Sequential, 1)
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidInput);
    assert!(err.message.contains("xx"), "{}", err.message);
    assert!(
        err.message.contains("knows: ") && err.message.contains("fr"),
        "the valid codes are listed: {}",
        err.message
    );
}

/// tiny.en (the real English-only model): "en" or nothing works; any other language, or
/// translation, is refused instead of silently transcribing English.
#[test]
fn english_only_models_refuse_other_languages_and_translation() {
    let Some(model) = whisper_common::load_model() else {
        return;
    };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let audio = vec![0.0f32; 16_000];
    for ok in [None, Some("en")] {
        tr.transcribe(&[&audio], &opts(ok), LongFormMode::Sequential, 1)
            .unwrap();
    }
    for bad in ["fr", "xx", "english"] {
        let err = tr
            .transcribe(&[&audio], &opts(Some(bad)), LongFormMode::Sequential, 1)
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidInput, "{bad}");
        assert!(
            err.message.contains("English-only") && err.message.contains(bad),
            "{}",
            err.message
        );
    }
    let translate = DecodeOptions {
        task: dicta_engine::whisper::Task::Translate,
        ..opts(None)
    };
    let err = tr
        .transcribe(&[&audio], &translate, LongFormMode::Sequential, 1)
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidInput);
    assert!(err.message.contains("cannot translate"), "{}", err.message);
}

/// A multilingual folder without generation_config.json (which the loader accepts) has no
/// language table: detection is then a typed error, not a panic, and forcing a code is invalid.
#[test]
fn missing_language_table_is_an_error() {
    let dir = std::env::temp_dir().join(format!("dicta-whisper-language-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(format!("{FIXTURE}/model/{f}"), dir.join(f)).unwrap();
    }
    let model = Whisper::load(&dir, &Device::Cpu);
    std::fs::remove_dir_all(&dir).unwrap();
    let model = model.expect("load without generation_config.json");
    assert!(model.config.is_multilingual && model.config.lang_ids.is_empty());
    let tr = WhisperTranscriber::new(&model).unwrap();
    let audio = vec![0.0f32; 16_000];
    let err = tr
        .transcribe(&[&audio], &opts(None), LongFormMode::Sequential, 1)
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::ModelLoad, "{err}");
    let err = tr
        .transcribe(&[&audio], &opts(Some("en")), LongFormMode::Sequential, 1)
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidInput, "{err}");
}
