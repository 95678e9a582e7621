//! Parity of the Whisper log-mel front end with transformers' `WhisperFeatureExtractor`
//! (openai-whisper / faster-whisper math) on fixtures made by
//! `tests/fixtures/mel/gen_mel_fixtures.py`, plus negative controls showing that a perturbed
//! front end does not meet the same tolerance.

use std::path::{Path, PathBuf};

use dicta_audio::mel::{LogMel, MelConfig, MelSpectrogram};
use serde_json::Value;

/// Largest allowed |rust - reference| on any element.
const TOL: f32 = 1e-4;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mel")
}

fn data_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data"))
}

fn manifest() -> Value {
    let text = std::fs::read_to_string(fixtures().join("manifest.json")).expect("manifest.json");
    serde_json::from_str(&text).expect("manifest.json parses")
}

fn case(name: &str) -> Value {
    manifest()["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("case {name} not in manifest.json"))
        .clone()
}

fn read_npy_f32(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).expect("npy header");
    let shape = npy.shape().iter().map(|&d| d as usize).collect();
    (shape, npy.into_vec::<f32>().expect("f32 npy data"))
}

/// Minimal reader for the 16 kHz mono s16 WAV copies in shared/data; samples / 32768 exactly as
/// whisper's `load_audio` and the fixture script do.
fn read_wav_s16_mono(path: &Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        &b[0..4] == b"RIFF" && &b[8..12] == b"WAVE",
        "{}",
        path.display()
    );
    let mut pos = 12;
    let mut fmt_ok = false;
    while pos + 8 <= b.len() {
        let id = &b[pos..pos + 4];
        let len = u32::from_le_bytes(b[pos + 4..pos + 8].try_into().unwrap()) as usize;
        let body = &b[pos + 8..(pos + 8 + len).min(b.len())];
        if id == b"fmt " {
            let u16_at = |i: usize| u16::from_le_bytes([body[i], body[i + 1]]);
            let rate = u32::from_le_bytes(body[4..8].try_into().unwrap());
            fmt_ok = u16_at(0) == 1 && u16_at(2) == 1 && rate == 16_000 && u16_at(14) == 16;
        } else if id == b"data" {
            assert!(fmt_ok, "{}: not 16 kHz mono s16 PCM", path.display());
            return body
                .chunks_exact(2)
                .map(|s| f32::from(i16::from_le_bytes([s[0], s[1]])) / 32768.0)
                .collect();
        }
        pos += 8 + len + (len & 1);
    }
    panic!("{}: no data chunk", path.display());
}

/// The input signal named in manifest.json (stored .npy, or concatenated WAV pieces).
fn signal(name: &str) -> Vec<f32> {
    let src = &manifest()["signals"][name];
    if let Some(file) = src["npy"].as_str() {
        return read_npy_f32(&fixtures().join(file)).1;
    }
    let mut out = Vec::new();
    for piece in src["wav_concat"].as_array().expect("wav_concat") {
        let path = data_dir().join(piece[0].as_str().unwrap());
        let (a, b) = (
            piece[1].as_u64().unwrap() as usize,
            piece[2].as_u64().unwrap() as usize,
        );
        out.extend_from_slice(&read_wav_s16_mono(&path)[a..b]);
    }
    out
}

struct Loaded {
    samples: Vec<f32>,
    n_mels: usize,
    padding: usize,
    shape: Vec<usize>,
    expected: Vec<f32>,
}

fn load(name: &str) -> Loaded {
    let c = case(name);
    let samples = signal(c["signal"].as_str().unwrap());
    assert_eq!(
        samples.len() as u64,
        c["n_samples"].as_u64().unwrap(),
        "{name}: input length"
    );
    let (shape, expected) = read_npy_f32(&fixtures().join(c["expected"].as_str().unwrap()));
    Loaded {
        samples,
        n_mels: c["n_mels"].as_u64().unwrap() as usize,
        padding: c["padding"].as_u64().unwrap() as usize,
        shape,
        expected,
    }
}

