//! CTranslate2 → Hugging Face conversion round trip: the converted folder loads through the HF loader
//! with the same config and gives the same logits as the CTranslate2 load.

mod whisper_support;

use candle_core::{Device, IndexOp};
use dicta_models::whisper::{convert_ct2_to_hf, WeightFormat, Whisper};
use whisper_support::*;

#[test]
fn converted_hf_folder_matches_ct2() {
    let (Some(src), Some(ct2)) = (model_dir(), model()) else {
        return;
    };
    let dst = tempfile::tempdir().unwrap();
    convert_ct2_to_hf(&src, dst.path()).unwrap();
    // Keep a copy for fixtures/whisper/check_hf_transformers.py when asked.
    if let Some(out) = std::env::var_os("DICTA_TEST_CONVERT_OUT") {
        convert_ct2_to_hf(&src, std::path::Path::new(&out)).unwrap();
    }
    for f in [
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "preprocessor_config.json",
        "tokenizer.json",
    ] {
        assert!(dst.path().join(f).is_file(), "{f} not written");
    }
    let hf = Whisper::load(dst.path(), &Device::Cpu).unwrap();
    assert_eq!(hf.format, WeightFormat::HuggingFace);
    assert_eq!(hf.config, ct2.config);

    let mel = mel().i(0..2).unwrap();
    let r = reference();
    let toks = ids(&r["items"][0]["timestamps"]["tokens"]);
    let seq: Vec<u32> = ids(&r["items"][0]["timestamps"]["prompt"])
        .into_iter()
        .chain(toks[..8].iter().copied())
        .collect();
    let mut worst = 0f32;
    let (ea, eb) = (ct2.encode(&mel).unwrap(), hf.encode(&mel).unwrap());
    worst = worst.max(max_abs_diff(&ea, &eb));
    let (mut ca, mut cb) = (ct2.new_cache(&ea).unwrap(), hf.new_cache(&eb).unwrap());
    let la = ct2.decode(&prompt(&seq, 2), &mut ca).unwrap();
    let lb = hf.decode(&prompt(&seq, 2), &mut cb).unwrap();
    worst = worst.max(max_abs_diff(&la, &lb));
    eprintln!("CT2 vs converted HF max abs diff: {worst:e}");
    assert!(worst <= 1e-4, "HF load differs from CT2 load by {worst}");

    // The converted preprocessor config describes the model's own front end.
    let pre: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dst.path().join("preprocessor_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(pre["feature_size"], 80);
    assert_eq!(pre["nb_max_frames"], 3000);
}
