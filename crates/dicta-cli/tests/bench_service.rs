//! `dicta bench service` end to end: it spawns `dicta serve` with the real model, drives it with
//! two concurrent clients over a tiny workload of real recordings, and writes results whose
//! counts, latency order and transcripts are checked here — and the same audio sent as a file
//! (OpenAI route) and as raw float PCM must give the same transcripts.
//!
//! Needs the Whisper model: `DICTA_TEST_MODEL_DIR` (then it must exist) or /work/models/tiny.en-ct2.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

mod common;

use common::{model_dir, three_clip_manifest};

/// Runs `dicta bench service` and returns its results.json.
fn bench(model: &Path, dir: &Path, manifest: &Path, extra: &[&str]) -> Value {
    let name: String = extra
        .join("_")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let out = dir.join(format!("out-{name}"));
    let status = Command::new(env!("CARGO_BIN_EXE_dicta"))
        .args(["bench", "service", "--concurrency", "2", "--runs", "1"])
        .args(["--threads", "2", "--model"])
        .arg(model)
        .arg("-w")
        .arg(manifest)
        .arg("--out")
        .arg(&out)
        .args(extra)
        .env("DICTA_HOME", dir.join("home"))
        .env_remove("DICTA_API_KEY")
        .status()
        .expect("run dicta bench service");
    assert!(status.success(), "dicta bench service {extra:?}: {status}");
    let text = std::fs::read_to_string(out.join("results.json")).unwrap();
    for f in ["results.csv", "results.md"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    serde_json::from_str(&text).unwrap()
}

/// A WebSocket endpoint's arguments: frames of 200 ms as fast as the socket takes them (the
/// tests measure nothing, they check counts and texts), no warm-up, then `extra`.
fn socket_args<'a>(endpoint: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--endpoint",
        endpoint,
        "--realtime",
        "0",
        "--chunk-ms",
        "200",
        "--warmup",
        "0",
    ];
    args.extend_from_slice(extra);
    args
}

fn f(v: &Value) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("expected a number, got {v}"))
}

/// Checks one service row and returns its transcripts by id.
fn check_row(row: &Value) -> Vec<(String, String)> {
    assert_eq!(row["status"], "ok", "{row:#}");
    assert_eq!(row["concurrency"], 2);
    let runs = row["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run["requests"], 3);
    assert_eq!(run["ok"], 3);
    for k in ["rejected_503", "rejected_413", "rejected_4xx", "failed"] {
        assert_eq!(run[k], 0, "{k}");
    }
    // 11 s + 5 s + 5 s of audio, every request answered.
    assert!((f(&run["audio_seconds"]) - 21.0).abs() < 0.1, "{run}");
    assert!(f(&run["rtfx"]) > 0.0);
    let l = &run["latency"];
    let (p50, p90, p99, max) = (f(&l["p50"]), f(&l["p90"]), f(&l["p99"]), f(&l["max"]));
    assert!(0.0 < p50 && p50 <= p90 && p90 <= p99 && p99 <= max, "{l}");
    // The wall clock covers every request's latency.
    assert!(max <= f(&run["wall_seconds"]) + 1e-6);
    assert_eq!(row["median"]["rtfx"], run["rtfx"]);
    assert!(
        f(&row["wer"]) < 0.25,
        "tiny.en on clean speech: {}",
        row["wer"]
    );
    let reqs = row["requests"].as_array().unwrap();
    let ids: Vec<&str> = reqs.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        ["jfk", "left", "right"],
        "requests are reported in workload order"
    );
    reqs.iter()
        .map(|r| {
            assert_eq!(r["outcome"], "ok");
            let text = r["text"].as_str().unwrap().to_string();
            assert!(!text.trim().is_empty(), "{r}");
            (r["id"].as_str().unwrap().to_string(), text)
        })
        .collect()
}

