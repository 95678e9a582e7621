//! The high-quality resampler (`resample_sinc`): parity with soxr / scipy.signal.resample_poly,
//! plus alignment invariants.

mod decode_support;

use decode_support::{fixture, npy, snr_db};
use dicta_audio::decode::decode_path;
use dicta_audio::resample::{resample_sinc as resample, sinc_output_len as output_len};

/// Edges excluded from SNR comparisons: both references and ours treat the signal as zero
/// outside, but their filters differ in length, so the first/last few ms differ legitimately.
const EDGE_MS: usize = 5;

fn compare(stem: &str, file: &str, rate: u32) -> (f64, f64) {
    let audio = decode_path(&fixture(file)).unwrap();
    assert_eq!(audio.sample_rate, rate);
    let ours = resample(&audio.samples, rate, 16_000).unwrap();
    assert_eq!(ours.len(), output_len(audio.samples.len(), rate, 16_000));
    let edge = EDGE_MS * 16;
    let mut snrs = [0.0; 2];
    for (i, reference) in ["soxr16k", "poly16k"].iter().enumerate() {
        let r = npy(&format!("{stem}.{reference}.npy"));
        let n = r.len().min(ours.len());
        assert!(
            r.len().abs_diff(ours.len()) <= 1,
            "{stem}: {} vs {}",
            r.len(),
            ours.len()
        );
        snrs[i] = snr_db(&r[edge..n - edge], &ours[edge..n - edge]);
        println!("{stem} vs {reference}: SNR {:.1} dB", snrs[i]);
    }
    (snrs[0], snrs[1])
}

#[test]
fn speech_44k1_stereo_matches_soxr() {
    let (soxr, poly) = compare("jfk_44k1_stereo", "jfk_44k1_stereo.flac", 44_100);
    assert!(soxr >= 70.0, "SNR vs soxr {soxr:.1} dB");
    assert!(poly >= 55.0, "SNR vs resample_poly {poly:.1} dB");
}

#[test]
fn speech_8k_matches_soxr() {
    let (soxr, poly) = compare("apollo_8k", "apollo_8k.wav", 8000);
    assert!(soxr >= 70.0, "SNR vs soxr {soxr:.1} dB");
    assert!(poly >= 55.0, "SNR vs resample_poly {poly:.1} dB");
}

/// A pure tone well inside the pass band must come out as the same tone, at the same phase:
/// this pins the delay compensation to a small fraction of a sample for every common rate.
#[test]
fn tones_keep_amplitude_and_phase() {
    for from in [
        8000u32, 11_025, 22_050, 24_000, 32_000, 44_100, 48_000, 96_000, 12_345,
    ] {
        for freq in [440.0f64, 3000.0] {
            let n = from as usize; // one second
            let x: Vec<f32> = (0..n)
                .map(|i| (2.0 * std::f64::consts::PI * freq * i as f64 / from as f64).sin() as f32)
                .collect();
            let y = resample(&x, from, 16_000).unwrap();
            assert_eq!(y.len(), 16_000);
            let expect: Vec<f32> = (0..y.len())
                .map(|i| (2.0 * std::f64::consts::PI * freq * i as f64 / 16_000.0).sin() as f32)
                .collect();
            // Skip 40 ms at each end where the filter sees the zero padding.
            let snr = snr_db(&expect[640..16_000 - 640], &y[640..16_000 - 640]);
            println!("{from} Hz, {freq} Hz tone: SNR {snr:.1} dB");
            let min = if from == 12_345 { 60.0 } else { 80.0 };
            assert!(
                snr >= min,
                "{from} Hz -> 16 kHz, {freq} Hz tone: SNR {snr:.1} dB"
            );
        }
    }
}

#[test]
fn upsampling_preserves_tones_too() {
    let x: Vec<f32> = (0..16_000)
        .map(|i| (2.0 * std::f64::consts::PI * 1000.0 * i as f64 / 16_000.0).sin() as f32)
        .collect();
    let y = resample(&x, 16_000, 44_100).unwrap();
    assert_eq!(y.len(), 44_100);
    let expect: Vec<f32> = (0..44_100)
        .map(|i| (2.0 * std::f64::consts::PI * 1000.0 * i as f64 / 44_100.0).sin() as f32)
        .collect();
    let snr = snr_db(&expect[2000..42_000], &y[2000..42_000]);
    assert!(snr >= 80.0, "SNR {snr:.1} dB");
}

/// Content above the target Nyquist frequency must be removed, not folded back (aliasing).
#[test]
fn content_above_target_nyquist_is_rejected() {
    let from = 44_100u32;
    let x: Vec<f32> = (0..from as usize)
        .map(|i| (2.0 * std::f64::consts::PI * 12_000.0 * i as f64 / from as f64).sin() as f32)
        .collect();
    let y = resample(&x, from, 16_000).unwrap();
    let rms = (y[640..15_360]
        .iter()
        .map(|v| (*v as f64).powi(2))
        .sum::<f64>()
        / 14_720.0)
        .sqrt();
    // A 12 kHz tone would alias to 4 kHz at full level with naive decimation.
    assert!(rms < 1e-4, "alias residue rms {rms}");
}

#[test]
fn lengths_follow_the_rounding_rule_and_edges_are_handled() {
    for n in [0usize, 1, 2, 3, 100, 441, 8191, 8192, 8193, 44_100 * 3 + 7] {
        for from in [8000u32, 44_100, 48_000] {
            let x = vec![0.25f32; n];
            let y = resample(&x, from, 16_000).unwrap();
            assert_eq!(y.len(), output_len(n, from, 16_000), "n={n} from={from}");
            assert!(y.iter().all(|v| v.is_finite()));
        }
    }
    // A constant (DC) signal stays at its level away from the edges.
    let y = resample(&vec![0.25f32; 48_000], 48_000, 16_000).unwrap();
    for v in &y[400..15_600] {
        assert!((v - 0.25).abs() < 1e-4, "{v}");
    }
    let same = resample(&[0.1, 0.2, 0.3], 16_000, 16_000).unwrap();
    assert_eq!(same, vec![0.1, 0.2, 0.3]);
}

/// An impulse at input time t must peak at output time t (delay compensated exactly).
#[test]
fn impulse_lands_at_the_same_time() {
    for (from, at) in [
        (48_000u32, 24_000usize),
        (8000, 4000),
        (44_100, 22_050),
        (22_050, 11_025),
    ] {
        let mut x = vec![0.0f32; from as usize];
        x[at] = 1.0;
        let y = resample(&x, from, 16_000).unwrap();
        let peak = y
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.abs().partial_cmp(&b.1.abs()).unwrap())
            .unwrap()
            .0;
        assert_eq!(peak, 8000, "{from} Hz");
    }
}
