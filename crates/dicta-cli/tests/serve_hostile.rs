//! `dicta serve` against hostile uploads, as the real binary over loopback: decompression
//! bombs (a megabyte of FLAC that expands to hours of multichannel audio), several at once
//! under a container-like address-space limit, and a huge prompt. Each must be refused (or
//! cut) without the server's memory growing, while an honest request beside them is answered.
//!
//! Needs the Whisper model: `DICTA_TEST_MODEL_DIR` (then it must exist) or /work/models/tiny.en-ct2.

use std::path::{Path, PathBuf};
use std::time::Instant;

mod common;

use common::flac::silent_flac;
use common::server::{curl, Server};
use common::{model_dir, DATA};

fn jfk() -> String {
    format!("{DATA}/openai_whisper/jfk.flac")
}

/// Writes `bytes` to a fresh file in the test's temp folder.
fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dicta-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Posts `file` to the OpenAI route with extra form fields; (status, body).
fn post_openai(base: &str, file: &Path, fields: &[(&str, &str)]) -> (u16, serde_json::Value) {
    let mut args = vec![
        "-o".to_string(),
        "-".to_string(),
        "-w".to_string(),
        "\n%{http_code}".to_string(),
        "-F".to_string(),
        format!("file=@{}", file.display()),
    ];
    for (k, v) in fields {
        args.push("-F".into());
        args.push(format!("{k}={v}"));
    }
    args.push(format!("{base}/v1/audio/transcriptions"));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (out, code) = curl(&refs);
    assert_eq!(code, Some(0), "curl failed: {out}");
    let (body, status) = out.rsplit_once('\n').unwrap();
    let json = serde_json::from_str(body).unwrap_or(serde_json::Value::Null);
    (status.trim().parse().unwrap(), json)
}

fn words(v: &serde_json::Value) -> String {
    v["text"].as_str().unwrap_or_default().to_lowercase()
}

#[test]
fn decompression_bombs_are_refused_under_an_address_space_limit_and_memory_stays_flat() {
    let Some(model) = model_dir() else { return };
    // 2 h of 44.1 kHz stereo (the header says so), 3500 s of 8-channel 48 kHz, and 2 h of
    // 44.1 kHz stereo whose header states no length: each about a megabyte.
    let bombs = [
        ("stereo-2h.flac", silent_flac(7200.0, 2, 44_100, true)),
        ("eight-ch.flac", silent_flac(3500.0, 8, 48_000, true)),
        (
            "stereo-2h-unsized.flac",
            silent_flac(7200.0, 2, 44_100, false),
        ),
    ];
    for (name, b) in &bombs {
        assert!(b.len() < 2 << 20, "{name} is {} bytes", b.len());
    }
    let paths: Vec<PathBuf> = bombs.iter().map(|(n, b)| temp_file(n, b)).collect();

    let server = Server::start_limited(&model, &["--max-audio-seconds", "600"], 2 << 30);
    let (status, v) = post_openai(&server.base, Path::new(&jfk()), &[]);
    assert_eq!(status, 200, "{v}");
    let want = words(&v);
    assert!(want.contains("ask not what your country"), "{want}");
    let before = server.status_kib("VmHWM");

    // All three bombs at once, each twice, with an honest request among them.
    let started = Instant::now();
    let handles: Vec<_> = paths
        .iter()
        .chain(paths.iter())
        .map(|p| {
            let (base, p) = (server.base.clone(), p.clone());
            std::thread::spawn(move || post_openai(&base, &p, &[]))
        })
        .collect();
    let honest = post_openai(&server.base, Path::new(&jfk()), &[]);
    for (h, path) in handles.into_iter().zip(paths.iter().chain(paths.iter())) {
        let (status, v) = h.join().unwrap();
        assert_eq!(status, 413, "{}: {v}", path.display());
        assert_eq!(v["error"]["type"], "limit_exceeded", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("max_audio_seconds"),
            "{v}"
        );
    }
    assert_eq!(honest.0, 200, "{}", honest.1);
    assert_eq!(words(&honest.1), want);
    let growth_mib = server.status_kib("VmHWM").saturating_sub(before) / 1024;
    eprintln!(
        "bombs answered in {:.2} s; peak RSS grew by {growth_mib} MiB",
        started.elapsed().as_secs_f64()
    );
    assert!(growth_mib < 200, "peak RSS grew by {growth_mib} MiB");
    // Still serving.
    let (status, v) = post_openai(&server.base, Path::new(&jfk()), &[]);
    assert_eq!((status, words(&v)), (200, want));
}

