//! Parity of the Whisper decoder with faster-whisper (CTranslate2 fp32) on real speech:
//! greedy and beam-5 transcripts of ~20 English utterances and one 53 s recording
//! (fixtures/whisper/reference.json, made by make_reference.py), and batched == alone.

mod whisper_common;

use dicta_engine::whisper::{DecodeOptions, LongFormMode, WhisperTranscriber};
use serde_json::Value;
use whisper_common::*;

fn reference() -> Value {
    let s = std::fs::read_to_string(format!("{FIXTURES}/reference.json")).expect("reference.json");
    serde_json::from_str(&s).unwrap()
}

fn opts(beam: usize) -> DecodeOptions {
    DecodeOptions {
        beam_size: beam,
        temperatures: vec![0.0],
        condition_on_previous_text: false,
        language: Some("en".into()),
        ..DecodeOptions::default()
    }
}

fn tokens_of(run: &Value) -> Vec<Vec<u32>> {
    run["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap() as u32)
                .collect()
        })
        .collect()
}

fn parity(run_name: &str, beam: usize) {
    parity_with(run_name, opts(beam));
}

fn parity_with(run_name: &str, o: DecodeOptions) {
    let Some(model) = load_model() else { return };
    let refs = reference();
    let items = refs["items"].as_array().unwrap();
    let audios: Vec<Vec<f32>> = items
        .iter()
        .map(|it| load_wav(it["wav"].as_str().unwrap()))
        .collect();
    let views: Vec<&[f32]> = audios.iter().map(|a| a.as_slice()).collect();
    let tr = WhisperTranscriber::new(&model).unwrap();
    let out = tr
        .transcribe(&views, &o, LongFormMode::Sequential, 8)
        .unwrap();
    let mut same_text = 0;
    let mut same_tokens = 0;
    for (it, got) in items.iter().zip(&out.transcripts) {
        let got = got.as_ref().unwrap();
        let want = &it["runs"][run_name];
        let want_text = want["text"].as_str().unwrap();
        let got_tokens: Vec<Vec<u32>> = got.segments.iter().map(|s| s.tokens.clone()).collect();
        if got.text == want_text {
            same_text += 1;
        } else {
            eprintln!(
                "{run_name} {}:\n  want {want_text:?}\n  got  {:?}",
                it["id"], got.text
            );
        }
        if got_tokens == tokens_of(want) {
            same_tokens += 1;
            // Same tokens: segment times must agree too.
            for (s, w) in got
                .segments
                .iter()
                .zip(want["segments"].as_array().unwrap())
            {
                assert!(
                    (s.start - w["start"].as_f64().unwrap()).abs() < 1e-3,
                    "{}",
                    it["id"]
                );
                assert!(
                    (s.end - w["end"].as_f64().unwrap()).abs() < 1e-3,
                    "{}",
                    it["id"]
                );
                let lp = w["avg_logprob"].as_f64().unwrap() as f32;
                assert!(
                    (s.avg_logprob.unwrap() - lp).abs() < 0.02,
                    "{} avg_logprob {} vs {lp}",
                    it["id"],
                    s.avg_logprob.unwrap()
                );
                let cr = w["compression_ratio"].as_f64().unwrap() as f32;
                assert!(
                    (s.compression_ratio.unwrap() - cr).abs() < 1e-4,
                    "{}",
                    it["id"]
                );
            }
        }
    }
    let n = items.len();
    eprintln!("{run_name}: identical text {same_text}/{n}, identical tokens {same_tokens}/{n}");
    assert!(
        same_text * 100 >= n * 95,
        "{run_name}: only {same_text}/{n} transcripts identical"
    );
}

#[test]
fn greedy_matches_faster_whisper() {
    parity("greedy", 1);
}

#[test]
fn beam5_matches_faster_whisper() {
    parity("beam5", 5);
}

#[test]
fn greedy_without_timestamps_matches_faster_whisper() {
    // The prompt ends in <|notimestamps|>: no-speech probability comes from the SOT position
    // of a two-token prompt, and no timestamp rules apply.
    parity_with(
        "greedy_notimestamps",
        DecodeOptions {
            without_timestamps: true,
            ..opts(1)
        },
    );
}

