//! Throughput measurement of the log-mel front end (no timing assertions; run on demand):
//! `cargo test --release -p dicta-audio --test mel_speed -- --ignored --nocapture`

use std::time::Instant;

use dicta_audio::mel::{LogMel, MelConfig};

/// A deterministic speech-like test signal (two drifting partials plus noise), `secs` long.
fn signal(secs: usize) -> Vec<f32> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..secs * 16_000)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let noise = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            let t = i as f32 / 16_000.0;
            0.3 * (2.0 * std::f32::consts::PI * (220.0 + 40.0 * (0.3 * t).sin()) * t).sin()
                + 0.1 * (2.0 * std::f32::consts::PI * 2500.0 * t).sin()
                + 0.05 * noise
        })
        .collect()
}

#[test]
#[ignore = "measurement, prints timings; run with --ignored --nocapture"]
fn measure_log_mel_throughput() {
    for n_mels in [80, 128] {
        let mel = LogMel::new(MelConfig::whisper(n_mels)).unwrap();
        for (label, secs, padding) in [("30 s", 30, 0), ("1 h + 30 s pad", 3600, 480_000)] {
            let x = signal(secs);
            let _warm = mel.compute(&x[..16_000], 0);
            let runs = if secs > 60 { 3 } else { 20 };
            let t0 = Instant::now();
            let mut frames = 0;
            for _ in 0..runs {
                frames = mel.compute(&x, padding).n_frames;
            }
            let per = t0.elapsed().as_secs_f64() / f64::from(runs);
            eprintln!(
                "n_mels {n_mels}, {label}: {frames} frames in {:.2} ms ({:.0}x real time, {} threads)",
                per * 1e3,
                secs as f64 / per,
                rayon::current_num_threads()
            );
        }
    }
}
