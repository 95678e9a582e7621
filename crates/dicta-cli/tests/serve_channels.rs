//! `channels=split` over a real socket: the OpenAI form field and `/transcribe`'s parameter on
//! a stereo upload whose channels hold two different recordings give segments labelled with
//! their channel, each channel's text that recording's; `channels=bogus` gets a JSON 400 naming
//! the valid values, and mix (the default) has no labels.

mod common;

use std::path::{Path, PathBuf};

use common::server::{curl, openai_verbose as openai, Server};
use common::{model_dir, DATA};
use serde_json::Value;

fn read_i16(rel: &str) -> Vec<i16> {
    let mut r = hound::WavReader::open(PathBuf::from(DATA).join(rel)).unwrap();
    r.samples::<i16>().map(Result::unwrap).collect()
}

/// Left: JFK; right: 3 s of silence then LJ001-0001; 16 kHz 16-bit stereo.
fn stereo(path: &Path) {
    let mut a = read_i16("openai_whisper/jfk.16k.wav");
    let mut b: Vec<i16> = std::iter::repeat_n(0, 48_000)
        .chain(read_i16("coqui_tts/LJ001-0001.16k.wav"))
        .collect();
    let n = a.len().max(b.len());
    a.resize(n, 0);
    b.resize(n, 0);
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for (x, y) in a.iter().zip(&b) {
        w.write_sample(*x).unwrap();
        w.write_sample(*y).unwrap();
    }
    w.finalize().unwrap();
}

fn channel_text(segments: &Value, c: u64) -> String {
    segments
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["channel"].as_u64() == Some(c))
        .map(|s| s["text"].as_str().unwrap().trim().to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn split_channels_over_http() {
    let Some(model) = model_dir() else { return };
    let tmp = std::env::temp_dir().join(format!("dicta-serve-channels-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let wav = tmp.join("call.wav");
    stereo(&wav);
    let server = Server::start(&model, &["--no-vad"]);
    let base = &server.base;

    let (code, split) = openai(base, &wav, &["channels=split"]);
    assert_eq!(code, 200, "{split}");
    let segs = &split["segments"];
    let left = channel_text(segs, 0);
    let right = channel_text(segs, 1);
    assert!(left.contains("ask not what your country"), "{split}");
    assert!(!left.contains("printing"), "{split}");
    assert!(right.to_lowercase().contains("printing"), "{split}");
    assert!(!right.contains("country"), "{split}");
    let starts: Vec<f64> = segs
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["start"].as_f64().unwrap())
        .collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{split}");

    // srt labels cues with the channel.
    let (srt, _) = curl(&[
        "-F",
        &format!("file=@{}", wav.display()),
        "-F",
        "response_format=srt",
        "-F",
        "channels=split",
        &format!("{base}/v1/audio/transcriptions"),
    ]);
    assert!(srt.contains("[CH0] ") && srt.contains("[CH1] "), "{srt}");

    // Mix: no labels.
    let (code, mixed) = openai(base, &wav, &[]);
    assert_eq!(code, 200, "{mixed}");
    assert!(mixed["segments"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s.get("channel").is_none()));

    // A bad value: JSON 400 naming the valid ones; the server keeps serving.
    let (code, bad) = openai(base, &wav, &["channels=bogus"]);
    assert_eq!(code, 400, "{bad}");
    let msg = bad["error"]["message"].as_str().unwrap();
    assert!(msg.contains("mix, split") && msg.contains("bogus"), "{bad}");

    // /transcribe parameters.
    let b64 = common::base64(&std::fs::read(&wav).unwrap());
    for (channels, want) in [("split", 200), ("bogus", 400)] {
        let body = serde_json::json!({"inputs": [{"audio_base64": b64}], "parameters": {"channels": channels}});
        let body_file = tmp.join("body.json");
        std::fs::write(&body_file, body.to_string()).unwrap();
        let (out, _) = curl(&[
            "-w",
            "\n%{http_code}",
            "-H",
            "content-type: application/json",
            "-d",
            &format!("@{}", body_file.display()),
            &format!("{base}/transcribe"),
        ]);
        let (json, code) = out.rsplit_once('\n').unwrap();
        assert_eq!(code.parse::<u16>().unwrap(), want, "{out}");
        let v: Value = serde_json::from_str(json).unwrap();
        if want == 200 {
            let segs = &v["results"][0]["segments"];
            assert!(channel_text(segs, 0).contains("ask not"), "{v}");
            assert!(
                channel_text(segs, 1).to_lowercase().contains("printing"),
                "{v}"
            );
        } else {
            assert!(
                v["error"]["message"].as_str().unwrap().contains("split"),
                "{v}"
            );
        }
    }
    std::fs::remove_dir_all(&tmp).ok();
}
