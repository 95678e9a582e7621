//! Helpers shared by the Whisper integration tests.
#![allow(dead_code)]

use candle_core::{DType, Device, Tensor};
use dicta_models::whisper::Whisper;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Model folder under test: `DICTA_TEST_MODEL_DIR`, else the development copy of tiny.en (CTranslate2).
pub fn model_dir() -> Option<PathBuf> {
    // When the test runner names a model folder (scripts/test.sh does), its absence is a failure,
    // not a reason to skip.
    if let Some(dir) = std::env::var_os("DICTA_TEST_MODEL_DIR").map(PathBuf::from) {
        assert!(
            dir.join("model.bin").is_file(),
            "DICTA_TEST_MODEL_DIR={} holds no CTranslate2 model.bin",
            dir.display()
        );
        return Some(dir);
    }
    let dir = PathBuf::from("/work/models/tiny.en-ct2");
    if dir.join("model.bin").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "SKIPPED: no CTranslate2 Whisper tiny.en at {} (set DICTA_TEST_MODEL_DIR)",
            dir.display()
        );
        None
    }
}

/// The CT2 model, loaded once per test binary.
pub fn model() -> Option<&'static Whisper> {
    static M: OnceLock<Option<Whisper>> = OnceLock::new();
    M.get_or_init(|| {
        model_dir().map(|d| Whisper::load(&d, &Device::Cpu).expect("load CT2 tiny.en"))
    })
    .as_ref()
}

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/whisper"
    ))
    .join(name)
}

/// mel.npy as f32 [3, 80, 3000].
pub fn mel() -> Tensor {
    Tensor::read_npy(fixture("mel.npy"))
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
}

pub fn reference() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("reference.json")).unwrap()).unwrap()
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Largest absolute difference between two tensors of the same shape.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// Prompt tokens repeated for `n` rows as a [n, L] tensor.
pub fn prompt(tokens: &[u32], n: usize) -> Tensor {
    let flat: Vec<u32> = (0..n).flat_map(|_| tokens.iter().copied()).collect();
    Tensor::from_vec(flat, (n, tokens.len()), &Device::Cpu).unwrap()
}

/// Greedy decoding as CTranslate2's `generate(beam_size=1)` does it without timestamps: argmax after
/// suppressing `suppress_tokens` (and `begin_suppress_tokens` at the first sampled step). All rows run
/// in one batch; finished rows are dropped with `select_rows`. Returns the tokens of each row
/// (without the prompt and the final `<|endoftext|>`).
pub fn greedy(m: &Whisper, mel: &Tensor, prompt_tokens: &[u32], max_len: usize) -> Vec<Vec<u32>> {
    let n = mel.dim(0).unwrap();
    let enc = m.encode(mel).unwrap();
    let mut cache = m.new_cache(&enc).unwrap();
    let eot = m.config.special.eot;
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut active: Vec<usize> = (0..n).collect();
    let mut input = prompt(prompt_tokens, n);
    for step in 0..max_len {
        let logits = m.decode_last(&input, &mut cache).unwrap();
        let mut rows: Vec<Vec<f32>> = logits.to_vec2().unwrap();
        let mut next = Vec::new();
        let mut keep = Vec::new();
        for (r, row) in rows.iter_mut().enumerate() {
            for &t in &m.config.suppress_tokens {
                row[t as usize] = f32::NEG_INFINITY;
            }
            if step == 0 {
                for &t in &m.config.begin_suppress_tokens {
                    row[t as usize] = f32::NEG_INFINITY;
                }
            }
            let best = row
                .iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |acc, (i, &v)| if v > acc.1 { (i, v) } else { acc },
                )
                .0 as u32;
            if best != eot {
                out[active[r]].push(best);
                keep.push(r as u32);
                next.push(best);
            }
        }
        if keep.is_empty() {
            break;
        }
        if keep.len() != active.len() {
            cache.select_rows(&keep).unwrap();
            active = keep.iter().map(|&r| active[r as usize]).collect();
        }
        input = Tensor::from_vec(next.clone(), (next.len(), 1), &Device::Cpu).unwrap();
    }
    out
}