#[test]
fn a_huge_prompt_is_cut_to_what_whisper_uses_without_memory_growth() {
    let Some(model) = model_dir() else { return };
    let server = Server::start(&model, &[]);
    let (status, plain) = post_openai(&server.base, Path::new(&jfk()), &[]);
    assert_eq!(status, 200, "{plain}");
    let before = server.status_kib("VmHWM");
    // 30 MB of prompt whose last words are what a short prompt would say.
    let tail = " Ask not.";
    let mut prompt = "lorem ipsum dolor sit amet ".repeat(30 << 20 >> 5);
    prompt.push_str(tail);
    let prompt_file = temp_file("prompt.txt", prompt.as_bytes());
    let started = Instant::now();
    let field = format!("<{}", prompt_file.display());
    let (status, huge) = post_openai(&server.base, Path::new(&jfk()), &[("prompt", &field)]);
    let huge_s = started.elapsed().as_secs_f64();
    assert_eq!(status, 200, "{huge}");
    // The same answer as a prompt of just its last 8 KiB, cut at a word.
    let short = &prompt[prompt.len() - 6000..];
    let short = &short[short.find(' ').unwrap()..];
    let short_file = temp_file("short.txt", short.as_bytes());
    let field = format!("<{}", short_file.display());
    let (status, cut) = post_openai(&server.base, Path::new(&jfk()), &[("prompt", &field)]);
    assert_eq!(status, 200, "{cut}");
    assert_eq!(words(&huge), words(&cut));
    let growth_mib = server.status_kib("VmHWM").saturating_sub(before) / 1024;
    eprintln!("30 MB prompt answered in {huge_s:.2} s; peak RSS grew by {growth_mib} MiB");
    assert!(growth_mib < 100, "peak RSS grew by {growth_mib} MiB");
}

/// An oversized body is answered 413 before it is used, and a client that writes the whole
/// body before reading (Python's urllib) still reads that answer instead of a reset.
#[test]
fn urllib_reads_the_413_of_an_oversized_body() {
    let Some(model) = model_dir() else { return };
    let server = Server::start(&model, &["--max-body-mib", "1"]);
    let script = r#"
import sys, urllib.request, urllib.error, json
url = sys.argv[1] + "/v1/transcriptions/raw?encoding=i16_le"
body = b"\0" * (8 << 20)
got = []
for _ in range(10):
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"))
        got.append("200")
    except urllib.error.HTTPError as e:
        got.append(str(e.code) + ":" + json.load(e)["error"]["type"])
    except Exception as e:
        got.append(type(e).__name__)
print(" ".join(got))
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, &server.base])
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        ["413:limit_exceeded"; 10].join(" "),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A 16-bit 16 kHz WAV of `copies` of jfk.flac back to back (11 s each).
fn long_jfk(copies: usize) -> Vec<u8> {
    let one = dicta_audio::decode::load_path(Path::new(&jfk())).unwrap();
    let mut wav = std::io::Cursor::new(Vec::new());
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::new(&mut wav, spec).unwrap();
    for _ in 0..copies {
        for s in &one {
            w.write_sample((s * 32768.0).round().clamp(-32768.0, 32767.0) as i16)
                .unwrap();
        }
    }
    w.finalize().unwrap();
    wav.into_inner()
}

