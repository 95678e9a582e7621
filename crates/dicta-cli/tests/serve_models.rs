//! `dicta serve --model A --model B`: both models resident, each request picks one by name
//! (OpenAI form `model`, `/transcribe`'s `model`, the stream's `model`), `/v1/models` lists
//! them, an unknown name gets 400 naming the known ones, and each answers with its own model.

mod common;

use std::path::PathBuf;

use common::server::{curl, Server};
use common::{model_dir, DATA};

fn moonshine_dir() -> Option<PathBuf> {
    common::fetched_model(
        "moonshine-tiny",
        "DICTA_TEST_MOONSHINE_DIR",
        "encoder_model.ort",
    )
}

fn openai(base: &str, model: &str) -> (u16, serde_json::Value) {
    let (body, _) = curl(&[
        "-w",
        "\n%{http_code}",
        "-F",
        &format!("file=@{DATA}/openai_whisper/jfk.flac"),
        "-F",
        &format!("model={model}"),
        "-F",
        "response_format=verbose_json",
        &format!("{base}/v1/audio/transcriptions"),
    ]);
    let (json, code) = body.rsplit_once('\n').unwrap();
    (
        code.parse().unwrap(),
        serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
    )
}

#[test]
fn two_resident_models_each_answer_with_their_own_transcript() {
    let (Some(whisper), Some(moonshine)) = (model_dir(), moonshine_dir()) else {
        return;
    };
    let ws = whisper.display().to_string();
    let ms = moonshine.display().to_string();
    let server = Server::start(&whisper, &["--model", &ms]);
    let base = &server.base;

    let (models, _) = curl(&[&format!("{base}/v1/models")]);
    let models: serde_json::Value = serde_json::from_str(&models).unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [ws.as_str(), ms.as_str()]);

    // whisper-1 (what OpenAI clients send) and no model pick the first; a name picks its model.
    let (code, w) = openai(base, "whisper-1");
    assert_eq!(code, 200, "{w}");
    let (code, m) = openai(base, &ms);
    assert_eq!(code, 200, "{m}");
    let (wt, mt) = (w["text"].as_str().unwrap(), m["text"].as_str().unwrap());
    assert!(
        wt.contains("ask not what your country can do for you"),
        "{wt}"
    );
    assert!(
        mt.contains("ask not what your country can do for you"),
        "{mt}"
    );
    // Whisper's punctuation differs from Moonshine's here ("Americans, ask" vs "Americans ask").
    assert_ne!(wt, mt, "both requests were answered by the same model");

    // /transcribe names the model that answered.
    let audio = std::fs::read(format!("{DATA}/pocketsphinx/cards_001.wav")).unwrap();
    let b64 = common::base64(&audio);
    let body = serde_json::json!({"model": ms, "inputs": [{"audio_base64": b64}]}).to_string();
    let (out, _) = curl(&[
        "-H",
        "content-type: application/json",
        "-d",
        &body,
        &format!("{base}/transcribe"),
    ]);
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["model"], ms.as_str());
    assert!(
        out["results"][0]["text"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("clubs"),
        "{out}"
    );

    // An unknown name: 400 naming the known ones; the server keeps serving.
    let (code, e) = openai(base, "large-v3");
    assert_eq!(code, 400, "{e}");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("large-v3") && msg.contains(&ws) && msg.contains(&ms),
        "{msg}"
    );
    let (code, _) = openai(base, "whisper-1");
    assert_eq!(code, 200);

    // A WebSocket stream on the second model (picked in the query string) matches that model's
    // offline transcript of the same file (22.05 kHz: resampled as it arrives).
    let python_ok = std::process::Command::new("python3")
        .args(["-c", "import websockets"])
        .status()
        .is_ok_and(|s| s.success());
    if python_ok {
        let wav = format!("{DATA}/coqui_tts/LJ001-0001.wav");
        let (code, m) = openai_file(base, &ms, &wav);
        assert_eq!(code, 200, "{m}");
        let offline = m["text"].as_str().unwrap().trim().to_string();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/serve_stream_check.py");
        let url = format!("{}/v1/stream?model={ms}", base.replace("http://", "ws://"));
        let status = std::process::Command::new("python3")
            .arg(script)
            .args(["--url", &url, "--wav", &wav, "--expect", &offline])
            .args(["--max-word-errors", "4", "--speed", "10"])
            .status()
            .unwrap();
        assert!(status.success(), "Moonshine WebSocket stream check failed");
        // An unknown model in the query string: refused before the upgrade.
        let (out, _) = curl(&[
            "-i",
            "-H",
            "Connection: Upgrade",
            "-H",
            "Upgrade: websocket",
            "-H",
            "Sec-WebSocket-Version: 13",
            "-H",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            &format!("{base}/v1/stream?model=nope"),
        ]);
        assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    } else {
        eprintln!("note: python3 has no `websockets`; stream check skipped");
    }
    assert_eq!(server.terminate(), 0);
}

fn openai_file(base: &str, model: &str, path: &str) -> (u16, serde_json::Value) {
    let (body, _) = curl(&[
        "-w",
        "\n%{http_code}",
        "-F",
        &format!("file=@{path}"),
        "-F",
        &format!("model={model}"),
        &format!("{base}/v1/audio/transcriptions"),
    ]);
    let (json, code) = body.rsplit_once('\n').unwrap();
    (
        code.parse().unwrap(),
        serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
    )
}
