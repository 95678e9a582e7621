//! The engine's CTC path end to end on the tiny random-weight wav2vec2 parity models and real
//! speech: window plans, stitching vs one pass, batching invariance, input order, padding bound,
//! beam + LM decoding of the joined log-probs.
//!
//! The tiny models have random weights, so their "text" is gibberish: tests compare modes with
//! each other, never with reference transcripts.
//!
//! Two models are used:
//! - `layer` (fixture): layer-norm feature encoder, attention mask, two transformer layers with
//!   *global* attention. Its rows are independent of batch company, so batching invariance is
//!   tested on it. Its frames at 800 Hz make a 30 s window a 24 000² attention matrix per head,
//!   so tests that run it use short windows.
//! - `local`: the same weights with `num_hidden_layers = 0` and `do_normalize = false` (made in
//!   a temp folder from the fixture), i.e. conv front end + positional conv + layer norms + CTC
//!   head. Every output frame depends only on ±7 frames (the positional conv, kernel 15) around
//!   it, so it is the model for which "stitched == one pass" is a precise statement. The full
//!   `layer` model attends to the whole input and normalises each window's waveform, so no
//!   window of it reproduces a one-pass frame exactly; see
//!   `stitched_rows_are_the_retaining_windows_rows` for what holds there instead.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use dicta_core::ErrorKind;
use dicta_decode::{
    greedy_decode, BeamConfig, BeamDecoder, LmFusion, LmWeights, LogProbs, NgramLm, Unigrams,
    Vocabulary,
};
use dicta_engine::{
    AudioSource, CtcDecoderKind, CtcOptions, Engine, EngineConfig, Input, ModelFamily,
};
use dicta_models::ctc::load_ctc_model;

const SR: usize = 16_000;

fn fixture(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn layer_dir() -> PathBuf {
    fixture("dicta-models/tests/fixtures/wav2vec2/layer")
}

fn data(p: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data")).join(p)
}

/// The `local` model (see the module docs), built once per test process.
fn local_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("dicta-engine-ctc-local-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(layer_dir()).unwrap() {
            let p = entry.unwrap().path();
            std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
        }
        let edit = |name: &str, key: &str, value: serde_json::Value| {
            let path = dir.join(name);
            let mut cfg: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            cfg[key] = value;
            std::fs::write(&path, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
        };
        edit("config.json", "num_hidden_layers", 0.into());
        edit("preprocessor_config.json", "do_normalize", false.into());
        dir
    })
}

/// Short real English clips (1–10 s), in a fixed order.
fn clips() -> Vec<(String, Vec<f32>)> {
    [
        "openai_whisper/jfk.16k.wav",
        "faster_whisper/hotwords.16k.wav",
        "speechbrain/spk1_snt1.wav",
        "speechbrain/spk2_snt2.wav",
        "pocketsphinx/cards_001.wav",
        "pocketsphinx/goforward.16k.wav",
        "coqui_tts/LJ001-0001.16k.wav",
        "coqui_tts/LJ001-0002.16k.wav",
        "coqui_tts/LJ001-0004.16k.wav",
        "coqui_tts/LJ001-0008.16k.wav",
        "coqui_tts/LJ001-0011.16k.wav",
    ]
    .iter()
    .map(|p| {
        let audio = dicta_audio::decode::load_path(&data(p)).unwrap();
        (p.to_string(), audio)
    })
    .collect()
}

/// Real speech of exactly `seconds`: long-form and short recordings joined end to end.
fn speech(seconds: f64) -> Vec<f32> {
    let n = (seconds * SR as f64).round() as usize;
    let mut out = Vec::with_capacity(n);
    static SOURCES: OnceLock<Vec<Vec<f32>>> = OnceLock::new();
    let sources = SOURCES.get_or_init(|| {
        let apollo = data("whisper_timestamped/apollo11.16k.wav");
        let mut v = vec![dicta_audio::decode::load_path(&apollo).unwrap()];
        v.extend(clips().into_iter().map(|(_, a)| a));
        v
    });
    for s in sources.iter().cycle() {
        if out.len() >= n {
            break;
        }
        out.extend_from_slice(&s[..s.len().min(n - out.len())]);
    }
    out
}

fn engine(dir: &Path, config: EngineConfig) -> Engine {
    Engine::load(dir, config).unwrap()
}