#[test]
fn sampling_is_seeded_and_batch_invariant() {
    let Some(model) = load_model() else { return };
    let refs = reference();
    let items: Vec<&Value> = refs["items"].as_array().unwrap().iter().take(3).collect();
    let audios: Vec<Vec<f32>> = items
        .iter()
        .map(|it| load_wav(it["wav"].as_str().unwrap()))
        .collect();
    let views: Vec<&[f32]> = audios.iter().map(|a| a.as_slice()).collect();
    let tr = WhisperTranscriber::new(&model).unwrap();
    let o = DecodeOptions {
        temperatures: vec![1.0],
        best_of: 2,
        seed: 42,
        ..opts(1)
    };
    let toks = |out: &dicta_engine::whisper::TranscribeOutput| -> Vec<Vec<u32>> {
        out.transcripts
            .iter()
            .map(|t| {
                t.as_ref()
                    .unwrap()
                    .segments
                    .iter()
                    .flat_map(|s| s.tokens.clone())
                    .collect()
            })
            .collect()
    };
    let a = toks(
        &tr.transcribe(&views, &o, LongFormMode::Sequential, 3)
            .unwrap(),
    );
    let b = toks(
        &tr.transcribe(&views, &o, LongFormMode::Sequential, 1)
            .unwrap(),
    );
    assert_eq!(a, b, "same seed: batched == alone");
    assert!(a.iter().all(|t| !t.is_empty()));
}

#[test]
fn batched_rows_equal_alone() {
    let Some(model) = load_model() else { return };
    let refs = reference();
    let items: Vec<&Value> = refs["items"].as_array().unwrap().iter().take(8).collect();
    let audios: Vec<Vec<f32>> = items
        .iter()
        .map(|it| load_wav(it["wav"].as_str().unwrap()))
        .collect();
    let views: Vec<&[f32]> = audios.iter().map(|a| a.as_slice()).collect();
    let tr = WhisperTranscriber::new(&model).unwrap();
    let o = opts(1);
    let batched = tr
        .transcribe(&views, &o, LongFormMode::Sequential, 8)
        .unwrap();
    assert_eq!(batched.batch_sizes[0], 8);
    for (i, v) in views.iter().enumerate() {
        let alone = tr
            .transcribe(&[v], &o, LongFormMode::Sequential, 1)
            .unwrap();
        let a = alone.transcripts[0].as_ref().unwrap();
        let b = batched.transcripts[i].as_ref().unwrap();
        let ta: Vec<&Vec<u32>> = a.segments.iter().map(|s| &s.tokens).collect();
        let tb: Vec<&Vec<u32>> = b.segments.iter().map(|s| &s.tokens).collect();
        assert_eq!(ta, tb, "item {i}");
    }
}

/// RTFx of the greedy decoder on the first 8 reference items (prints; no timing assertions).
/// Run: cargo test --release -p dicta-engine --test whisper_parity -- --ignored --nocapture
/// and compare with fixtures/whisper/bench_faster_whisper.py on the same files.
#[test]
#[ignore]
fn bench_greedy_rtfx() {
    let Some(model) = load_model() else { return };
    let refs = reference();
    let items: Vec<&Value> = refs["items"].as_array().unwrap().iter().take(8).collect();
    let audios: Vec<Vec<f32>> = items
        .iter()
        .map(|it| load_wav(it["wav"].as_str().unwrap()))
        .collect();
    let views: Vec<&[f32]> = audios.iter().map(|a| a.as_slice()).collect();
    let secs: f64 = audios.iter().map(|a| a.len() as f64 / 16000.0).sum();
    let tr = WhisperTranscriber::new(&model).unwrap();
    let o = opts(1);
    for batch in [1, 8] {
        let t = std::time::Instant::now();
        tr.transcribe(&views, &o, LongFormMode::Sequential, batch)
            .unwrap();
        let wall = t.elapsed().as_secs_f64();
        eprintln!(
            "dicta greedy fp32 batch {batch}: {secs:.1} s audio in {wall:.2} s, RTFx {:.1}",
            secs / wall
        );
    }
}
