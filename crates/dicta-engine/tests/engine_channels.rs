//! `channels: split` on Whisper (tiny.en): a stereo file whose left channel is one real
//! recording and whose right channel is another, starting 3 s later, gives channel-0 segments
//! equal to transcribing the left channel alone and channel-1 segments equal to the right
//! channel alone, merged by start time; `mix` still gives the mixed transcript; split inputs
//! among others (batched) equal split alone; a broken file fails alone; with diarization the
//! speakers are the channels; the VAD filter runs per channel. Skipped (with a note) where the
//! tiny.en weights are not set up.

mod whisper_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dicta_core::{ChannelMode, ErrorKind, Transcript};
use dicta_engine::diarize::DiarizeOptions;
use dicta_engine::whisper::DecodeOptions;
use dicta_engine::{AudioSource, Engine, EngineConfig, Input};
use whisper_common::{model_dir, vad_dir, DATA};

fn read_i16(rel: &str) -> Vec<i16> {
    let mut r = hound::WavReader::open(PathBuf::from(DATA).join(rel)).unwrap();
    assert_eq!((r.spec().channels, r.spec().sample_rate), (1, 16_000));
    r.samples::<i16>().map(Result::unwrap).collect()
}

/// Left: JFK (11 s); right: 3 s of silence, then LJ001-0001 (9.7 s); both padded to one length.
fn channels() -> (Vec<i16>, Vec<i16>) {
    let mut a = read_i16("openai_whisper/jfk.16k.wav");
    let b = read_i16("coqui_tts/LJ001-0001.16k.wav");
    let mut b: Vec<i16> = std::iter::repeat_n(0, 3 * 16_000).chain(b).collect();
    let n = a.len().max(b.len());
    a.resize(n, 0);
    b.resize(n, 0);
    (a, b)
}

fn write_stereo(path: &Path, l: &[i16], r: &[i16]) {
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for (a, b) in l.iter().zip(r) {
        w.write_sample(*a).unwrap();
        w.write_sample(*b).unwrap();
    }
    w.finalize().unwrap();
}

fn floats(s: &[i16]) -> Vec<f32> {
    s.iter().map(|&v| f32::from(v) / 32768.0).collect()
}

fn split(mut o: DecodeOptions) -> DecodeOptions {
    o.channels = ChannelMode::Split;
    o
}

fn one(engine: &Engine, input: Input, opts: &DecodeOptions) -> Transcript {
    let mut out = engine.transcribe_with(&[input], opts);
    out.results.remove(0).unwrap()
}

/// `merged`'s segments of `channel`, without the label, equal `alone`'s; the merge is in
/// order of start and its text is the segments' texts in that order.
fn check_channel(merged: &Transcript, channel: u32, alone: &Transcript) {
    let mine: Vec<_> = merged
        .segments
        .iter()
        .filter(|s| s.channel == Some(channel))
        .map(|s| {
            let mut s = s.clone();
            s.channel = None;
            s.speaker = None;
            s.words.iter_mut().for_each(|w| w.speaker = None);
            s
        })
        .collect();
    assert!(!alone.segments.is_empty());
    assert_eq!(mine, alone.segments, "channel {channel}");
}

/// Texts, times and tokens of segments and words: what batched == alone pins (word
/// probabilities move in the last ulp with the batch's other rows).
fn timed(segments: &[dicta_core::Segment]) -> Vec<dicta_core::Segment> {
    segments
        .iter()
        .map(|s| {
            let mut s = s.clone();
            s.words.iter_mut().for_each(|w| w.probability = None);
            s
        })
        .collect()
}

