//! `dicta serve --model base` (multilingual Whisper) with the official `openai` Python SDK over a
//! real socket: detected language and its probability in `verbose_json`, `/v1/audio/translations`
//! in every format, a forced and an unknown language; and the CLI's `--task translate` /
//! `--language` on the same model. Expected texts are faster-whisper's on the same weights
//! (crates/dicta-engine/tests/fixtures/whisper_base/reference.json).
//!
//! Needs the base model: `DICTA_TEST_BASE_DIR` (then it must hold it) or the cache
//! (`dicta models fetch base`); skipped otherwise.

use std::process::Command;

mod common;

use common::server::Server;
use common::{fetched_model, python_has};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../dicta-engine/tests/fixtures/whisper_base"
);

fn base_dir() -> Option<std::path::PathBuf> {
    fetched_model("base", "DICTA_TEST_BASE_DIR", "model.bin")
}

/// The fixture's Swedish item (9 s) with faster-whisper's answers.
fn item() -> serde_json::Value {
    let s = std::fs::read_to_string(format!("{FIXTURE}/reference.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|it| it["language"] == "sv")
        .expect("a Swedish item")
        .clone()
}

#[test]
fn openai_sdk_translates_and_reports_the_detected_language() {
    let Some(model) = base_dir() else { return };
    if !python_has("openai") {
        return;
    }
    let it = item();
    // float32: the expected texts are faster-whisper float32's.
    let server = Server::start(&model, &["--no-vad", "--compute-type", "float32"]);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/serve_multilingual_check.py"
    );
    let status = Command::new("python3")
        .arg(script)
        .args(["--base-url", &format!("{}/v1", server.base)])
        .args([
            "--audio",
            &format!("{FIXTURE}/{}", it["wav"].as_str().unwrap()),
        ])
        .args(["--language", it["language"].as_str().unwrap()])
        .args(["--transcript", it["transcript"].as_str().unwrap()])
        .args(["--translation", it["translation"].as_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success(), "openai SDK multilingual check failed");

    // `/transcribe`: an unknown language is a 400 listing the codes; `task` translates.
    let wav = std::fs::read(format!("{FIXTURE}/{}", it["wav"].as_str().unwrap())).unwrap();
    let post = |parameters: serde_json::Value| {
        let (code, v) = server.post_transcribe(&serde_json::json!({
            "inputs": [{"id": "a", "audio_base64": common::base64(&wav)}],
            "parameters": parameters,
        }));
        (code.to_string(), v)
    };
    let (code, v) = post(serde_json::json!({"language": "xx"}));
    assert_eq!(code, "400", "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("\"xx\"") && msg.contains("sv, it"), "{msg}");
    let (code, v) = post(serde_json::json!({"task": "translate"}));
    assert_eq!(code, "200", "{v}");
    let r = &v["results"][0];
    assert_eq!(r["text"], it["translation"]);
    assert_eq!(r["language"], it["language"]);
    assert!(r["language_probability"].as_f64().unwrap() > 0.5, "{r}");

    // Language detection over several windows (language_reference.json's first two cases:
    // German at 0.51 in the first window, Spanish in the second).
    let s = std::fs::read_to_string(format!("{FIXTURE}/language_reference.json")).unwrap();
    let refs: serde_json::Value = serde_json::from_str(&s).unwrap();
    let cases = &refs["cases"];
    let mut wav = std::io::Cursor::new(Vec::new());
    {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 16_000,
            bits_per_sample: 32,
            sample_format: hound::SampleFormat::Float,
        };
        let mut w = hound::WavWriter::new(&mut wav, spec).unwrap();
        for clip in cases[1]["clips"].as_array().unwrap() {
            let p = format!("{FIXTURE}/{}", clip.as_str().unwrap());
            let mut a = dicta_audio::decode::load_path(std::path::Path::new(&p)).unwrap();
            a.resize(30 * 16_000, 0.0);
            for x in a {
                w.write_sample(x).unwrap();
            }
        }
        w.finalize().unwrap();
    }
    let wav = wav.into_inner();
    for case in &cases.as_array().unwrap()[..2] {
        let (code, v) = server.post_transcribe(&serde_json::json!({
            "inputs": [{"audio_base64": common::base64(&wav)}],
            "parameters": {
                "language_detection_segments": case["language_detection_segments"],
                "language_detection_threshold": case["language_detection_threshold"],
                "max_new_tokens": 1,
            },
        }));
        assert_eq!(code, 200, "{v}");
        let r = &v["results"][0];
        assert_eq!(r["language"], case["language"], "{case}");
        let p = r["language_probability"].as_f64().unwrap();
        assert!(
            (p - case["language_probability"].as_f64().unwrap()).abs() < 1e-3,
            "{r}"
        );
    }
    // `multilingual`: faster-whisper's English-then-German recording, each window in its own
    // language (the server decodes greedily, as the fixture's run).
    let m = &refs["multilingual"];
    let wav = std::fs::read(format!("{}/{}", common::DATA, m["wav"].as_str().unwrap())).unwrap();
    for (run, on) in [("off", false), ("on", true)] {
        let (code, v) = server.post_transcribe(&serde_json::json!({
            "inputs": [{"audio_base64": common::base64(&wav)}],
            "parameters": {"multilingual": on, "temperature": [0.0],
                "condition_on_previous_text": false},
        }));
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["results"][0]["text"], m["runs"][run]["text"], "{run}");
    }
    // Streams with their own task and language (`websockets` client, serve_stream_check.py):
    // the Swedish clip streamed translated, and decoded as German, each differ from the plain
    // stream, the query string and a `config` message alike.
    if python_has("websockets") {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/serve_stream_check.py");
        let url = format!("{}/v1/stream", server.base.replace("http://", "ws://"));
        let status = Command::new("python3")
            .arg(script)
            .args(["--url", &url, "--wav"])
            .arg(format!("{FIXTURE}/{}", it["wav"].as_str().unwrap()))
            .args(["--options-check", "task=translate", "language=de"])
            .status()
            .unwrap();
        assert!(
            status.success(),
            "per-stream task and language check failed"
        );
    }
    assert_eq!(server.terminate(), 0);
}

#[test]
fn cli_task_translate_and_language_flags_on_base() {
    let Some(model) = base_dir() else { return };
    let it = item();
    let wav = format!("{FIXTURE}/{}", it["wav"].as_str().unwrap());
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_dicta"))
            .args([
                "transcribe",
                "--quiet",
                "--beam-size",
                "1",
                "--temperature",
                "0",
            ])
            .args([
                "--no-condition-on-previous-text",
                "--compute-type",
                "float32",
            ])
            .arg("--model")
            .arg(&model)
            .args(extra)
            .arg(&wav)
            .output()
            .unwrap()
    };
    let json = |o: &std::process::Output| -> serde_json::Value {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let v = json(&run(&[]));
    let r = &v["results"][0];
    assert_eq!(r["language"], it["language"]);
    assert!(r["language_probability"].as_f64().unwrap() > 0.5, "{r}");
    assert_eq!(r["text"], it["transcript"]);
    for flag in [&["--task", "translate"][..], &["--translate"][..]] {
        let v = json(&run(flag));
        assert_eq!(v["results"][0]["text"], it["translation"], "{flag:?}");
    }
    let v = json(&run(&["--language", "sv", "--format", "verbose-json"]));
    assert_eq!(v["results"][0]["language"], "sv");
    assert!(v["results"][0].get("language_probability").is_none());
    // An unknown code is a usage error that lists the valid ones.
    let o = run(&["--language", "xx"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unknown language code \"xx\"") && err.contains("sv"),
        "{err}"
    );
}
