//! Parity of the Whisper decoder with faster-whisper (CTranslate2 fp32) on real speech:
//! greedy and beam-5 transcripts of ~20 English utterances and one 53 s recording
//! (fixtures/whisper/reference.json, made by make_reference.py), and batched == alone.

mod whisper_common;

use dicta_engine::whisper::{DecodeOptions, LongFormMode, WhisperTranscriber};
use serde_json::Value;
use whisper_common::*;

fn reference() -> Value {
    read_fixture("reference.json")
}

/// Runs with decoding options other than the defaults (make_options_reference.py).
fn options_reference() -> Value {
    read_fixture("options_reference.json")
}

fn read_fixture(name: &str) -> Value {
    let s = std::fs::read_to_string(format!("{FIXTURES}/{name}")).expect(name);
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

fn parity(run_name: &str, beam: usize) {
    parity_with(run_name, opts(beam));
}

fn parity_with(run_name: &str, o: DecodeOptions) {
    parity_in(&reference(), run_name, o, 0, 95);
}

/// [`parity_with`] on `refs`, the audio after `lead_s` seconds of silence, with at least
/// `min_percent` of the transcripts identical.
fn parity_in(refs: &Value, run_name: &str, o: DecodeOptions, lead_s: usize, min_percent: usize) {
    let Some(model) = load_model() else { return };
    let items = refs["items"].as_array().unwrap();
    let audios: Vec<Vec<f32>> = items
        .iter()
        .map(|it| {
            let mut a = vec![0f32; 16_000 * lead_s];
            a.extend(load_wav(it["wav"].as_str().unwrap()));
            a
        })
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
        same_text * 100 >= n * min_percent,
        "{run_name}: only {same_text}/{n} transcripts identical"
    );
}

/// How many items' tokens differ between run `a` of `refs_a` and run `b` of `refs_b` (same
/// items by id): an option test is only worth its name where faster-whisper's own output moved.
fn moved(refs_a: &Value, a: &str, refs_b: &Value, b: &str) -> usize {
    let items_b = refs_b["items"].as_array().unwrap();
    refs_a["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|it| {
            let other = items_b
                .iter()
                .find(|o| o["id"] == it["id"])
                .expect("same items");
            tokens_of(&it["runs"][a]) != tokens_of(&other["runs"][b])
        })
        .count()
}

