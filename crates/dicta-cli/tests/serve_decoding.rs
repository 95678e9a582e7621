//! faster-whisper's decoding options through every interface, with the real model: a
//! `/transcribe` body's `parameters`, the OpenAI route's extra form fields (what the OpenAI SDK
//! sends for `extra_body`) and `dicta transcribe`'s flags give the same segments for the same
//! options, the options change the transcript, and bad values get a 400 naming the option while
//! the server keeps serving.
//!
//! Needs the Whisper model: `DICTA_TEST_MODEL_DIR` (then it must exist) or /work/models/tiny.en-ct2.

mod common;

use common::server::{openai_verbose, Server};
use common::{base64, dicta_json, model_dir, DATA};
use serde_json::{json, Value};

/// LJ001-0001: "Printing, in the only sense with which we are at present concerned, …" — it
/// holds the words the suppression below takes away.
fn clip() -> String {
    format!("{DATA}/coqui_tts/LJ001-0001.16k.wav")
}

/// (start, end, text) of each segment of a transcript.
fn segments(t: &Value) -> Vec<(f64, f64, String)> {
    t["segments"]
        .as_array()
        .unwrap_or_else(|| panic!("no segments in {t}"))
        .iter()
        .map(|s| {
            (
                s["start"].as_f64().unwrap(),
                s["end"].as_f64().unwrap(),
                s["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// One option set as `/transcribe` parameters, OpenAI form fields and CLI flags.
struct Case {
    parameters: Value,
    form: &'static [&'static str],
    flags: &'static [&'static str],
}

#[test]
fn decoding_options_agree_across_interfaces_and_bad_values_are_refused() {
    let Some(model) = model_dir() else { return };
    let server = Server::start(&model, &[]);
    let audio = base64(&std::fs::read(clip()).unwrap());
    let model_arg = model.to_str().unwrap();
    let cli = |flags: &[&str]| -> Vec<(f64, f64, String)> {
        let clip = clip();
        let mut args = vec!["transcribe", &clip, "--model", model_arg, "--quiet"];
        args.extend(flags);
        segments(&dicta_json(&args)["results"][0])
    };
    let default = cli(&[]);
    let cases = [
        // Greedy, no fallback, " the", " and", " of", " a", " to" never sampled, 20 tokens.
        Case {
            parameters: json!({"beam_size": 1, "temperature": [0.0],
                "suppress_tokens": [-1, 262, 290, 286, 257, 284], "max_new_tokens": 20}),
            form: &[
                "beam_size=1",
                "suppress_tokens=[-1, 262, 290, 286, 257, 284]",
                "max_new_tokens=20",
            ],
            flags: &[
                "--beam-size",
                "1",
                "--temperature",
                "0",
                "--suppress-tokens",
                "-1,262,290,286,257,284",
                "--max-new-tokens",
                "20",
            ],
        },
        // Beam search with patience, a length penalty and CTranslate2's repetition rules, one
        // segment without timestamps.
        Case {
            parameters: json!({"beam_size": 3, "patience": 2.0, "length_penalty": 0.5,
                "without_timestamps": true, "initial_prompt": "Printing.",
                "repetition_penalty": 1.3, "no_repeat_ngram_size": 3}),
            form: &[
                "beam_size=3",
                "patience=2.0",
                "length_penalty=0.5",
                "without_timestamps=true",
                "prompt=Printing.",
                "repetition_penalty=1.3",
                "no_repeat_ngram_size=3",
            ],
            flags: &[
                "--beam-size",
                "3",
                "--patience",
                "2",
                "--length-penalty",
                "0.5",
                "--without-timestamps",
                "--initial-prompt",
                "Printing.",
                "--repetition-penalty",
                "1.3",
                "--no-repeat-ngram-size",
                "3",
            ],
        },
        // Hotwords (faster-whisper's), which this clip's transcript follows; the server's own
        // beam size (the test server runs `--beam-size 1`).
        Case {
            parameters: json!({"hotwords": "Gutenberg, typography, the Exhibition"}),
            form: &["hotwords=Gutenberg, typography, the Exhibition"],
            flags: &[
                "--hotwords",
                "Gutenberg, typography, the Exhibition",
                "--beam-size",
                "1",
            ],
        },
        // faster-whisper's prefix, which the transcript starts with (with hotwords, which the
        // forced window leaves out).
        Case {
            parameters: json!({"prefix": "Well, printing", "hotwords": "Gutenberg"}),
            form: &["prefix=Well, printing", "hotwords=Gutenberg"],
            flags: &[
                "--prefix",
                "Well, printing",
                "--hotwords",
                "Gutenberg",
                "--beam-size",
                "1",
            ],
        },
        // faster-whisper's clip_timestamps, as a list in the body and as text in the form.
        Case {
            parameters: json!({"clip_timestamps": [0.5, 3.2, 5]}),
            form: &["clip_timestamps=0.5,3.2,5"],
            flags: &["--clip-timestamps", "0.5,3.2,5", "--beam-size", "1"],
        },
    ];
    for (i, case) in cases.iter().enumerate() {
        let want = cli(case.flags);
        assert_ne!(want, default, "case {i}: the options change the transcript");
        if let Some(prefix) = case.parameters["prefix"].as_str() {
            assert!(want[0].2.trim_start().starts_with(prefix), "{want:?}");
        }
        let mut body = json!({"inputs": [{"id": "lj", "audio_base64": audio}]});
        body["parameters"] = case.parameters.clone();
        let (code, json) = server.post_transcribe(&body);
        assert_eq!(code, 200, "case {i}: {json}");
        assert_eq!(segments(&json["results"][0]), want, "case {i}: /transcribe");
        // The OpenAI route takes the same options as extra form fields (temperature 0 there
        // keeps the fallback schedule, which greedy decoding of this clip never needs).
        let (code, json) = openai_verbose(&server.base, std::path::Path::new(&clip()), case.form);
        assert_eq!(code, 200, "case {i}: {json}");
        let got: Vec<(f64, f64, String)> = segments(&json);
        let close = got.len() == want.len()
            && got
                .iter()
                .zip(&want)
                .all(|(g, w)| (g.0 - w.0).abs() < 0.01 && (g.1 - w.1).abs() < 0.01 && g.2 == w.2);
        assert!(close, "case {i}: OpenAI route {got:?} vs CLI {want:?}");
    }

    // Bad values: 400 with the option named, and the server keeps serving.
    for (parameters, named) in [
        (json!({"beam_size": 1000}), "beam_size"),
        (json!({"best_of": 0}), "best_of"),
        (json!({"patience": -1.0}), "patience"),
        (json!({"temperature": [0.0, 1.5]}), "temperature"),
        (json!({"temperature": []}), "temperature"),
        (json!({"max_new_tokens": 100000}), "max_new_tokens"),
        (json!({"suppress_tokens": [-5]}), "suppress_tokens"),
        (
            json!({"max_initial_timestamp": 99.0}),
            "max_initial_timestamp",
        ),
        (json!({"beam_size": "five"}), "beam_size"),
        (json!({"repetition_penalty": -1.0}), "repetition_penalty"),
        (json!({"clip_timestamps": "1,x"}), "clip_timestamps"),
        (json!({"clip_timestamps": [5, 10, 2, 8]}), "time order"),
        (
            json!({"clip_timestamps": [1.0], "vad_filter": true}),
            "clip_timestamps",
        ),
    ] {
        let body = json!({"inputs": [{"audio_base64": audio}], "parameters": parameters});
        let (code, json) = server.post_transcribe(&body);
        assert_eq!(code, 400, "{parameters}: {json}");
        let message = json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(named), "{parameters}: {message}");
    }
    for field in ["beam_size=abc", "suppress_tokens=[1, -7]", "patience=0"] {
        let (code, json) = openai_verbose(&server.base, std::path::Path::new(&clip()), &[field]);
        assert_eq!(code, 400, "{field}: {json}");
        let name = field.split('=').next().unwrap();
        assert!(
            json["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(name)),
            "{field}: {json}"
        );
    }
    // Each clip counts as 30 s toward the request's audio limit (3600 s here): 121 clips of
    // 10 ms would otherwise cost the encoder work of an hour.
    let many: Vec<f64> = (0..242).map(|i| i as f64 * 0.01).collect();
    let body =
        json!({"inputs": [{"audio_base64": audio}], "parameters": {"clip_timestamps": many}});
    let (code, json) = server.post_transcribe(&body);
    let message = json["error"]["message"].as_str().unwrap_or_default();
    assert!(
        code == 413 && message.contains("max_audio_seconds") && message.contains("121 clips"),
        "{code} {json}"
    );
    let (code, json) = openai_verbose(&server.base, std::path::Path::new(&clip()), &[]);
    assert_eq!(code, 200, "{json}");
    assert_eq!(segments(&json).len(), default.len());
}

/// The noise generator of make_hallucination_reference.py (dicta-engine's word fixtures).
fn lcg_noise(n: usize, seed: u32, amplitude: f32) -> Vec<f32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((x >> 8) as f32 / 16_777_216.0 - 0.5) * amplitude
        })
        .collect()
}

