//! Parity of the wav2vec2 CTC model with transformers on tiny random-weight folders made by
//! `tests/fixtures/wav2vec2/make_fixtures.py`, plus batching invariances and load errors.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use dicta_core::ErrorKind;
use dicta_models::ctc::{load_ctc_model, CtcModel, CtcOutput, Wav2Vec2ForCtc};

const TOL: f32 = 1e-4;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/wav2vec2")
        .join(name)
}

struct Reference {
    waves: Vec<Vec<f32>>,
    alone: Vec<Tensor>,
    batch: Tensor,
    lengths: Vec<usize>,
}

fn reference(name: &str) -> Reference {
    let path = fixture(name).join("reference.safetensors");
    let mut t: HashMap<String, Tensor> =
        candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    let mut waves = Vec::new();
    let mut alone = Vec::new();
    for i in 0.. {
        let Some(w) = t.remove(&format!("wave_{i}")) else {
            break;
        };
        waves.push(w.to_vec1::<f32>().unwrap());
        alone.push(t.remove(&format!("alone_{i}")).unwrap());
    }
    let lengths = t["lengths"]
        .to_vec1::<i64>()
        .unwrap()
        .into_iter()
        .map(|l| l as usize)
        .collect();
    Reference {
        waves,
        alone,
        batch: t.remove("batch").unwrap(),
        lengths,
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "shape mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

fn run(model: &dyn CtcModel, waves: &[Vec<f32>]) -> CtcOutput {
    let rows: Vec<&[f32]> = waves.iter().map(|w| w.as_slice()).collect();
    model.forward(&rows).unwrap()
}

fn load(name: &str) -> Box<dyn CtcModel> {
    load_ctc_model(&fixture(name), &Device::Cpu).unwrap()
}

/// Each waveform alone matches transformers' log-probs, with the reference frame count.
fn check_alone(name: &str) {
    let model = load(name);
    let r = reference(name);
    for (i, w) in r.waves.iter().enumerate() {
        let out = run(model.as_ref(), std::slice::from_ref(w));
        assert_eq!(out.n_rows, 1);
        assert_eq!(out.lengths, vec![r.lengths[i]], "{name} row {i} frames");
        assert_eq!(out.t_max, r.lengths[i]);
        assert_eq!(out.vocab_size, model.vocab().len());
        let d = max_abs_diff(out.row(0), &flat(&r.alone[i]));
        assert!(d < TOL, "{name} wave {i} alone: max abs diff {d}");
        // Log-softmax rows are normalised.
        for frame in out.row(0).chunks(out.vocab_size) {
            let s: f32 = frame.iter().map(|v| v.exp()).sum();
            assert!((s - 1.0).abs() < 1e-4);
        }
    }
}

/// The padded batch matches transformers' padded batch, row by row over the valid frames.
fn check_batch(name: &str) -> (CtcOutput, Reference) {
    let model = load(name);
    let r = reference(name);
    let out = run(model.as_ref(), &r.waves);
    let (n, t, v) = r.batch.dims3().unwrap();
    assert_eq!((out.n_rows, out.t_max, out.vocab_size), (n, t, v));
    assert_eq!(out.lengths, r.lengths);
    for i in 0..n {
        let want = r.batch.get(i).unwrap().narrow(0, 0, r.lengths[i]).unwrap();
        let d = max_abs_diff(out.row(i), &flat(&want));
        assert!(d < TOL, "{name} batch row {i}: max abs diff {d}");
    }
    (out, r)
}

#[test]
fn group_norm_variant_matches_transformers_alone() {
    check_alone("group");
}

#[test]
fn layer_norm_variant_matches_transformers_alone() {
    check_alone("layer");
}

#[test]
fn group_norm_variant_matches_transformers_padded_batch() {
    let (out, r) = check_batch("group");
    // Without an attention mask (as transformers runs base-960h-style models) padding leaks
    // into the shorter rows; the longest row is unpadded and equals its solo run.
    let longest = (0..r.waves.len())
        .max_by_key(|&i| r.waves[i].len())
        .unwrap();
    for i in 0..r.waves.len() {
        let d = max_abs_diff(out.row(i), &flat(&r.alone[i]));
        if i == longest {
            assert!(d < TOL, "unpadded row {i} differs from alone by {d}");
        } else {
            assert!(
                d > 1e-2,
                "padded row {i} unexpectedly equals alone (diff {d})"
            );
        }
    }
}

#[test]
fn layer_norm_variant_matches_transformers_padded_batch_and_alone() {
    let (out, r) = check_batch("layer");
    let model = Wav2Vec2ForCtc::load(&fixture("layer"), &Device::Cpu).unwrap();
    assert!(model.uses_attention_mask());
    for (i, w) in r.waves.iter().enumerate() {
        let alone = run(&model, std::slice::from_ref(w));
        let d = max_abs_diff(out.row(i), alone.row(0));
        assert!(d < TOL, "batched row {i} differs from alone by {d}");
    }
    // Batch order does not matter either: reversed input gives reversed rows.
    let reversed: Vec<Vec<f32>> = r.waves.iter().rev().cloned().collect();
    let rev = run(&model, &reversed);
    for i in 0..r.waves.len() {
        let j = r.waves.len() - 1 - i;
        assert!(max_abs_diff(out.row(i), rev.row(j)) < TOL);
    }
}

#[test]
fn layer_norm_variant_ignores_padding_values_beyond_length() {
    // Appending a loud, very long companion row must not change a masked model's output.
    let model = load("layer");
    let r = reference("layer");
    let loud: Vec<f32> = (0..4000)
        .map(|i| ((i * 7919) % 200) as f32 - 100.0)
        .collect();
    let out = run(model.as_ref(), &[r.waves[2].clone(), loud]);
    let d = max_abs_diff(out.row(0), &flat(&r.alone[2]));
    assert!(d < TOL, "diff {d}");
}

#[test]
fn geometry_follows_the_conv_stack() {
    let model = load("group");
    // Strides 5, 2, 2 and kernels 10, 3, 2 (see make_fixtures.py).
    assert_eq!(model.samples_per_frame(), 20);
    assert_eq!(model.frames_for_samples(0), 0);
    assert_eq!(model.frames_for_samples(29), 0);
    assert_eq!(model.frames_for_samples(30), 1);
    assert_eq!(model.frames_for_samples(1000), 49);
    assert_eq!(model.frames_for_samples(1237), 61);
    // Too-short and empty rows get zero frames without failing their batch companions.
    let r = reference("group");
    let out = run(model.as_ref(), &[vec![], vec![0.1; 10], r.waves[1].clone()]);
    assert_eq!(out.lengths, vec![0, 0, 61]);
    assert!(out.row(0).is_empty() && out.row(1).is_empty());
    assert!(max_abs_diff(out.row(2), &flat(&r.alone[1])) < TOL);
    let empty = model.forward(&[]).unwrap();
    assert_eq!((empty.n_rows, empty.t_max), (0, 0));
    let silent = model.forward(&[&[0.5; 5]]).unwrap();
    assert_eq!(
        (silent.n_rows, silent.t_max, silent.lengths.clone()),
        (1, 0, vec![0])
    );
}

#[test]
fn non_finite_samples_are_rejected() {
    let model = load("layer");
    let mut w = vec![0.1f32; 1000];
    w[10] = f32::NAN;
    let err = model.forward(&[&w]).unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidInput);
}

#[test]
fn vocab_comes_from_vocab_json() {
    for name in ["group", "layer"] {
        let model = load(name);
        let v = model.vocab();
        assert_eq!(v.tokens.len(), 14);
        assert_eq!(v.tokens[0], "<pad>");
        assert_eq!(v.tokens[4], "|");
        assert_eq!(v.tokens[13], "R");
        assert_eq!(v.blank_id, 0);
        assert_eq!(v.word_delimiter.as_deref(), Some("|"));
    }
}

/// A scratch copy of a fixture folder that tests may edit.
fn scratch_copy(name: &str, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dicta-w2v2-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(fixture(name)).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    dir
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(&path, serde_json::to_string(&cfg).unwrap()).unwrap();
}

#[test]
fn sharded_safetensors_folder_loads() {
    let dir = scratch_copy("layer", "sharded");
    let shard = "model-00001-of-00001.safetensors";
    std::fs::rename(dir.join("model.safetensors"), dir.join(shard)).unwrap();
    let tensors = candle_core::safetensors::load(dir.join(shard), &Device::Cpu).unwrap();
    let weight_map: serde_json::Map<String, serde_json::Value> =
        tensors.keys().map(|k| (k.clone(), shard.into())).collect();
    let index = serde_json::json!({ "metadata": {}, "weight_map": weight_map });
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let model = load_ctc_model(&dir, &Device::Cpu).unwrap();
    let r = reference("layer");
    let out = run(model.as_ref(), std::slice::from_ref(&r.waves[0]));
    assert!(max_abs_diff(out.row(0), &flat(&r.alone[0])) < TOL);
}

#[test]
fn unusable_folders_are_refused_with_model_load_errors() {
    let dir = scratch_copy("layer", "unknown-type");
    edit_config(&dir, |c| c["model_type"] = "speech_to_text".into());
    let err = load_ctc_model(&dir, &Device::Cpu).err().unwrap();
    assert_eq!(err.kind, ErrorKind::ModelLoad);
    assert!(err.message.contains("speech_to_text"), "{}", err.message);

    let dir = scratch_copy("layer", "no-head");
    edit_config(&dir, |c| {
        c["architectures"] = serde_json::json!(["Wav2Vec2ForPreTraining"])
    });
    let err = load_ctc_model(&dir, &Device::Cpu).err().unwrap();
    assert_eq!(err.kind, ErrorKind::ModelLoad);
    assert!(err.message.contains("CTC head"), "{}", err.message);

    let dir = scratch_copy("layer", "wrong-shape");
    edit_config(&dir, |c| c["hidden_size"] = 64.into());
    let err = load_ctc_model(&dir, &Device::Cpu).err().unwrap();
    assert_eq!(err.kind, ErrorKind::ModelLoad);

    let dir = scratch_copy("layer", "no-weights");
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let err = load_ctc_model(&dir, &Device::Cpu).err().unwrap();
    assert_eq!(err.kind, ErrorKind::ModelLoad);
    assert!(err.message.contains("model.safetensors"), "{}", err.message);

    let dir = scratch_copy("group", "not-zip");
    std::fs::write(dir.join("pytorch_model.bin"), b"not a torch checkpoint").unwrap();
    let err = load_ctc_model(&dir, &Device::Cpu).err().unwrap();
    assert_eq!(err.kind, ErrorKind::ModelLoad);
    assert!(err.message.contains("safetensors"), "{}", err.message);
}
