//! `dicta transcribe` says in its stats which numeric type the model ran in: what
//! `--compute-type` asked, with `default` resolved (int8 for Whisper where the CPU has int8
//! dot-product kernels, float32 elsewhere) and int8 falling back to float32 on other CPUs.
//!
//! Needs the Whisper model: `DICTA_TEST_MODEL_DIR` (then it must exist) or /work/models/tiny.en-ct2.

mod common;

use common::{dicta_json, model_dir, DATA};

#[test]
fn stats_name_the_compute_type_that_ran() {
    let Some(model) = model_dir() else { return };
    let model = model.to_string_lossy();
    let wav = format!("{DATA}/openai_whisper/jfk.flac");
    let int8 = if dicta_models::kernels::int8::int8_fast() {
        "int8"
    } else {
        "float32"
    };
    for (asked, ran) in [("default", int8), ("float32", "float32"), ("int8", int8)] {
        let v = dicta_json(&[
            "transcribe",
            "--quiet",
            "--beam-size",
            "1",
            "--compute-type",
            asked,
            "--model",
            &model,
            &wav,
        ]);
        assert_eq!(v["stats"]["compute_type"], ran, "--compute-type {asked}");
        assert!(v["results"][0]["text"]
            .as_str()
            .unwrap()
            .contains("ask not what your country"));
    }
}
