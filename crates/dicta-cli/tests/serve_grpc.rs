//! `dicta serve --grpc-port 0`: NVIDIA's own Riva client (PyPI `nvidia-riva-client`) against the
//! real binary (serve_grpc_check.py): Recognize of WAV files, raw PCM at 22.05 kHz, stereo,
//! μ-law and A-law give the CLI's texts, and so do each channel of a stereo recording recognized
//! apart (`enable_separate_recognition_per_channel`, as `--channels split`), word boosting (`speech_contexts`, as
//! `--hotwords`) and `custom_configuration` (as the CLI's decoding flags); `profanity_filter` stars profane words (espeak-ng speech, a fixture);
//! StreamingRecognize gives interim results and
//! finals close to them, with word offsets; health, config, API key, error codes and the stream
//! limit. `.ci/run` installs the client and sets DICTA_REQUIRE_CLIENTS, so there a missing
//! client fails instead of skipping.

mod common;

use std::process::Command;

use common::server::Server;
use common::{dicta_json, model_dir, python_has, DATA};

#[test]
fn the_riva_client_works_against_the_grpc_port() {
    let Some(model) = model_dir() else { return };
    if !python_has("riva.client") {
        return;
    }
    let key = "grpc-test-key";
    let server = Server::start(
        &model,
        &[
            "--grpc-port",
            "0",
            "--api-key",
            key,
            "--max-streams",
            "1",
            "--max-audio-seconds",
            "60",
        ],
    );
    let grpc = server.grpc.clone().expect("the gRPC address is printed");
    let wav16 = format!("{DATA}/openai_whisper/jfk.16k.wav");
    let wav22 = format!("{DATA}/coqui_tts/LJ001-0001.wav");
    // The expected texts are the CLI's, with the server's settings (greedy, no VAD).
    let cli_text = |wav: &str, flags: &[&str]| {
        let model = model.to_string_lossy();
        let mut args = vec![
            "transcribe",
            "--quiet",
            "--beam-size",
            "1",
            "--model",
            &model,
            wav,
        ];
        args.extend(flags);
        let v = dicta_json(&args);
        v["results"][0]["text"].as_str().unwrap().trim().to_string()
    };
    let expect16 = cli_text(&wav16, &[]);
    let expect22 = cli_text(&wav22, &[]);
    // Riva's word boosting (speech_contexts) is Whisper's `hotwords`, and custom_configuration
    // sets the decoding options: both change this clip's text, so ignoring them fails.
    let phrases = "Printing, Gutenberg";
    let expect_hot = cli_text(&wav22, &["--hotwords", phrases]);
    let expect_custom = cli_text(&wav22, &["--max-new-tokens", "5"]);
    assert_ne!(expect_hot, expect22, "the phrases must change the text");
    assert_ne!(expect_custom, expect22, "the options must change the text");
    // A different utterance on each channel: the CLI's text of each channel, split.
    let stereo = format!("{DATA}/faster_whisper/stereo_diarization.wav");
    let channel_text = |channel: u64| {
        let model = model.to_string_lossy();
        let v = dicta_json(&[
            "transcribe",
            "--quiet",
            "--beam-size",
            "1",
            "--channels",
            "split",
            "--model",
            &model,
            &stereo,
        ]);
        let texts: Vec<String> = v["results"][0]["segments"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["channel"].as_u64() == Some(channel))
            .map(|s| s["text"].as_str().unwrap().trim().to_string())
            .collect();
        texts.join(" ")
    };
    let (left, right) = (channel_text(0), channel_text(1));
    assert!(!left.is_empty() && !right.is_empty() && left != right);
    // Speech with profanities for `profanity_filter` (espeak-ng; fixtures/make_profane.sh).
    let profane = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/profane.wav").to_string();
    let expect_profane = cli_text(&profane, &[]);
    // Models are named as `--model` gave them (here the folder).
    let name = model.to_string_lossy().into_owned();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/serve_grpc_check.py");
    let status = Command::new("python3")
        .arg(script)
        .args(["--uri", &grpc, "--key", key, "--model", &name])
        .args(["--wav16", &wav16, "--expect16", &expect16])
        .args(["--wav22", &wav22, "--expect22", &expect22])
        .args(["--phrases", phrases, "--expect-hot", &expect_hot])
        .args(["--custom", "beam_size:1,max_new_tokens:5"])
        .args(["--expect-custom", &expect_custom])
        .args(["--stereo", &stereo, "--expect-left", &left])
        .args(["--expect-right", &right])
        .args(["--profane", &profane, "--expect-profane", &expect_profane])
        .status()
        .unwrap();
    assert!(status.success(), "Riva client check failed");
    // SIGTERM drains and exits 0 with the gRPC listener up.
    assert_eq!(server.terminate(), 0);
}

/// Capacity with gRPC calls alone (no WebSocket stream open): Riva streaming calls at real time,
/// one every 2 s, until the server refuses one with `RESOURCE_EXHAUSTED` because the open calls
/// fell behind; a call too far behind is ended with the finals of what was transcribed and
/// `RESOURCE_EXHAUSTED`, the others with OK and their finals (serve_grpc_capacity_check.py).
#[test]
fn grpc_calls_alone_are_admitted_by_capacity_and_shed_when_behind() {
    let Some(model) = model_dir() else { return };
    if !python_has("riva.client") {
        return;
    }
    let server = Server::start(
        &model,
        &[
            "--grpc-port",
            "0",
            "--stream-admit-lag-s",
            "2",
            "--stream-max-lag-s",
            "8",
        ],
    );
    let grpc = server.grpc.clone().expect("the gRPC address is printed");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/serve_grpc_capacity_check.py"
    );
    let wav = format!("{DATA}/pyannote_audio/sample.wav");
    let status = Command::new("python3")
        .arg(script)
        .args([
            "--uri", &grpc, "--wav", &wav, "--every", "2", "--hold", "15",
        ])
        .status()
        .unwrap();
    assert!(status.success(), "gRPC capacity check failed");
    assert!(server.metric("dicta_streams_refused_behind_total").unwrap() >= 1.0);
    assert_eq!(server.terminate(), 0);
}
