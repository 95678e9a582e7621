//! Helpers shared by the real-model tests of the `dicta` binary.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};

pub mod flac;
pub mod server;

/// The shared real-speech data folder (`../shared/data` beside the repository).
pub const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data");

/// Whether a client tool the test drives is here (`ok`); when it is not, the check is skipped
/// with a note, or fails under `DICTA_REQUIRE_CLIENTS` (`.ci/run` sets it after installing
/// every client, so a missing install step cannot pass as a skip).
pub fn client_available(what: &str, ok: bool) -> bool {
    if !ok {
        assert!(
            std::env::var_os("DICTA_REQUIRE_CLIENTS").is_none(),
            "no {what} (DICTA_REQUIRE_CLIENTS is set)"
        );
        eprintln!("note: no {what}; check skipped");
    }
    ok
}

/// Whether `python3` can import `module` (see [`client_available`]).
pub fn python_has(module: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .status()
        .is_ok_and(|s| s.success());
    client_available(&format!("python3 package `{module}`"), ok)
}

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

/// Standard base64 (for `/transcribe`'s `audio_base64`).
/// Runs this crate's `dicta` binary with `args` and returns its standard output; panics with its
/// standard error when it fails.
pub fn dicta_stdout<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Vec<u8> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dicta"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dicta failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// [`dicta_stdout`] parsed as one JSON document.
pub fn dicta_json<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> serde_json::Value {
    serde_json::from_slice(&dicta_stdout(args)).unwrap()
}

pub fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Writes `dir/name`, a workload manifest of three short real recordings (11 s, 5 s, 5 s) with
/// their references, for the `dicta bench` tests.
pub fn three_clip_manifest(dir: &Path, name: &str) -> PathBuf {
    let items = [
        (
            "jfk",
            "openai_whisper/jfk.16k.wav",
            "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.",
        ),
        (
            "left",
            "faster_whisper/stereo_diarization.ch0.16k.wav",
            "He began a confused complaint against the wizard, who had vanished behind the curtain on the left.",
        ),
        (
            "right",
            "faster_whisper/stereo_diarization.ch1.16k.wav",
            "The horizon seems extremely distant.",
        ),
    ];
    let lines: String = items
        .iter()
        .map(|(id, audio, text)| {
            let audio = Path::new(DATA).join(audio);
            serde_json::json!({"id": id, "audio": audio, "text": text}).to_string() + "\n"
        })
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, lines).unwrap();
    path
}