/// Windows short enough for the global-attention `layer` model (1 599 frames each).
fn short_windows(batch_size: usize) -> EngineConfig {
    EngineConfig {
        batch_size,
        chunk_seconds: 2.0,
        overlap_seconds: 0.5,
        ..EngineConfig::default()
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn texts(out: &dicta_engine::EngineOutput) -> Vec<String> {
    out.results
        .iter()
        .map(|r| r.as_ref().unwrap().text.clone())
        .collect()
}

#[test]
fn model_family_is_detected_from_the_folder() {
    assert_eq!(ModelFamily::detect(&layer_dir()).unwrap(), ModelFamily::Ctc);
    let e = engine(&layer_dir(), EngineConfig::default());
    assert_eq!(e.family(), ModelFamily::Ctc);
    assert!(e.whisper().is_none() && e.ctc_model().is_some());

    let dir = std::env::temp_dir().join(format!("dicta-engine-family-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert_eq!(
        ModelFamily::detect(&dir).unwrap_err().kind,
        ErrorKind::ModelLoad
    );
    std::fs::write(dir.join("config.json"), r#"{"model_type": "whisper"}"#).unwrap();
    assert_eq!(ModelFamily::detect(&dir).unwrap(), ModelFamily::Whisper);
    std::fs::write(dir.join("config.json"), r#"{"model_type": "bert"}"#).unwrap();
    let err = ModelFamily::detect(&dir).unwrap_err();
    assert!(err.message.contains("\"bert\""), "{err}");
    std::fs::write(dir.join("model.bin"), b"ct2").unwrap();
    assert_eq!(ModelFamily::detect(&dir).unwrap(), ModelFamily::Whisper);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn thirty_seconds_is_one_window_and_65_seconds_retains_every_frame_once() {
    let e = engine(local_dir(), EngineConfig::default());
    let model = e.ctc_model().unwrap();
    assert_eq!(model.samples_per_frame(), 20);

    let one = e.plan_windows(30 * SR).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!((one[0].start_sample, one[0].len_samples), (0, 30 * SR));
    assert_eq!(one[0].retain, 0..model.frames_for_samples(30 * SR));

    let n = 65 * SR;
    let w = e.plan_windows(n).unwrap();
    let spans: Vec<_> = w.iter().map(|w| (w.start_sample, w.len_samples)).collect();
    // Windows every 25 s; the last one ends with the recording (50–65 s).
    assert_eq!(
        spans,
        [(0, 30 * SR), (25 * SR, 30 * SR), (50 * SR, 15 * SR)]
    );
    let total = model.frames_for_samples(n);
    let mut seen = vec![0u8; total];
    for win in &w {
        assert!(win.retain.end <= win.n_frames);
        for f in win.retained_recording_frames() {
            seen[f] += 1;
        }
    }
    assert!(
        seen.iter().all(|&c| c == 1),
        "every frame retained exactly once"
    );

    // The engine runs exactly that plan: three windows, and the joined matrix has every frame.
    let audio = speech(65.0);
    let (lp, stats) = e
        .ctc_log_probs(&[Input::from_samples("65s", audio)])
        .unwrap();
    assert_eq!(stats.windows, 3);
    assert_eq!(stats.frames, w.iter().map(|w| w.n_frames).sum::<usize>());
    assert_eq!(lp[0].as_ref().unwrap().frames(), total);
}

#[test]
fn stitched_four_minutes_equals_one_pass() {
    // Default 30 s windows with 5 s overlap: every retained frame has >= 2.5 s (2 000 frames)
    // of context on both sides, far more than the local model's ±7 frames, so stitching must
    // reproduce the one-pass matrix everywhere (float noise only: convs see different
    // lengths, so their blocking differs).
    let e = engine(local_dir(), EngineConfig::default());
    let audio = speech(240.0);
    let (lp, stats) = e
        .ctc_log_probs(&[Input::from_samples("4min", audio.clone())])
        .unwrap();
    let stitched = lp.into_iter().next().unwrap().unwrap();
    assert_eq!(stats.windows, 10);
    let model = load_ctc_model(local_dir(), &candle_core::Device::Cpu).unwrap();
    let full = model.forward(&[&audio]).unwrap();
    assert_eq!(stitched.frames(), full.lengths[0]);
    let d = max_abs_diff(stitched.as_slice(), full.row(0));
    assert!(d < 1e-4, "max |stitched - one pass| = {d}");

    let vocab = Vocabulary::from_labels(&model.vocab().tokens).unwrap();
    let one_pass = LogProbs::new(full.row(0).to_vec(), full.lengths[0], vocab.len()).unwrap();
    let expected = greedy_decode(&one_pass, &vocab).unwrap();
    let out = e.transcribe(&[Input::from_samples("4min", audio)]);
    let t = out.results[0].as_ref().unwrap();
    assert_eq!(t.text, expected.text);
    assert!(!t.text.is_empty());
}

#[test]
fn frames_differ_from_one_pass_only_near_cut_points_when_context_is_short() {
    // 1 s windows overlapping by 10 ms (7 shared frames): a retained frame may have only
    // 3 frames of context past its window's edge, less than the ±7 the local model reads, so
    // frames next to a cut see the zero padding at the window edge. Farther than 8 frames
    // from a cut, windows see everything the one pass sees, and the frames must agree.
    let cfg = EngineConfig {
        chunk_seconds: 1.0,
        overlap_seconds: 0.01,
        ..EngineConfig::default()
    };
    let e = engine(local_dir(), cfg);
    let audio = speech(20.0);
    let (lp, _) = e
        .ctc_log_probs(&[Input::from_samples("20s", audio.clone())])
        .unwrap();
    let stitched = lp.into_iter().next().unwrap().unwrap();
    let model = load_ctc_model(local_dir(), &candle_core::Device::Cpu).unwrap();
    let full = model.forward(&[&audio]).unwrap();
    let v = full.vocab_size;
    let cuts: Vec<usize> = e
        .plan_windows(audio.len())
        .unwrap()
        .iter()
        .skip(1)
        .map(|w| w.retained_recording_frames().start)
        .collect();
    assert_eq!(cuts.len(), 20);
    let (mut near_diff, mut far) = (0usize, 0usize);
    for t in 0..stitched.frames() {
        let d = max_abs_diff(stitched.row(t), &full.row(0)[t * v..(t + 1) * v]);
        let dist = cuts.iter().map(|&c| t.abs_diff(c)).min().unwrap();
        if dist >= 8 {
            far += 1;
            assert!(d < 1e-4, "frame {t}, {dist} frames from a cut: diff {d}");
        } else if d >= 1e-4 {
            near_diff += 1;
        }
    }
    assert!(far > stitched.frames() * 9 / 10);
    // The edge effect is real: some frames near cuts do differ (this is what the margin buys).
    assert!(near_diff > 0);
}

#[test]
fn stitched_rows_are_the_retaining_windows_rows() {
    // For the global-attention model, each recording frame equals the frame computed by the
    // one window that retains it, run alone (and nothing is glued from text).
    let e = engine(&layer_dir(), short_windows(16));
    let audio = speech(9.3);
    let (lp, _) = e
        .ctc_log_probs(&[Input::from_samples("9s", audio.clone())])
        .unwrap();
    let stitched = lp.into_iter().next().unwrap().unwrap();
    let model = e.ctc_model().unwrap();
    let v = model.vocab().len();
    let windows = e.plan_windows(audio.len()).unwrap();
    assert_eq!(windows.len(), 6);
    for w in &windows {
        let alone = model
            .forward(&[&audio[w.start_sample..w.end_sample()]])
            .unwrap();
        let row = alone.row(0);
        let frames = w.retained_recording_frames();
        let d = max_abs_diff(
            &stitched.as_slice()[frames.start * v..frames.end * v],
            &row[w.retain.start * v..w.retain.end * v],
        );
        assert!(d < 1e-4, "window {}: diff {d}", w.index);
    }
}

#[test]
fn text_is_the_same_alone_in_company_and_at_any_batch_size() {
    let clips = clips();
    let inputs: Vec<Input> = clips
        .iter()
        .map(|(id, a)| Input::from_samples(id.clone(), a.clone()))
        .collect();
    let batched = engine(&layer_dir(), short_windows(16));
    let single = engine(&layer_dir(), short_windows(1));

    let all16 = batched.transcribe(&inputs);
    let all1 = single.transcribe(&inputs);
    assert!(all16.stats.batch_sizes.iter().any(|&b| b > 1));
    assert!(all1.stats.batch_sizes.iter().all(|&b| b == 1));
    let ids: Vec<&str> = all16
        .results
        .iter()
        .map(|r| r.as_ref().unwrap().id.as_str())
        .collect();
    let expected_ids: Vec<&str> = clips.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, expected_ids, "results come back in input order");
    assert_eq!(texts(&all16), texts(&all1));

    let alone: Vec<String> = inputs
        .iter()
        .map(|i| texts(&single.transcribe(std::slice::from_ref(i))).remove(0))
        .collect();
    assert_eq!(texts(&all16), alone);
    assert!(alone.iter().any(|t| !t.is_empty()));

    // Reversed input order: same texts, reversed.
    let reversed: Vec<Input> = inputs.iter().rev().cloned().collect();
    let mut rev = texts(&batched.transcribe(&reversed));
    rev.reverse();
    assert_eq!(rev, alone);

    // Log-probs agree to float noise between batch sizes (the attention mask hides padding).
    let (lp16, _) = batched.ctc_log_probs(&inputs).unwrap();
    let (lp1, _) = single.ctc_log_probs(&inputs).unwrap();
    for (a, b) in lp16.iter().zip(&lp1) {
        let d = max_abs_diff(
            a.as_ref().unwrap().as_slice(),
            b.as_ref().unwrap().as_slice(),
        );
        assert!(d < 1e-4, "batch 16 vs 1: {d}");
    }
}

#[test]
fn padding_bound_holds_on_a_mixed_length_workload() {
    // Recordings from 2 s to 60 s with the default 30 s / 5 s windows and 0.15 bound.
    let lengths: Vec<f64> = (0..24).map(|i| 2.0 + 58.0 * f64::from(i) / 23.0).collect();
    let inputs: Vec<Input> = lengths
        .iter()
        .enumerate()
        .map(|(i, &s)| Input::from_samples(format!("r{i}"), speech(s)))
        .collect();
    let e = engine(local_dir(), EngineConfig::default());
    let out = e.transcribe(&inputs);
    assert!(out.results.iter().all(|r| r.is_ok()));
    let s = &out.stats;
    assert_eq!(s.batch_sizes.len(), s.padding_fractions.len());
    assert_eq!(s.batch_sizes.iter().sum::<usize>(), s.windows);
    for &p in &s.padding_fractions {
        assert!(
            p <= 0.15,
            "batch padding {p} over the bound: {:?}",
            s.padding_fractions
        );
    }
    assert!(s.batch_sizes.iter().all(|&b| b <= 8));
    let mean = s.windows as f64 / s.batch_sizes.len() as f64;
    assert!(mean > 2.0, "batches too small: {:?}", s.batch_sizes);
    assert!(s.padded_frames >= s.frames);
    let overall = (s.padded_frames - s.frames) as f64 / s.padded_frames as f64;
    assert!(overall <= 0.15);
}

#[test]
fn beam_with_lm_decodes_each_recording_once_from_its_joined_log_probs() {
    let lm_path = fixture("dicta-decode/tests/fixtures/sub.arpa.gz");
    let weights = LmWeights {
        alpha: 0.5,
        beta: 1.0,
        ..LmWeights::default()
    };
    let beam = BeamConfig {
        beam_width: 8,
        ..BeamConfig::default()
    };
    let cfg = EngineConfig {
        decode_workers: 3,
        ctc: CtcOptions {
            decoder: CtcDecoderKind::Beam,
            lm: Some(lm_path.clone()),
            lm_weights: weights,
            beam: beam.clone(),
            pause_seconds: Some(0.3),
            ..CtcOptions::default()
        },
        ..short_windows(4)
    };
    let e = engine(&layer_dir(), cfg);
    let inputs = vec![
        Input::from_samples("long", speech(7.5)),
        Input::from_samples("short", speech(1.2)),
    ];
    let out = e.transcribe(&inputs);
    let (lps, _) = e.ctc_log_probs(&inputs).unwrap();

    let model = e.ctc_model().unwrap();
    let vocab = Vocabulary::from_labels(&model.vocab().tokens).unwrap();
    let lm = std::sync::Arc::new(NgramLm::from_path(&lm_path).unwrap());
    let fusion = LmFusion::new(lm, weights, Unigrams::FromLm);
    let decoder = BeamDecoder::new(vocab, Some(std::sync::Arc::new(fusion)), beam).unwrap();
    for ((r, lp), input) in out.results.iter().zip(&lps).zip(&inputs) {
        let t = r.as_ref().unwrap();
        let hyp = decoder.decode(lp.as_ref().unwrap()).unwrap();
        assert_eq!(t.text, hyp.text, "{}", input.id);
        let AudioSource::Samples(s) = &input.source else {
            unreachable!()
        };
        assert!((t.duration - s.len() as f64 / SR as f64).abs() < 1e-9);
        // Segments hold the words in order, with times on the 20-sample frame grid.
        let words: Vec<&dicta_core::Word> = t.segments.iter().flat_map(|s| &s.words).collect();
        assert_eq!(words.len(), hyp.words.len());
        let joined: Vec<&str> = t.segments.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(joined.join(" "), t.text);
        for (w, span) in words.iter().zip(&hyp.words) {
            assert_eq!(w.start, span.start_frame as f64 * 20.0 / SR as f64);
            assert!(w.start <= w.end && w.end <= t.duration);
        }
    }
    assert!(out.stats.decoder_seconds > 0.0);
}

#[test]
fn a_broken_input_fails_only_its_own_entry() {
    let clips = clips();
    let good = |i: usize| Input::from_samples(clips[i].0.clone(), clips[i].1.clone());
    let inputs = vec![
        good(0),
        Input::from_samples("empty", Vec::new()),
        Input::from_samples("nan", vec![0.1, f32::NAN, 0.2]),
        Input::from_path("/nonexistent/dicta.wav"),
        Input::from_samples("tiny", vec![0.01; 10]),
        good(2),
    ];
    let e = engine(&layer_dir(), short_windows(8));
    let out = e.transcribe(&inputs);
    assert_eq!(
        out.results[1].as_ref().unwrap_err().kind,
        ErrorKind::EmptyInput
    );
    assert_eq!(
        out.results[2].as_ref().unwrap_err().kind,
        ErrorKind::CorruptInput
    );
    assert!(out.results[3].is_err());
    // Shorter than one receptive field: no frames, an empty transcript rather than an error.
    let tiny = out.results[4].as_ref().unwrap();
    assert!(tiny.text.is_empty() && tiny.segments.is_empty());
    let alone = e.transcribe(&[good(0), good(2)]);
    assert_eq!(out.results[0].as_ref().unwrap().text, texts(&alone)[0]);
    assert_eq!(out.results[5].as_ref().unwrap().text, texts(&alone)[1]);
}

/// Audio decoding runs ahead of the model in rounds of `lookahead_windows` windows: the round
/// size changes which windows share a batch, never a result, and results keep input order with
/// broken inputs failing in place.
#[test]
fn look_ahead_changes_no_result_and_keeps_input_order() {
    let clips = clips();
    let mut inputs: Vec<Input> = clips
        .iter()
        .map(|(id, a)| Input::from_samples(id.clone(), a.clone()))
        .collect();
    inputs.insert(3, Input::from_path("/nonexistent/dicta-lookahead.wav"));
    inputs.insert(6, Input::from_samples("long", speech(12.0)));
    inputs.insert(8, Input::from_samples("nan", vec![0.1, f32::NAN]));
    let ids: Vec<&str> = inputs.iter().map(|i| i.id.as_str()).collect();
    let run = |lookahead: Option<usize>| {
        let e = engine(
            &layer_dir(),
            EngineConfig {
                lookahead_windows: lookahead,
                ..short_windows(4)
            },
        );
        (e.transcribe(&inputs), e.ctc_log_probs(&inputs).unwrap().0)
    };
    // Every input decoded before the model starts: one schedule over all windows.
    let (all, all_lp) = run(Some(usize::MAX));
    assert!(all.results[3].is_err());
    assert_eq!(
        all.results[8].as_ref().unwrap_err().kind,
        ErrorKind::CorruptInput
    );
    for lookahead in [Some(1), None] {
        let (out, lp) = run(lookahead);
        for (k, (a, b)) in out.results.iter().zip(&all.results).enumerate() {
            match (a, b) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a.id, ids[k], "input order");
                    assert_eq!(a.text, b.text, "input {k}, look-ahead {lookahead:?}");
                    assert_eq!(a.segments, b.segments);
                }
                (Err(a), Err(b)) => assert_eq!(a.kind, b.kind),
                _ => panic!("input {k}: {a:?} vs {b:?}"),
            }
        }
        for (a, b) in lp.iter().zip(&all_lp) {
            if let (Ok(a), Ok(b)) = (a, b) {
                let d = max_abs_diff(a.as_slice(), b.as_slice());
                assert!(d < 1e-4, "look-ahead {lookahead:?}: {d}");
            }
        }
        assert_eq!(out.stats.windows, all.stats.windows);
        assert_eq!(out.stats.frames, all.stats.frames);
        assert!((out.stats.audio_seconds - all.stats.audio_seconds).abs() < 1e-9);
        assert!(out.stats.decode_seconds > 0.0);
        if lookahead == Some(1) {
            // One recording per round: no batch mixes recordings, so more (smaller) batches.
            assert!(out.stats.batch_sizes.len() > all.stats.batch_sizes.len());
        }
    }
    assert!(texts_ok(&all).iter().any(|t| !t.is_empty()));
}

fn texts_ok(out: &dicta_engine::EngineOutput) -> Vec<String> {
    out.results
        .iter()
        .filter_map(|r| r.as_ref().ok().map(|t| t.text.clone()))
        .collect()
}

#[test]
fn settings_are_validated_with_their_names() {
    let bad = |cfg: EngineConfig| Engine::load(&layer_dir(), cfg).err().unwrap().message;
    assert!(bad(EngineConfig {
        chunk_seconds: 0.0,
        ..EngineConfig::default()
    })
    .contains("chunk_seconds"));
    assert!(bad(EngineConfig {
        decode_workers: 0,
        ..EngineConfig::default()
    })
    .contains("decode_workers"));
    assert!(bad(EngineConfig {
        lookahead_windows: Some(0),
        ..EngineConfig::default()
    })
    .contains("lookahead_windows"));
    assert!(bad(EngineConfig {
        max_padding_fraction: 1.5,
        ..EngineConfig::default()
    })
    .contains("max_padding_fraction"));
    let greedy_lm = EngineConfig {
        ctc: CtcOptions {
            lm: Some(fixture("dicta-decode/tests/fixtures/sub.arpa.gz")),
            ..CtcOptions::default()
        },
        ..EngineConfig::default()
    };
    assert!(bad(greedy_lm).contains("beam"));
}

/// A one-hour recording through the tiny model: prints RTFx and peak RSS, and checks that
/// memory stays far below holding the model activations of every window at once.
/// Run alone: `cargo test --release -p dicta-engine --test engine_ctc -- --ignored one_hour`.
#[test]
#[ignore = "slow: one hour of audio; run alone to measure peak RSS"]
fn one_hour_recording_stays_within_memory() {
    let hour = speech(3600.0);
    let wav = std::env::temp_dir().join(format!("dicta-engine-hour-{}.wav", std::process::id()));
    write_wav(&wav, &hour);
    drop(hour);
    for (name, dir, cfg) in [
        (
            "local, 30 s / 5 s",
            local_dir().to_path_buf(),
            EngineConfig::default(),
        ),
        (
            "layer (2 attention layers), 4 s / 1 s",
            layer_dir(),
            EngineConfig {
                chunk_seconds: 4.0,
                overlap_seconds: 1.0,
                batch_size: 4,
                ..EngineConfig::default()
            },
        ),
    ] {
        let e = engine(&dir, cfg);
        // Measure this call's peak, not the test's own making of the hour (Linux; elsewhere
        // the process peak is an upper bound).
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let out = e.transcribe(&[Input::from_path(&wav)]);
        let t = out.results[0].as_ref().unwrap();
        let s = &out.stats;
        let rss = s.peak_rss_bytes.unwrap_or(0) as f64 / 1e9;
        println!(
            "{name}: {:.0} s audio, {} windows, {} batches, wall {:.1} s, RTFx {:.1}, model {:.1} s, \
             decoder {:.1} s, audio decode {:.1} s, waited for audio {:.1} s, peak RSS {rss:.2} GB, \
             {} chars",
            s.audio_seconds,
            s.windows,
            s.batch_sizes.len(),
            s.wall_seconds,
            s.rtfx,
            s.model_seconds,
            s.decoder_seconds,
            s.decode_seconds,
            s.input_wait_seconds,
            t.text.len()
        );
        assert!((t.duration - 3600.0).abs() < 1e-6);
        // Audio (230 MB as f32) + joined log-probs (2.88 M frames × 14 × 4 B = 161 MB) + one
        // batch of activations; all windows' activations at once would be tens of GB.
        assert!(rss < 3.0, "peak RSS {rss:.2} GB");
    }
    std::fs::remove_file(&wav).unwrap();
}

fn write_wav(path: &Path, samples: &[f32]) {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: SR as u32,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for &s in samples {
        w.write_sample((s.clamp(-1.0, 1.0) * 32767.0) as i16)
            .unwrap();
    }
    w.finalize().unwrap();
}
