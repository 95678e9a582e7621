//! Shared loaders for the parity fixtures made by `tests/fixtures/make_cases.py`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use dicta_decode::{LogProbs, NgramLm, Vocabulary};
use serde_json::Value;

pub fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"))
}

pub fn arpa_path() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/lm/en-us.arpa.gz"
    ))
}

pub struct Cases {
    pub meta: Value,
    pub list: Vec<Value>,
    pub vocab: Vocabulary,
    pub matrices: Vec<LogProbs>,
}

/// The character-vocabulary cases (`cases_q.npy`).
pub fn cases() -> &'static Cases {
    static CASES: OnceLock<Cases> = OnceLock::new();
    CASES.get_or_init(|| load("labels", "cases", "cases_q.npy"))
}

/// The sentencepiece-style cases (`bpe_cases_q.npy`).
pub fn bpe_cases() -> &'static Cases {
    static CASES: OnceLock<Cases> = OnceLock::new();
    CASES.get_or_init(|| load("bpe_labels", "bpe_cases", "bpe_cases_q.npy"))
}

/// Dequantises a `*_q.npy` exactly as the generator does: `-(f32(q) * f32(step))`.
fn load(labels_key: &str, list_key: &str, npy: &str) -> Cases {
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("cases.json")).unwrap())
            .unwrap();
    let labels: Vec<String> = serde_json::from_value(meta[labels_key].clone()).unwrap();
    let vocab = Vocabulary::from_labels(&labels).unwrap();
    let bytes = std::fs::read(fixtures().join(npy)).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let v = npy.shape()[1] as usize;
    assert_eq!(v, vocab.len());
    let q: Vec<u8> = npy.into_vec().unwrap();
    let step = meta["quant_step"].as_f64().unwrap() as f32;
    let list = meta[list_key].as_array().unwrap().clone();
    let matrices = list
        .iter()
        .map(|c| {
            let off = c["offset"].as_u64().unwrap() as usize;
            let t = c["frames"].as_u64().unwrap() as usize;
            let data = q[off * v..(off + t) * v]
                .iter()
                .map(|&x| -(f32::from(x) * step))
                .collect();
            LogProbs::new(data, t, v).unwrap()
        })
        .collect();
    Cases {
        meta,
        list,
        vocab,
        matrices,
    }
}

/// The shared English trigram ARPA, loaded once per test binary.
pub fn english_lm() -> Arc<NgramLm> {
    static LM: OnceLock<Arc<NgramLm>> = OnceLock::new();
    LM.get_or_init(|| {
        let path = arpa_path();
        assert!(
            path.exists(),
            "{} is missing: the shared data folder must sit next to the repository",
            path.display()
        );
        Arc::new(NgramLm::from_arpa_path(&path).unwrap())
    })
    .clone()
}

/// (word, start, end) triples of a reference beam.
pub fn ref_words(v: &Value) -> Vec<(String, i64, i64)> {
    v["words"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w[0].as_str().unwrap().to_string(),
                w[1].as_i64().unwrap(),
                w[2].as_i64().unwrap(),
            )
        })
        .collect()
}
