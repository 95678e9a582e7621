//! `dicta serve` end to end with the real model and real clients: the binary on port 0, curl for
//! `/transcribe` and the OpenAI endpoint, the official `openai` Python SDK, errors that leave the
//! server serving, 8 concurrent clients sharing batches, and a graceful SIGTERM.
//!
//! Needs the Whisper model: `DICTA_TEST_MODEL_DIR` (then it must exist) or /work/models/tiny.en-ct2.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data");

fn model_dir() -> Option<PathBuf> {
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

struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(model: &Path, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dicta"))
            .args(["serve", "--port", "0", "--beam-size", "1", "--model"])
            .arg(model)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start dicta serve");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        let server = Server { child, base };
        let deadline = Instant::now() + Duration::from_secs(120);
        while server
            .curl(&[
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("{}/readyz", server.base),
            ])
            .0
            != "200"
        {
            assert!(Instant::now() < deadline, "server never became ready");
            std::thread::sleep(Duration::from_millis(200));
        }
        server
    }

    /// Runs curl; returns (stdout, success).
    fn curl(&self, args: &[&str]) -> (String, bool) {
        let out = Command::new("curl")
            .arg("-sS")
            .args(args)
            .output()
            .expect("curl");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.status.success(),
        )
    }

    fn transcribe_file(&self, path: &str) -> (u16, serde_json::Value) {
        let (body, _) = self.curl(&[
            "-w",
            "\n%{http_code}",
            "-F",
            &format!("file=@{path}"),
            "-F",
            "model=whisper-1",
            &format!("{}/v1/audio/transcriptions", self.base),
        ]);
        let (json, code) = body.rsplit_once('\n').unwrap();
        (
            code.parse().unwrap(),
            serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
        )
    }

    fn terminate(mut self) -> i32 {
        Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        self.child.wait().unwrap().code().unwrap_or(-1)
    }
}

fn jfk() -> String {
    format!("{DATA}/openai_whisper/jfk.flac")
}

#[test]
fn serves_real_transcripts_errors_and_shuts_down_cleanly() {
    let Some(model) = model_dir() else { return };
    let server = Server::start(&model, &[]);

    let (code, json) = server.transcribe_file(&jfk());
    assert_eq!(code, 200, "{json}");
    let text = json["text"].as_str().unwrap().to_lowercase();
    assert!(
        text.contains("my fellow americans") && text.contains("your country"),
        "{text}"
    );

    // A text file is not audio: 400 with a JSON error naming the upload, then normal service.
    let bogus = std::env::temp_dir().join(format!("dicta-serve-bogus-{}.wav", std::process::id()));
    std::fs::write(&bogus, "this is not audio").unwrap();
    let (code, json) = server.transcribe_file(bogus.to_str().unwrap());
    assert_eq!(code, 400, "{json}");
    assert!(
        json["error"]["type"].is_string() && json["error"]["message"].is_string(),
        "{json}"
    );
    let (code, _) = server.transcribe_file(&jfk());
    assert_eq!(code, 200);

    // The JSON batch endpoint keeps input order and per-input ids.
    let wav = std::fs::read(format!("{DATA}/pocketsphinx/cards_001.wav")).unwrap();
    let b64 = base64_encode(&wav);
    let body = serde_json::json!({"inputs": [
        {"id": "a", "audio_base64": b64},
        {"id": "b", "audio_base64": base64_encode(&std::fs::read(jfk()).unwrap())},
    ]});
    let body_path =
        std::env::temp_dir().join(format!("dicta-serve-body-{}.json", std::process::id()));
    std::fs::write(&body_path, body.to_string()).unwrap();
    let (out, ok) = server.curl(&[
        "-H",
        "content-type: application/json",
        "--data-binary",
        &format!("@{}", body_path.display()),
        &format!("{}/transcribe", server.base),
    ]);
    assert!(ok, "{out}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let results = json["results"].as_array().unwrap();
    assert_eq!(results[0]["id"], "a");
    assert_eq!(results[1]["id"], "b");
    assert!(results[1]["text"]
        .as_str()
        .unwrap()
        .to_lowercase()
        .contains("fellow americans"));

    // The official OpenAI SDK, unmodified, when it is installed.
    let sdk = Command::new("python3")
        .args(["-c", "import openai"])
        .status();
    if sdk.map(|s| s.success()).unwrap_or(false) {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../dicta-server/tests/openai_sdk_check.py"
        );
        let status = Command::new("python3")
            .arg(script)
            .args([
                "--base-url",
                &format!("{}/v1", server.base),
                "--expect",
                "fellow americans",
                // Whisper word alignment is not built yet, so verbose_json carries segments only.
                "--no-words",
            ])
            .status()
            .unwrap();
        assert!(status.success(), "openai SDK check failed");
    } else {
        eprintln!("note: python3 has no `openai` package; SDK check skipped");
    }

    assert_eq!(server.terminate(), 0, "SIGTERM must exit 0");
}

#[test]
fn concurrent_clients_share_batches_and_each_gets_its_own_transcript() {
    let Some(model) = model_dir() else { return };
    let server = Server::start(&model, &["--batch-wait-ms", "200"]);
    let files = [
        format!("{DATA}/openai_whisper/jfk.flac"),
        format!("{DATA}/pocketsphinx/goforward.16k.wav"),
    ];
    let body_for = |path: &str, id: &str| {
        let b64 = base64_encode(&std::fs::read(path).unwrap());
        let p =
            std::env::temp_dir().join(format!("dicta-serve-c-{id}-{}.json", std::process::id()));
        std::fs::write(
            &p,
            serde_json::json!({"inputs": [{"id": "x", "audio_base64": b64}]}).to_string(),
        )
        .unwrap();
        p
    };
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let path = body_for(&files[i % 2], &i.to_string());
            let url = format!("{}/transcribe", server.base);
            std::thread::spawn(move || {
                let out = Command::new("curl")
                    .args([
                        "-sS",
                        "-H",
                        "content-type: application/json",
                        "--data-binary",
                    ])
                    .arg(format!("@{}", path.display()))
                    .arg(url)
                    .output()
                    .unwrap();
                (
                    i,
                    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(),
                )
            })
        })
        .collect();
    let mut max_group = 0;
    for h in handles {
        let (i, json) = h.join().unwrap();
        let text = json["results"][0]["text"].as_str().unwrap().to_lowercase();
        if i % 2 == 0 {
            assert!(text.contains("fellow americans"), "client {i}: {text}");
        } else {
            assert!(
                text.contains("forward") && !text.contains("americans"),
                "client {i}: {text}"
            );
        }
        max_group = max_group.max(json["group_requests"].as_u64().unwrap());
    }
    assert!(max_group > 1, "no request shared a batch");
    assert_eq!(server.terminate(), 0);
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