/// A long upload that times out (504) or whose client leaves stops at its next model call:
/// the next request does not wait for the abandoned work, and the cancellation is counted.
#[test]
fn abandoned_work_is_cancelled_and_the_next_request_is_served_at_once() {
    let Some(model) = model_dir() else { return };
    let long = temp_file("long.wav", &long_jfk(40)); // 440 s: about a minute of model time
    let server = Server::start(&model, &["--request-timeout-s", "5"]);
    let (status, v) = post_openai(&server.base, Path::new(&jfk()), &[]);
    assert_eq!(status, 200, "{v}");
    let want = words(&v);
    let alone = Instant::now();
    post_openai(&server.base, Path::new(&jfk()), &[]);
    let alone_s = alone.elapsed().as_secs_f64();

    // 1. Timed out: 504 after 5 s.
    let (status, v) = post_openai(&server.base, &long, &[]);
    assert_eq!(
        (status, v["error"]["type"].as_str()),
        (504, Some("timeout")),
        "{v}"
    );
    let next = Instant::now();
    let (status, v) = post_openai(&server.base, Path::new(&jfk()), &[]);
    let after_timeout_s = next.elapsed().as_secs_f64();
    assert_eq!((status, words(&v)), (200, want.clone()));

    // 2. The client disconnects after 1 s (curl's --max-time).
    let (_, code) = curl(&[
        "-o",
        "/dev/null",
        "--max-time",
        "1",
        "-F",
        &format!("file=@{}", long.display()),
        &format!("{}/v1/audio/transcriptions", server.base),
    ]);
    assert_eq!(code, Some(28), "curl should have given up (timeout)");
    let next = Instant::now();
    let (status, v) = post_openai(&server.base, Path::new(&jfk()), &[]);
    let after_disconnect_s = next.elapsed().as_secs_f64();
    assert_eq!((status, words(&v)), (200, want));
    eprintln!(
        "jfk alone {alone_s:.2} s; after a 504 {after_timeout_s:.2} s; after a disconnect {after_disconnect_s:.2} s"
    );
    let cancelled = server.metric("dicta_cancelled_inputs_total").unwrap_or(0.0);
    assert_eq!(
        cancelled, 2.0,
        "both abandoned uploads were cancelled midway"
    );
}

/// A short request that arrives while a long upload is being transcribed is answered while the
/// long one still runs (its own lane, windows taking turns on the model), with its usual text.
/// Before, it waited in the same batcher until the long request was done or abandoned.
#[test]
fn a_short_request_is_answered_while_a_long_upload_runs() {
    let Some(model) = model_dir() else { return };
    let long = temp_file("long-lane.wav", &long_jfk(55)); // 605 s: far more than 20 s of model time
    let server = Server::start(&model, &[]);
    let (status, v) = post_openai(&server.base, Path::new(&jfk()), &[]);
    assert_eq!(status, 200, "{v}");
    let want = words(&v);

    let long_done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let upload = {
        let (url, long, done) = (
            format!("{}/v1/audio/transcriptions", server.base),
            long.clone(),
            long_done.clone(),
        );
        std::thread::spawn(move || {
            // The client gives up after 20 s, which cancels the rest of its work.
            let (_, code) = curl(&[
                "-o",
                "/dev/null",
                "--max-time",
                "20",
                "-F",
                &format!("file=@{}", long.display()),
                &url,
            ]);
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            code
        })
    };
    // Let the long request reach the model first.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let t = Instant::now();
    let (status, v) = post_openai(&server.base, Path::new(&jfk()), &[]);
    let short_s = t.elapsed().as_secs_f64();
    let long_still_running = !long_done.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!((status, words(&v)), (200, want));
    assert!(
        long_still_running,
        "the short request was answered only after the long one ended ({short_s:.1} s)"
    );
    assert_eq!(
        upload.join().unwrap(),
        Some(28),
        "the long upload should have run past 20 s"
    );
    eprintln!("jfk behind a 605 s upload: {short_s:.2} s");
}
