//! `vad_filter` and `diarize` over real sockets: the OpenAI route (form fields `vad_filter`,
//! `vad_parameters`, `diarize`, `num_speakers`), `/transcribe` parameters and the raw route's
//! query, against the same audio without them; bad options get a JSON 400 and the server keeps
//! serving; a server started with `--no-vad` and no speaker model refuses both with 400.
//! OpenAI's `diarized_json` (plain and streamed) labels the same segments `A` and `B`.
//! OpenAI's Realtime transcription sessions (`/v1/realtime`) detect turns with the same VAD.

mod common;

use std::path::PathBuf;

use common::server::{curl, openai_verbose as openai, Server};
use common::{model_dir, speaker_dir, vad_dir, DATA};
use serde_json::Value;

/// 4 s of silence, jfk, 6 s of silence, as a 16 kHz 16-bit WAV.
fn padded_jfk(dir: &std::path::Path) -> PathBuf {
    let jfk =
        dicta_audio::decode::load_path(&PathBuf::from(DATA).join("openai_whisper/jfk.16k.wav"))
            .unwrap();
    let mut samples = vec![0.0f32; 4 * 16_000];
    samples.extend(&jfk);
    samples.extend(vec![0.0; 6 * 16_000]);
    let path = dir.join("padded_jfk.wav");
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(&path, spec).unwrap();
    for s in samples {
        w.write_sample((s * 32767.0).round().clamp(-32768.0, 32767.0) as i16)
            .unwrap();
    }
    w.finalize().unwrap();
    path
}

