//! `--channels split` loading: each channel of a stereo file made from two different real
//! recordings comes back exactly as the mono file of that channel loads (the same
//! libswresample-exact resampling and 16-bit quantisation), at 16 kHz and at 44.1 kHz, from a
//! path, from bytes and under bounds that count every channel.

mod decode_support;

use std::path::{Path, PathBuf};

use decode_support::shared_data;
use dicta_audio::decode::{
    load_channel_owned, load_channel_path, load_channels_owned, load_channels_owned_at,
    load_channels_owned_bounded, load_channels_path, load_channels_path_at, load_owned_at,
    load_path, load_path_at, probe_channels_bytes, probe_channels_path, Bounds,
};
use dicta_core::ErrorKind;

fn read_i16(path: &Path) -> Vec<i16> {
    let mut r = hound::WavReader::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(r.spec().channels, 1);
    r.samples::<i16>().map(Result::unwrap).collect()
}

fn write_wav(path: &Path, rate: u32, planes: &[&[i16]]) {
    let spec = hound::WavSpec {
        channels: planes.len() as u16,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for i in 0..planes[0].len() {
        for p in planes {
            w.write_sample(p[i]).unwrap();
        }
    }
    w.finalize().unwrap();
}

fn write_wav_f32(path: &Path, rate: u32, planes: &[&[i16]]) {
    let spec = hound::WavSpec {
        channels: planes.len() as u16,
        sample_rate: rate,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for i in 0..planes[0].len() {
        for p in planes {
            // Not on the 16-bit grid, so the quantisation after resampling matters.
            w.write_sample(f32::from(p[i]) / 32768.0 * 0.9).unwrap();
        }
    }
    w.finalize().unwrap();
}

fn tmp_dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dicta-channels-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Two different speakers' recordings, the second starting 0.75 s later, padded to one length.
fn two_recordings() -> (Vec<i16>, Vec<i16>) {
    let data = shared_data();
    let mut a = read_i16(&data.join("speechbrain/spk1_snt1.wav"));
    let b = read_i16(&data.join("speechbrain/spk2_snt1.wav"));
    let mut b: Vec<i16> = std::iter::repeat_n(0, 12_000).chain(b).collect();
    let n = a.len().max(b.len());
    a.resize(n, 0);
    b.resize(n, 0);
    assert_ne!(a, b);
    (a, b)
}

#[test]
fn each_channel_loads_as_its_mono_file_bit_exact() {
    let (a, b) = two_recordings();
    let dir = tmp_dir("exact");
    // 44.1 kHz: the same samples declared at another rate, so every channel is resampled.
    for (rate, float) in [
        (16_000u32, false),
        (44_100, false),
        (44_100, true),
        (8000, true),
    ] {
        let tag = format!("{rate}-{}", if float { "f32" } else { "s16" });
        let write = if float { write_wav_f32 } else { write_wav };
        let stereo = dir.join(format!("stereo-{tag}.wav"));
        let left = dir.join(format!("left-{tag}.wav"));
        let right = dir.join(format!("right-{tag}.wav"));
        write(&stereo, rate, &[&a, &b]);
        write(&left, rate, &[&a]);
        write(&right, rate, &[&b]);
        let want = [load_path(&left).unwrap(), load_path(&right).unwrap()];
        assert_ne!(want[0], want[1]);
        let got = load_channels_path(&stereo).unwrap();
        assert_eq!(got.warning, None);
        assert_eq!(got.channels.len(), 2, "{tag}");
        assert!(
            got.channels[0] == want[0],
            "{tag}: left channel differs from its mono file"
        );
        assert!(
            got.channels[1] == want[1],
            "{tag}: right channel differs from its mono file"
        );
        // The mix is something else (the mean, quantised once).
        assert!(load_path(&stereo).unwrap() != want[0]);
        let bytes = std::fs::read(&stereo).unwrap();
        assert_eq!(load_channels_owned(bytes.clone(), "stereo").unwrap(), got);
        // One channel alone (only it resampled) is the same.
        for (c, w) in want.iter().enumerate() {
            assert!(
                load_channel_path(&stereo, c).unwrap().samples == *w,
                "{tag} ch {c}"
            );
            assert!(load_channel_owned(bytes.clone(), "s", c).unwrap().samples == *w);
        }
        let e = load_channel_path(&stereo, 2).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidInput);
        assert_eq!(probe_channels_path(&stereo).unwrap(), 2);
        assert_eq!(probe_channels_bytes(&bytes, "stereo").unwrap(), 2);
        // A mono file is one channel, equal to the mono load.
        let mono = load_channels_path(&left).unwrap();
        assert_eq!(mono.channels, vec![want[0].clone()]);
        assert_eq!(probe_channels_path(&left).unwrap(), 1);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Output at other rates (faster-whisper's `decode_audio(sampling_rate=…)`; its PyAV samples are
/// held in `python/tests`): 16 kHz is the engine's load; a file's own rate returns its 16-bit
/// samples untouched; each channel of a stereo file at any rate is its mono file at that rate;
/// from bytes the same as from the path; rates out of range are refused by name.
#[test]
fn other_output_rates_keep_every_invariant() {
    let (a, b) = two_recordings();
    let dir = tmp_dir("rates");
    let stereo = dir.join("stereo.wav");
    let left = dir.join("left.wav");
    let right = dir.join("right.wav");
    write_wav(&stereo, 22_050, &[&a, &b]);
    write_wav(&left, 22_050, &[&a]);
    write_wav(&right, 22_050, &[&b]);
    assert!(load_path_at(&left, 16_000).unwrap().samples == load_path(&left).unwrap());
    let own: Vec<f32> = a.iter().map(|&v| f32::from(v) / 32_768.0).collect();
    assert!(load_path_at(&left, 22_050).unwrap().samples == own);
    let bytes = std::fs::read(&stereo).unwrap();
    for rate in [8000u32, 11_025, 44_100, 48_000] {
        let want = [
            load_path_at(&left, rate).unwrap().samples,
            load_path_at(&right, rate).unwrap().samples,
        ];
        // About rate/22050 of the samples (the filter's edges decide the last few).
        let expect = a.len() as f64 * f64::from(rate) / 22_050.0;
        assert!((want[0].len() as f64 - expect).abs() < 4.0, "{rate}");
        let got = load_channels_path_at(&stereo, rate).unwrap();
        assert!(
            got.channels == want,
            "{rate} Hz: a channel differs from its mono file"
        );
        assert_eq!(
            load_channels_owned_at(bytes.clone(), "s", rate).unwrap(),
            got
        );
        let mix = load_owned_at(bytes.clone(), "s", rate).unwrap().samples;
        assert_eq!(mix, load_path_at(&stereo, rate).unwrap().samples);
        assert_eq!(mix.len(), want[0].len());
    }
    for bad in [0u32, dicta_audio::MAX_SAMPLE_RATE + 1] {
        let e = load_path_at(&left, bad).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidInput);
        assert!(e.message.contains("Hz"), "{e}");
        let e = load_channels_owned_at(bytes.clone(), "s", bad).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidInput);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// faster-whisper's own stereo test file: each channel equals ffmpeg's extraction of it.
#[test]
fn real_stereo_file_channels_equal_ffmpeg_extractions() {
    let data = shared_data().join("faster_whisper");
    let got = load_channels_path(&data.join("stereo_diarization.wav")).unwrap();
    assert_eq!(got.channels.len(), 2);
    for (c, ch) in got.channels.iter().enumerate() {
        let want = load_path(&data.join(format!("stereo_diarization.ch{c}.16k.wav"))).unwrap();
        assert!(*ch == want, "channel {c}");
    }
}

#[test]
fn bounds_count_every_channel() {
    let (a, b) = two_recordings();
    let dir = tmp_dir("bounds");
    let stereo = dir.join("bounded.wav");
    write_wav(&stereo, 44_100, &[&a, &b]);
    let bytes = std::fs::read(&stereo).unwrap();
    let mut counted = 0usize;
    let mut count = |n: usize| {
        counted += n;
        Ok(())
    };
    let got = load_channels_owned_bounded(
        bytes.clone(),
        "stereo",
        Bounds {
            max_seconds: 60.0,
            limit: "test limit",
            on_samples: &mut count,
        },
    )
    .unwrap();
    assert_eq!(counted, got.channels.iter().map(Vec::len).sum::<usize>());
    assert_eq!(counted, 2 * got.channels[0].len());
    // A memory cap of 1.5 channels' worth stops it.
    let cap = got.channels[0].len() * 3 / 2;
    let mut total = 0usize;
    let mut capped = |n: usize| {
        total += n;
        if total > cap {
            return Err(dicta_core::Error::new(ErrorKind::Overloaded, "cap"));
        }
        Ok(())
    };
    let e = load_channels_owned_bounded(
        bytes.clone(),
        "stereo",
        Bounds {
            max_seconds: 60.0,
            limit: "test limit",
            on_samples: &mut capped,
        },
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Overloaded);
    // The duration limit refuses from the header.
    let e = load_channels_owned_bounded(
        bytes,
        "stereo",
        Bounds {
            max_seconds: 0.5,
            limit: "max_audio_seconds (0.5 s per request)",
            on_samples: &mut |_| Ok(()),
        },
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::LimitExceeded);
    assert!(e.message.contains("max_audio_seconds"), "{}", e.message);
    std::fs::remove_dir_all(&dir).ok();
}
