//! Decoding parity: every supported container/sample format against values computed
//! independently by make_fixtures.py (exact for PCM and FLAC, reference decoders for lossy).

mod decode_support;

use decode_support::{fixture, npy, npy_i16, snr_db};
use dicta_audio::decode::{
    decode_bytes, decode_path, decode_raw_pcm, load_bytes, load_path, load_raw_pcm, PcmEncoding,
};
use dicta_audio::resample::{quantize_i16, resample};

/// What `load_*` returns for mono input at another rate: swr-compatible resampling, then s16.
fn resample_s16(x: &[f32], from: u32) -> Vec<f32> {
    let mut y = resample(x, from, 16_000).unwrap();
    quantize_i16(&mut y);
    y
}
use dicta_core::ErrorKind;

fn assert_bit_exact(file: &str, expected: &str) {
    let audio = decode_path(&fixture(file)).unwrap();
    assert_eq!(audio.sample_rate, 16_000, "{file}");
    let want = npy(expected);
    assert_eq!(audio.samples.len(), want.len(), "{file}");
    for (i, (a, b)) in audio.samples.iter().zip(&want).enumerate() {
        assert_eq!(a.to_bits(), b.to_bits(), "{file}: sample {i}: {a} != {b}");
    }
}

#[test]
fn integer_wavs_decode_exactly() {
    assert_bit_exact("pcm_u8.wav", "pcm_u8.expected.npy");
    assert_bit_exact("pcm_s16.wav", "pcm_s16.expected.npy");
    assert_bit_exact("pcm_s24.wav", "pcm_s24.expected.npy");
    assert_bit_exact("pcm_s32.wav", "pcm_s32.expected.npy");
}

#[test]
fn float_wavs_decode_exactly() {
    assert_bit_exact("float32.wav", "float32.expected.npy");
    assert_bit_exact("float64.wav", "float64.expected.npy");
}

#[test]
fn flac_is_lossless() {
    assert_bit_exact("speech_s16.flac", "pcm_s16.expected.npy");
}

#[test]
fn stereo_is_the_mean_of_the_channels() {
    assert_bit_exact("stereo_s16.wav", "stereo_s16.expected.npy");
}

#[test]
fn six_channels_are_averaged() {
    let audio = decode_path(&fixture("surround6_s16.wav")).unwrap();
    let want = npy("surround6_s16.expected.npy");
    assert_eq!(audio.samples.len(), want.len());
    for (a, b) in audio.samples.iter().zip(&want) {
        assert!((a - b).abs() <= 1e-7, "{a} vs {b}");
    }
}

/// MP3 and Vorbis are lossy and decoders differ in rounding; compare with libsndfile's decode
/// (mpg123 / libvorbis) after finding the best alignment within ±2 frames' worth of samples.
fn lossy_parity(file: &str, reference: &str) -> (f64, isize) {
    let audio = decode_path(&fixture(file)).unwrap();
    assert_eq!(audio.sample_rate, 16_000);
    let want = npy(reference);
    let mut best = (f64::NEG_INFINITY, 0isize);
    for lag in -2304isize..=2304 {
        let (a, b) = if lag >= 0 {
            (&audio.samples[lag as usize..], &want[..])
        } else {
            (&audio.samples[..], &want[(-lag) as usize..])
        };
        let n = a.len().min(b.len());
        if n < want.len() / 2 {
            continue;
        }
        let s = snr_db(&b[..n], &a[..n]);
        if s > best.0 {
            best = (s, lag);
        }
    }
    println!(
        "{file}: {} samples (reference {}), best lag {}, SNR {:.1} dB",
        audio.samples.len(),
        want.len(),
        best.1,
        best.0
    );
    best
}

#[test]
fn mp3_matches_mpg123() {
    let (snr, lag) = lossy_parity("speech.mp3", "speech_mp3.ref.npy");
    assert!(snr >= 90.0, "SNR {snr:.1} dB");
    assert_eq!(lag, 0, "gapless trimming should align with mpg123");
}

#[test]
fn vorbis_matches_libvorbis() {
    let (snr, lag) = lossy_parity("speech.ogg", "speech_ogg.ref.npy");
    assert!(snr >= 100.0, "SNR {snr:.1} dB");
    assert_eq!(lag, 0);
}

/// MP4/AAC (`.m4a`, made by FFmpeg's encoder): symphonia's AAC decoder against FFmpeg's.
#[test]
fn aac_in_mp4_matches_ffmpeg() {
    let (snr, lag) = lossy_parity("speech.m4a", "speech_m4a.ref.npy");
    assert!(snr >= 30.0, "SNR {snr:.1} dB");
    assert_eq!(
        lag, 0,
        "the encoder delay must be trimmed as FFmpeg trims it"
    );
}

