//! Multilingual Whisper base (`dicta models fetch base`, CTranslate2 fp16 weights) against
//! faster-whisper on the same folder: detected language, its probability, transcripts and
//! translations of a few short clips in five languages (fixtures/whisper_base: 16 kHz WAVs and
//! faster-whisper's answers, made by tools/multilingual_parity/compare.py --make-fixture, which
//! also runs the whole comparison). Skipped without the model, unless DICTA_TEST_BASE_DIR names
//! its folder (scripts/test.sh sets it; then a missing model fails).

mod whisper_common;

use std::path::PathBuf;

use candle_core::Device;
use dicta_engine::whisper::{DecodeOptions, LongFormMode, Task, WhisperTranscriber};
use dicta_models::whisper::{ComputeType, LoadOptions, Whisper};
use serde_json::Value;
use whisper_common::fetched_model;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/whisper_base");

fn reference() -> Vec<Value> {
    let s = std::fs::read_to_string(format!("{FIXTURE}/reference.json")).expect("reference.json");
    let v: Value = serde_json::from_str(&s).unwrap();
    v["items"].as_array().unwrap().clone()
}

fn audios(items: &[Value]) -> Vec<Vec<f32>> {
    items
        .iter()
        .map(|it| {
            let p = PathBuf::from(FIXTURE).join(it["wav"].as_str().unwrap());
            dicta_audio::decode::load_path(&p).expect("decode fixture wav")
        })
        .collect()
}

/// faster-whisper's settings of the reference: greedy, temperature 0 only, no previous text.
fn opts(task: Task) -> DecodeOptions {
    DecodeOptions {
        temperatures: vec![0.0],
        condition_on_previous_text: false,
        task,
        ..DecodeOptions::greedy()
    }
}

fn load(compute_type: ComputeType) -> Option<Whisper> {
    let dir = fetched_model("base", "DICTA_TEST_BASE_DIR", "model.bin")?;
    let o = LoadOptions { compute_type };
    Some(Whisper::load_with(&dir, &Device::Cpu, &o).expect("load base"))
}

#[test]
fn base_detects_transcribes_and_translates_as_faster_whisper() {
    let Some(model) = load(ComputeType::Float32) else {
        return;
    };
    let c = &model.config;
    assert!(c.is_multilingual);
    assert_eq!((c.n_vocab, c.n_mels, c.lang_ids.len()), (51865, 80, 99));
    let sp = &c.special;
    assert_eq!(
        (
            sp.eot,
            sp.sot,
            sp.translate,
            sp.transcribe,
            sp.no_timestamps
        ),
        (50257, 50258, 50358, 50359, 50363)
    );
    assert_eq!(sp.timestamp_begin, 50364);
    assert_eq!(
        (c.lang_id("en"), c.lang_id("su")),
        (Some(50259), Some(50357))
    );

    let items = reference();
    let audio = audios(&items);
    let views: Vec<&[f32]> = audio.iter().map(|a| a.as_slice()).collect();
    let tr = WhisperTranscriber::new(&model).unwrap();
    for (task, key) in [
        (Task::Transcribe, "transcript"),
        (Task::Translate, "translation"),
    ] {
        let out = tr
            .transcribe(&views, &opts(task), LongFormMode::Sequential, 8)
            .unwrap();
        for (it, got) in items.iter().zip(&out.transcripts) {
            let got = got.as_ref().unwrap();
            let id = it["id"].as_str().unwrap();
            assert_eq!(got.language.as_deref(), it["language"].as_str(), "{id}");
            let p = got
                .language_probability
                .expect("detected language has a probability");
            let want = it["language_probability"].as_f64().unwrap();
            assert!(
                (f64::from(p) - want).abs() < 1e-3,
                "{id}: probability {p} vs {want}"
            );
            assert_eq!(got.text, it[key].as_str().unwrap(), "{id} {key}");
        }
    }

    // A language given is used as is, without a probability.
    let o = DecodeOptions {
        language: Some("de".into()),
        ..opts(Task::Transcribe)
    };
    let out = tr
        .transcribe(&views[..1], &o, LongFormMode::Sequential, 8)
        .unwrap();
    let t = out.transcripts[0].as_ref().unwrap();
    assert_eq!(
        (t.language.as_deref(), t.language_probability),
        (Some("de"), None)
    );
    // An unknown code is refused, listing the model's codes.
    let o = DecodeOptions {
        language: Some("xx".into()),
        ..opts(Task::Transcribe)
    };
    let e = tr
        .transcribe(&views[..1], &o, LongFormMode::Sequential, 8)
        .unwrap_err();
    assert!(
        e.message.contains("\"xx\"") && e.message.contains("de, es, ru"),
        "{}",
        e.message
    );
}

