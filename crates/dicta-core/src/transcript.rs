//! Transcription results: the shape returned by the library, the CLI's JSON output and the
//! server's `/transcribe` endpoint.

use serde::{Deserialize, Serialize};

/// One recognised word with times in seconds from the start of the recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Word {
    /// The word text (without surrounding whitespace).
    pub word: String,
    /// Start time in seconds.
    pub start: f64,
    /// End time in seconds.
    pub end: f64,
    /// Model confidence in [0, 1], when the decoder provides one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub probability: Option<f32>,
    /// Who said it (`SPEAKER_00`, …), with diarization.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub speaker: Option<String>,
}

/// A timed stretch of text (a Whisper segment, or an utterance for CTC models).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// Start time in seconds.
    pub start: f64,
    /// End time in seconds.
    pub end: f64,
    /// Segment text.
    pub text: String,
    /// Word timings, when requested and available.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub words: Vec<Word>,
    /// Whisper: mean log-probability of the tokens.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub avg_logprob: Option<f32>,
    /// Whisper: gzip compression ratio of the text.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub compression_ratio: Option<f32>,
    /// Whisper: probability of the no-speech token.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub no_speech_prob: Option<f32>,
    /// Whisper: temperature the segment was finally decoded at.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub temperature: Option<f32>,
    /// Whisper: where the 30 s window the segment was decoded in starts, in 10 ms mel frames
    /// of the audio the model heard (faster-whisper's and OpenAI's `seek`; with a VAD filter,
    /// of the speech joined, as there).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub seek: Option<u32>,
    /// Token ids of the segment (Whisper), useful for prompts.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub tokens: Vec<u32>,
    /// Who spoke (`SPEAKER_00`, …), with diarization: the speaker of most of the segment.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub speaker: Option<String>,
    /// The channel (0 = first) the segment was heard on, when channels are transcribed apart
    /// ([`crate::ChannelMode::Split`]); its words are from that channel too.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub channel: Option<u32>,
    /// Whisper, when asked for (`token_logprobs`): each text token of the segment with its
    /// log-probability under the model given the text before it.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub token_logprobs: Vec<TokenLogprob>,
}

/// One text token with its log-probability (OpenAI's `logprobs` entries).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    /// The token as text (a token that holds part of a UTF-8 character shows U+FFFD there).
    pub token: String,
    /// Natural log of its probability (≤ 0).
    pub logprob: f32,
    /// The token's own bytes (UTF-8, possibly part of a character).
    pub bytes: Vec<u8>,
}

/// One stretch of one speaker's speech (an RTTM `SPEAKER` line), times in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeakerTurn {
    /// Speaker label (`SPEAKER_00`, … in order of first appearance).
    pub speaker: String,
    /// Start time in seconds.
    pub start: f64,
    /// End time in seconds.
    pub end: f64,
}

impl Segment {
    /// A segment with only times and text.
    pub fn new(start: f64, end: f64, text: impl Into<String>) -> Self {
        Self {
            start,
            end,
            text: text.into(),
            words: Vec::new(),
            avg_logprob: None,
            compression_ratio: None,
            no_speech_prob: None,
            temperature: None,
            seek: None,
            tokens: Vec::new(),
            speaker: None,
            channel: None,
            token_logprobs: Vec::new(),
        }
    }
}

