//! Damaged, empty and unsupported inputs give typed errors naming the input, never a panic.

mod decode_support;

use std::panic::{catch_unwind, AssertUnwindSafe};

use decode_support::{fixture, shared_data, Rng};
use dicta_audio::decode::{decode_bytes, decode_path, load_owned_report, load_path};
use dicta_core::{Error, ErrorKind};

fn path_error(file: &str) -> Error {
    let path = fixture(file);
    let e = decode_path(&path).unwrap_err();
    let name = path.display().to_string();
    assert!(
        e.message.starts_with(&format!("{name}: ")),
        "message must start with the input name: {}",
        e.message
    );
    // The in-memory path reports the same kind, under the caller's name.
    let bytes = std::fs::read(&path).unwrap();
    let e2 = decode_bytes(&bytes, "upload-7").unwrap_err();
    assert_eq!(e2.kind, e.kind, "{file}: {} vs {}", e.message, e2.message);
    assert!(e2.message.starts_with("upload-7: "), "{}", e2.message);
    println!("{file}: {e}");
    e
}

#[test]
fn zero_byte_file_is_empty_input() {
    assert_eq!(path_error("empty.wav").kind, ErrorKind::EmptyInput);
}

/// A file damaged after some audio is read up to the damage, as FFmpeg-based tools read it:
/// the audio before it, exactly as the whole file decodes there, and a note saying what was
/// wrong and how much was kept.
fn read_in_part(bytes: &[u8], name: &str, what: &str) -> (Vec<f32>, String) {
    let loaded = load_owned_report(bytes.to_vec(), name).unwrap();
    let warning = loaded.warning.expect("a damaged file carries a note");
    assert!(warning.starts_with(what), "{name}: {warning}");
    assert!(
        warning.contains("s of audio that could be read are used"),
        "{warning}"
    );
    let audio = decode_bytes(bytes, name).unwrap();
    assert!(!audio.samples.is_empty());
    (audio.samples, warning)
}

#[test]
fn a_flac_cut_short_gives_the_audio_before_the_cut() {
    let bytes = std::fs::read(fixture("jfk_44k1_stereo.flac")).unwrap();
    let whole = decode_bytes(&bytes, "whole.flac").unwrap().samples;
    assert!(load_owned_report(bytes.clone(), "whole.flac")
        .unwrap()
        .warning
        .is_none());
    let (part, _) = read_in_part(&bytes[..bytes.len() * 4 / 5], "cut.flac", "truncated");
    assert!(part.len() < whole.len() && part.len() > whole.len() / 2);
    assert_eq!(
        part[..],
        whole[..part.len()],
        "the kept audio is the file's own"
    );
    // The committed truncated fixture too.
    let bytes = std::fs::read(fixture("truncated.flac")).unwrap();
    read_in_part(&bytes, "truncated.flac", "truncated");
}

#[test]
fn a_wav_whose_data_size_promises_more_than_it_holds_is_read_to_its_end() {
    let bytes = std::fs::read(fixture("lying_header.wav")).unwrap();
    let (part, warning) = read_in_part(&bytes, "lying.wav", "truncated");
    assert!(warning.contains("header declares"), "{warning}");
    // 16-bit PCM: every complete frame after the header is kept.
    assert!(part.len() >= (bytes.len() - 44) / 2 - 1, "{}", part.len());
}

#[test]
fn flac_whose_only_frame_is_cut_is_corrupt_not_empty() {
    let bytes = std::fs::read(fixture("speech_s16.flac")).unwrap();
    let e = decode_bytes(&bytes[..bytes.len() * 3 / 5], "one-frame.flac").unwrap_err();
    assert_eq!(e.kind, ErrorKind::CorruptInput);
    assert!(
        e.message.starts_with("one-frame.flac: truncated"),
        "{}",
        e.message
    );
}

#[test]
fn an_mp3_cut_short_of_its_xing_length_gives_the_audio_before_the_cut() {
    let bytes = std::fs::read(fixture("speech.mp3")).unwrap();
    let whole = decode_bytes(&bytes, "whole.mp3").unwrap().samples;
    let (part, _) = read_in_part(&bytes[..bytes.len() / 2], "half.mp3", "truncated");
    assert!(part.len() < whole.len() * 3 / 4 && part.len() > whole.len() / 4);
    assert_eq!(
        part[..],
        whole[..part.len()],
        "the kept audio is the file's own"
    );
}

#[test]
fn wav_cut_inside_its_header_is_corrupt() {
    assert_eq!(
        path_error("truncated_header.wav").kind,
        ErrorKind::CorruptInput
    );
}

#[test]
fn text_file_is_unsupported() {
    assert_eq!(
        path_error("not_audio.txt").kind,
        ErrorKind::UnsupportedFormat
    );
}

#[test]
fn non_finite_samples_are_rejected() {
    for file in ["nan.wav", "inf.wav"] {
        let e = path_error(file);
        assert_eq!(e.kind, ErrorKind::CorruptInput);
        assert!(e.message.contains("sample 321"), "{}", e.message);
    }
}

