//! Silero VAD v6 against faster-whisper's onnxruntime run on the same samples (fixtures from
//! tests/fixtures/silero/make_fixtures.py): every window's speech probability within 1e-4, and
//! state carried across calls giving the same probabilities as one call.

use std::path::PathBuf;

use dicta_models::vad::{silero, SileroState, SileroVad, SILERO_FILE};

/// `DICTA_TEST_VAD_DIR` (a failure when it holds no model), else the default cache.
fn model_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DICTA_TEST_VAD_DIR").map(PathBuf::from) {
        let p = dir.join(SILERO_FILE);
        assert!(
            p.is_file(),
            "DICTA_TEST_VAD_DIR={} holds no {SILERO_FILE}",
            dir.display()
        );
        return Some(p);
    }
    let p = PathBuf::from(std::env::var("HOME").unwrap_or_default())
        .join(".cache/dicta/models/silero-vad")
        .join(SILERO_FILE);
    if p.is_file() {
        Some(p)
    } else {
        eprintln!(
            "SKIPPED: no Silero VAD at {} (set DICTA_TEST_VAD_DIR)",
            p.display()
        );
        None
    }
}

fn reference() -> serde_json::Value {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/silero/reference.json"
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn audio(rel: &str) -> Vec<f32> {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data")).join(rel);
    dicta_audio::decode::load_path(&p).unwrap()
}

#[test]
fn probabilities_match_onnxruntime() {
    let Some(path) = model_path() else { return };
    let vad = SileroVad::load(&path).unwrap();
    let reference = reference();
    for rec in reference["recordings"].as_array().unwrap() {
        let name = rec["audio"].as_str().unwrap();
        let samples = audio(name);
        assert_eq!(
            samples.len() as u64,
            rec["samples"].as_u64().unwrap(),
            "{name}"
        );
        let want: Vec<f64> = rec["probs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_f64().unwrap())
            .collect();
        let got = vad.speech_probs(&samples).unwrap();
        assert_eq!(got.len(), want.len(), "{name}");
        let worst = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (f64::from(*g) - w).abs())
            .fold(0.0, f64::max);
        eprintln!("{name}: {} windows, max |Δp| {worst:.2e}", got.len());
        assert!(worst < 1e-4, "{name}: max |Δp| {worst}");
        // Speech and silence are both present, so the check is not vacuous.
        assert!(
            want.iter().any(|&p| p > 0.8) && want.iter().any(|&p| p < 0.3),
            "{name}"
        );
    }
}

#[test]
fn state_carries_across_calls() {
    let Some(path) = model_path() else { return };
    let vad = SileroVad::load(&path).unwrap();
    let samples = audio("openai_whisper/jfk.16k.wav");
    let n = samples.len() / silero::WINDOW;
    let mut rows = Vec::new();
    for i in 0..n {
        let ctx = if i == 0 {
            vec![0.0; silero::CONTEXT]
        } else {
            samples[i * silero::WINDOW - silero::CONTEXT..i * silero::WINDOW].to_vec()
        };
        rows.extend(ctx);
        rows.extend_from_slice(&samples[i * silero::WINDOW..(i + 1) * silero::WINDOW]);
    }
    let whole = vad.forward(&rows, &mut SileroState::default()).unwrap();
    let mut state = SileroState::default();
    let mut parts = Vec::new();
    // Uneven pieces, one of a single row.
    for piece in [1usize, 37, 100, n - 138] {
        let (head, rest) = rows.split_at(piece * silero::INPUT);
        parts.extend(vad.forward(head, &mut state).unwrap());
        rows = rest.to_vec();
    }
    assert_eq!(parts.len(), whole.len());
    for (a, b) in parts.iter().zip(&whole) {
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }
    assert!(vad.forward(&[0.0; 100], &mut state).is_err());
    // A state of the wrong width is refused, not run.
    let mut narrow = SileroState {
        h: vec![0.0; 64],
        c: vec![0.0; 128],
    };
    assert!(vad.forward(&[0.0; silero::INPUT], &mut narrow).is_err());
}

/// Timing report (nothing asserted on time): `speech_probs` over ten minutes of real speech
/// (a dev recording repeated), best of 3, and over its first 30 s, best of 20.
#[test]
#[ignore = "timing report; run explicitly"]
fn speech_probs_speed() {
    let Some(path) = model_path() else { return };
    let vad = SileroVad::load(&path).unwrap();
    let one = audio("resemblyzer/X2zqiX6yL3I.16k.wav");
    let long: Vec<f32> = one.iter().copied().cycle().take(16_000 * 600).collect();
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = std::time::Instant::now();
        std::hint::black_box(vad.speech_probs(&long).unwrap());
        best = best.min(t.elapsed().as_secs_f64());
    }
    eprintln!(
        "speech_probs of 600 s: {:.0} ms (RTFx {:.0})",
        best * 1e3,
        600.0 / best
    );
    // A diarization-sized input: 30 s (best of 20).
    let short = &long[..16_000 * 30];
    let mut best = f64::INFINITY;
    for _ in 0..20 {
        let t = std::time::Instant::now();
        std::hint::black_box(vad.speech_probs(short).unwrap());
        best = best.min(t.elapsed().as_secs_f64());
    }
    eprintln!(
        "speech_probs of 30 s: {:.1} ms (RTFx {:.0})",
        best * 1e3,
        30.0 / best
    );
}
