//! Turning uploaded bytes into 16 kHz samples under the per-request audio limits.
//!
//! Runs on tokio's blocking pool (decoding and resampling are CPU work). Files are decoded as
//! a stream ([`dicta_audio::decode::load_owned_bounded`]): each block is resampled and
//! down-mixed at once, a header that declares more than the request may hold is refused before
//! anything is decoded, and decoding stops at the limit. So a small file that expands to hours
//! of multichannel audio (a decompression bomb) costs at most the request's limit in 16 kHz
//! samples, and every sample held is reserved from the server-wide [`AudioBudget`] first, so
//! concurrent requests cannot add up past it either.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use base64::Engine as _;
use dicta_audio::decode::{
    decode_raw_pcm, load_channels_owned_bounded, load_owned_bounded, Bounds, Loaded, PcmEncoding,
};
use dicta_audio::SAMPLE_RATE;
use dicta_core::{ChannelMode, Error, ErrorKind, Result};

/// The server-wide cap on decoded audio held by admitted requests (decoding, queued or being
/// transcribed), in bytes of 16 kHz mono f32 samples. Requests reserve as they decode; a
/// reservation that would pass the cap fails the request with `Overloaded` (503, retry later).
#[derive(Debug)]
pub(crate) struct AudioBudget {
    cap: u64,
    used: AtomicU64,
}

impl AudioBudget {
    pub fn new(cap: u64) -> Arc<Self> {
        Arc::new(Self {
            cap,
            used: AtomicU64::new(0),
        })
    }

    /// Bytes reserved now (the `dicta_pending_audio_bytes` gauge).
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// An empty reservation that grows with [`Reservation::grow`] and is returned on drop.
    pub fn reservation(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: self.clone(),
            bytes: 0,
        }
    }
}

/// Bytes of an [`AudioBudget`] held by one request; given back when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<AudioBudget>,
    bytes: u64,
}

impl Reservation {
    /// Reserves `bytes` more, or fails (reserving nothing) when the cap would be passed.
    pub fn grow(&mut self, bytes: u64) -> Result<()> {
        let b = &self.budget;
        b.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&u| u <= b.cap)
            })
            .map_err(|used| {
                Error::new(
                    ErrorKind::Overloaded,
                    format!(
                        "max_pending_audio_mib is {} MiB of decoded audio for the whole server, and {} MiB are held by requests in progress; retry later",
                        b.cap >> 20,
                        used >> 20
                    ),
                )
            })?;
        self.bytes += bytes;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// How an input's bytes are to be read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AudioFormat {
    /// A file in any supported container (WAV, FLAC, MP3, OGG/Vorbis or Opus, MP4, WebM);
    /// detected from content.
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

/// One decoded input: its id, and its 16 kHz samples (with the note on a damaged file that
/// could be read in part) or why they could not be had.
pub(crate) type Decoded = (String, Result<Loaded>);

/// One decoded input of [`decode_inputs_as`]: its id, and its samples with their channel
/// count, or why they could not be had.
pub(crate) type DecodedChannels = (String, Result<(Loaded, usize)>);

/// Decodes every input to 16 kHz mono, reserving what it holds in `reservation`. An input
/// that cannot be read (bad base64, unknown format, damaged file, no audio) fails alone, with
/// an error that names it; the request's limits (`LimitExceeded`) and the server's budget
/// (`Overloaded`) fail the whole request.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn decode_inputs(
    inputs: Vec<RawInput>,
    limits: AudioLimits,
    reservation: &mut Reservation,
) -> Result<Vec<Decoded>> {
    let out = decode_inputs_as(inputs, limits, ChannelMode::Mix, reservation)?;
    Ok(out
        .into_iter()
        .map(|(id, r)| (id, r.map(|(l, _)| l)))
        .collect())
}

/// [`decode_inputs`], each channel apart with [`ChannelMode::Split`]: an input's samples are
/// then its channels one after another (all of one length), with the channel count beside
/// them; the limits count every channel's samples (`max_audio_seconds` the recording's length).
pub(crate) fn decode_inputs_as(
    inputs: Vec<RawInput>,
    limits: AudioLimits,
    channels: ChannelMode,
    reservation: &mut Reservation,
) -> Result<Vec<DecodedChannels>> {
    let split = channels == ChannelMode::Split;
    let mut out = Vec::with_capacity(inputs.len());
    let mut total_seconds = 0.0;
    let mut total_bytes = 0u64;
    for input in inputs {
        let name = input.id.clone();
        match decode_one(
            input,
            limits,
            split,
            reservation,
            &mut total_seconds,
            &mut total_bytes,
        ) {
            Ok(samples) => out.push((name, Ok(samples))),
            Err(e) if matches!(e.kind, ErrorKind::LimitExceeded | ErrorKind::Overloaded) => {
                return Err(e)
            }
            Err(e) => out.push((name, Err(e))),
        }
    }
    Ok(out)
}