#[test]
fn service_bench_reports_every_request_and_matches_the_engine() {
    let Some(model) = model_dir() else { return };
    let dir = std::env::temp_dir().join(format!("dicta-bench-service-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = three_clip_manifest(&dir, "tiny.jsonl");

    let doc = bench(
        &model,
        &dir,
        &manifest,
        &["--endpoint", "openai", "--vs-engine", "--warmup", "1"],
    );
    let row = &doc["rows"][0];
    let openai = check_row(row);
    assert!(openai[0]
        .1
        .to_lowercase()
        .contains("ask not what your country"));
    assert_eq!(row["endpoint"], "openai");
    assert_eq!(row["spawned"], true);
    // --vs-engine: the in-process arm ran the same three inputs, and the ratio is reported.
    let engine = &doc["engine_rows"][0];
    assert_eq!(engine["status"], "ok", "{engine:#}");
    assert_eq!(engine["inputs"], 3);
    assert!(f(&engine["rtfx_median"]) > 0.0);
    assert!(f(&row["service_vs_engine_median"]) > 0.0);
    assert_eq!(doc["meta"]["service"]["concurrency"], 2);

    // The same samples as raw float PCM must transcribe exactly as the WAV upload did.
    let doc = bench(
        &model,
        &dir,
        &manifest,
        &[
            "--endpoint",
            "raw",
            "--wire-encoding",
            "f32_le",
            "--warmup",
            "0",
        ],
    );
    let raw = check_row(&doc["rows"][0]);
    assert_eq!(doc["rows"][0]["wire_encoding"], "f32_le");
    assert_eq!(raw, openai);
    assert!(doc["engine_rows"].as_array().unwrap().is_empty());

    // A server started apart (`--url`: nothing spawned), driven through `/transcribe`.
    let mut server = Command::new(env!("CARGO_BIN_EXE_dicta"))
        .args([
            "serve",
            "--port",
            "0",
            "--beam-size",
            "1",
            "--threads",
            "2",
            "--model",
        ])
        .arg(&model)
        .env_remove("DICTA_API_KEY")
        .stdout(Stdio::piped())
        // Its "not ready yet" warnings while the bench polls /readyz are expected.
        .stderr(Stdio::null())
        .spawn()
        .expect("start dicta serve");
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    let doc = bench(
        &model,
        &dir,
        &manifest,
        &["--endpoint", "transcribe", "--warmup", "0", "--url", &url],
    );
    Command::new("kill")
        .arg(server.id().to_string())
        .status()
        .unwrap();
    assert!(
        server.wait().unwrap().success(),
        "SIGTERM stops the server cleanly"
    );
    let row = &doc["rows"][0];
    assert_eq!(
        (row["spawned"].as_bool(), row["url"].as_str()),
        (Some(false), Some(url.as_str()))
    );
    assert!(
        row["threads"].is_null(),
        "settings of a server not spawned are unknown"
    );
    assert_eq!(check_row(row), openai);

    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn stream_bench_reports_partials_and_finals() {
    let Some(model) = model_dir() else { return };
    let dir = std::env::temp_dir().join(format!("dicta-bench-stream-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = three_clip_manifest(&dir, "tiny.jsonl");
    // As fast as the socket takes the frames: the test measures nothing, it checks the counts.
    let doc = bench(&model, &dir, &manifest, &socket_args("stream", &[]));
    let row = &doc["rows"][0];
    let texts = check_row(row);
    assert_eq!(
        (row["endpoint"].as_str(), row["realtime"].as_bool()),
        (Some("stream"), Some(false))
    );
    assert!(
        texts[0].1.to_lowercase().contains("your country"),
        "{texts:?}"
    );
    let run = &row["runs"][0];
    // Every stream ended with `done` after its `end`, and the time between them is reported.
    assert!(f(&run["finalize_p50"]) >= 0.0);
    assert!(f(&run["partials_per_request"]) >= 0.0);
    for r in row["requests"].as_array().unwrap() {
        assert_eq!(r["http_status"], 101, "{r}");
        assert!(r["partials"].as_u64().is_some(), "{r}");
        assert!(f(&r["finalize_s"]) <= f(&r["latency_s"]), "{r}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `--endpoint realtime`: OpenAI Realtime sessions, turns found by the server's detector (and,
/// on a server without one, the buffer committed by hand), every item's transcript collected.
#[test]
fn realtime_bench_transcribes_each_session() {
    let (Some(model), Some(vad)) = (model_dir(), common::vad_dir()) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("dicta-bench-realtime-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = three_clip_manifest(&dir, "tiny.jsonl");
    let vad_arg = format!("--serve-arg=--vad-model={}", vad.display());
    for serve_arg in [vad_arg.as_str(), "--serve-arg=--no-vad"] {
        let doc = bench(
            &model,
            &dir,
            &manifest,
            &socket_args("realtime", &[serve_arg]),
        );
        let row = &doc["rows"][0];
        let texts = check_row(row);
        assert_eq!(row["endpoint"], "realtime");
        assert!(
            texts[0].1.to_lowercase().contains("your country"),
            "{serve_arg}: {texts:?}"
        );
        for r in row["requests"].as_array().unwrap() {
            assert_eq!(r["http_status"], 101, "{r}");
            assert!(f(&r["finalize_s"]) <= f(&r["latency_s"]), "{r}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
