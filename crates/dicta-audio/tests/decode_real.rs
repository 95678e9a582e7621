//! Every recording of the shared real-speech set decodes with the rate, channel count and
//! duration ffprobe reported, and its 16 kHz mono version matches ffmpeg's conversion.

mod decode_support;

use decode_support::{shared_data, snr_db};
use dicta_audio::decode::{decode_path, load_path, load_raw_pcm, PcmEncoding};
use dicta_core::ErrorKind;

#[test]
fn shared_recordings_decode_like_ffmpeg() {
    let data = shared_data();
    let manifest = std::fs::read_to_string(data.join("manifest.jsonl"))
        .expect("shared/data/manifest.jsonl must be present next to the repository");
    let mut seen = std::collections::HashSet::new();
    let mut checked = 0;
    let mut worst = (f64::INFINITY, String::new());
    for line in manifest.lines() {
        let item: serde_json::Value = serde_json::from_str(line).unwrap();
        let audio = item["audio"].as_str().unwrap();
        if !seen.insert(audio.to_string()) {
            continue; // the two channel items share one stereo file
        }
        let path = data.join(audio);
        if item.get("channel").is_some() {
            // ffmpeg's per-channel copies let us check the down-mix exactly: (l + r) / 2.
            let ours = decode_path(&path).unwrap().samples;
            let stem = path.to_str().unwrap().trim_end_matches(".wav").to_string();
            let l = decode_path(std::path::Path::new(&format!("{stem}.ch0.16k.wav"))).unwrap();
            let r = decode_path(std::path::Path::new(&format!("{stem}.ch1.16k.wav"))).unwrap();
            assert_eq!(ours.len(), l.samples.len());
            for ((m, a), b) in ours.iter().zip(&l.samples).zip(&r.samples) {
                assert_eq!(*m, (a + b) / 2.0, "{audio}");
            }
            checked += 1;
            continue;
        }
        let codec = item["codec"].as_str().unwrap();
        let ours16k = if audio.ends_with(".raw") {
            // Headerless: not guessable as a container, so it must be refused, not misread.
            let e = decode_path(&path).unwrap_err();
            assert_eq!(e.kind, ErrorKind::UnsupportedFormat, "{audio}: {e}");
            let bytes = std::fs::read(&path).unwrap();
            load_raw_pcm(&bytes, PcmEncoding::I16Le, 16_000, audio).unwrap()
        } else {
            let decoded = decode_path(&path).unwrap_or_else(|e| panic!("{audio}: {e}"));
            assert_eq!(
                decoded.sample_rate as u64,
                item["sample_rate"].as_u64().unwrap(),
                "{audio}"
            );
            let want = item["duration_s"].as_f64().unwrap();
            // ffprobe reports container durations; MP3 frames add up to ~50 ms of slack, and
            // its Ogg/Opus duration counts the pre-skip (312 samples, 6.5 ms) that FFmpeg's
            // decode drops, as ours does.
            let tol = match codec {
                "mp3" => 0.06,
                "opus" => 0.007,
                _ => 0.002,
            };
            assert!(
                (decoded.duration() - want).abs() <= tol,
                "{audio}: {} s vs ffprobe {want} s",
                decoded.duration()
            );
            load_path(&path).unwrap()
        };
        // ffmpeg's conversion (its default resampler, and its MP3 decoder) is the reference.
        let Some(ref16k) = item["audio_16k_wav"].as_str() else {
            continue;
        };
        let reference = decode_path(&data.join(ref16k)).unwrap();
        assert_eq!(reference.sample_rate, 16_000);
        let r = &reference.samples;
        assert!(
            ours16k.len().abs_diff(r.len()) <= if codec == "mp3" { 1200 } else { 2 },
            "{audio}: {} vs {} samples",
            ours16k.len(),
            r.len()
        );
        let n = ours16k.len().min(r.len());
        let edge = 160; // 10 ms
        let snr = snr_db(&r[edge..n - edge], &ours16k[edge..n - edge]);
        if snr < worst.0 {
            worst = (snr, audio.to_string());
        }
        println!("{audio}: {codec}, SNR vs ffmpeg {snr:.1} dB");
        let native = item["sample_rate"].as_u64() == Some(16_000) && item["channels"] == 1;
        if native && codec != "mp3" {
            // Lossless 16 kHz mono: ffmpeg's copy holds the very same samples.
            assert_eq!(&ours16k, r, "{audio}");
        } else {
            // ffmpeg's default resampler (and MP3 decoder) is itself far from exact: on the
            // 22.05 kHz LJ Speech files soxr VHQ and ffmpeg agree only to 18-30 dB. This bound
            // checks alignment and level (one sample of misalignment drops SNR below 7 dB).
            let min = if codec == "mp3" { 25.0 } else { 15.0 };
            assert!(
                snr >= min,
                "{audio}: SNR {snr:.1} dB vs ffmpeg's 16 kHz copy"
            );
        }
        checked += 1;
    }
    println!(
        "{checked} recordings checked; worst SNR {:.1} dB ({})",
        worst.0, worst.1
    );
    assert!(checked >= 100);
}
