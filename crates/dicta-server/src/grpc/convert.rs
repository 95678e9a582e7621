//! Riva messages ↔ the server's requests and results: audio encodings, options, transcripts.

use dicta_audio::decode::PcmEncoding;
use dicta_core::{Error, ErrorKind, Result, Segment, Transcript, Word};

use super::pb::nvidia::riva::asr::{
    EndpointingConfig, RecognitionConfig, SpeechContext, SpeechRecognitionAlternative,
    SpeechRecognitionResult, StreamingRecognitionResult, WordInfo,
};
use super::pb::nvidia::riva::AudioEncoding;
use crate::audio::AudioFormat;
use crate::backend::{RequestOptions, StreamEvent, StreamEventKind, StreamOptions};
use crate::pipeline::validate_stream_options;

/// Whether `bytes` start like a file Dicta decodes by its content (WAV, FLAC, OGG, MP3,
/// MP4/M4A, Matroska/WebM), rather than headerless samples. (An MP3 needs its ID3 tag here.)
pub(crate) fn looks_like_a_file(bytes: &[u8]) -> bool {
    let starts = |m: &[u8]| bytes.starts_with(m);
    starts(b"RIFF")
        || starts(b"RF64")
        || starts(b"fLaC")
        || starts(b"OggS")
        || starts(b"ID3")
        || starts(&[0x1A, 0x45, 0xDF, 0xA3])
        || (bytes.len() >= 8 && &bytes[4..8] == b"ftyp")
    // No bare MP3 frame sync: 0xFFEx is also a small negative 16-bit sample.
}

/// How one channel of headerless audio is coded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawCoding {
    /// 16-bit little-endian signed samples (`LINEAR_PCM`).
    Linear16,
    /// G.711 μ-law bytes (`MULAW`).
    Mulaw,
    /// G.711 A-law bytes (`ALAW`).
    Alaw,
}

impl RawCoding {
    /// Bytes per sample of one channel.
    pub fn bytes(self) -> usize {
        match self {
            RawCoding::Linear16 => 2,
            RawCoding::Mulaw | RawCoding::Alaw => 1,
        }
    }
}

/// What the config says about headerless audio: coding, rate and channels. Errors name the
/// field: a missing or odd rate, an encoding that is not headerless (`OGGOPUS`: an Ogg/Opus file,
/// which `Recognize` reads by its content but a stream of chunks cannot carry).
pub(crate) fn raw_spec(config: &RecognitionConfig) -> Result<(RawCoding, u32, usize)> {
    let coding = match AudioEncoding::try_from(config.encoding) {
        Ok(AudioEncoding::LinearPcm) | Ok(AudioEncoding::EncodingUnspecified) => {
            RawCoding::Linear16
        }
        Ok(AudioEncoding::Mulaw) => RawCoding::Mulaw,
        Ok(AudioEncoding::Alaw) => RawCoding::Alaw,
        Ok(AudioEncoding::Flac) => {
            return Err(Error::new(
                ErrorKind::CorruptInput,
                "encoding is FLAC but the audio does not start with a FLAC header",
            ))
        }
        Ok(AudioEncoding::Oggopus) => return Err(Error::new(
            ErrorKind::UnsupportedFormat,
            "encoding OGGOPUS is not supported for streaming; stream LINEAR_PCM, MULAW or ALAW (Recognize reads Ogg/Opus files)",
        )),
        Err(_) => {
            return Err(Error::invalid_input(format!(
                "unknown audio encoding {}",
                config.encoding
            )))
        }
    };
    if !(1000..=384_000).contains(&config.sample_rate_hertz) {
        return Err(Error::invalid_input(format!(
            "sample_rate_hertz must be set for raw audio (1000..=384000), got {}",
            config.sample_rate_hertz
        )));
    }
    let channels = match config.audio_channel_count {
        0 | 1 => 1,
        n @ 2..=32 => n as usize,
        n => {
            return Err(Error::invalid_input(format!(
                "audio_channel_count must be in 1..=32, got {n}"
            )))
        }
    };
    Ok((coding, config.sample_rate_hertz as u32, channels))
}

