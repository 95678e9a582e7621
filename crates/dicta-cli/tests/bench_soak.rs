//! `dicta bench service --soak-minutes`: a 20 s soak (samples every 5 s) against a spawned
//! `dicta serve` with the real model — one real-time stream looping over three real recordings
//! on one socket and one upload client — must write a sample per interval with the server's RSS,
//! and count uploads and utterances that all succeeded.
//!
//! Needs the Whisper model: `DICTA_TEST_MODEL_DIR` (then it must exist) or /work/models/tiny.en-ct2.

use std::process::Command;

mod common;

use common::{model_dir, three_clip_manifest};

#[test]
fn soak_samples_rss_and_counts_every_request() {
    let Some(model) = model_dir() else { return };
    let dir = std::env::temp_dir().join(format!("dicta-bench-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = three_clip_manifest(&dir, "soak.jsonl");
    let out = dir.join("out");
    // 20 s in 5 s samples; 2 utterances per socket so that sockets are reopened within the run.
    let status = Command::new(env!("CARGO_BIN_EXE_dicta"))
        .args(["bench", "service", "--threads", "2", "--model"])
        .arg(&model)
        .arg("-w")
        .arg(&manifest)
        .arg("--out")
        .arg(&out)
        .args(["--soak-minutes", "0.3334", "--soak-sample-s", "5"])
        .args(["--soak-streams", "1", "--soak-uploads", "1"])
        .args([
            "--soak-upload-gap-ms",
            "200",
            "--soak-stream-utterances",
            "2",
        ])
        .env("DICTA_HOME", dir.join("home"))
        .env_remove("DICTA_API_KEY")
        .status()
        .expect("run dicta bench service --soak-minutes");
    assert!(
        status.success(),
        "dicta bench service --soak-minutes: {status}"
    );

    let csv = std::fs::read_to_string(out.join("soak.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
    };
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    // Sample 0 before the load, at 5, 10 and 15 s, and the last one after the 20 s are over.
    assert_eq!(rows.len(), 5, "{csv}");
    let num = |r: &Vec<String>, c: &str| -> f64 {
        r[col(c)]
            .parse()
            .unwrap_or_else(|_| panic!("{c} = {:?} in {csv}", r[col(c)]))
    };
    let sum = |c: &str| rows.iter().map(|r| num(r, c)).sum::<f64>();
    for (k, r) in rows.iter().enumerate() {
        assert_eq!(num(r, "sample") as usize, k);
        assert!(
            num(r, "rss_mb") > 10.0,
            "the server's RSS is sampled: {csv}"
        );
        if k > 0 {
            assert!(num(r, "t_s") > num(&rows[k - 1], "t_s"));
            assert!(num(r, "cpu_cores") > 0.0, "{csv}");
        }
    }
    assert!(num(&rows[4], "t_s") >= 20.0);
    assert!(sum("uploads_ok") >= 1.0, "{csv}");
    // 20 s at real time: the 11 s clip and at least one 5 s clip end within it.
    assert!(sum("streams_ok") >= 2.0, "{csv}");
    assert_eq!(sum("uploads_failed"), 0.0, "{csv}");
    assert_eq!(sum("streams_failed"), 0.0, "{csv}");

    let md = std::fs::read_to_string(out.join("soak.md")).unwrap();
    assert!(md.contains("| t | RSS MB |"), "{md}");
    assert!(md.contains("errors 0 (uploads 0 of"), "{md}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("soak.json")).unwrap()).unwrap();
    let s = &doc["summary"];
    assert_eq!(s["errors"], 0, "{s}");
    assert!(s["rss_max_mb"].as_f64().unwrap() >= s["rss_last_mb"].as_f64().unwrap());
    assert!(s["rss_growth_mb"].is_number(), "{s}");
    assert_eq!(doc["soak"]["streams"], 1);
    std::fs::remove_dir_all(&dir).ok();
}
