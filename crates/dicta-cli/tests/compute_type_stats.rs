//! `dicta transcribe` says in its stats which numeric type the model ran in: what
//! `--compute-type` asked, with `default` resolved (float32 for Whisper) and int8 falling back
//! to float32 on CPUs without int8 dot-product kernels.
//!
//! Needs the Whisper model: `DICTA_TEST_MODEL_DIR` (then it must exist) or /work/models/tiny.en-ct2.

use std::process::Command;

mod common;

use common::{model_dir, DATA};

#[test]
fn stats_name_the_compute_type_that_ran() {
    let Some(model) = model_dir() else { return };
    let int8 = if dicta_models::kernels::int8::int8_fast() {
        "int8"
    } else {
        "float32"
    };
    for (asked, ran) in [
        ("default", "float32"),
        ("float32", "float32"),
        ("int8", int8),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_dicta"))
            .args([
                "transcribe",
                "--quiet",
                "--beam-size",
                "1",
                "--compute-type",
                asked,
            ])
            .arg("--model")
            .arg(&model)
            .arg(format!("{DATA}/openai_whisper/jfk.flac"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["stats"]["compute_type"], ran, "--compute-type {asked}");
        assert!(v["results"][0]["text"]
            .as_str()
            .unwrap()
            .contains("ask not what your country"));
    }
}
