//! A file cut short is transcribed as far as it goes, as FFmpeg-based tools do: `dicta
//! transcribe` gives the transcript of the audio that can be decoded, with a warning in that
//! input's result, and the other inputs are untouched.
//!
//! Real recordings (MP3 and FLAC) are cut inside their audio here; the transcript of each cut
//! file must equal the transcript of a WAV holding exactly the samples that decode from it, on
//! the CLI and on the server's OpenAI route.
//!
//! Needs the Whisper model: `DICTA_TEST_MODEL_DIR` (then it must exist) or a fetched tiny.en.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod common;

use common::{model_dir, DATA};

/// 16 kHz mono 16-bit WAV of `samples` (already on the 16-bit grid, as loaded audio is).
fn write_wav(path: &Path, samples: &[f32]) {
    let data: Vec<u8> = samples
        .iter()
        .flat_map(|s| ((s * 32768.0).round().clamp(-32768.0, 32767.0) as i16).to_le_bytes())
        .collect();
    let mut out = Vec::with_capacity(44 + data.len());
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes()); // PCM
    out.extend_from_slice(&1u16.to_le_bytes()); // mono
    out.extend_from_slice(&16_000u32.to_le_bytes());
    out.extend_from_slice(&32_000u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&data);
    std::fs::write(path, out).unwrap();
}

fn transcribe(model: &Path, files: &[&Path]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_dicta"))
        .args(["transcribe", "--quiet", "--beam-size", "1", "--model"])
        .arg(model)
        .args(files)
        .output()
        .expect("run dicta transcribe");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    v["results"].as_array().unwrap().clone()
}

#[test]
fn a_file_cut_short_gives_the_transcript_of_what_decodes_with_a_warning() {
    let Some(model) = model_dir() else { return };
    let dir = std::env::temp_dir().join(format!("dicta-truncated-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let whole_mp3 = format!("{DATA}/faster_whisper/hotwords.mp3");
    let whole_flac = format!("{DATA}/openai_whisper/jfk.flac");
    let mut cut = Vec::new();
    for (src, keep, name) in [(&whole_mp3, 0.6, "cut.mp3"), (&whole_flac, 0.7, "cut.flac")] {
        let bytes = std::fs::read(src).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, &bytes[..(bytes.len() as f64 * keep) as usize]).unwrap();
        // What decodes from the cut file, as a plain WAV.
        let samples = dicta_audio::decode::load_path(&path).unwrap();
        let wav = dir.join(format!("{name}.wav"));
        write_wav(&wav, &samples);
        cut.push((path, wav, samples.len() as f64 / 16_000.0));
    }
    let files: Vec<&Path> = vec![
        cut[0].0.as_path(),
        Path::new(&whole_flac),
        cut[1].0.as_path(),
        cut[0].1.as_path(),
        cut[1].1.as_path(),
    ];
    let results = transcribe(&model, &files);
    assert_eq!(results.len(), 5);
    for (k, (path, _, seconds)) in cut.iter().enumerate() {
        let r = &results[[0, 2][k]];
        let wav = &results[3 + k];
        assert!(r["error"].is_null(), "{path:?}: {r}");
        let warnings = r["warnings"].as_array().expect("a warning on a cut file");
        assert_eq!(warnings.len(), 1, "{r}");
        assert!(
            warnings[0].as_str().unwrap().starts_with("truncated"),
            "{warnings:?}"
        );
        assert!(
            wav.get("warnings").is_none(),
            "a sound file has no warnings: {wav}"
        );
        assert!(
            (r["duration"].as_f64().unwrap() - seconds).abs() < 1e-3,
            "{r}"
        );
        let text = r["text"].as_str().unwrap();
        assert!(text.split_whitespace().count() >= 3, "{path:?}: {text:?}");
        assert_eq!(text, wav["text"].as_str().unwrap(), "{path:?}");
        assert_eq!(r["segments"], wav["segments"], "{path:?}");
    }
    // The whole file between them is untouched.
    assert!(results[1].get("warnings").is_none());
    assert!(
        results[1]["text"]
            .as_str()
            .unwrap()
            .contains("ask not what your country can do for you"),
        "{}",
        results[1]["text"]
    );

    // The server: the OpenAI route's json carries the warning beside the same text.
    let server = common::server::Server::start(&model, &[]);
    let (status, body) = server.transcribe_file(cut[1].0.to_str().unwrap());
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["text"], results[2]["text"].as_str().unwrap().trim());
    assert_eq!(body["warnings"], results[2]["warnings"], "{body}");
    let (status, body) = server.transcribe_file(&whole_flac);
    assert_eq!(status, 200, "{body}");
    assert!(body.get("warnings").is_none(), "{body}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