/// G.711 μ-law byte → linear sample (ITU-T G.711, 14-bit range scaled to 16 bits).
pub(crate) fn mulaw(b: u8) -> i16 {
    let b = !b;
    let exponent = (b >> 4) & 0x07;
    let mantissa = i32::from(b & 0x0F);
    let magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84;
    (if b & 0x80 != 0 { -magnitude } else { magnitude }) as i16
}

/// G.711 A-law byte → linear sample.
pub(crate) fn alaw(b: u8) -> i16 {
    let b = b ^ 0x55;
    let exponent = (b >> 4) & 0x07;
    let mantissa = i32::from(b & 0x0F);
    let magnitude = if exponent == 0 {
        (mantissa << 4) + 8
    } else {
        ((mantissa << 4) + 0x108) << (exponent - 1)
    };
    (if b & 0x80 != 0 { magnitude } else { -magnitude }) as i16
}

/// One headerless sample (`coding.bytes()` bytes) as 16-bit linear.
fn linear(s: &[u8], coding: RawCoding) -> i16 {
    match coding {
        RawCoding::Linear16 => i16::from_le_bytes([s[0], s[1]]),
        RawCoding::Mulaw => mulaw(s[0]),
        RawCoding::Alaw => alaw(s[0]),
    }
}

/// Headerless interleaved frames (whole ones) → a 16-bit PCM WAV file of `channels` at `rate`.
fn raw_to_wav(bytes: &[u8], coding: RawCoding, rate: u32, channels: usize) -> Result<Vec<u8>> {
    let spec = hound::WavSpec {
        channels: channels as u16,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let samples = bytes.len() / coding.bytes();
    let mut out = std::io::Cursor::new(Vec::with_capacity(44 + 2 * samples));
    let wav = |e: hound::Error| Error::internal(format!("writing the channels as WAV: {e}"));
    let mut w = hound::WavWriter::new(&mut out, spec).map_err(wav)?;
    {
        let mut i16w = w.get_i16_writer(samples as u32);
        for s in bytes.chunks_exact(coding.bytes()) {
            i16w.write_sample(linear(s, coding));
        }
        i16w.flush().map_err(wav)?;
    }
    w.finalize().map_err(wav)?;
    Ok(out.into_inner())
}

/// Headerless interleaved frames → mono samples in [-1, 1) (the mean of the channels).
/// `bytes` must hold whole frames.
pub(crate) fn raw_to_mono(bytes: &[u8], coding: RawCoding, channels: usize) -> Vec<f32> {
    let frame = coding.bytes() * channels;
    let sample = |s: &[u8]| -> f32 { f32::from(linear(s, coding)) / 32768.0 };
    bytes
        .chunks_exact(frame)
        .map(|f| {
            if channels == 1 {
                sample(f)
            } else {
                let sum: f32 = f.chunks_exact(coding.bytes()).map(sample).sum();
                sum / channels as f32
            }
        })
        .collect()
}

/// How `Recognize`'s audio is read: a file by its content, else headerless samples per the
/// config. Mono 16-bit PCM goes to the server's PCM reader as is; other codings and channel
/// counts are converted to mono `f32` here, except that with
/// `enable_separate_recognition_per_channel` several channels become a 16-bit WAV file of
/// them, which the server reads as any file whose channels a request splits.
pub(crate) fn recognize_audio(
    config: &RecognitionConfig,
    audio: Vec<u8>,
) -> Result<(AudioFormat, Vec<u8>)> {
    if audio.is_empty() {
        return Err(Error::new(
            ErrorKind::EmptyInput,
            "the request holds no audio",
        ));
    }
    if looks_like_a_file(&audio) {
        return Ok((AudioFormat::Encoded, audio));
    }
    if config.encoding == AudioEncoding::Oggopus as i32 {
        // OGGOPUS is an Ogg/Opus file (decoded by its content above), not headerless samples.
        return Err(Error::new(
            ErrorKind::CorruptInput,
            "encoding is OGGOPUS but the audio does not start with an Ogg page (\"OggS\")",
        ));
    }
    let (coding, rate, channels) = raw_spec(config)?;
    let frame = coding.bytes() * channels;
    if !audio.len().is_multiple_of(frame) {
        return Err(Error::new(
            ErrorKind::CorruptInput,
            format!(
                "{} bytes of audio is not a whole number of {channels}-channel frames of {} bytes",
                audio.len(),
                frame
            ),
        ));
    }
    if channels > 1 && config.enable_separate_recognition_per_channel {
        return Ok((
            AudioFormat::Encoded,
            raw_to_wav(&audio, coding, rate, channels)?,
        ));
    }
    if coding == RawCoding::Linear16 && channels == 1 {
        return Ok((
            AudioFormat::Pcm {
                encoding: PcmEncoding::I16Le,
                sample_rate: rate,
            },
            audio,
        ));
    }
    let mono: Vec<u8> = raw_to_mono(&audio, coding, channels)
        .into_iter()
        .flat_map(f32::to_le_bytes)
        .collect();
    Ok((
        AudioFormat::Pcm {
            encoding: PcmEncoding::F32Le,
            sample_rate: rate,
        },
        mono,
    ))
}

/// Riva's BCP-47 `language_code` (`en-US`) as Whisper's code (`en`); empty: none.
pub(crate) fn language(code: &str) -> Option<String> {
    let base = code
        .trim()
        .split(['-', '_'])
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    (!base.is_empty()).then_some(base)
}

/// The request options a config asks for: its language, word offsets and diarization, the
/// phrases of `speech_contexts` as faster-whisper's `hotwords`, and `custom_configuration`'s
/// entries as the `/transcribe` parameters of the same names (`beam_size`, `temperature`,
/// `vad_filter`, `initial_prompt`, …), which override the rest. Values are read as JSON
/// (`5`, `true`, `[0.0, 0.2]`), text fields ([`TEXT_FIELDS`]) as they are. A key that is
/// not a parameter is refused, as a `/transcribe` body's unknown field is: a typo must not
/// pass silently.
pub(crate) fn request_options(config: &RecognitionConfig) -> Result<RequestOptions> {
    let diarize = config
        .diarization_config
        .as_ref()
        .is_some_and(|d| d.enable_speaker_diarization);
    let max_speakers = config
        .diarization_config
        .as_ref()
        .and_then(|d| usize::try_from(d.max_speaker_count).ok())
        .filter(|&n| n > 0 && diarize);
    let base = RequestOptions {
        language: language(&config.language_code),
        word_timestamps: config.enable_word_time_offsets,
        diarize,
        max_speakers,
        hotwords: boosted_phrases(&config.speech_contexts)?,
        // Each channel recognized on its own: the results carry their `channel_tag`.
        channels: if config.enable_separate_recognition_per_channel {
            dicta_core::ChannelMode::Split
        } else {
            dicta_core::ChannelMode::Mix
        },
        ..RequestOptions::default()
    };
    if config.custom_configuration.is_empty() {
        return Ok(base);
    }
    let mut fields = serde_json::Map::new();
    for (key, text) in &config.custom_configuration {
        let key = key.trim();
        if key == "channels" {
            // Riva's own fields say how channels are read and recognized.
            return Err(Error::invalid_input(
                "custom_configuration: channels is not taken over gRPC; set \
                 enable_separate_recognition_per_channel to recognize each channel on its own",
            ));
        }
        let value = if TEXT_FIELDS.contains(&key) {
            serde_json::Value::String(text.clone())
        } else {
            serde_json::from_str(text.trim())
                .unwrap_or_else(|_| serde_json::Value::String(text.clone()))
        };
        fields.insert(key.to_string(), value);
    }
    base.overlaid(fields, "custom_configuration")
}

/// The options of a `StreamingRecognize` session: its language, the phrases of
/// `speech_contexts` as `hotwords`, and of `custom_configuration` only what a stream can take
/// per session (`prompt` or `initial_prompt`, `hotwords`, `language`, `task`, which override the
/// rest); any other key is refused by name (streams decode with the model's streaming
/// settings), as is a negative boost. `model` is the config's, resolved by the caller.
pub(crate) fn stream_options(
    config: &RecognitionConfig,
    model: Option<String>,
) -> Result<StreamOptions> {
    let (vad, vad_parameters) = match &config.endpointing_config {
        Some(e) => (Some(true), endpointing(e)?),
        None => (None, None),
    };
    let mut o = StreamOptions {
        language: language(&config.language_code),
        model,
        task: None,
        prompt: None,
        hotwords: boosted_phrases(&config.speech_contexts)?,
        vad,
        vad_parameters,
    };
    for (key, text) in &config.custom_configuration {
        let text = text.trim();
        let value = (!text.is_empty()).then(|| text.to_string());
        match key.trim() {
            "prompt" | "initial_prompt" => o.prompt = value,
            "hotwords" => o.hotwords = value,
            "language" => o.language = language(text),
            "task" => o.task = value.map(|t| t.parse()).transpose()?,
            "vad" => {
                o.vad = Some(text.parse().map_err(|_| {
                    Error::invalid_input(format!(
                        "custom_configuration: vad must be true or false, got {text:?}"
                    ))
                })?)
            }
            "vad_parameters" => {
                let base = o
                    .vad_parameters
                    .clone()
                    .unwrap_or_else(dicta_core::VadOptions::endpointing);
                let given = base.overlaid_json(text).map_err(|e| {
                    Error::invalid_input(format!(
                        "custom_configuration: vad_parameters {}",
                        e.message
                    ))
                })?;
                o.vad_parameters = Some(given);
            }
            other => {
                return Err(Error::invalid_input(format!(
                    "custom_configuration: {other} cannot be set per stream (StreamingRecognize \
                     takes prompt, initial_prompt, hotwords, language, task, vad and \
                     vad_parameters; streams decode with the model's streaming settings); use \
                     Recognize for it"
                )))
            }
        }
    }
    validate_stream_options(&o)?;
    Ok(o)
}

/// Riva's `endpointing_config` as Dicta's VAD endpointing: `stop_history` (ms of non-speech
/// that end an utterance) is `min_silence_duration_ms`, `start_history` (ms of speech that
/// start one) `min_speech_duration_ms`; unset or 0 keep the endpointing defaults. Riva's
/// thresholds are fractions of acoustic-model frames, which a voice activity detector does not
/// have: they are refused by name (a detector's speech probability threshold goes in
/// `custom_configuration` `vad_parameters`), as are the two-pass end-of-utterance fields.
fn endpointing(e: &EndpointingConfig) -> Result<Option<dicta_core::VadOptions>> {
    for (name, set) in [
        ("start_threshold", e.start_threshold.is_some()),
        ("stop_threshold", e.stop_threshold.is_some()),
        ("stop_history_eou", e.stop_history_eou.is_some()),
        ("stop_threshold_eou", e.stop_threshold_eou.is_some()),
    ] {
        if set {
            return Err(Error::invalid_input(format!(
                "endpointing_config.{name} is not supported: Dicta ends utterances where a voice \
                 activity detector hears silence (stop_history: the silence in ms; start_history: \
                 the shortest speech in ms; custom_configuration vad_parameters: the detector's \
                 options as JSON)"
            )));
        }
    }
    let mut o = dicta_core::VadOptions::endpointing();
    for (name, value, field) in [
        (
            "start_history",
            e.start_history,
            &mut o.min_speech_duration_ms,
        ),
        (
            "stop_history",
            e.stop_history,
            &mut o.min_silence_duration_ms,
        ),
    ] {
        match value {
            Some(ms) if ms < 0 => {
                return Err(Error::invalid_input(format!(
                    "endpointing_config.{name} must be >= 0 ms, got {ms}"
                )))
            }
            Some(ms) if ms > 0 => *field = ms as u32,
            _ => {}
        }
    }
    Ok(Some(o))
}

/// `custom_configuration` keys whose values are text, taken as sent (a prompt of "42" stays
/// text).
const TEXT_FIELDS: &[&str] = &[
    "language",
    "prompt",
    "initial_prompt",
    "hotwords",
    "prefix",
    "task",
];

/// Riva's word boosting as Whisper's `hotwords`: the phrases of every context, in order,
/// joined by ", ". Whisper has no weight per phrase: any boost of 0 or more puts its phrases
/// in the prompt, and a negative boost (Riva's way to make words less likely) is refused
/// rather than ignored.
fn boosted_phrases(contexts: &[SpeechContext]) -> Result<Option<String>> {
    let mut phrases: Vec<&str> = Vec::new();
    for c in contexts {
        if c.boost < 0.0 {
            return Err(Error::invalid_input(format!(
                "speech_contexts: a negative boost ({}) is not supported: Whisper models can \
                 bias towards phrases (boost >= 0) but not away from them",
                c.boost
            )));
        }
        phrases.extend(c.phrases.iter().map(|p| p.trim()).filter(|p| !p.is_empty()));
    }
    Ok((!phrases.is_empty()).then(|| phrases.join(", ")))
}

/// Seconds → Riva's milliseconds.
fn ms(seconds: f64) -> i32 {
    (seconds * 1000.0).round().clamp(0.0, f64::from(i32::MAX)) as i32
}

/// Riva's speaker tag of Dicta's `SPEAKER_03` (3 + 1: Riva counts from 1; 0 is none).
fn speaker_tag(speaker: Option<&str>) -> i32 {
    speaker
        .and_then(|s| s.rsplit('_').next())
        .and_then(|n| n.parse::<i32>().ok())
        .map_or(0, |n| n + 1)
}

fn word_info(w: &Word, offset: f64, language: &str) -> WordInfo {
    WordInfo {
        start_time: ms(w.start + offset),
        end_time: ms(w.end + offset),
        word: w.word.trim().to_string(),
        confidence: w.probability.unwrap_or(0.0),
        speaker_tag: speaker_tag(w.speaker.as_deref()),
        language_code: language.to_string(),
    }
}

/// A segment's confidence: the geometric mean of its tokens' probabilities.
fn confidence(s: &Segment) -> f32 {
    s.avg_logprob.map_or(0.0, |lp| lp.exp().clamp(0.0, 1.0))
}

/// `Recognize`'s results: one per segment (Riva's results are utterances), words when asked.
pub(crate) fn recognize_results(t: &Transcript, words: bool) -> Vec<SpeechRecognitionResult> {
    let language = t.language.clone().unwrap_or_default();
    t.segments
        .iter()
        .filter(|s| !s.text.trim().is_empty())
        .map(|s| SpeechRecognitionResult {
            alternatives: vec![SpeechRecognitionAlternative {
                transcript: s.text.trim().to_string(),
                confidence: confidence(s),
                words: if words {
                    s.words
                        .iter()
                        .map(|w| word_info(w, 0.0, &language))
                        .collect()
                } else {
                    Vec::new()
                },
                language_code: t.language.iter().cloned().collect(),
            }],
            // Riva numbers channels from 1; a mixed recording is channel 1.
            channel_tag: s.channel.map_or(1, |c| c as i32 + 1),
            audio_processed: s.end as f32,
        })
        .collect()
}

/// One stream event as a streaming result. `offset` is the start of the current utterance
/// in the stream (events' times restart at each `end`); `processed` the audio seconds so far.
pub(crate) fn streaming_result(
    e: &StreamEvent,
    words: bool,
    offset: f64,
    processed: f64,
    language: &str,
) -> StreamingRecognitionResult {
    let is_final = e.kind == StreamEventKind::Final;
    StreamingRecognitionResult {
        alternatives: vec![SpeechRecognitionAlternative {
            transcript: e.text.trim().to_string(),
            confidence: 0.0,
            words: if words {
                e.words
                    .iter()
                    .map(|w| word_info(w, offset, language))
                    .collect()
            } else {
                Vec::new()
            },
            language_code: if language.is_empty() {
                Vec::new()
            } else {
                vec![language.to_string()]
            },
        }],
        is_final,
        // A partial may still change (the next partial replaces it); a final never does.
        stability: if is_final { 1.0 } else { 0.5 },
        channel_tag: 1,
        audio_processed: processed as f32,
        pipeline_states: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g711_decodes_to_the_standard_values() {
        // ITU-T G.711: 0xFF / 0x7F are μ-law zeros, 0x00 the most negative; A-law 0xD5 ≈ +8.
        assert_eq!(mulaw(0xFF), 0);
        assert_eq!(mulaw(0x7F), 0);
        assert_eq!(mulaw(0x00), -32124);
        assert_eq!(mulaw(0x80), 32124);
        assert_eq!(alaw(0xD5), 8);
        assert_eq!(alaw(0x55), -8);
        assert_eq!(alaw(0xAA), 32256);
        assert_eq!(alaw(0x2A), -32256);
        // Monotonic over each half of the code space.
        let m: Vec<i16> = (0u8..=0x7F).map(|b| mulaw(b | 0x80)).collect();
        assert!(m.windows(2).all(|w| w[0] >= w[1]));
    }

    #[test]
    fn interleaved_channels_are_averaged() {
        let mut bytes = Vec::new();
        for (l, r) in [(1000i16, 3000i16), (-2000, 0)] {
            bytes.extend(l.to_le_bytes());
            bytes.extend(r.to_le_bytes());
        }
        let mono = raw_to_mono(&bytes, RawCoding::Linear16, 2);
        assert_eq!(mono, vec![2000.0 / 32768.0, -1000.0 / 32768.0]);
    }

    /// With `enable_separate_recognition_per_channel`, raw channels (μ-law here) stay apart,
    /// as a WAV file of them that holds the same linear samples; without it they are mixed;
    /// results carry Riva's 1-based `channel_tag`.
    #[test]
    fn separate_recognition_keeps_the_channels_apart() {
        let frames: Vec<u8> = vec![0x00, 0xFF, 0x80, 0x7F, 0x10, 0x90];
        let mut config = RecognitionConfig {
            encoding: AudioEncoding::Mulaw as i32,
            sample_rate_hertz: 8000,
            audio_channel_count: 2,
            ..Default::default()
        };
        let (format, _) = recognize_audio(&config, frames.clone()).unwrap();
        assert!(matches!(format, AudioFormat::Pcm { .. }));
        assert_eq!(
            request_options(&config).unwrap().channels,
            dicta_core::ChannelMode::Mix
        );
        config.enable_separate_recognition_per_channel = true;
        let (format, wav) = recognize_audio(&config, frames.clone()).unwrap();
        assert!(matches!(format, AudioFormat::Encoded) && looks_like_a_file(&wav));
        let mut r = hound::WavReader::new(std::io::Cursor::new(wav)).unwrap();
        assert_eq!((r.spec().channels, r.spec().sample_rate), (2, 8000));
        let back: Vec<i16> = r.samples::<i16>().map(|x| x.unwrap()).collect();
        let want: Vec<i16> = frames.iter().map(|&b| mulaw(b)).collect();
        assert_eq!(back, want);
        assert_eq!(
            request_options(&config).unwrap().channels,
            dicta_core::ChannelMode::Split
        );
        let mut left = Segment::new(0.0, 1.0, " left");
        left.channel = Some(0);
        let mut right = Segment::new(0.5, 1.5, " right");
        right.channel = Some(1);
        let t = Transcript {
            id: "a".into(),
            audio: String::new(),
            text: String::new(),
            language: None,
            language_probability: None,
            all_language_probs: None,
            duration: 3.0,
            segments: vec![left, right, Segment::new(2.0, 3.0, " mixed")],
            warnings: Vec::new(),
        };
        let tags: Vec<i32> = recognize_results(&t, false)
            .iter()
            .map(|r| r.channel_tag)
            .collect();
        assert_eq!(tags, vec![1, 2, 1]);
    }

    #[test]
    fn files_are_told_from_samples() {
        assert!(looks_like_a_file(b"RIFF\0\0\0\0WAVEfmt "));
        assert!(looks_like_a_file(b"fLaC\0\0\0\x22"));
        assert!(!looks_like_a_file(&[0x10, 0x00, 0x20, 0x00]));
        assert_eq!(language("en-US").as_deref(), Some("en"));
        assert_eq!(language(""), None);
        assert_eq!(speaker_tag(Some("SPEAKER_01")), 2);
    }

    fn config_with(custom: &[(&str, &str)], contexts: &[(&[&str], f32)]) -> RecognitionConfig {
        RecognitionConfig {
            language_code: "en-US".into(),
            custom_configuration: custom
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            speech_contexts: contexts
                .iter()
                .map(|(phrases, boost)| SpeechContext {
                    phrases: phrases.iter().map(|p| p.to_string()).collect(),
                    boost: *boost,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn speech_contexts_become_hotwords_and_custom_configuration_sets_parameters() {
        let o = request_options(&config_with(
            &[
                ("beam_size", "1"),
                ("temperature", "[0.0, 0.2]"),
                ("initial_prompt", "42"),
                ("prefix", "true"),
                ("vad_filter", "true"),
                ("no_speech_threshold", "null"),
                ("language", "de"),
            ],
            &[(&["Dicta", " MFA "], 20.0), (&["Riva"], 0.0)],
        ))
        .unwrap();
        assert_eq!(o.hotwords.as_deref(), Some("Dicta, MFA, Riva"));
        assert_eq!(o.beam_size, Some(1));
        assert_eq!(
            o.temperature,
            Some(crate::backend::Temperature::Schedule(vec![0.0, 0.2]))
        );
        // Text fields stay text; `initial_prompt` is `prompt`.
        assert_eq!(o.prompt.as_deref(), Some("42"));
        assert_eq!(o.prefix.as_deref(), Some("true"));
        assert!(o.vad_filter);
        assert_eq!(o.no_speech_threshold, None);
        // The custom entry overrides the config's own field.
        assert_eq!(o.language.as_deref(), Some("de"));
        // Without either, the config's fields alone.
        let plain = request_options(&config_with(&[], &[])).unwrap();
        assert_eq!(
            plain,
            RequestOptions {
                language: Some("en".into()),
                ..Default::default()
            }
        );
    }

    #[test]
    fn streams_take_boosting_prompt_hotwords_and_language_only() {
        let o = stream_options(
            &config_with(
                &[
                    ("initial_prompt", " Dr. Quilter "),
                    ("language", "en"),
                    ("task", "translate"),
                ],
                &[(&["Dicta", "MFA"], 10.0)],
            ),
            Some("tiny.en".into()),
        )
        .unwrap();
        assert_eq!(o.hotwords.as_deref(), Some("Dicta, MFA"));
        assert_eq!(o.prompt.as_deref(), Some("Dr. Quilter"));
        assert_eq!(o.language.as_deref(), Some("en"));
        assert_eq!(o.model.as_deref(), Some("tiny.en"));
        assert_eq!(o.task, Some(crate::backend::Task::Translate));
        // custom_configuration's hotwords override the boosted phrases.
        let o = stream_options(
            &config_with(&[("hotwords", "Riva")], &[(&["Dicta"], 1.0)]),
            None,
        )
        .unwrap();
        assert_eq!(o.hotwords.as_deref(), Some("Riva"));
        for (custom, contexts, needle) in [
            (vec![("beam_size", "2")], vec![], "beam_size"),
            (vec![("task", "transcode")], vec![], "transcode"),
            (vec![], vec![(&["x"][..], -1.0)], "negative boost"),
        ] {
            let e = stream_options(&config_with(&custom, &contexts), None).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidInput);
            assert!(e.message.contains(needle), "{}", e.message);
        }
    }

    #[test]
    fn bad_boosts_and_custom_keys_are_refused_by_name() {
        for (custom, contexts, needle) in [
            (vec![], vec![(&["x"][..], -5.0)], "negative boost"),
            (vec![("beam_sise", "2")], vec![], "beam_sise"),
            (vec![("beam_size", "two")], vec![], "custom_configuration"),
            (vec![("channels", "split")], vec![], "channels"),
        ] {
            let e = request_options(&config_with(&custom, &contexts)).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidInput, "{}", e.message);
            assert!(e.message.contains(needle), "{needle}: {}", e.message);
        }
    }

    #[test]
    fn oggopus_is_an_ogg_file() {
        let config = RecognitionConfig {
            encoding: AudioEncoding::Oggopus as i32,
            sample_rate_hertz: 48_000,
            ..Default::default()
        };
        let ogg = b"OggS\0\x02\0\0\0\0\0\0\0\0".to_vec();
        let (format, bytes) = recognize_audio(&config, ogg.clone()).unwrap();
        assert!(matches!(format, AudioFormat::Encoded));
        assert_eq!(bytes, ogg);
        let e = recognize_audio(&config, vec![0; 3200]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::CorruptInput);
        assert!(e.message.contains("OGGOPUS"), "{}", e.message);
        // A stream of chunks cannot carry a container.
        let e = raw_spec(&config).unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnsupportedFormat);
        assert!(e.message.contains("streaming"), "{}", e.message);
    }
}
