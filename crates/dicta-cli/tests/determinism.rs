//! The same input gives the same text whatever the thread count, the batch it lands in, or a
//! busy neighbour: `dicta transcribe` runs two real recordings five times each, with 1, 2 and
//! 4 model threads, while other threads spin, and all 15 copies of each must read the same.
//!
//! Needs the Whisper model: `DICTA_TEST_MODEL_DIR` (then it must exist) or /work/models/tiny.en-ct2.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

mod common;

use common::{model_dir, DATA};

#[test]
fn transcripts_do_not_depend_on_threads_batches_or_load() {
    let Some(model) = model_dir() else { return };
    let files = [
        format!("{DATA}/openai_whisper/jfk.flac"),
        format!("{DATA}/faster_whisper/hotwords.mp3"),
    ];
    // A busy neighbour: two spinning threads competing for the cores the whole time.
    let stop = Arc::new(AtomicBool::new(false));
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    let mut texts: Vec<Vec<String>> = vec![Vec::new(); files.len()];
    for threads in ["1", "2", "4"] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_dicta"));
        cmd.args([
            "transcribe",
            "--quiet",
            "--beam-size",
            "1",
            "--batch-size",
            "4",
        ])
        .args(["--threads", threads, "--model"])
        .arg(&model);
        // Interleaved copies in batches of 4, so that copies share batches with different
        // neighbours (a b b a | a b b a | a b) and sit at different rows.
        for k in 0..5 {
            cmd.arg(&files[k % 2]).arg(&files[(k + 1) % 2]);
        }
        let out = cmd.output().expect("run dicta transcribe");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for r in v["results"].as_array().unwrap() {
            let i = files.iter().position(|f| r["audio"] == *f).unwrap();
            texts[i].push(r["text"].as_str().unwrap().to_string());
        }
    }
    stop.store(true, Ordering::Relaxed);
    for s in spinners {
        s.join().unwrap();
    }
    for (f, t) in files.iter().zip(&texts) {
        assert_eq!(t.len(), 15, "{f}");
        let distinct: std::collections::BTreeSet<&String> = t.iter().collect();
        assert_eq!(distinct.len(), 1, "{f} gave {distinct:?}");
    }
}