/// The transcript of one recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transcript {
    /// Caller-chosen id (defaults to the path as given).
    pub id: String,
    /// Where the audio came from (path, or a label for in-memory input).
    pub audio: String,
    /// Full text.
    pub text: String,
    /// Language code (e.g. "en").
    pub language: Option<String>,
    /// How sure a multilingual model was of `language` when it detected it (faster-whisper's
    /// `language_probability`); `None` when the language was given or the model is English-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language_probability: Option<f32>,
    /// Every language's probability from the last window language detection read, most
    /// likely first (faster-whisper's `all_language_probs`); `None` when the language was
    /// given or the model is English-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_language_probs: Option<Vec<(String, f32)>>,
    /// Duration of the audio in seconds.
    pub duration: f64,
    /// Timed segments in order.
    pub segments: Vec<Segment>,
    /// What was wrong with an input that could be read only in part (a file cut short, a
    /// header promising more audio than the file holds, undecodable packets): the transcript
    /// covers the audio before the damage. Empty for sound inputs (and then not serialized).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Timing and batching statistics for one call of the engine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Number of inputs.
    pub inputs: usize,
    /// Total audio seconds.
    pub audio_seconds: f64,
    /// Wall-clock seconds.
    pub wall_seconds: f64,
    /// audio_seconds / wall_seconds.
    pub rtfx: f64,
    /// Seconds spent decoding and resampling audio, summed over the threads doing it. These
    /// four are busy times of stages that overlap (audio decoding and the CTC decoder run while
    /// the model does), so they can add up to more than `wall_seconds`.
    pub decode_seconds: f64,
    /// Seconds spent computing features outside model calls (Whisper: log-mel; 0 where the
    /// model takes raw audio: wav2vec2 normalises inside its call, Moonshine's encoder starts
    /// from the waveform).
    pub features_seconds: f64,
    /// Seconds spent in model calls (Whisper and Moonshine: the encoder and the token loop
    /// with its search).
    pub model_seconds: f64,
    /// Seconds spent in a decoder that runs apart from the model (CTC decoding of joined
    /// log-probs, summed over decode workers); 0 for Whisper and Moonshine, whose token search
    /// runs inside `model_seconds`.
    pub decoder_seconds: f64,
    /// Number of windows planned.
    pub windows: usize,
    /// Effective batch size of each model batch, in order.
    pub batch_sizes: Vec<usize>,
    /// Padding fraction of each batch (padded frames / total frames).
    pub padding_fractions: Vec<f64>,
    /// Model output frames of real audio over all batches (CTC: log-prob frames; Whisper:
    /// encoder frames, 50 per second of audio in each window; 0 for Moonshine).
    #[serde(default)]
    pub frames: usize,
    /// Model output frames including batch padding (`frames` plus padding).
    #[serde(default)]
    pub padded_frames: usize,
    /// How long-form audio was processed ("sequential" or "batched"), when relevant.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub long_form_mode: Option<String>,
    /// The numeric type the model ran in ("float32" or "int8": what `default` resolved to on
    /// this CPU), for Whisper and Moonshine models.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub compute_type: Option<String>,
    /// Peak resident set size in bytes, when measured.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peak_rss_bytes: Option<u64>,
    /// Seconds the model loop sat waiting for decoded audio (audio decoding runs ahead of the
    /// model on other threads; this is what it failed to hide, the first inputs included).
    #[serde(default)]
    pub input_wait_seconds: f64,
    /// With a VAD filter: seconds of speech the model heard (faster-whisper's
    /// `duration_after_vad`); `audio_seconds` still counts the whole recordings.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub speech_seconds: Option<f64>,
    /// With an assistant model (speculative decoding): tokens it drafted.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub assistant_drafted: Option<usize>,
    /// With an assistant model: drafted tokens the main model accepted.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub assistant_accepted: Option<usize>,
    /// With an assistant model: `assistant_accepted / assistant_drafted` (0 when nothing was
    /// drafted).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub assistant_acceptance: Option<f64>,
}

impl Stats {
    /// Counts drafted and accepted tokens of speculative decoding and updates the rate.
    pub fn add_assistant(&mut self, drafted: usize, accepted: usize) {
        let d = self.assistant_drafted.unwrap_or(0) + drafted;
        let a = self.assistant_accepted.unwrap_or(0) + accepted;
        self.assistant_drafted = Some(d);
        self.assistant_accepted = Some(a);
        self.assistant_acceptance = Some(if d > 0 { a as f64 / d as f64 } else { 0.0 });
    }

    /// Adds another call's statistics to these (sums, concatenated batch lists) and recomputes
    /// RTFx from the totals; used when one logical job runs as several engine calls.
    pub fn absorb(&mut self, other: Stats) {
        self.inputs += other.inputs;
        self.audio_seconds += other.audio_seconds;
        self.wall_seconds += other.wall_seconds;
        self.decode_seconds += other.decode_seconds;
        self.features_seconds += other.features_seconds;
        self.model_seconds += other.model_seconds;
        self.decoder_seconds += other.decoder_seconds;
        self.input_wait_seconds += other.input_wait_seconds;
        self.windows += other.windows;
        self.frames += other.frames;
        self.padded_frames += other.padded_frames;
        self.batch_sizes.extend(other.batch_sizes);
        self.padding_fractions.extend(other.padding_fractions);
        self.speech_seconds = match (self.speech_seconds, other.speech_seconds) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        if let (Some(d), Some(a)) = (other.assistant_drafted, other.assistant_accepted) {
            self.add_assistant(d, a);
        }
        if other.long_form_mode.is_some() {
            self.long_form_mode = other.long_form_mode;
        }
        if other.compute_type.is_some() {
            self.compute_type = other.compute_type;
        }
        self.peak_rss_bytes = match (self.peak_rss_bytes, other.peak_rss_bytes) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.rtfx = if self.wall_seconds > 0.0 {
            self.audio_seconds / self.wall_seconds
        } else {
            0.0
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absorb_sums_and_recomputes_rtfx() {
        let mut a = Stats {
            inputs: 2,
            audio_seconds: 20.0,
            wall_seconds: 2.0,
            batch_sizes: vec![2],
            peak_rss_bytes: Some(10),
            ..Stats::default()
        };
        a.absorb(Stats {
            inputs: 1,
            audio_seconds: 10.0,
            wall_seconds: 3.0,
            batch_sizes: vec![1],
            long_form_mode: Some("batched".into()),
            peak_rss_bytes: Some(7),
            ..Stats::default()
        });
        assert_eq!(a.inputs, 3);
        assert_eq!(a.batch_sizes, vec![2, 1]);
        assert_eq!(a.peak_rss_bytes, Some(10));
        assert_eq!(a.long_form_mode.as_deref(), Some("batched"));
        assert!((a.rtfx - 6.0).abs() < 1e-12);
    }
}