/// Largest |got - want| over the common `[rows, cols]` top-left block of two row-major matrices.
fn max_abs_diff_overlap(want: &[f32], want_shape: &[usize], got: &MelSpectrogram) -> f32 {
    let rows = want_shape[0].min(got.n_mels);
    let cols = want_shape[1].min(got.n_frames);
    let mut worst = 0.0f32;
    for m in 0..rows {
        let w = &want[m * want_shape[1]..][..cols];
        let g = &got.data[m * got.n_frames..][..cols];
        for (a, b) in w.iter().zip(g) {
            let d = (a - b).abs();
            // NaN must count as a failure.
            if d.is_nan() || d > worst {
                worst = if d.is_nan() { f32::INFINITY } else { d };
            }
        }
    }
    worst
}

/// Ok(max |diff|) when shapes are identical and every element is within TOL.
fn parity(want: &[f32], want_shape: &[usize], got: &MelSpectrogram) -> Result<f32, String> {
    if want_shape != [got.n_mels, got.n_frames] {
        return Err(format!(
            "shape {:?} != expected {:?}",
            [got.n_mels, got.n_frames],
            want_shape
        ));
    }
    let worst = max_abs_diff_overlap(want, want_shape, got);
    if worst <= TOL {
        Ok(worst)
    } else {
        Err(format!("max |diff| {worst} > {TOL}"))
    }
}

fn check_case(name: &str) {
    let l = load(name);
    let mel = LogMel::new(MelConfig::whisper(l.n_mels)).unwrap();
    let got = mel.compute(&l.samples, l.padding);
    assert_eq!(got.data.len(), got.n_mels * got.n_frames);
    match parity(&l.expected, &l.shape, &got) {
        Ok(worst) => eprintln!("{name}: {:?}, max |diff| = {worst:.3e}", l.shape),
        Err(e) => panic!("{name}: {e}"),
    }
}