#[test]
fn vad_filter_on_every_route() {
    let (Some(model), Some(vad)) = (model_dir(), vad_dir()) else {
        return;
    };
    let tmp = std::env::temp_dir().join(format!("dicta-serve-vad-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let wav = padded_jfk(&tmp);
    let speaker = speaker_dir();
    let mut flags = vec!["--vad-model".to_string(), vad.display().to_string()];
    if let Some(s) = &speaker {
        flags.extend(["--speaker-model".to_string(), s.display().to_string()]);
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start(&model, &flags);
    let base = &server.base;

    let (code, plain) = openai(base, &wav, &[]);
    assert_eq!(code, 200, "{plain}");
    let (code, filtered) = openai(base, &wav, &["vad_filter=true"]);
    assert_eq!(code, 200, "{filtered}");
    let text = filtered["text"].as_str().unwrap();
    assert!(
        text.contains("ask not what your country can do for you"),
        "{text}"
    );
    // Times are those of the original audio: speech starts after the 4 s of silence (less the
    // 400 ms pad) and the duration is the whole file's.
    let segs = filtered["segments"].as_array().unwrap();
    let first = segs[0]["start"].as_f64().unwrap();
    assert!((3.5..4.6).contains(&first), "first segment at {first}");
    assert!(
        (filtered["duration"].as_f64().unwrap() - 21.0).abs() < 0.01,
        "{filtered}"
    );
    assert_eq!(plain["duration"], filtered["duration"]);

    // Tighter options through vad_parameters change where chunks are cut, not the words.
    let (code, tight) = openai(
        base,
        &wav,
        &[
            "vad_filter=true",
            r#"vad_parameters={"min_silence_duration_ms":300,"speech_pad_ms":100}"#,
        ],
    );
    assert_eq!(code, 200, "{tight}");
    assert!(
        tight["text"]
            .as_str()
            .unwrap()
            .contains("ask not what your country"),
        "{tight}"
    );

    // OpenAI's chunking_strategy is the same detection: "auto" is vad_filter=true, and a
    // server_vad object (as the SDK sends it) sets the detector's silence and padding.
    let (code, auto) = openai(base, &wav, &["chunking_strategy=auto"]);
    assert_eq!(code, 200, "{auto}");
    assert_eq!(auto["segments"], filtered["segments"]);
    let (code, server_vad) = openai(
        base,
        &wav,
        &[
            "chunking_strategy[type]=server_vad",
            "chunking_strategy[silence_duration_ms]=300",
            "chunking_strategy[prefix_padding_ms]=100",
        ],
    );
    assert_eq!(code, 200, "{server_vad}");
    assert_eq!(server_vad["segments"], tight["segments"]);
    assert_ne!(
        tight["segments"], filtered["segments"],
        "the options must matter"
    );

    // Bad options: JSON 400 naming the problem, and the server keeps serving.
    for bad in [
        &["chunking_strategy=sometimes"][..],
        &["chunking_strategy=auto", "vad_filter=true"],
        &["vad_filter=maybe"][..],
        &["vad_filter=true", r#"vad_parameters={"threshold":2}"#],
        &["vad_filter=true", r#"vad_parameters={"speech_pad":1}"#],
        &[r#"vad_parameters={"threshold":0.3}"#],
    ] {
        let (code, e) = openai(base, &wav, bad);
        assert_eq!(code, 400, "{bad:?}: {e}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains("vad"),
            "{e}"
        );
    }

    // /transcribe parameters.
    let audio = std::fs::read(&wav).unwrap();
    let b64 = common::base64(&audio);
    let body = serde_json::json!({"inputs": [{"audio_base64": b64}], "parameters": {"vad_filter": true, "vad_parameters": {"speech_pad_ms": 200}}}).to_string();
    let body_file = tmp.join("body.json");
    std::fs::write(&body_file, body).unwrap();
    let (out, _) = curl(&[
        "-H",
        "content-type: application/json",
        "-d",
        &format!("@{}", body_file.display()),
        &format!("{base}/transcribe"),
    ]);
    let out: Value = serde_json::from_str(&out).unwrap();
    let r = &out["results"][0];
    assert!(
        r["text"]
            .as_str()
            .unwrap()
            .contains("ask not what your country"),
        "{out}"
    );
    assert!(r["segments"][0]["start"].as_f64().unwrap() > 3.5, "{out}");
    assert!(
        out["group"]["speech_seconds"].as_f64().unwrap() < 12.0,
        "{out}"
    );

    // The raw route's query flag (headerless samples: the WAV without its 44-byte header).
    let raw = tmp.join("padded_jfk.pcm");
    std::fs::write(&raw, &audio[44..]).unwrap();
    let (out, _) = curl(&[
        "--data-binary",
        &format!("@{}", raw.display()),
        &format!("{base}/v1/transcriptions/raw?encoding=i16_le&vad_filter=true"),
    ]);
    let out: Value = serde_json::from_str(&out).unwrap();
    assert!(
        out["results"][0]["text"]
            .as_str()
            .unwrap()
            .contains("ask not"),
        "{out}"
    );
    // Diarization: a speaker on every segment and word of the two-speaker sample.
    if speaker.is_some() {
        let sample = PathBuf::from(DATA).join("pyannote_audio/sample.wav");
        let (code, d) = openai(
            base,
            &sample,
            &[
                "diarize=true",
                "num_speakers=2",
                "timestamp_granularities[]=word",
                "timestamp_granularities[]=segment",
            ],
        );
        assert_eq!(code, 200, "{d}");
        let segs = d["segments"].as_array().unwrap();
        assert!(
            segs.iter()
                .all(|s| s["speaker"].as_str().unwrap().starts_with("SPEAKER_")),
            "{d}"
        );
        let mut who: Vec<&str> = d["words"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["speaker"].as_str().unwrap())
            .collect();
        who.sort();
        who.dedup();
        assert_eq!(who, ["SPEAKER_00", "SPEAKER_01"], "{d}");
        diarized_json(base, &sample);
        for bad in [
            &["diarize=true", "num_speakers=0"][..],
            &["num_speakers=2"],
            &["diarize=true", "min_speakers=3", "max_speakers=2"],
            &["diarize=yes"],
        ] {
            let (code, e) = openai(base, &sample, bad);
            assert_eq!(code, 400, "{bad:?}: {e}");
        }
    }
    drop(server);

    // Without a detector: refused with 400, the server stays up.
    let server = Server::start(&model, &["--no-vad"]);
    let (code, e) = openai(&server.base, &wav, &["vad_filter=true"]);
    assert_eq!(code, 400, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("vad"),
        "{e}"
    );
    let (code, _) = openai(&server.base, &wav, &[]);
    assert_eq!(code, 200);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A multipart POST of `file` with `fields` to the OpenAI route: (status, body).
fn post(base: &str, file: &std::path::Path, fields: &[&str]) -> (String, String) {
    let mut args = vec![
        "-w".to_string(),
        "\n%{http_code}".into(),
        "-F".into(),
        format!("file=@{}", file.display()),
    ];
    for f in fields {
        args.extend(["-F".to_string(), (*f).to_string()]);
    }
    args.push(format!("{base}/v1/audio/transcriptions"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (body, _) = curl(&args);
    let (body, code) = body.rsplit_once('\n').unwrap();
    (code.to_string(), body.to_string())
}

/// OpenAI's `diarized_json` on the two-speaker sample: verbose_json's diarized segments (same
/// text and times), each speaker a letter (one letter per speaker, `A` first); streamed, each
/// segment's delta then its `transcript.text.segment` event, the same segments, then `done`;
/// `known_speaker_names[]` is refused.
fn diarized_json(base: &str, sample: &std::path::Path) {
    let (code, verbose) = post(
        base,
        sample,
        &[
            "response_format=verbose_json",
            "diarize=true",
            "num_speakers=2",
        ],
    );
    assert_eq!(code, "200", "{verbose}");
    let verbose: Value = serde_json::from_str(&verbose).unwrap();
    let (code, body) = post(
        base,
        sample,
        &["response_format=diarized_json", "num_speakers=2"],
    );
    assert_eq!(code, "200", "{body}");
    let d: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&d["task"], &d["text"]),
        (&verbose["task"], &verbose["text"])
    );
    let (segs, want) = (
        d["segments"].as_array().unwrap(),
        verbose["segments"].as_array().unwrap(),
    );
    assert_eq!(segs.len(), want.len(), "{d}");
    let mut pairs = std::collections::BTreeSet::new();
    for (i, (a, b)) in segs.iter().zip(want).enumerate() {
        assert_eq!(a["type"], "transcript.text.segment");
        assert_eq!(a["id"], format!("seg_{i}"));
        assert_eq!(a["text"].as_str(), b["text"].as_str().map(str::trim));
        assert_eq!((&a["start"], &a["end"]), (&b["start"], &b["end"]));
        pairs.insert((a["speaker"].to_string(), b["speaker"].to_string()));
    }
    let letters: std::collections::BTreeSet<_> = pairs.iter().map(|p| p.0.clone()).collect();
    assert_eq!(pairs.len(), 2, "one letter per speaker: {pairs:?}");
    assert_eq!(letters.len(), 2);
    assert_eq!(segs[0]["speaker"], "A");
    // Streamed: delta (with its segment id), segment event, … then done.
    let (code, events) = post(
        base,
        sample,
        &[
            "response_format=diarized_json",
            "num_speakers=2",
            "stream=true",
        ],
    );
    assert_eq!(code, "200", "{events}");
    let events: Vec<Value> = events
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (done, rest) = events.split_last().unwrap();
    assert_eq!(done["type"], "transcript.text.done");
    assert_eq!(done["text"], d["text"]);
    let streamed: Vec<&Value> = rest
        .chunks(2)
        .map(|pair| {
            assert_eq!(pair[0]["type"], "transcript.text.delta");
            assert_eq!(pair[0]["segment_id"], pair[1]["id"]);
            &pair[1]
        })
        .collect();
    assert_eq!(streamed, segs.iter().collect::<Vec<_>>());
    let (code, e) = post(
        base,
        sample,
        &[
            "response_format=diarized_json",
            "known_speaker_names[]=agent",
        ],
    );
    assert_eq!(code, "400", "{e}");
    assert!(e.contains("known_speaker"), "{e}");
}

/// VAD endpointing of WebSocket streams with the `websockets` client
/// (`serve_stream_vad_check.py`): `vad` and `vad_parameters` in the query string and in `config`
/// messages; with them JFK's last word is final before the client ends the stream, without
/// them only after; a bad option is refused by name; a server without a detector refuses
/// `vad=true` with 400; and `--stream-vad` needs the detector.
#[test]
fn websocket_streams_end_utterances_on_silence() {
    let (Some(model), Some(vad)) = (model_dir(), vad_dir()) else {
        return;
    };
    if !common::python_has("websockets") {
        return;
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/serve_stream_vad_check.py"
    );
    let wav = format!("{DATA}/openai_whisper/jfk.16k.wav");
    let jfk = "And so my fellow Americans, ask not what your country can do for you, ask what you \
               can do for your country.";
    let vad = vad.display().to_string();
    let server = Server::start(&model, &["--vad-model", &vad]);
    let url = format!("{}/v1/stream", server.base.replace("http://", "ws://"));
    let status = std::process::Command::new("python3")
        .arg(script)
        .args(["--url", &url, "--wav", &wav, "--expect", jfk])
        .status()
        .unwrap();
    assert!(status.success(), "WebSocket VAD endpointing check failed");
    assert_eq!(server.terminate(), 0);

    let server = Server::start(&model, &["--no-vad"]);
    let url = format!("{}/v1/stream", server.base.replace("http://", "ws://"));
    let status = std::process::Command::new("python3")
        .arg(script)
        .args(["--url", &url, "--no-detector"])
        .status()
        .unwrap();
    assert!(
        status.success(),
        "a server without a detector took vad=true"
    );
    drop(server);

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dicta"))
        .args(["serve", "--model"])
        .arg(&model)
        .args(["--no-vad", "--stream-vad", "--port", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--stream-vad"), "{err}");
}

/// OpenAI's Realtime transcription API with the official SDK (tests/realtime_check.py): turns
/// detected by the server's VAD become items whose transcripts are the CLI's texts; commits by
/// hand; errors as events; a server without a detector offers no turn detection; the API key in
/// the header or, from a browser, in OpenAI's subprotocol.
#[test]
fn openai_realtime_transcription_sessions() {
    let (Some(model), Some(vad)) = (model_dir(), vad_dir()) else {
        return;
    };
    if !(common::python_has("openai") && common::python_has("websockets")) {
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/realtime_check.py");
    let clips = [
        format!("{DATA}/openai_whisper/jfk.16k.wav"),
        format!("{DATA}/coqui_tts/LJ001-0002.16k.wav"),
    ];
    let expect: Vec<String> = clips
        .iter()
        .map(|c| {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_dicta"))
                .args([
                    "transcribe",
                    "--quiet",
                    "--language",
                    "en",
                    "--format",
                    "text",
                ])
                .arg("--model")
                .arg(&model)
                .arg(c)
                .output()
                .unwrap();
            assert!(out.status.success());
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        })
        .collect();
    let vad = vad.display().to_string();
    let server = Server::start(&model, &["--vad-model", &vad]);
    let status = std::process::Command::new("python3")
        .arg(script)
        .args(["--base", &server.base, "--audio", &clips[0], &clips[1]])
        .args(["--expect", &expect[0], &expect[1]])
        .status()
        .unwrap();
    assert!(status.success(), "realtime check failed");
    assert_eq!(server.terminate(), 0);
    // With an API key: the SDK's header, and a browser's subprotocols.
    let server = Server::start(&model, &["--no-vad", "--api-key", "rt-secret"]);
    let status = std::process::Command::new("python3")
        .arg(script)
        .args([
            "--base",
            &server.base,
            "--no-detector",
            "--api-key",
            "rt-secret",
        ])
        .status()
        .unwrap();
    assert!(status.success(), "realtime check without a detector failed");
}
