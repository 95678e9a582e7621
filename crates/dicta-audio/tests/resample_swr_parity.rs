//! Parity of the default 16 kHz path with faster-whisper's `decode_audio` (PyAV → libswresample,
//! mono s16): same length and the same 16-bit samples, on real speech at 8, 16 (stereo s16),
//! 22.05, 44.1 (stereo) and 48 kHz (float input), on chirps at 32 kHz and 12 345 Hz (inexact
//! ratio) and on a 16 kHz float tone. Fixtures come from tests/fixtures/swr/make_fixtures.py.
//! The high-quality sinc resampler serves as the negative control: it must fail the same
//! comparison.

use std::path::PathBuf;

use dicta_audio::decode::{decode_path, load_bytes, load_path};
use dicta_audio::resample::{quantize_i16, resample_sinc};

fn swr_fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/swr")).join(name)
}

/// The reference output as 16-bit integers.
fn reference(case: &str) -> Vec<i32> {
    let name = format!("{case}.ref.npy");
    let bytes = std::fs::read(swr_fixture(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    npyz::NpyFile::new(&bytes[..])
        .unwrap()
        .into_vec::<i16>()
        .unwrap()
        .into_iter()
        .map(i32::from)
        .collect()
}

/// Our samples as 16-bit integers; they must lie on the 16-bit grid.
fn as_i16(samples: &[f32]) -> Vec<i32> {
    samples
        .iter()
        .map(|&v| {
            let s = v * 32_768.0;
            assert_eq!(s, s.round(), "sample {v} is not on the 16-bit grid");
            s as i32
        })
        .collect()
}

/// (equal length, largest |difference| in LSB, number of differing samples).
fn compare(ours: &[i32], reference: &[i32]) -> (bool, i32, usize) {
    let n = ours.len().min(reference.len());
    let diffs = ours[..n]
        .iter()
        .zip(&reference[..n])
        .map(|(a, b)| (a - b).abs());
    let max = diffs.clone().max().unwrap_or(0);
    (
        ours.len() == reference.len(),
        max,
        diffs.filter(|d| *d > 0).count(),
    )
}

fn assert_parity(case: &str, ours: &[f32]) {
    let reference = reference(case);
    let (same_len, max, count) = compare(&as_i16(ours), &reference);
    println!(
        "{case}: {} vs {} samples, max |diff| {max} LSB, {count} differ",
        ours.len(),
        reference.len()
    );
    assert!(
        same_len,
        "{case}: {} vs {} samples",
        ours.len(),
        reference.len()
    );
    assert!(
        max <= 1,
        "{case}: max |diff| {max} LSB ({count} samples differ)"
    );
}

/// (case, file); the first six have exact rate ratios (or none) and must match bit for bit.
const CASES: [(&str, &str); 8] = [
    ("lj_22050", "lj_22050.wav"),
    ("cv_48000_f32", "cv_48000_f32.wav"),
    ("apollo_8000", "apollo_8000.wav"),
    ("chirp_32000", "chirp_32000.wav"),
    ("jfk_44100_stereo", "jfk_44100_stereo.wav"),
    ("diar_16000_stereo", "diar_16000_stereo.wav"),
    ("tone_16000_f32", "tone_16000_f32.wav"),
    ("chirp_12345", "chirp_12345.wav"),
];

#[test]
fn load_path_matches_faster_whisper() {
    for (case, file) in CASES {
        assert_parity(case, &load_path(&swr_fixture(file)).unwrap());
    }
}

#[test]
fn load_bytes_equals_load_path() {
    for (_, file) in CASES {
        let path = swr_fixture(file);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            load_bytes(&bytes, file).unwrap(),
            load_path(&path).unwrap(),
            "{file}"
        );
    }
}

/// Beyond the 1-LSB contract: the port reproduces swr bit for bit, including the inexact
/// ratio (linear interpolation between phases) on this machine's FMA path.
#[test]
fn every_case_is_bit_exact() {
    for (case, file) in CASES {
        let ours = as_i16(&load_path(&swr_fixture(file)).unwrap());
        assert_eq!(ours, reference(case), "{case}");
    }
}

/// Negative control: the sinc resampler is better than swr's filter, which is exactly why it
/// does not reproduce the reference samples.
#[test]
fn the_sinc_resampler_does_not_match() {
    for (case, file) in CASES {
        if file.contains("16000") {
            continue; // nothing is resampled at 16 kHz
        }
        let audio = decode_path(&swr_fixture(file)).unwrap();
        let mut y = resample_sinc(&audio.samples, audio.sample_rate, 16_000).unwrap();
        quantize_i16(&mut y);
        let (same_len, max, count) = compare(&as_i16(&y), &reference(case));
        println!("{case} with resample_sinc: same length {same_len}, max |diff| {max} LSB, {count} differ");
        assert!(
            !same_len || max > 1,
            "{case}: the control unexpectedly matches"
        );
    }
}