/// faster-whisper's `language_detection_segments` / `language_detection_threshold`
/// (fixtures/whisper_base/language_reference.json, made by make_language_reference.py): clips
/// each padded to one 30 s window; detection stops at the first window above the threshold,
/// else the language most windows chose wins, with its highest probability.
#[test]
fn language_detection_over_several_windows_matches_faster_whisper() {
    let Some(model) = load(ComputeType::Float32) else {
        return;
    };
    let s = std::fs::read_to_string(format!("{FIXTURE}/language_reference.json")).unwrap();
    let refs: Value = serde_json::from_str(&s).unwrap();
    let tr = WhisperTranscriber::new(&model).unwrap();
    let cases = refs["cases"].as_array().unwrap();
    let languages: Vec<&str> = cases
        .iter()
        .map(|c| c["language"].as_str().unwrap())
        .collect();
    // The options move faster-whisper's answer (the first two cases differ in segments only).
    assert_ne!(languages[0], languages[1]);
    for case in cases {
        let mut audio = Vec::new();
        for clip in case["clips"].as_array().unwrap() {
            let p = PathBuf::from(FIXTURE).join(clip.as_str().unwrap());
            let mut a = dicta_audio::decode::load_path(&p).expect("decode fixture wav");
            a.resize(30 * 16_000, 0.0);
            audio.extend(a);
        }
        let o = DecodeOptions {
            language_detection_segments: case["language_detection_segments"].as_u64().unwrap()
                as usize,
            language_detection_threshold: case["language_detection_threshold"].as_f64().unwrap()
                as f32,
            max_new_tokens: Some(1),
            ..opts(Task::Transcribe)
        };
        let out = tr
            .transcribe(&[audio.as_slice()], &o, LongFormMode::Sequential, 8)
            .unwrap();
        let t = out.transcripts[0].as_ref().unwrap();
        let p = f64::from(t.language_probability.unwrap());
        let want = case["language_probability"].as_f64().unwrap();
        assert_eq!(t.language.as_deref(), case["language"].as_str(), "{case}");
        assert!((p - want).abs() < 1e-3, "{case}: probability {p}");
        // faster-whisper's `all_language_probs`: the last window read, most likely first (in
        // the last case that window is the features' padding, and says "en").
        let all = t.all_language_probs.as_ref().expect("detected");
        assert_eq!(all.len(), model.config.lang_ids.len());
        let total: f32 = all.iter().map(|(_, p)| p).sum();
        assert!((total - 1.0).abs() < 1e-3, "{total}");
        assert!(all.windows(2).all(|w| w[0].1 >= w[1].1));
        for (k, want) in case["all_language_probs"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            let (code, p) = &all[k];
            assert_eq!(Some(code.as_str()), want[0].as_str(), "{case}: rank {k}");
            let d = (f64::from(*p) - want[1].as_f64().unwrap()).abs();
            assert!(d < 2e-3, "{case}: rank {k}: {p}");
        }
    }
}

