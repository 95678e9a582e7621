//! Helpers shared by the real-model tests of the `dicta` binary.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;

pub mod flac;
pub mod server;

/// The shared real-speech data folder (`../shared/data` beside the repository).
pub const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data");

/// The Whisper test model: `DICTA_TEST_MODEL_DIR` (then it must hold a model), else the dev
/// copy at /work/models/tiny.en-ct2, else `None` (the test skips).
pub fn model_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DICTA_TEST_MODEL_DIR").map(PathBuf::from) {
        assert!(
            dir.join("model.bin").is_file(),
            "DICTA_TEST_MODEL_DIR={} holds no model",
            dir.display()
        );
        return Some(dir);
    }
    let dir = PathBuf::from("/work/models/tiny.en-ct2");
    if dir.join("model.bin").is_file() {
        Some(dir)
    } else {
        eprintln!("note: no Whisper model (set DICTA_TEST_MODEL_DIR); skipping");
        None
    }
}

/// Standard base64 (for `/transcribe`'s `audio_base64`).
pub fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