fn check_merge(t: &Transcript) {
    assert!(t.segments.windows(2).all(|w| w[0].start <= w[1].start));
    let text: Vec<&str> = t.segments.iter().map(|s| s.text.trim()).collect();
    assert_eq!(t.text, text.join(" "));
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dicta-engine-channels-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn split_channels_equal_each_channel_alone_merged_by_start() {
    let Some(dir) = model_dir() else { return };
    let engine = Engine::load(&dir, EngineConfig::default()).unwrap();
    let (a, b) = channels();
    let stereo = tmp("split.wav");
    write_stereo(&stereo, &a, &b);
    let mut opts = DecodeOptions::greedy();
    opts.word_timestamps = true;
    let alone_a = one(&engine, Input::from_samples("a", floats(&a)), &opts);
    let alone_b = one(&engine, Input::from_samples("b", floats(&b)), &opts);
    assert!(
        alone_a.text.contains("ask not what your country"),
        "{}",
        alone_a.text
    );
    assert!(
        alone_b.segments[0].start >= 2.5,
        "{:?}",
        alone_b.segments[0]
    );

    let got = one(&engine, Input::from_path(&stereo), &split(opts.clone()));
    check_channel(&got, 0, &alone_a);
    check_channel(&got, 1, &alone_b);
    check_merge(&got);
    assert_eq!(got.id, stereo.to_string_lossy());
    // Channel 1 starts later, so the merge interleaves: channel 0 first.
    assert_eq!(got.segments[0].channel, Some(0));
    assert!(got.segments.iter().any(|s| s.channel == Some(1)));

    // The same from bytes and from decoded channels.
    let bytes = Input {
        id: "bytes".into(),
        audio: "bytes.wav".into(),
        source: AudioSource::Bytes(std::fs::read(&stereo).unwrap()),
    };
    let from_bytes = one(&engine, bytes, &split(opts.clone()));
    assert_eq!(from_bytes.segments, got.segments);
    let decoded = dicta_audio::decode::load_channels_path(&stereo).unwrap();
    let planes = Input {
        id: "planes".into(),
        audio: "planes".into(),
        source: AudioSource::Channels(Arc::from(decoded.channels)),
    };
    assert_eq!(
        one(&engine, planes, &split(opts.clone())).segments,
        got.segments
    );

    // Mix is unchanged: the mean of the channels, no channel labels.
    let mixed = one(&engine, Input::from_path(&stereo), &opts);
    let want = one(
        &engine,
        Input::from_samples("m", dicta_audio::decode::load_path(&stereo).unwrap()),
        &opts,
    );
    assert_eq!(mixed.segments, want.segments);
    assert!(mixed.segments.iter().all(|s| s.channel.is_none()));
    assert_ne!(mixed.text, got.text);

    // Batched among other inputs (a mono file: one channel, 0; a missing file) == alone.
    let jfk = PathBuf::from(DATA).join("openai_whisper/jfk.16k.wav");
    let inputs = [
        Input::from_path(&jfk),
        Input::from_path(&stereo),
        Input::from_path("/nonexistent/dicta-split.wav"),
        Input::from_path(PathBuf::from(DATA).join("coqui_tts/LJ001-0002.16k.wav")),
    ];
    let out = engine.transcribe_with(&inputs, &split(opts.clone()));
    assert_eq!(out.results.len(), 4);
    assert_eq!(out.stats.inputs, 4);
    let mono = out.results[0].as_ref().unwrap();
    assert!(mono.segments.iter().all(|s| s.channel == Some(0)));
    let mut jfk_alone = one(&engine, Input::from_path(&jfk), &opts);
    jfk_alone
        .segments
        .iter_mut()
        .for_each(|s| s.channel = Some(0));
    assert_eq!(timed(&mono.segments), timed(&jfk_alone.segments));
    let batched = out.results[1].as_ref().unwrap();
    assert_eq!(timed(&batched.segments), timed(&got.segments));
    assert_eq!(batched.text, got.text);
    assert_eq!(out.results[2].as_ref().unwrap_err().kind, ErrorKind::Io);
    let lj = Input::from_path(PathBuf::from(DATA).join("coqui_tts/LJ001-0002.16k.wav"));
    let mut lj_alone = one(&engine, lj, &opts);
    lj_alone
        .segments
        .iter_mut()
        .for_each(|s| s.channel = Some(0));
    let lj_batched = &out.results[3].as_ref().unwrap().segments;
    assert_eq!(timed(lj_batched), timed(&lj_alone.segments));

    // Diarization with split: the speaker is the channel (no speaker model needed).
    let mut d = split(opts.clone());
    d.diarize = Some(DiarizeOptions::default());
    let spk = one(&engine, Input::from_path(&stereo), &d);
    for s in &spk.segments {
        let who = format!("SPEAKER_{:02}", s.channel.unwrap());
        assert_eq!(s.speaker.as_deref(), Some(who.as_str()));
        assert!(s
            .words
            .iter()
            .all(|w| w.speaker.as_deref() == Some(who.as_str())));
    }
    std::fs::remove_file(&stereo).ok();
}

#[test]
fn vad_filter_runs_per_channel() {
    let (Some(dir), Some(vad)) = (model_dir(), vad_dir()) else {
        return;
    };
    let config = EngineConfig {
        vad_model: Some(vad),
        ..EngineConfig::default()
    };
    let engine = Engine::load(&dir, config).unwrap();
    let (a, b) = channels();
    let stereo = tmp("vad.wav");
    write_stereo(&stereo, &a, &b);
    let mut opts = DecodeOptions::greedy();
    opts.vad = Some(Default::default());
    let alone_a = one(&engine, Input::from_samples("a", floats(&a)), &opts);
    let alone_b = one(&engine, Input::from_samples("b", floats(&b)), &opts);
    let got = one(&engine, Input::from_path(&stereo), &split(opts));
    check_channel(&got, 0, &alone_a);
    check_channel(&got, 1, &alone_b);
    check_merge(&got);
    std::fs::remove_file(&stereo).ok();
}