/// Ogg/Opus and WebM/Opus cut anywhere: never a panic (libopus is C: a crash there could not
/// be caught), and what decodes is the start of the whole file's audio, sample for sample.
/// (symphonia's Matroska reader refuses a seekable WebM cut short, as its index points past
/// the end; a WebM written live, with no index, reads up to the cut.)
#[test]
fn opus_cut_anywhere_gives_a_prefix_or_a_typed_error() {
    for (file, some_decode) in [
        ("opus_48k_mono.ogg", true),
        ("opus_16k_stereo.ogg", true),
        ("opus_44k1_stereo.webm", false),
    ] {
        let bytes = std::fs::read(fixture(file)).unwrap();
        let whole = decode_bytes(&bytes, file).unwrap().samples;
        let (mut ok, mut err) = (0, 0);
        for cut in (0..bytes.len()).step_by(97) {
            let label = format!("{file}[..{cut}]");
            match decode_bytes(&bytes[..cut], &label) {
                Ok(audio) => {
                    ok += 1;
                    assert_eq!(audio.sample_rate, 48_000, "{label}");
                    assert!(audio.samples.len() <= whole.len(), "{label}");
                    assert_eq!(audio.samples[..], whole[..audio.samples.len()], "{label}");
                }
                Err(e) => {
                    err += 1;
                    assert!(e.message.starts_with(&format!("{label}: ")), "{e}");
                    assert!(
                        matches!(
                            e.kind,
                            ErrorKind::EmptyInput
                                | ErrorKind::UnsupportedFormat
                                | ErrorKind::CorruptInput
                        ),
                        "{label}: {e}"
                    );
                }
            }
        }
        println!("{file}: {ok} cuts decoded, {err} refused");
        assert!(err > 0 && (ok > 0 || !some_decode), "{file}");
    }
}

#[test]
fn missing_file_is_io() {
    let path = fixture("does-not-exist.wav");
    let e = load_path(&path).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
    assert!(e.message.starts_with(&path.display().to_string()));
}

/// Truncations, byte flips and overwritten spans of real files: every call returns a Result,
/// errors are typed and named, and successful decodes hold only finite samples.
#[test]
fn random_corruptions_never_panic() {
    let mut sources: Vec<(String, Vec<u8>)> = [
        "pcm_s16.wav",
        "pcm_s24.wav",
        "float32.wav",
        "stereo_s16.wav",
        "speech_s16.flac",
        "jfk_44k1_stereo.flac",
        "speech.mp3",
        "speech.ogg",
        "speech.opus",
        "opus_16k_stereo.ogg",
        "opus_16k_mono.webm",
    ]
    .iter()
    .map(|f| (f.to_string(), std::fs::read(fixture(f)).unwrap()))
    .collect();
    // A few real recordings too (short ones keep the test quick).
    for f in [
        "pocketsphinx/goforward.raw",
        "deepspeech/new-home-in-the-stars-16k.wav",
    ] {
        if let Ok(b) = std::fs::read(shared_data().join(f)) {
            sources.push((f.to_string(), b));
        }
    }
    let mut rng = Rng(0x5eed_dec0de);
    let (mut ok, mut err) = (0usize, 0usize);
    let mut caught_panics = 0usize;
    for (name, original) in &sources {
        for round in 0..200 {
            let mut bytes = original.clone();
            match round % 4 {
                0 => bytes.truncate(rng.below(bytes.len())),
                1 => {
                    for _ in 0..1 + rng.below(8) {
                        let i = rng.below(bytes.len());
                        bytes[i] ^= 1 << rng.below(8);
                    }
                }
                2 => {
                    let start = rng.below(bytes.len());
                    let len = 1 + rng.below(64);
                    for b in bytes.iter_mut().skip(start).take(len) {
                        *b = rng.next() as u8;
                    }
                }
                _ => {
                    // Damage the header region specifically, where parsers are most fragile.
                    for _ in 0..4 {
                        let i = rng.below(bytes.len().min(128));
                        bytes[i] = rng.next() as u8;
                    }
                }
            }
            let label = format!("{name}#{round}");
            let result = catch_unwind(AssertUnwindSafe(|| decode_bytes(&bytes, &label)));
            let Ok(result) = result else {
                panic!("{label}: decode_bytes panicked");
            };
            match result {
                Ok(audio) => {
                    ok += 1;
                    assert!(!audio.samples.is_empty(), "{label}");
                    assert!(audio.sample_rate > 0, "{label}");
                    assert!(audio.samples.iter().all(|s| s.is_finite()), "{label}");
                }
                Err(e) => {
                    err += 1;
                    assert!(
                        e.message.starts_with(&format!("{label}: ")),
                        "{}",
                        e.message
                    );
                    assert!(
                        matches!(
                            e.kind,
                            ErrorKind::EmptyInput
                                | ErrorKind::UnsupportedFormat
                                | ErrorKind::CorruptInput
                        ),
                        "{label}: {e}"
                    );
                    if e.message.contains("decoder failed on malformed data") {
                        caught_panics += 1;
                    }
                }
            }
        }
    }
    println!("{ok} decoded, {err} rejected, {caught_panics} decoder panics contained");
    assert!(err > 0 && ok > 0);
}