/// faster-whisper's `multilingual` on its own English-then-German test recording: each window
/// in its own detected language, token for token with faster-whisper, off and on (off, the
/// German half is mostly lost; on, it is transcribed in German).
#[test]
fn multilingual_decodes_each_window_in_its_language_as_faster_whisper() {
    let Some(model) = load(ComputeType::Float32) else {
        return;
    };
    let s = std::fs::read_to_string(format!("{FIXTURE}/language_reference.json")).unwrap();
    let refs: Value = serde_json::from_str(&s).unwrap();
    let m = &refs["multilingual"];
    let audio = whisper_common::load_wav(m["wav"].as_str().unwrap());
    let tr = WhisperTranscriber::new(&model).unwrap();
    assert_ne!(m["runs"]["off"]["text"], m["runs"]["on"]["text"]);
    for (run, on) in [("off", false), ("on", true)] {
        let o = DecodeOptions {
            multilingual: on,
            ..opts(Task::Transcribe)
        };
        let out = tr
            .transcribe(&[audio.as_slice()], &o, LongFormMode::Sequential, 8)
            .unwrap();
        let t = out.transcripts[0].as_ref().unwrap();
        let want = &m["runs"][run];
        assert_eq!(t.language.as_deref(), want["language"].as_str(), "{run}");
        let got: Vec<Vec<u32>> = t.segments.iter().map(|s| s.tokens.clone()).collect();
        assert_eq!(t.text, want["text"].as_str().unwrap(), "{run}");
        assert_eq!(got, whisper_common::tokens_of(want), "{run}");
    }
    // Word timestamps align each window in its own language.
    let o = DecodeOptions {
        multilingual: true,
        word_timestamps: true,
        ..opts(Task::Transcribe)
    };
    let out = tr
        .transcribe(&[audio.as_slice()], &o, LongFormMode::Sequential, 8)
        .unwrap();
    let t = out.transcripts[0].as_ref().unwrap();
    let last = t.segments.last().unwrap();
    assert!(
        !last.words.is_empty() && last.words.last().unwrap().end > 55.0,
        "{last:?}"
    );
}

/// The fp16 weights also load as int8 (where the CPU has int8 kernels: VNNI or AVX2; float32 otherwise): the
/// language is detected the same and the transcript stays close.
/// Hotwords and previous text of 223 tokens each, with a multilingual SOT sequence (3 tokens),
/// pass the 448-token context (where faster-whisper fails): the previous text gives way, and
/// every window still decodes.
#[test]
fn the_longest_hotwords_and_prompt_still_fit_the_context() {
    let Some(model) = load(ComputeType::Int8) else {
        return;
    };
    let items = reference();
    let audio = &audios(&items[..1])[0];
    let o = DecodeOptions {
        hotwords: Some("lighthouse ".repeat(400)),
        initial_prompt: Some("harbour ".repeat(400)),
        condition_on_previous_text: true,
        language: Some("en".into()),
        ..opts(Task::Transcribe)
    };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let out = tr
        .transcribe(&[audio], &o, LongFormMode::Sequential, 1)
        .unwrap();
    assert!(out.transcripts[0].is_ok(), "{:?}", out.transcripts[0]);
}

#[test]
fn base_fp16_weights_load_as_int8() {
    let Some(model) = load(ComputeType::Int8) else {
        return;
    };
    let items = reference();
    let audio = audios(&items[..2]);
    let views: Vec<&[f32]> = audio.iter().map(|a| a.as_slice()).collect();
    let tr = WhisperTranscriber::new(&model).unwrap();
    let out = tr
        .transcribe(&views, &opts(Task::Transcribe), LongFormMode::Sequential, 8)
        .unwrap();
    // int8 may word a passage differently from float32 and still be right ("en, två, tre"
    // against "1, 2, 3" for a spoken count), so a text passes when it is within a third of
    // the words of either the float32 reference or the human transcript (shared data).
    let human = human_transcripts();
    for (it, got) in items.iter().zip(&out.transcripts) {
        let got = got.as_ref().unwrap();
        assert_eq!(got.language.as_deref(), it["language"].as_str());
        let hyp = whisper_common::words(&got.text);
        let close = |reference: &str| {
            let want = whisper_common::words(reference);
            let (s, d, i) = whisper_common::edit_ops(&want, &hyp);
            (s + d + i) * 3 <= want.len()
        };
        let id = it["id"].as_str().unwrap();
        assert!(
            close(it["transcript"].as_str().unwrap()) || human.get(id).is_some_and(|h| close(h)),
            "{id}: int8 {:?} vs float32 reference {:?}, human {:?}",
            got.text,
            it["transcript"],
            human.get(id)
        );
    }
}

