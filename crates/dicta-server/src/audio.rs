//! Turning uploaded bytes into 16 kHz samples under the per-request audio limits.
//!
//! Runs on tokio's blocking pool (decoding and resampling are CPU work). Limits are checked
//! on the decoded duration before resampling, so an over-long request costs no resampling.

use base64::Engine as _;
use dicta_audio::decode::{decode_owned_planar, decode_raw_pcm, PcmEncoding, PlanarAudio};
use dicta_audio::SAMPLE_RATE;
use dicta_core::{Error, Result};

/// How an input's bytes are to be read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AudioFormat {
    /// A file in any supported container (WAV, FLAC, MP3, OGG/Vorbis); detected from content.
    Encoded,
    /// Headerless little-endian mono PCM.
    Pcm {
        encoding: PcmEncoding,
        sample_rate: u32,
    },
}

/// The bytes of one input, as they arrived.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Payload {
    /// Raw bytes (multipart file, raw body).
    Bytes(Vec<u8>),
    /// Base64 text (JSON batch); decoded here, off the runtime.
    Base64(String),
}

/// One input before decoding.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawInput {
    /// The caller's id (also used to name the input in error messages).
    pub id: String,
    /// The data.
    pub payload: Payload,
    /// How to read it.
    pub format: AudioFormat,
}

/// Per-request audio limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AudioLimits {
    /// Most audio seconds over all inputs of a request.
    pub max_audio_seconds: f64,
    /// Most bytes of 16 kHz mono f32 samples over all inputs of a request.
    pub max_decoded_bytes: u64,
}