/// `hallucination_silence_threshold` through the CLI, `/transcribe` and the OpenAI route (with
/// word timestamps), on a mixture of the engine's hallucination fixture (utterances between
/// stretches of noise) where it changes the transcript; without word timestamps it gets 400.
#[test]
fn hallucination_silence_threshold_reaches_every_interface() {
    let Some(model) = model_dir() else { return };
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dicta-engine/tests/fixtures/whisper_words/hallucination_reference.json"
    );
    let refs: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let amplitude = refs["amplitude"].as_f64().unwrap() as f32;
    let dir = std::env::temp_dir().join(format!("dicta-hallucination-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server = Server::start(&model, &[]);
    let model_arg = model.to_str().unwrap();
    let mut changed = 0;
    // The mixtures whose transcript the threshold changes in faster-whisper.
    for (k, it) in refs["items"].as_array().unwrap().iter().enumerate() {
        let runs = &it["runs"];
        if runs["off"]["text"] == runs["threshold2"]["text"] {
            continue;
        }
        let mut samples = Vec::new();
        for p in it["parts"].as_array().unwrap() {
            let wav = format!("{DATA}/{}", p["wav"].as_str().unwrap());
            samples.extend(dicta_audio::decode::load_path(std::path::Path::new(&wav)).unwrap());
            let n = p["noise_s"].as_u64().unwrap() as usize * 16_000;
            samples.extend(lcg_noise(n, p["seed"].as_u64().unwrap() as u32, amplitude));
        }
        let path = dir.join(format!("mixture{k}.wav"));
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 16_000,
            bits_per_sample: 32,
            sample_format: hound::SampleFormat::Float,
        };
        let mut w = hound::WavWriter::create(&path, spec).unwrap();
        for s in &samples {
            w.write_sample(*s).unwrap();
        }
        w.finalize().unwrap();
        let path_s = path.to_str().unwrap();
        let cli = |flags: &[&str]| {
            let mut args = vec!["transcribe", path_s, "--model", model_arg, "--quiet"];
            args.extend(["--beam-size", "1", "--word-timestamps"]);
            args.extend(flags);
            segments(&dicta_json(&args)["results"][0])
        };
        let want = cli(&["--hallucination-silence-threshold", "2"]);
        if want == cli(&[]) {
            continue;
        }
        changed += 1;
        let body = json!({"inputs": [{"audio_base64": base64(&std::fs::read(&path).unwrap())}],
            "parameters": {"word_timestamps": true, "hallucination_silence_threshold": 2.0}});
        let (code, json) = server.post_transcribe(&body);
        assert_eq!(code, 200, "{json}");
        assert_eq!(
            segments(&json["results"][0]),
            want,
            "mixture {k}: /transcribe"
        );
        let (code, json) = openai_verbose(
            &server.base,
            &path,
            &[
                "timestamp_granularities[]=word",
                "timestamp_granularities[]=segment",
                "hallucination_silence_threshold=2",
            ],
        );
        assert_eq!(code, 200, "{json}");
        let got = segments(&json);
        let close = got.len() == want.len()
            && got
                .iter()
                .zip(&want)
                .all(|(g, w)| (g.0 - w.0).abs() < 0.01 && (g.1 - w.1).abs() < 0.01 && g.2 == w.2);
        assert!(close, "mixture {k}: OpenAI route {got:?} vs CLI {want:?}");
    }
    assert!(
        changed > 0,
        "the threshold changed no transcript of the CLI"
    );
    for parameters in [
        json!({"hallucination_silence_threshold": 2.0}),
        json!({"word_timestamps": true, "hallucination_silence_threshold": -1.0}),
    ] {
        let audio = base64(&std::fs::read(clip()).unwrap());
        let body = json!({"inputs": [{"audio_base64": audio}], "parameters": parameters});
        let (code, json) = server.post_transcribe(&body);
        assert_eq!(code, 400, "{parameters}: {json}");
        let message = json["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("hallucination_silence_threshold"),
            "{message}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
