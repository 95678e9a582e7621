//! Runs `tests/openai_sdk_check.py` (the official `openai` Python SDK, unmodified) against an
//! in-process server with the echo backend. Skipped, with a note, where python3 lacks the
//! `openai` package (`python3 -m pip install openai`).

mod common;

use std::process::Command;
use std::sync::Arc;

use common::{samples, wav, EchoBackend, TestServer};
use dicta_server::ServerConfig;

fn sdk_available() -> bool {
    Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[tokio::test]
async fn official_openai_sdk_works_unmodified() {
    if !sdk_available() {
        eprintln!("skipped: python3 with the `openai` package is not available");
        return;
    }
    let cfg = ServerConfig {
        api_key: Some("test-key".into()),
        ..Default::default()
    };
    let server = TestServer::start(cfg, Arc::new(EchoBackend::multilingual())).await;
    let audio = std::env::temp_dir().join(format!("dicta-sdk-{}.wav", std::process::id()));
    std::fs::write(&audio, wav(&samples(20_000, 7), 16_000)).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_sdk_check.py");
    let args = [
        script.to_string(),
        "--base-url".into(),
        server.url("/v1"),
        "--api-key".into(),
        "test-key".into(),
        "--audio".into(),
        audio.display().to_string(),
        "--echo".into(),
        "--translate".into(),
    ];
    let out = tokio::task::spawn_blocking(move || Command::new("python3").args(args).output())
        .await
        .unwrap()
        .unwrap();
    let _ = std::fs::remove_file(&audio);
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "openai_sdk_check.py failed:\n{log}");
    assert!(log.contains("all openai SDK checks passed"), "{log}");
    server.shutdown().await.unwrap();
}