/// Decodes one input, adding what it holds to the request's running totals.
fn decode_one(
    input: RawInput,
    limits: AudioLimits,
    split: bool,
    reservation: &mut Reservation,
    total_seconds: &mut f64,
    total_bytes: &mut u64,
) -> Result<(Loaded, usize)> {
    let f32_bytes = std::mem::size_of::<f32>() as u64;
    let name = input.id;
    let bytes = match input.payload {
        Payload::Bytes(b) => b,
        Payload::Base64(text) => base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|e| {
                Error::invalid_input(format!("{name}: audio_base64 is not valid base64: {e}"))
            })?,
    };
    let over_bytes = |total: u64| {
        Error::limit(
            "max_decoded_bytes",
            format!("{} bytes per request", limits.max_decoded_bytes),
            format!("{total} bytes of 16 kHz f32 samples (counting up to input {name:?})"),
        )
    };
    let before = *total_seconds;
    match input.format {
        AudioFormat::Encoded => {
            let limit = if before > 0.0 {
                format!(
                    "max_audio_seconds ({} s per request, {before:.1} s of it taken by earlier inputs)",
                    limits.max_audio_seconds
                )
            } else {
                format!(
                    "max_audio_seconds ({} s per request)",
                    limits.max_audio_seconds
                )
            };
            let mut on_samples = |n: usize| {
                let add = n as u64 * f32_bytes;
                *total_bytes += add;
                if *total_bytes > limits.max_decoded_bytes {
                    return Err(over_bytes(*total_bytes));
                }
                reservation.grow(add)
            };
            // Files keep their channels apart until after resampling, so that the conversion
            // matches `dicta transcribe` and faster-whisper bit for bit.
            let bounds = Bounds {
                max_seconds: limits.max_audio_seconds - before,
                limit: &limit,
                on_samples: &mut on_samples,
            };
            if split {
                let all = load_channels_owned_bounded(bytes, &name, bounds)?;
                let n = all.channels.len();
                let len = all.channels.first().map_or(0, Vec::len);
                *total_seconds += len as f64 / f64::from(SAMPLE_RATE);
                let loaded = Loaded {
                    samples: all.channels.concat(),
                    warning: all.warning,
                };
                return Ok((loaded, n));
            }
            let loaded = load_owned_bounded(bytes, &name, bounds)?;
            *total_seconds += loaded.samples.len() as f64 / f64::from(SAMPLE_RATE);
            Ok((loaded, 1))
        }
        AudioFormat::Pcm {
            encoding,
            sample_rate,
        } => {
            // Raw PCM is at most the body in size: its duration is known before converting.
            let audio = decode_raw_pcm(&bytes, encoding, sample_rate, &name)?;
            drop(bytes);
            *total_seconds += audio.duration();
            if *total_seconds > limits.max_audio_seconds {
                let total = *total_seconds;
                return Err(Error::limit(
                    "max_audio_seconds",
                    format!("{} s per request", limits.max_audio_seconds),
                    format!("{total:.1} s (counting up to input {name:?})"),
                ));
            }
            let add = (audio.duration() * f64::from(SAMPLE_RATE)).ceil() as u64 * f32_bytes;
            *total_bytes += add;
            if *total_bytes > limits.max_decoded_bytes {
                return Err(over_bytes(*total_bytes));
            }
            reservation.grow(add)?;
            let loaded = Loaded {
                samples: audio.into_16k()?,
                warning: None,
            };
            Ok((loaded, 1))
        }
    }
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

    /// Every input decoded, or the first error (request-level or per input).
    fn decode(inputs: Vec<RawInput>, limits: AudioLimits) -> Result<Vec<(String, Vec<f32>)>> {
        let budget = AudioBudget::new(1 << 40);
        let mut r = budget.reservation();
        decode_inputs(inputs, limits, &mut r)?
            .into_iter()
            .map(|(id, s)| s.map(|s| (id, s.samples)))
            .collect()
    }

    #[test]
    fn a_broken_input_fails_alone() {
        let budget = AudioBudget::new(1 << 40);
        let mut r = budget.reservation();
        let junk = RawInput {
            id: "junk.wav".into(),
            payload: Payload::Bytes(b"definitely not audio at all".to_vec()),
            format: AudioFormat::Encoded,
        };
        let out = decode_inputs(
            vec![junk, pcm("good", &[0, 100, -100], 16_000)],
            LOOSE,
            &mut r,
        )
        .unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].0, "junk.wav");
        let e = out[0].1.as_ref().unwrap_err();
        assert!(e.message.contains("junk.wav"), "{}", e.message);
        assert_eq!(out[1].1.as_ref().unwrap().samples.len(), 3);
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
        let got = decode(vec![input], LOOSE).unwrap().remove(0).1;
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
        let out = decode(
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
            decode(vec![raw], LOOSE).unwrap(),
            decode(vec![b64], LOOSE).unwrap()
        );
    }

    #[test]
    fn audio_seconds_limit_counts_all_inputs_and_names_values() {
        let limits = AudioLimits {
            max_audio_seconds: 1.5,
            ..LOOSE
        };
        let second = vec![0i16; 16_000];
        let e = decode(
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
        let e = decode(vec![pcm("lo", &[0; 4000], 8_000)], limits).unwrap_err();
        assert_eq!(e.kind, ErrorKind::LimitExceeded);
        assert!(e.message.contains("32000 bytes"), "{}", e.message);
        let ok = AudioLimits {
            max_decoded_bytes: 32_000,
            ..LOOSE
        };
        let out = decode(vec![pcm("lo", &[0; 4000], 8_000)], ok).unwrap();
        assert_eq!(out[0].1.len(), 8000);
    }

    #[test]
    fn bad_payloads_are_typed_and_named() {
        let e = decode(
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
        let e = decode(
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

#[cfg(test)]
mod bomb_tests {
    use super::*;

    /// A 16-bit WAV of `seconds` of digital silence, `channels` at `rate`.
    fn silent_wav(seconds: f64, channels: u16, rate: u32) -> Vec<u8> {
        let mut wav = std::io::Cursor::new(Vec::new());
        let spec = hound::WavSpec {
            channels,
            sample_rate: rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::new(&mut wav, spec).unwrap();
        let frames = (seconds * f64::from(rate)) as usize;
        let mut i16w = w.get_i16_writer((frames * channels as usize) as u32);
        for _ in 0..frames * channels as usize {
            i16w.write_sample(0);
        }
        i16w.flush().unwrap();
        w.finalize().unwrap();
        wav.into_inner()
    }

    fn input(id: &str, bytes: Vec<u8>) -> RawInput {
        RawInput {
            id: id.into(),
            payload: Payload::Bytes(bytes),
            format: AudioFormat::Encoded,
        }
    }

    const LIMITS: AudioLimits = AudioLimits {
        max_audio_seconds: 2.0,
        max_decoded_bytes: 1 << 30,
    };

    #[test]
    fn a_header_that_declares_too_much_is_refused_before_decoding() {
        let budget = AudioBudget::new(1 << 30);
        let mut r = budget.reservation();
        let e = decode_inputs(
            vec![input("long.wav", silent_wav(3.0, 8, 48_000))],
            LIMITS,
            &mut r,
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::LimitExceeded, "{}", e.message);
        assert!(
            e.message.contains("max_audio_seconds") && e.message.contains("declares 3.0 s"),
            "{}",
            e.message
        );
        assert_eq!(budget.used(), 0, "nothing was decoded, nothing reserved");
    }

    #[test]
    fn the_limit_counts_every_input_of_a_request() {
        let budget = AudioBudget::new(1 << 30);
        let mut r = budget.reservation();
        let one = silent_wav(1.5, 2, 44_100);
        let e = decode_inputs(
            vec![input("a.wav", one.clone()), input("b.wav", one)],
            LIMITS,
            &mut r,
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::LimitExceeded);
        assert!(e.message.contains("b.wav"), "{}", e.message);
    }

    #[test]
    fn the_server_budget_is_shared_and_given_back() {
        // 1 s at 16 kHz is 64000 bytes; a budget of 100000 bytes holds one such request.
        let budget = AudioBudget::new(100_000);
        let mut first = budget.reservation();
        let got = decode_inputs(
            vec![input("a.wav", silent_wav(1.0, 2, 48_000))],
            LIMITS,
            &mut first,
        )
        .unwrap();
        assert_eq!(got[0].1.as_ref().unwrap().samples.len(), 16_000);
        assert_eq!(budget.used(), 64_000);
        let mut second = budget.reservation();
        let e = decode_inputs(
            vec![input("b.wav", silent_wav(1.0, 1, 16_000))],
            LIMITS,
            &mut second,
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Overloaded, "{}", e.message);
        drop(second);
        drop(first);
        assert_eq!(budget.used(), 0);
        let mut third = budget.reservation();
        decode_inputs(
            vec![input("b.wav", silent_wav(1.0, 1, 16_000))],
            LIMITS,
            &mut third,
        )
        .unwrap();
    }
}