/// Parity of option run `run` of options_reference.json (95% of the transcripts identical, as
/// the default runs: in a degenerate loop float32 rounding alone can move a beam), after
/// checking that the option moved more of faster-whisper's transcripts against run `base` of
/// `base_refs` than that tolerance, so that ignoring the option fails.
fn option_parity(run: &str, base_refs: &Value, base: &str, o: DecodeOptions, lead_s: usize) {
    let refs = options_reference();
    let items = refs["items"].as_array().unwrap().len();
    let n = moved(&refs, run, base_refs, base);
    eprintln!("{run}: {n} of {items} transcripts differ from {base}");
    assert!(
        n * 100 > items * 5,
        "{run}: the option moves too few transcripts of the fixture to be tested"
    );
    parity_in(&refs, run, o, lead_s, 95);
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

/// Beam search with `patience` and `length_penalty` (faster-whisper's names and meaning: stop
/// after `round(beam · patience)` finished hypotheses, rank them by `logprob / len^penalty`).
#[test]
fn patience_and_length_penalty_options_match_faster_whisper() {
    option_parity(
        "beam5_patience3_lp2",
        &reference(),
        "beam5",
        DecodeOptions {
            patience: 3.0,
            length_penalty: 2.0,
            ..opts(5)
        },
        0,
    );
}

/// Words in `suppress_tokens` (with -1, the non-speech symbols) are never sampled.
#[test]
fn suppress_tokens_option_matches_faster_whisper() {
    option_parity(
        "greedy_suppress_words",
        &reference(),
        "greedy",
        DecodeOptions {
            suppress_tokens: vec![-1, 262, 290, 286, 257, 284],
            ..opts(1)
        },
        0,
    );
}

/// `suppress_blank` off and a later `max_initial_timestamp`, after 3 s of silence; the defaults
/// there too.
#[test]
fn suppress_blank_and_max_initial_timestamp_options_match_faster_whisper() {
    parity_in(&options_reference(), "greedy_lead3", opts(1), 3, 95);
    option_parity(
        "greedy_lead3_blank_initial10",
        &options_reference(),
        "greedy_lead3",
        DecodeOptions {
            suppress_blank: false,
            max_initial_timestamp: 10.0,
            ..opts(1)
        },
        3,
    );
}

/// `hotwords` after `<|startofprev|>`, alone and before an initial prompt.
#[test]
fn hotwords_option_matches_faster_whisper() {
    option_parity(
        "greedy_hotwords",
        &reference(),
        "greedy",
        DecodeOptions {
            hotwords: Some("Montreal Forced Aligner, MFA, Wizard of Oz, LJ Speech".into()),
            ..opts(1)
        },
        0,
    );
    option_parity(
        "greedy_hotwords_prompt",
        &reference(),
        "greedy",
        DecodeOptions {
            hotwords: Some("Montreal Forced Aligner, MFA".into()),
            initial_prompt: Some("Printing, in the Exhibition.".into()),
            ..opts(1)
        },
        0,
    );
}

/// `initial_prompt` as token ids (faster-whisper's `Iterable[int]`): taken as they are, here a
/// tokenization without the leading space a text prompt gets; and refused with text, or past
/// the vocabulary.
#[test]
fn initial_prompt_token_ids_match_faster_whisper() {
    let ids = vec![18557, 278, 11, 287, 262, 48064, 13];
    option_parity(
        "greedy_prompt_ids",
        &reference(),
        "greedy",
        DecodeOptions {
            initial_prompt_tokens: Some(ids.clone()),
            ..opts(1)
        },
        0,
    );
    let Some(model) = load_model() else { return };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let audio = vec![0f32; 16_000];
    let both = DecodeOptions {
        initial_prompt: Some("Printing".into()),
        initial_prompt_tokens: Some(ids),
        ..opts(1)
    };
    let past = DecodeOptions {
        initial_prompt_tokens: Some(vec![7, model.config.n_vocab as u32]),
        ..opts(1)
    };
    for (o, says) in [
        (both, "both as text and as token ids"),
        (past, "past the model"),
    ] {
        let e = tr
            .transcribe(&[&audio], &o, LongFormMode::Sequential, 8)
            .unwrap_err();
        assert_eq!(e.kind, dicta_core::ErrorKind::InvalidInput);
        assert!(e.message.contains(says), "{e}");
    }
}

/// `repetition_penalty` (greedy) and `no_repeat_ngram_size` (beam 5).
#[test]
fn repetition_options_match_faster_whisper() {
    option_parity(
        "greedy_repetition15",
        &reference(),
        "greedy",
        DecodeOptions {
            repetition_penalty: 1.5,
            ..opts(1)
        },
        0,
    );
    option_parity(
        "beam5_no_repeat2",
        &reference(),
        "beam5",
        DecodeOptions {
            no_repeat_ngram_size: 2,
            ..opts(5)
        },
        0,
    );
}

/// `max_new_tokens` cuts every window's search.
#[test]
fn max_new_tokens_option_matches_faster_whisper() {
    option_parity(
        "greedy_max8",
        &reference(),
        "greedy",
        DecodeOptions {
            max_new_tokens: Some(8),
            ..opts(1)
        },
        0,
    );
}

/// `clip_timestamps`: only 0.4–1.6 s and 2.0 s to the end of each utterance, the previous text
/// carried from clip to clip.
#[test]
fn clip_timestamps_option_matches_faster_whisper() {
    option_parity(
        "greedy_clips_conditioned",
        &reference(),
        "greedy",
        DecodeOptions {
            clip_timestamps: vec![0.4, 1.6, 2.0],
            condition_on_previous_text: true,
            ..opts(1)
        },
        0,
    );
}

/// `clip_timestamps` on the 53 s recording: a 35 s clip (its second window cut at the clip's
/// end), then the rest from 41.5 s, beam 5 with the previous-text prompt: token for token, in
/// every mode (clips always run the sequential seek loop), and the batched mode reports so.
#[test]
fn clip_timestamps_on_a_long_recording_match_faster_whisper() {
    let refs = options_reference();
    let long = serde_json::json!({ "items": refs["long_items"].clone() });
    let o = DecodeOptions {
        clip_timestamps: vec![3.0, 38.0, 41.5],
        condition_on_previous_text: true,
        ..opts(5)
    };
    parity_in(&long, "beam5_clips_conditioned", o.clone(), 0, 100);
    let Some(model) = load_model() else { return };
    let it = &refs["long_items"][0];
    let audio = load_wav(it["wav"].as_str().unwrap());
    let tr = WhisperTranscriber::new(&model).unwrap();
    let out = tr
        .transcribe(&[audio.as_slice()], &o, LongFormMode::Batched, 8)
        .unwrap();
    assert_eq!(out.long_form_mode, LongFormMode::Sequential);
    let t = out.transcripts[0].as_ref().unwrap();
    assert_eq!(
        t.text,
        it["runs"]["beam5_clips_conditioned"]["text"]
            .as_str()
            .unwrap()
    );
    // Nothing from outside the clips.
    assert!(t
        .segments
        .iter()
        .all(|s| (3.0..=38.0).contains(&s.start) && s.end <= 38.0 || s.start >= 41.5));
}

/// `prefix`: every hypothesis of the first window starts with it (after `<|0.00|>` with
/// timestamps), counted in the length but not the log-probability (the segment's avg_logprob
/// is compared too); with beam search, where the hotwords leave that window's prompt; and
/// without timestamps.
#[test]
fn prefix_option_matches_faster_whisper() {
    option_parity(
        "greedy_prefix",
        &reference(),
        "greedy",
        DecodeOptions {
            prefix: Some("Well, I think".into()),
            ..opts(1)
        },
        0,
    );
    option_parity(
        "beam5_prefix_hotwords",
        &reference(),
        "beam5",
        DecodeOptions {
            prefix: Some("So".into()),
            hotwords: Some("Montreal Forced Aligner, MFA".into()),
            ..opts(5)
        },
        0,
    );
    option_parity(
        "greedy_prefix_notimestamps",
        &reference(),
        "greedy_notimestamps",
        DecodeOptions {
            prefix: Some("Well, I think".into()),
            without_timestamps: true,
            ..opts(1)
        },
        0,
    );
}

/// `prefix` on the 53 s recording (beam 5, previous text): only the first window is forced,
/// and the next one takes the forced words as previous text; token for token.
#[test]
fn prefix_on_a_long_recording_matches_faster_whisper() {
    let refs = options_reference();
    let long = serde_json::json!({ "items": refs["long_items"].clone() });
    let o = DecodeOptions {
        prefix: Some("Sonnet one.".into()),
        condition_on_previous_text: true,
        ..opts(5)
    };
    parity_in(&long, "beam5_prefix_conditioned", o, 0, 100);
    let text = refs["long_items"][0]["runs"]["beam5_prefix_conditioned"]["text"]
        .as_str()
        .unwrap();
    assert_eq!(text.matches("Sonnet one.").count(), 1, "{text}");
}

/// The fallback thresholds decide which windows are decoded again at the next temperature:
/// each segment's temperature is faster-whisper's, and where no fallback happened the tokens
/// are too (sampled draws differ between the two implementations' generators).
#[test]
fn fallback_threshold_options_match_faster_whisper() {
    let Some(model) = load_model() else { return };
    let refs = options_reference();
    let items = refs["items"].as_array().unwrap();
    let audios: Vec<Vec<f32>> = items
        .iter()
        .map(|it| load_wav(it["wav"].as_str().unwrap()))
        .collect();
    let views: Vec<&[f32]> = audios.iter().map(|a| a.as_slice()).collect();
    let o = DecodeOptions {
        temperatures: vec![0.0, 0.5],
        compression_ratio_threshold: Some(1.3),
        log_prob_threshold: Some(-0.3),
        no_speech_threshold: Some(0.9),
        ..opts(1)
    };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let out = tr
        .transcribe(&views, &o, LongFormMode::Sequential, 8)
        .unwrap();
    let (mut fell_back, mut same) = (0, 0);
    for (it, got) in items.iter().zip(&out.transcripts) {
        let got = got.as_ref().unwrap();
        let want = &it["runs"]["greedy_thresholds"];
        let want_t: Vec<f32> = want["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["temperature"].as_f64().unwrap() as f32)
            .collect();
        let got_t: Vec<f32> = got
            .segments
            .iter()
            .map(|s| {
                s.temperature
                    .expect("Whisper segments carry their temperature")
            })
            .collect();
        if want_t.iter().any(|&t| t > 0.0) {
            fell_back += 1;
            assert!(
                got_t.iter().all(|&t| t == 0.5),
                "{}: faster-whisper fell back to 0.5, Dicta's temperatures {got_t:?}",
                it["id"]
            );
        } else {
            assert_eq!(got_t, want_t, "{}", it["id"]);
            if got.text == want["text"].as_str().unwrap() {
                same += 1;
            }
        }
    }
    let kept = items.len() - fell_back;
    eprintln!("fallback thresholds: {fell_back} fell back; {same}/{kept} others identical");
    assert!(
        fell_back > 0 && kept > 0,
        "the thresholds should split the set"
    );
    assert_eq!(
        same, kept,
        "windows kept at temperature 0 decode as faster-whisper's"
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
