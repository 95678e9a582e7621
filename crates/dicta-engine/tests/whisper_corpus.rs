//! Greedy Whisper transcripts equal faster-whisper's (CTranslate2 fp32, same tiny.en weights) on a
//! CI-sized slice of the parity corpus that whisper_parity.rs does not cover: 15 real English
//! utterances from shared/data and 3 espeak-ng sentences kept as 16 kHz WAVs next to the
//! fixture (fixtures/whisper_corpus/reference.json, made by make_reference.py there). The full
//! corpus comparison is tools/whisper_parity/compare.py.

mod whisper_common;

use std::path::PathBuf;

use dicta_engine::whisper::{DecodeOptions, LongFormMode, WhisperTranscriber};
use serde_json::Value;
use whisper_common::*;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/whisper_corpus");

fn reference() -> Value {
    let s = std::fs::read_to_string(format!("{CORPUS}/reference.json")).expect("reference.json");
    serde_json::from_str(&s).unwrap()
}

fn audio_of(item: &Value) -> Vec<f32> {
    let wav = item["wav"].as_str().unwrap();
    if item["in_fixtures"].as_bool().unwrap() {
        dicta_audio::decode::load_path(&PathBuf::from(CORPUS).join(wav)).expect("decode wav")
    } else {
        load_wav(wav)
    }
}

#[test]
fn greedy_corpus_matches_faster_whisper() {
    let Some(model) = load_model() else { return };
    let refs = reference();
    let items = refs["items"].as_array().unwrap();
    assert!(items.len() >= 15, "fixture holds {} items", items.len());
    let audios: Vec<Vec<f32>> = items.iter().map(audio_of).collect();
    let views: Vec<&[f32]> = audios.iter().map(|a| a.as_slice()).collect();
    let opts = DecodeOptions {
        beam_size: 1,
        temperatures: vec![0.0],
        condition_on_previous_text: false,
        language: Some("en".into()),
        ..DecodeOptions::default()
    };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let out = tr
        .transcribe(&views, &opts, LongFormMode::Sequential, 8)
        .unwrap();
    assert_eq!(out.transcripts.len(), items.len());
    let mut same = 0;
    let mut espeak_same = 0;
    for (it, got) in items.iter().zip(&out.transcripts) {
        let got = got.as_ref().expect("transcript");
        let want = it["faster_whisper"].as_str().unwrap();
        if got.text == want {
            same += 1;
            espeak_same += usize::from(it["in_fixtures"].as_bool().unwrap());
        } else {
            eprintln!("{}:\n  want {want:?}\n  got  {:?}", it["id"], got.text);
        }
    }
    let n = items.len();
    eprintln!("identical text {same}/{n} (espeak-ng {espeak_same}/3)");
    // >= 95% identical: with 18 items at most one may differ.
    assert!(
        same * 100 >= n * 95 || same + 1 >= n,
        "only {same}/{n} transcripts identical to faster-whisper"
    );
}