macro_rules! parity_tests {
    ($($test:ident => $case:literal),* $(,)?) => {
        $( #[test] fn $test() { check_case($case); } )*
        const TESTED_CASES: &[&str] = &[$($case),*];
    };
}

parity_tests! {
    tone_1s_80_mels_matches_reference => "tone_1s_mel80",
    tone_1s_128_mels_matches_reference => "tone_1s_mel128",
    speech_7s3_80_mels_matches_reference => "speech_7s3_mel80",
    speech_7s3_128_mels_matches_reference => "speech_7s3_mel128",
    speech_exactly_30s_matches_reference => "speech_30s_mel80",
    speech_45s_matches_reference => "speech_45s_mel80",
    faster_whisper_30s_padding_with_global_clamp_matches_reference => "speech_7s3_mel80_pad480000",
    input_shorter_than_reflect_pad_matches_reference => "tiny_170_mel80",
}

#[test]
fn every_manifest_case_has_a_test() {
    let m = manifest();
    let names: Vec<&str> = m["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let mut a = names.clone();
    let mut b = TESTED_CASES.to_vec();
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
}

// ---- Negative controls: each perturbed front end must miss the reference. ----

fn perturbed(cfg: MelConfig, samples: &[f32], padding: usize) -> MelSpectrogram {
    LogMel::new(cfg).unwrap().compute(samples, padding)
}

#[test]
fn hop_161_fails_on_frame_count_and_values() {
    let l = load("speech_7s3_mel80");
    let cfg = MelConfig {
        hop_length: 161,
        ..MelConfig::whisper(80)
    };
    let got = perturbed(cfg, &l.samples, l.padding);
    assert!(parity(&l.expected, &l.shape, &got).is_err());
    assert_ne!(got.n_frames, l.shape[1]);
    // Not just the shape: the frames both have in common drift apart too.
    assert!(max_abs_diff_overlap(&l.expected, &l.shape, &got) > 100.0 * TOL);
}

#[test]
fn hop_161_fails_on_the_padded_faster_whisper_case() {
    let l = load("speech_7s3_mel80_pad480000");
    let cfg = MelConfig {
        hop_length: 161,
        ..MelConfig::whisper(80)
    };
    let got = perturbed(cfg, &l.samples, l.padding);
    assert!(parity(&l.expected, &l.shape, &got).is_err());
    assert!(max_abs_diff_overlap(&l.expected, &l.shape, &got) > 100.0 * TOL);
}

#[test]
fn mels_79_fails_on_shape_and_values() {
    let l = load("speech_7s3_mel80");
    let got = perturbed(MelConfig::whisper(79), &l.samples, l.padding);
    assert!(parity(&l.expected, &l.shape, &got).is_err());
    assert!(max_abs_diff_overlap(&l.expected, &l.shape, &got) > 100.0 * TOL);
}

#[test]
fn shifted_filterbank_fails_with_identical_shape() {
    // Same shape, filters built for 16.1 kHz: only the values can catch it.
    let l = load("speech_30s_mel80");
    let cfg = MelConfig {
        sample_rate: 16_100,
        ..MelConfig::whisper(80)
    };
    let got = perturbed(cfg, &l.samples, l.padding);
    assert_eq!([got.n_mels, got.n_frames], [l.shape[0], l.shape[1]]);
    assert!(parity(&l.expected, &l.shape, &got).is_err());
}

#[test]
fn uncentred_frames_fail() {
    // An STFT without the centring pad puts frame t at samples [t*hop, t*hop + n_fft); that is
    // the centred front end run on the input minus its first n_fft/2 samples.
    let l = load("speech_45s_mel80");
    let got = MelConfig::whisper(80);
    let got = perturbed(got, &l.samples[200..], 200);
    assert_eq!(got.n_frames, l.shape[1]);
    assert!(parity(&l.expected, &l.shape, &got).is_err());
}

#[test]
fn single_sample_change_is_detected() {
    // The tolerance is tight enough to see one sample of the 1 s tone changed by 0.01.
    let mut l = load("tone_1s_mel80");
    l.samples[8_000] += 0.01;
    let got = perturbed(MelConfig::whisper(80), &l.samples, l.padding);
    assert!(parity(&l.expected, &l.shape, &got).is_err());
}

// ---- Invariances on real speech. ----

#[test]
fn faster_whisper_windows_slice_the_global_spectrogram() {
    let samples = signal("speech_45s");
    let mel = LogMel::new(MelConfig::whisper(80)).unwrap();
    let full = mel.compute(&samples, 480_000);
    assert_eq!(full.n_frames, 4500 + 3000);
    // Second 30 s window: frames 3000..6000, all inside the padded spectrogram.
    let w = full.window(3000, 3000);
    assert_eq!(w.len(), 80 * 3000);
    for m in 0..80 {
        assert_eq!(
            &w[m * 3000..(m + 1) * 3000],
            &full.row(m).unwrap()[3000..6000]
        );
    }
    // A window running past the end is zero-filled, as pad_or_trim does.
    let tail = full.window(6000, 3000);
    assert_eq!(&tail[..1500], &full.row(0).unwrap()[6000..7500]);
    assert!(tail[1500..3000].iter().all(|&v| v == 0.0));
}

#[test]
fn padding_only_adds_floor_frames_and_keeps_the_global_clamp() {
    // Appended zeros raise no maximum, so the clamp floor is unchanged: all frames whose window
    // does not reach the appended zeros are identical with and without padding.
    let samples = signal("speech_7s3");
    let mel = LogMel::new(MelConfig::whisper(80)).unwrap();
    let plain = mel.compute(&samples, 0);
    let padded = mel.compute(&samples, 480_000);
    let untouched = (samples.len() - 200) / 160; // frames ending before the last sample
    for m in 0..80 {
        assert_eq!(
            &plain.row(m).unwrap()[..untouched],
            &padded.row(m).unwrap()[..untouched]
        );
    }
    let floor = padded.data.iter().copied().fold(f32::INFINITY, f32::min);
    let max = padded
        .data
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    assert!(
        (max - floor - 2.0).abs() < 1e-5,
        "clamp spans 8 decades: (max-8+4)/4"
    );
    // Deep in the padding every value is the floor.
    assert!(padded.row(40).unwrap()[1000..].iter().all(|&v| v == floor));
}

#[test]
fn thread_count_does_not_change_a_single_bit() {
    let samples = signal("speech_45s");
    let mel = LogMel::new(MelConfig::whisper(128)).unwrap();
    let many = mel.compute(&samples, 0);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let one = pool.install(|| mel.compute(&samples, 0));
    assert_eq!(many, one);
}
