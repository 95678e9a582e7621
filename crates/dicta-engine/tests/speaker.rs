//! ECAPA-TDNN speaker embeddings against SpeechBrain's own modules on the same samples
//! (fixtures from tests/fixtures/ecapa/make_fixtures.py): filterbanks close, float32 embeddings
//! with cosine ≥ 0.999 and int8 ones (every dispatch level the CPU has) ≥ 0.99, batched clips
//! equal to clips alone.

mod whisper_common;

use std::sync::OnceLock;

use dicta_engine::diarize::{cosine, SpeakerEncoder};
use serde_json::Value;

fn encoder() -> Option<&'static SpeakerEncoder> {
    static E: OnceLock<Option<SpeakerEncoder>> = OnceLock::new();
    E.get_or_init(|| {
        whisper_common::speaker_dir()
            .map(|d| SpeakerEncoder::load_with(&d, false).expect("load ECAPA"))
    })
    .as_ref()
}

fn clips() -> Vec<(Vec<f32>, Value)> {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/ecapa/reference.json"
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    r["clips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let x = whisper_common::load_wav(c["audio"].as_str().unwrap());
            let a = (c["start"].as_f64().unwrap() * 16_000.0) as usize;
            let x = match c["length"].as_f64() {
                Some(l) => x[a..(a + (l * 16_000.0) as usize).min(x.len())].to_vec(),
                None => x[a..].to_vec(),
            };
            assert_eq!(x.len() as u64, c["samples"].as_u64().unwrap());
            (x, c.clone())
        })
        .collect()
}

#[test]
fn embeddings_match_speechbrain() {
    let Some(enc) = encoder() else { return };
    let clips = clips();
    for (x, c) in &clips {
        let f = enc.features(x);
        assert_eq!(f.len() / 80, c["frames"].as_u64().unwrap() as usize);
        let head: Vec<Vec<f64>> = serde_json::from_value(c["fbank_head"].clone()).unwrap();
        let worst = head
            .iter()
            .flatten()
            .zip(&f)
            .map(|(a, b)| (a - f64::from(*b)).abs())
            .fold(0.0, f64::max);
        assert!(worst < 2e-3, "{}: fbank |Δ| {worst}", c["audio"]);
    }
    let refs: Vec<&[f32]> = clips.iter().map(|(x, _)| x.as_slice()).collect();
    let got = enc.embed(&refs).unwrap();
    for ((_, c), e) in clips.iter().zip(&got) {
        let want: Vec<f32> = serde_json::from_value(c["embedding"].clone()).unwrap();
        let cos = cosine(e, &want);
        eprintln!("{} @{}: cosine {cos:.6}", c["audio"], c["start"]);
        assert!(cos >= 0.999, "{}: cosine {cos}", c["audio"]);
    }
    // Same speaker closer than different speakers (spk1 vs spk2 of the SpeechBrain clips).
    assert!(cosine(&got[2], &got[3]) > cosine(&got[2], &got[4]) + 0.2);
}

#[test]
fn batched_clips_equal_clips_alone() {
    let Some(enc) = encoder() else { return };
    let jfk = whisper_common::load_wav("openai_whisper/jfk.16k.wav");
    let windows: Vec<&[f32]> = (0..5)
        .map(|i| &jfk[i * 20_000..i * 20_000 + 24_000])
        .collect();
    let together = enc.embed(&windows).unwrap();
    for (w, t) in windows.iter().zip(&together) {
        let alone = enc.embed(&[w]).unwrap();
        assert!(cosine(&alone[0], t) > 0.99999);
    }
    assert!(enc.embed(&[&[0.0; 100][..]]).is_err());
}

#[test]
fn int8_embeddings_stay_close() {
    let Some(dir) = whisper_common::speaker_dir() else {
        return;
    };
    if !dicta_models::kernels::int8::int8_fast() {
        eprintln!("SKIPPED: no int8 kernels on this CPU");
        return;
    }
    let enc = SpeakerEncoder::load_with(&dir, true).unwrap();
    let clips = clips();
    let refs: Vec<&[f32]> = clips.iter().map(|(x, _)| x.as_slice()).collect();
    let got = enc.embed(&refs).unwrap();
    for ((_, c), e) in clips.iter().zip(&got) {
        let want: Vec<f32> = serde_json::from_value(c["embedding"].clone()).unwrap();
        let cos = cosine(e, &want);
        eprintln!("int8 {} @{}: cosine {cos:.5}", c["audio"], c["start"]);
        assert!(cos >= 0.99, "{}: cosine {cos}", c["audio"]);
    }
}
