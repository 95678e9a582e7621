//! Shared helpers of the engine's integration tests (Whisper, VAD, speakers).
#![allow(dead_code)]

use std::path::PathBuf;

use candle_core::Device;
use dicta_models::whisper::Whisper;

pub const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data");
pub const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/whisper");

/// The test model folder: $DICTA_TEST_MODEL_DIR (which must then hold a model: scripts/test.sh
/// sets it, and a missing model there is a failure) or the development copy at
/// /work/models/tiny.en-ct2; `None` (with a note) when neither is set up, so machines without the
/// weights skip these tests.
pub fn model_dir() -> Option<PathBuf> {
    let has_model =
        |dir: &PathBuf| dir.join("model.bin").is_file() || dir.join("model.safetensors").is_file();
    let dir = match std::env::var_os("DICTA_TEST_MODEL_DIR").map(PathBuf::from) {
        Some(dir) => {
            assert!(
                has_model(&dir),
                "DICTA_TEST_MODEL_DIR={} holds no Whisper model",
                dir.display()
            );
            dir
        }
        None => PathBuf::from("/work/models/tiny.en-ct2"),
    };
    if !has_model(&dir) {
        eprintln!(
            "note: no Whisper model at {} (set DICTA_TEST_MODEL_DIR); skipping",
            dir.display()
        );
        return None;
    }
    Some(dir)
}

/// A fetched model folder for a test: the folder `$env` names (a failure when `file` is not in
/// it: scripts/test.sh sets these), else `~/.cache/dicta/models/<name>` when it holds `file`,
/// else `None` with a note (the test skips).
pub fn fetched_model(name: &str, env: &str, file: &str) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(env).map(PathBuf::from) {
        assert!(
            dir.join(file).is_file(),
            "{env}={} holds no {file}",
            dir.display()
        );
        return Some(dir);
    }
    let dir = PathBuf::from(std::env::var("HOME").unwrap_or_default())
        .join(".cache/dicta/models")
        .join(name);
    if dir.join(file).is_file() {
        Some(dir)
    } else {
        eprintln!("SKIPPED: no {name} at {} (set {env})", dir.display());
        None
    }
}

/// The Silero VAD folder (`DICTA_TEST_VAD_DIR`, else the cache).
pub fn vad_dir() -> Option<PathBuf> {
    fetched_model("silero-vad", "DICTA_TEST_VAD_DIR", "silero_vad_v6.onnx")
}

/// The ECAPA speaker model folder (`DICTA_TEST_SPEAKER_DIR`, else the cache).
pub fn speaker_dir() -> Option<PathBuf> {
    fetched_model(
        "ecapa-voxceleb",
        "DICTA_TEST_SPEAKER_DIR",
        "embedding_model.ckpt",
    )
}

/// The test model ([`model_dir`]) loaded on the CPU.
pub fn load_model() -> Option<Whisper> {
    let dir = model_dir()?;
    Some(Whisper::load(&dir, &Device::Cpu).expect("load model"))
}

/// The test model ([`model_dir`]) loaded with the int8 compute type.
pub fn load_int8() -> Option<Whisper> {
    use dicta_models::whisper::{ComputeType, LoadOptions};
    let opts = LoadOptions {
        compute_type: ComputeType::Int8,
    };
    Some(Whisper::load_with(&model_dir()?, &Device::Cpu, &opts).expect("load int8 model"))
}

/// The rows of the shared data's `manifest.jsonl` (one JSON object per recording: `id`,
/// `audio_16k_wav`, `text`, `category`, …), in file order; empty where the data is absent.
pub fn manifest() -> Vec<serde_json::Value> {
    std::fs::read_to_string(format!("{DATA}/manifest.jsonl"))
        .map(|m| {
            m.lines()
                .map(|l| serde_json::from_str(l).expect("manifest line is JSON"))
                .collect()
        })
        .unwrap_or_default()
}

pub fn load_wav(rel: &str) -> Vec<f32> {
    dicta_audio::decode::load_path(&PathBuf::from(DATA).join(rel)).expect("decode wav")
}

/// Lower-case alphanumeric words (apostrophes kept) for WER.
pub fn words(s: &str) -> Vec<String> {
    s.split_whitespace()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_alphanumeric() || *c == '\'')
                .flat_map(|c| c.to_lowercase())
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// (substitutions, deletions, insertions) of `hyp` against `reference`.
pub fn edit_ops(reference: &[String], hyp: &[String]) -> (usize, usize, usize) {
    let (n, m) = (reference.len(), hyp.len());
    // d[i][j] = (cost, sub, del, ins)
    let mut d = vec![vec![(0usize, 0usize, 0usize, 0usize); m + 1]; n + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = (i, 0, i, 0);
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = (j, 0, 0, j);
    }
    for i in 1..=n {
        for j in 1..=m {
            let s = d[i - 1][j - 1];
            let sub = if reference[i - 1] == hyp[j - 1] {
                s
            } else {
                (s.0 + 1, s.1 + 1, s.2, s.3)
            };
            let de = d[i - 1][j];
            let del = (de.0 + 1, de.1, de.2 + 1, de.3);
            let ie = d[i][j - 1];
            let ins = (ie.0 + 1, ie.1, ie.2, ie.3 + 1);
            d[i][j] = [sub, del, ins].into_iter().min_by_key(|x| x.0).unwrap();
        }
    }
    let r = d[n][m];
    (r.1, r.2, r.3)
}

/// The tokens of each segment of a fixture's run (`{"segments": [{"tokens": [...]}, ...]}`).
pub fn tokens_of(run: &serde_json::Value) -> Vec<Vec<u32>> {
    run["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap() as u32)
                .collect()
        })
        .collect()
}

/// Word error rate of `hyp` against `reference` over [`words`] (edits ÷ reference words).
pub fn wer(reference: &str, hyp: &str) -> f64 {
    let (r, h) = (words(reference), words(hyp));
    let mut prev: Vec<usize> = (0..=h.len()).collect();
    for (i, rw) in r.iter().enumerate() {
        let mut cur = vec![i + 1; h.len() + 1];
        for (j, hw) in h.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(rw != hw))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[h.len()] as f64 / r.len().max(1) as f64
}
