//! The live browser page: headless Debian Chromium whose fake microphone plays a real recording
//! opens `dicta serve`'s `/` (with an API key, which the page sends as the WebSocket
//! subprotocol), chooses utterances that end at pauses (a `config` message the server
//! acknowledges in `#status`), clicks `#start`, and the recording's words appear in `#transcript`
//! (browser_demo_check.py drives it over the DevTools protocol). `.ci/run` installs chromium and
//! sets DICTA_REQUIRE_CLIENTS, so there a missing browser fails instead of skipping.

mod common;

use std::path::Path;
use std::process::Command;

use common::server::Server;
use common::{client_available, model_dir, python_has, DATA};

#[test]
fn the_page_transcribes_the_microphone_in_headless_chromium() {
    let Some(model) = model_dir() else { return };
    let chromium = "/usr/bin/chromium";
    if !client_available("chromium", Path::new(chromium).is_file()) {
        return;
    }
    if !python_has("websockets.sync.client") {
        return;
    }
    let key = "browser-test-key";
    let server = Server::start(&model, &["--api-key", key]);
    // The page itself needs no key; its API calls carry the one typed in.
    let (page, ok) = server.curl(&[&format!("{}/", server.base)]);
    assert!(ok && page.contains("id=\"start\"") && page.contains("id=\"transcript\""));
    let shot = std::env::temp_dir().join(format!("dicta-demo-{}.png", std::process::id()));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser_demo_check.py");
    let out = Command::new("python3")
        .arg(script)
        .args(["--url", &format!("{}/", server.base)])
        // Chromium reads the fake capture file only by a plain absolute path (no `..`).
        .arg("--wav")
        .arg(std::fs::canonicalize(format!("{DATA}/openai_whisper/jfk.16k.wav")).unwrap())
        .args(["--expect", "fellow,country"])
        .args(["--key", key, "--chromium", chromium])
        // Endpointing chosen on the page: a `config` message, acknowledged before the audio.
        .args([
            "--endpoint",
            "on",
            "--expect-status",
            "utterances end at pauses",
        ])
        .arg("--screenshot")
        .arg(&shot)
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "browser check failed: {stdout}");
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let _ = std::fs::remove_file(&shot);
    assert_eq!(server.terminate(), 0);
}