/// id → the human transcript, from the shared data's manifest (empty where it is absent).
fn human_transcripts() -> std::collections::HashMap<String, String> {
    whisper_common::manifest()
        .iter()
        .filter_map(|r| Some((r["id"].as_str()?.to_owned(), r["text"].as_str()?.to_owned())))
        .collect()
}

/// Inputs of one call with their own language or task (a streaming session's,
/// [`dicta_engine::whisper::InputOptions`]): each is transcribed as a call with those options
/// alone would, and the others still detect their language, in the same batch.
#[test]
fn inputs_with_their_own_language_decode_as_alone() {
    use dicta_engine::whisper::InputOptions;
    let Some(model) = load(ComputeType::Int8) else {
        return;
    };
    let items = reference();
    let clips = audios(&items);
    let views: Vec<&[f32]> = clips.iter().map(|a| a.as_slice()).collect();
    let t = WhisperTranscriber::new(&model).unwrap();
    let base = opts(Task::Transcribe);
    // Every third clip is forced into German, the next one translated; the rest detect their
    // language and transcribe.
    let inputs: Vec<InputOptions> = (0..views.len())
        .map(|i| InputOptions {
            language: (i % 3 == 0).then(|| "de".to_string()),
            task: (i % 3 == 1).then_some(Task::Translate),
            ..Default::default()
        })
        .collect();
    let drafts: Vec<&[u32]> = vec![&[]; views.len()];
    let together = t
        .transcribe_with_drafts(
            &views,
            &drafts,
            &inputs.iter().collect::<Vec<_>>(),
            &base,
            views.len(),
        )
        .unwrap();
    let (mut changed, mut translated) = (0, 0);
    for (i, (view, input)) in views.iter().zip(&inputs).enumerate() {
        let alone = t
            .transcribe(&[view], &input.apply(&base), LongFormMode::Sequential, 1)
            .unwrap();
        let (a, b) = (
            alone.transcripts[0].as_ref().unwrap(),
            together.transcripts[i].as_ref().unwrap(),
        );
        assert_eq!((&a.text, &a.language), (&b.text, &b.language), "clip {i}");
        if input.language.is_some() {
            assert_eq!(b.language.as_deref(), Some("de"));
            assert_eq!(
                b.language_probability, None,
                "a given language has no probability"
            );
            changed += usize::from(items[i]["language"].as_str() != Some("de"));
        } else {
            assert_eq!(
                b.language.as_deref(),
                items[i]["language"].as_str(),
                "clip {i}"
            );
        }
        if input.task.is_some() {
            let plain = t
                .transcribe(&[view], &base, LongFormMode::Sequential, 1)
                .unwrap();
            translated += usize::from(plain.transcripts[0].as_ref().unwrap().text != b.text);
        }
    }
    assert!(changed > 0, "no clip was moved off its own language");
    assert!(
        translated > 0,
        "no translated clip differs from its transcription"
    );
    // An unknown language fails its input alone.
    let bad = [
        InputOptions {
            language: Some("xx".into()),
            ..Default::default()
        },
        InputOptions::default(),
    ];
    let out = t
        .transcribe_with_drafts(&views[..2], &drafts[..2], &[&bad[0], &bad[1]], &base, 2)
        .unwrap();
    let e = out.transcripts[0].as_ref().unwrap_err();
    assert!(e.message.contains("xx"), "{e}");
    assert!(out.transcripts[1].is_ok());
}