/// The lag (in samples of `ours`, within ±`max_lag`) that best aligns `ours` with `want`, and
/// the SNR there (over the overlap, which must cover at least half of `want`).
fn best_alignment(ours: &[f32], want: &[f32], max_lag: isize) -> (f64, isize) {
    let mut best = (f64::NEG_INFINITY, 0isize);
    for lag in -max_lag..=max_lag {
        let (a, b) = if lag >= 0 {
            (&ours[lag as usize..], want)
        } else {
            (ours, &want[(-lag) as usize..])
        };
        let n = a.len().min(b.len());
        if n < want.len() / 2 {
            continue;
        }
        let s = snr_db(&b[..n], &a[..n]);
        if s > best.0 {
            best = (s, lag);
        }
    }
    best
}

/// Opus against FFmpeg's own decode of the same file through libopus, then its default
/// resampler to 16 kHz mono s16 (as PyAV converts for faster-whisper), compared at 16 kHz
/// (see make_ffmpeg_fixtures.py for why libopus and not FFmpeg's native Opus decoder).
/// Returns (SNR dB, lag in 16 kHz samples, our length, FFmpeg's length).
fn opus_parity(file: &str, reference: &str, channels: usize) -> (f64, isize, usize, usize) {
    let path = fixture(file);
    let audio = decode_path(&path).unwrap();
    assert_eq!(
        audio.sample_rate, 48_000,
        "{file}: Opus always decodes at 48 kHz"
    );
    let ours = load_path(&path).unwrap();
    let want = npy_i16(reference);
    let (snr, lag) = best_alignment(&ours, &want, 1600);
    println!(
        "{file}: {channels} ch, {} samples at 48 kHz, {} at 16 kHz (FFmpeg {}), best lag {lag}, SNR {snr:.1} dB",
        audio.samples.len(),
        ours.len(),
        want.len()
    );
    // Bytes and path agree, and the name's extension is only a hint.
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(decode_bytes(&bytes, "upload.bin").unwrap(), audio, "{file}");
    (snr, lag, ours.len(), want.len())
}

/// Ogg/Opus (RFC 7845): the pre-skip is dropped and the end trimmed to the last granule
/// position, as FFmpeg does, so the samples line up one for one and the lengths agree.
#[test]
fn ogg_opus_matches_ffmpeg() {
    for (file, reference, channels) in [
        ("opus_48k_mono.ogg", "opus_48k_mono_ogg.ref16k.npy", 1),
        ("opus_16k_stereo.ogg", "opus_16k_stereo_ogg.ref16k.npy", 2),
        ("speech.opus", "speech_opus.ref16k.npy", 1),
    ] {
        let (snr, lag, len, want) = opus_parity(file, reference, channels);
        assert_eq!(
            lag, 0,
            "{file}: the pre-skip must be dropped as FFmpeg drops it"
        );
        assert!(snr >= 60.0, "{file}: SNR {snr:.1} dB");
        assert_eq!(
            len, want,
            "{file}: the end must be trimmed to the last granule"
        );
    }
}

/// WebM/Opus (what browsers' MediaRecorder writes; Matroska `A_OPUS`, the `OpusHead` in
/// CodecPrivate): the pre-skip is dropped as FFmpeg drops it. symphonia's Matroska reader
/// ignores `DiscardPadding`, so the end keeps the encoder's padding of the last packet (under
/// one 20 ms frame, 320 samples at 16 kHz) that FFmpeg cuts.
#[test]
fn webm_opus_matches_ffmpeg() {
    for (file, reference, channels) in [
        ("opus_16k_mono.webm", "opus_16k_mono_webm.ref16k.npy", 1),
        (
            "opus_44k1_stereo.webm",
            "opus_44k1_stereo_webm.ref16k.npy",
            2,
        ),
    ] {
        let (snr, lag, len, want) = opus_parity(file, reference, channels);
        assert_eq!(
            lag, 0,
            "{file}: the pre-skip must be dropped as FFmpeg drops it"
        );
        assert!(snr >= 60.0, "{file}: SNR {snr:.1} dB");
        assert!(
            len >= want && len <= want + 320,
            "{file}: {len} vs {want} samples"
        );
    }
}

/// A WAV written by `ffmpeg -f wav pipe:1` (RIFF and data sizes left at 0xFFFFFFFF) decodes
/// to the end, sample for sample.
#[test]
fn piped_wav_reads_to_the_end() {
    let audio = decode_path(&fixture("piped.wav")).unwrap();
    assert_eq!(audio.samples, npy("pcm_s16.expected.npy"));
}