/// Decodes every input to 16 kHz mono; the first failure fails the request, naming the input.
pub(crate) fn decode_inputs(
    inputs: Vec<RawInput>,
    limits: AudioLimits,
) -> Result<Vec<(String, Vec<f32>)>> {
    let mut total_seconds = 0.0;
    let mut total_bytes = 0u64;
    let mut out = Vec::with_capacity(inputs.len());
    for input in inputs {
        let name = input.id;
        let bytes = match input.payload {
            Payload::Bytes(b) => b,
            Payload::Base64(text) => base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .map_err(|e| {
                    Error::invalid_input(format!("{name}: audio_base64 is not valid base64: {e}"))
                })?,
        };
        // Files keep their channels apart until after resampling, so that the conversion
        // matches `dicta transcribe` and faster-whisper bit for bit.
        let audio: PlanarAudio = match input.format {
            AudioFormat::Encoded => decode_owned_planar(bytes, &name)?,
            AudioFormat::Pcm {
                encoding,
                sample_rate,
            } => decode_raw_pcm(&bytes, encoding, sample_rate, &name)?.into(),
        };
        let seconds = audio.duration();
        total_seconds += seconds;
        if total_seconds > limits.max_audio_seconds {
            return Err(Error::limit(
                "max_audio_seconds",
                format!("{} s per request", limits.max_audio_seconds),
                format!("{total_seconds:.1} s (counting up to input {name:?})"),
            ));
        }
        let samples_16k = (seconds * f64::from(SAMPLE_RATE)).ceil() as u64;
        total_bytes += samples_16k * std::mem::size_of::<f32>() as u64;
        if total_bytes > limits.max_decoded_bytes {
            return Err(Error::limit(
                "max_decoded_bytes",
                format!("{} bytes per request", limits.max_decoded_bytes),
                format!(
                    "{total_bytes} bytes of 16 kHz f32 samples (counting up to input {name:?})"
                ),
            ));
        }
        out.push((name, audio.into_16k()?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dicta_core::ErrorKind;

    fn pcm(id: &str, samples: &[i16], rate: u32) -> RawInput {
        RawInput {
            id: id.into(),
            payload: Payload::Bytes(samples.iter().flat_map(|s| s.to_le_bytes()).collect()),
            format: AudioFormat::Pcm {
                encoding: PcmEncoding::I16Le,
                sample_rate: rate,
            },
        }
    }

    const LOOSE: AudioLimits = AudioLimits {
        max_audio_seconds: 3600.0,
        max_decoded_bytes: 1 << 30,
    };

    #[test]
    fn stereo_uploads_convert_as_dicta_transcribe_does() {
        // Two different channels at 44.1 kHz: resampling each before the down-mix (as
        // faster-whisper does) and mixing first differ by an LSB here and there.
        let mut wav = std::io::Cursor::new(Vec::new());
        let spec = hound::WavSpec {
            channels: 2,
            sample_rate: 44100,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::new(&mut wav, spec).unwrap();
        let mut seed = 7u32;
        for n in 0..44100 {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let left = (seed >> 16) as i32 - 32768;
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let right = (seed >> 16) as i32 - 32768;
            let tone = (8000.0 * (n as f32 * 0.031).sin()) as i32;
            w.write_sample(((left + tone) / 2) as i16).unwrap();
            w.write_sample(((right - tone) / 2) as i16).unwrap();
        }
        w.finalize().unwrap();
        let bytes = wav.into_inner();
        let input = RawInput {
            id: "stereo.wav".into(),
            payload: Payload::Bytes(bytes.clone()),
            format: AudioFormat::Encoded,
        };
        let got = decode_inputs(vec![input], LOOSE).unwrap().remove(0).1;
        let exact = dicta_audio::decode::load_owned(bytes.clone(), "stereo.wav").unwrap();
        assert_eq!(got, exact);
        let mixed_first = dicta_audio::decode::decode_owned(bytes, "stereo.wav")
            .unwrap()
            .into_16k()
            .unwrap();
        assert_ne!(
            got, mixed_first,
            "the test signal must tell the two paths apart"
        );
    }

    #[test]
    fn raw_i16_at_16k_is_scaled_exactly_and_keeps_order() {
        let out = decode_inputs(
            vec![
                pcm("a", &[0, 16384, -32768], 16_000),
                pcm("b", &[1], 16_000),
            ],
            LOOSE,
        )
        .unwrap();
        assert_eq!(out[0], ("a".to_string(), vec![0.0, 0.5, -1.0]));
        assert_eq!(out[1], ("b".to_string(), vec![1.0 / 32768.0]));
    }

    #[test]
    fn base64_payload_matches_raw_bytes() {
        let raw = pcm("x", &[100, -200, 300], 16_000);
        let Payload::Bytes(bytes) = &raw.payload else {
            unreachable!()
        };
        let b64 = RawInput {
            payload: Payload::Base64(base64::engine::general_purpose::STANDARD.encode(bytes)),
            ..raw.clone()
        };
        assert_eq!(
            decode_inputs(vec![raw], LOOSE).unwrap(),
            decode_inputs(vec![b64], LOOSE).unwrap()
        );
    }

    #[test]
    fn audio_seconds_limit_counts_all_inputs_and_names_values() {
        let limits = AudioLimits {
            max_audio_seconds: 1.5,
            ..LOOSE
        };
        let second = vec![0i16; 16_000];
        let e = decode_inputs(
            vec![pcm("one", &second, 16_000), pcm("two", &second, 16_000)],
            limits,
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::LimitExceeded);
        assert!(e.message.contains("max_audio_seconds") && e.message.contains("1.5 s"));
        assert!(e.message.contains("2.0 s") && e.message.contains("\"two\""));
    }

    #[test]
    fn decoded_bytes_limit_is_measured_at_16k() {
        // 0.5 s at 8 kHz is 8000 samples at 16 kHz = 32000 bytes.
        let limits = AudioLimits {
            max_decoded_bytes: 31_999,
            ..LOOSE
        };
        let e = decode_inputs(vec![pcm("lo", &[0; 4000], 8_000)], limits).unwrap_err();
        assert_eq!(e.kind, ErrorKind::LimitExceeded);
        assert!(e.message.contains("32000 bytes"), "{}", e.message);
        let ok = AudioLimits {
            max_decoded_bytes: 32_000,
            ..LOOSE
        };
        let out = decode_inputs(vec![pcm("lo", &[0; 4000], 8_000)], ok).unwrap();
        assert_eq!(out[0].1.len(), 8000);
    }

    #[test]
    fn bad_payloads_are_typed_and_named() {
        let e = decode_inputs(
            vec![RawInput {
                id: "clip7".into(),
                payload: Payload::Base64("not base64!!".into()),
                format: AudioFormat::Encoded,
            }],
            LOOSE,
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidInput);
        assert!(e.message.starts_with("clip7:"));
        let e = decode_inputs(
            vec![RawInput {
                id: "junk.wav".into(),
                payload: Payload::Bytes(b"definitely not audio at all".to_vec()),
                format: AudioFormat::Encoded,
            }],
            LOOSE,
        )
        .unwrap_err();
        assert!(matches!(
            e.kind,
            ErrorKind::UnsupportedFormat | ErrorKind::CorruptInput
        ));
        assert!(e.message.contains("junk.wav"));
    }
}