#[test]
fn bytes_and_path_decode_identically() {
    for file in [
        "pcm_s16.wav",
        "float64.wav",
        "speech_s16.flac",
        "speech.mp3",
        "speech.ogg",
        "speech.m4a",
        "piped.wav",
        "speech.opus",
        "opus_48k_mono.ogg",
        "opus_44k1_stereo.webm",
        "jfk_44k1_stereo.flac",
    ] {
        let path = fixture(file);
        let bytes = std::fs::read(&path).unwrap();
        let from_path = decode_path(&path).unwrap();
        let from_bytes = decode_bytes(&bytes, file).unwrap();
        assert_eq!(from_path, from_bytes, "{file}");
        // A misleading name (wrong extension) must not change the result: detection is by content.
        assert_eq!(
            decode_bytes(&bytes, "upload.bin").unwrap(),
            from_path,
            "{file}"
        );
    }
}

#[test]
fn load_resamples_to_16k() {
    let path = fixture("jfk_44k1_stereo.flac");
    let audio = decode_path(&path).unwrap();
    assert_eq!(audio.sample_rate, 44_100);
    let loaded = load_path(&path).unwrap();
    // Stereo: each channel is resampled before the mix (as swr does), which can differ by one
    // 16-bit step from resampling the mix.
    let mixed_first = resample_s16(&audio.samples, 44_100);
    assert_eq!(loaded.len(), mixed_first.len());
    let worst = loaded
        .iter()
        .zip(&mixed_first)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(worst <= 1.0 / 32_768.0, "{worst}");
    assert_eq!(loaded.len(), 8000);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(load_bytes(&bytes, "jfk.flac").unwrap(), loaded);
    // Already 16 kHz: returned as decoded.
    let s16 = fixture("pcm_s16.wav");
    assert_eq!(load_path(&s16).unwrap(), npy("pcm_s16.expected.npy"));
}

#[test]
fn raw_pcm_round_trips() {
    let want = npy("pcm_s16.expected.npy");
    let i16_bytes: Vec<u8> = want
        .iter()
        .flat_map(|v| ((v * 32768.0) as i16).to_le_bytes())
        .collect();
    assert_eq!(
        load_raw_pcm(&i16_bytes, PcmEncoding::I16Le, 16_000, "raw").unwrap(),
        want
    );
    let f32_bytes: Vec<u8> = want.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(
        load_raw_pcm(&f32_bytes, PcmEncoding::F32Le, 16_000, "raw").unwrap(),
        want
    );
    // Raw PCM at another rate goes through the same resampler as files.
    let at8k = decode_raw_pcm(&i16_bytes, PcmEncoding::I16Le, 8000, "raw").unwrap();
    assert_eq!(at8k.sample_rate, 8000);
    assert_eq!(
        load_raw_pcm(&i16_bytes, PcmEncoding::I16Le, 8000, "raw").unwrap(),
        resample_s16(&want, 8000)
    );
}

#[test]
fn raw_pcm_rejects_bad_input() {
    let e = load_raw_pcm(&[1, 2, 3], PcmEncoding::I16Le, 16_000, "odd.pcm").unwrap_err();
    assert_eq!(e.kind, ErrorKind::CorruptInput);
    assert!(e.message.starts_with("odd.pcm: "), "{}", e.message);
    let e = load_raw_pcm(&[0; 6], PcmEncoding::F32Le, 16_000, "six.pcm").unwrap_err();
    assert_eq!(e.kind, ErrorKind::CorruptInput);
    let e = load_raw_pcm(&[], PcmEncoding::F32Le, 16_000, "none.pcm").unwrap_err();
    assert_eq!(e.kind, ErrorKind::EmptyInput);
    assert!(e.message.starts_with("none.pcm: "));
    let mut bytes: Vec<u8> = [0.1f32, 0.2, f32::NAN, 0.3]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let e = load_raw_pcm(&bytes, PcmEncoding::F32Le, 16_000, "nan.pcm").unwrap_err();
    assert_eq!(e.kind, ErrorKind::CorruptInput);
    assert!(e.message.contains("sample 2"), "{}", e.message);
    bytes[8..12].copy_from_slice(&f32::NEG_INFINITY.to_le_bytes());
    let e = load_raw_pcm(&bytes, PcmEncoding::F32Le, 16_000, "inf.pcm").unwrap_err();
    assert_eq!(e.kind, ErrorKind::CorruptInput);
    let e = load_raw_pcm(&[0; 4], PcmEncoding::I16Le, 0, "zero-rate").unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidInput);
}

#[test]
fn pcm_encoding_names_round_trip() {
    for enc in [PcmEncoding::I16Le, PcmEncoding::F32Le] {
        assert_eq!(enc.as_str().parse::<PcmEncoding>().unwrap(), enc);
        assert_eq!(enc.to_string(), enc.as_str());
    }
    assert_eq!("i16_le".parse::<PcmEncoding>().unwrap(), PcmEncoding::I16Le);
    assert_eq!("f32_le".parse::<PcmEncoding>().unwrap(), PcmEncoding::F32Le);
    assert!("s16le".parse::<PcmEncoding>().is_err());
}
