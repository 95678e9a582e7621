//! Decoding options for Whisper, with faster-whisper's defaults.

use dicta_core::{decoding, Error, Result};

/// What the decoder is asked to produce (the one type every interface parses).
pub use dicta_core::Task;

/// How recordings longer than one 30 s window are processed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LongFormMode {
    /// Seek through 30 s windows following the predicted timestamps (openai-whisper /
    /// faster-whisper behaviour). Windows of one recording are decoded one after another;
    /// different recordings share model calls.
    Sequential,
    /// Cut each recording longer than 2 minutes into lanes of at least 60 s (at most one per
    /// batch row), at the quietest stretch near each ideal cut; every lane runs the sequential
    /// seek loop and the windows of all lanes share model calls (see `whisper::lanes`). A single
    /// long recording then fills the batch; its text differs from `Sequential` only around the
    /// lane cuts. Recordings up to 2 minutes are decoded as in `Sequential`.
    Batched,
    /// With `condition_on_previous_text` (the default), `Sequential`, except that a recording of
    /// at least twice [`super::lanes::AUTO_MIN_LANE_FRAMES`] (12 minutes) is cut into lanes of at
    /// least 6 minutes, decoded as in `Batched`: each cut costs a few words there (the lane
    /// starts without the previous text), so cuts are only worth it where lanes are long (on
    /// the bench's 4-minute recordings 60 s lanes cost ≈ 0.7 WER points with conditioning; an
    /// hour cut into 8 lanes fills the batch and decodes ≈ 1.5× faster). Without conditioning a
    /// cut only moves where windows start, and `Auto` is `Batched` (see
    /// [`super::lanes::auto_min_lane`]).
    Auto,
}

impl LongFormMode {
    /// Stable name ("sequential", "batched" or "auto"). Results report the mode that ran:
    /// `auto` reports "batched" when it cut a recording into lanes, "sequential" otherwise.
    pub fn as_str(&self) -> &'static str {
        match self {
            LongFormMode::Sequential => "sequential",
            LongFormMode::Batched => "batched",
            LongFormMode::Auto => "auto",
        }
    }
}

/// Options of one transcription request. [`Default`] gives faster-whisper's
/// `WhisperModel.transcribe` defaults (beam 5, temperature fallback, thresholds 2.4 / -1.0 / 0.6).
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeOptions {
    /// Beam size at temperature 0 (1 = greedy).
    pub beam_size: usize,
    /// Number of sampled candidates at temperature > 0; the best scoring one is kept.
    pub best_of: usize,
    /// Beam search patience: search stops after `round(beam_size * patience)` finished hypotheses.
    pub patience: f32,
    /// Exponent of the length normalisation of hypothesis scores.
    pub length_penalty: f32,
    /// Logits of tokens already sampled in the window are divided by this when positive and
    /// multiplied when negative (faster-whisper's `repetition_penalty`; 1: off).
    pub repetition_penalty: f32,
    /// A token that would repeat an n-gram of this size among the window's sampled tokens is
    /// never sampled (faster-whisper's `no_repeat_ngram_size`; 0: off).
    pub no_repeat_ngram_size: usize,
    /// Temperatures tried in order until a result passes the thresholds.
    pub temperatures: Vec<f32>,
    /// Fallback when the gzip compression ratio of the text exceeds this (too repetitive).
    pub compression_ratio_threshold: Option<f32>,
    /// Fallback when the average token log-probability is below this.
    pub log_prob_threshold: Option<f32>,
    /// A window counts as silence when the no-speech probability exceeds this and the
    /// average log-probability is below `log_prob_threshold`.
    pub no_speech_threshold: Option<f32>,
    /// Feed the previous window's text as a prompt (sequential long-form only).
    pub condition_on_previous_text: bool,
    /// Previous text is dropped from the prompt after a window decoded above this temperature.
    pub prompt_reset_on_temperature: f32,
    /// Text given as previous context for the first window.
    pub initial_prompt: Option<String>,
    /// Token ids given as previous context for the first window, taken as they are (faster-whisper's
    /// `initial_prompt` as an `Iterable[int]`: no leading space added, nothing trimmed). Not
    /// together with `initial_prompt`; Whisper models only; each id below the vocabulary size.
    pub initial_prompt_tokens: Option<Vec<u32>>,
    /// The initial prompt is the previous-text prompt of every window, not only the first
    /// (faster-whisper's `BatchedInferencePipeline`, whose windows each start from it). A text
    /// prompt is then tokenized as given, as that pipeline does (no leading space added, nothing
    /// trimmed). Needs `condition_on_previous_text` off: no window's prompt holds decoded text.
    pub prompt_every_window: bool,
    /// Words to bias every window towards (names, jargon; faster-whisper's `hotwords`): put in
    /// front of each window's previous text, after `<|startofprev|>` (up to 223 tokens).
    pub hotwords: Option<String>,
    /// Text every hypothesis of a recording's first window starts with (faster-whisper's
    /// `prefix`): `" " + prefix.trim()` (up to 223 tokens), after `<|0.00|>` when timestamps
    /// are on, is forced into the window at seek 0 and is part of its text, tokens and scores
    /// (the forced tokens count in the length, not in the log-probability, as in
    /// CTranslate2). That window's prompt then leaves out the `hotwords`. `None` or `""`: none.
    pub prefix: Option<String>,
    /// Decode without timestamp tokens (one segment per window).
    pub without_timestamps: bool,
    /// Suppress blank/EOT as the first sampled token.
    pub suppress_blank: bool,
    /// Token ids never sampled; -1 expands to the tokenizer's non-speech symbols.
    pub suppress_tokens: Vec<i64>,
    /// The first timestamp may not be later than this (seconds).
    pub max_initial_timestamp: f32,
    /// Language code (e.g. "en"); `None` detects it on multilingual models.
    pub language: Option<String>,
    /// Transcribe or translate.
    pub task: Task,
    /// Maximum number of new tokens per window (default: model limit).
    pub max_new_tokens: Option<usize>,
    /// Transcribe only these stretches of each recording (faster-whisper's `clip_timestamps`):
    /// seconds `start, end, start, end, …`, the last end defaulting to the recording's end.
    /// Each clip runs the seek loop on its own, its windows ending at the clip's end, and the
    /// previous text carries over from clip to clip; times stay those of the recording.
    /// Empty: the whole recording. Whisper only; not with `vad` (faster-whisper ignores the
    /// VAD then); the long-form mode is sequential.
    pub clip_timestamps: Vec<f64>,
    /// With `word_timestamps`: a segment whose words look made up, with silence longer than
    /// this (seconds) around it, is dropped and the silence skipped (faster-whisper's
    /// `hallucination_silence_threshold`; `None`: off).
    pub hallucination_silence_threshold: Option<f64>,
    /// Language detection (no `language`, multilingual model) stops at the first window whose
    /// most likely language is more probable than this (faster-whisper's
    /// `language_detection_threshold`).
    pub language_detection_threshold: f32,
    /// Language detection reads up to this many 30 s windows; when none passes the threshold,
    /// the language most of them chose wins (faster-whisper's `language_detection_segments`).
    pub language_detection_segments: usize,
    /// Detect the language of every window and decode it in that language (faster-whisper's
    /// `multilingual`: speech that switches language); the transcript's `language` stays the
    /// first detection's (or the one given). No effect on English-only models.
    pub multilingual: bool,
    /// Seed of the sampler used at temperature > 0.
    pub seed: u64,
    /// Word-level timestamps from the cross-attention of the alignment heads (faster-whisper's
    /// `word_timestamps`); in sequential long-form the next window then starts at the last word.
    pub word_timestamps: bool,
    /// Each segment's text tokens with their log-probabilities
    /// ([`dicta_core::Segment::token_logprobs`]): the probability of each token given the audio
    /// and the text before it, over the text vocabulary, from the teacher-forced pass word
    /// timestamps also take (one per window, batched; the transcript is the same as without).
    pub token_logprobs: bool,
    /// With `word_timestamps`: punctuation merged into the following word.
    pub prepend_punctuations: String,
    /// With `word_timestamps`: punctuation merged into the preceding word.
    pub append_punctuations: String,
    /// Stops the work at the next model call once the caller has gone (the remaining windows
    /// fail with `Timeout`); never by default.
    pub cancel: dicta_core::Cancel,
    /// Transcribe only the speech a voice activity detector finds (faster-whisper's
    /// `vad_filter` with these `vad_parameters`); times stay those of the original audio. Any
    /// model family; needs `EngineConfig::vad_model`.
    pub vad: Option<crate::vad::VadOptions>,
    /// Put a speaker on every segment and word (diarization of the original audio); needs
    /// `EngineConfig::vad_model` and `speaker_model`.
    pub diarize: Option<crate::diarize::DiarizeOptions>,
    /// What is done with a recording's channels: mixed to mono (the default), or each channel
    /// transcribed on its own and the segments merged by start time, each carrying its channel
    /// ([`dicta_core::ChannelMode::Split`]; see `crate::engine::Engine::transcribe_with`). Any
    /// model family.
    pub channels: dicta_core::ChannelMode,
    /// Told how far the call is and which segments are final as it runs
    /// ([`crate::progress`]); nothing by default. Changes no result.
    pub progress: crate::progress::Progress,
    /// How the last window of a recording (or lane) ends when the model stops before the end
    /// of its audio: another window as faster-whisper (`Seek`), or the rest decoded in place
    /// (`Finish`); `Auto` finishes with int8 weights. See [`super::final_window`].
    pub final_window: super::final_window::FinalWindow,
}

/// What one input of a call may set apart from the call's [`DecodeOptions`]: a streaming
/// session's own language, task, prompt and hotwords, while its decodes share the stream
/// worker's batches with other sessions. `None` keeps the call's value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputOptions {
    /// Language code for this input ([`DecodeOptions::language`]).
    pub language: Option<String>,
    /// Transcribe or translate this input ([`DecodeOptions::task`]).
    pub task: Option<Task>,
    /// Previous-text context of this input's first window ([`DecodeOptions::initial_prompt`]).
    pub initial_prompt: Option<String>,
    /// Words to bias this input's windows towards ([`DecodeOptions::hotwords`]).
    pub hotwords: Option<String>,
}

impl InputOptions {
    /// Whether nothing is set (the call's options apply unchanged).
    pub fn is_empty(&self) -> bool {
        self.language.is_none()
            && self.task.is_none()
            && self.initial_prompt.is_none()
            && self.hotwords.is_none()
    }

    /// `opts` with this input's values in place of the call's.
    pub fn apply(&self, opts: &DecodeOptions) -> DecodeOptions {
        DecodeOptions {
            language: self.language.clone().or_else(|| opts.language.clone()),
            task: self.task.unwrap_or(opts.task),
            initial_prompt: self
                .initial_prompt
                .clone()
                .or_else(|| opts.initial_prompt.clone()),
            hotwords: self.hotwords.clone().or_else(|| opts.hotwords.clone()),
            ..opts.clone()
        }
    }
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            beam_size: 5,
            best_of: 5,
            patience: 1.0,
            length_penalty: 1.0,
            repetition_penalty: 1.0,
            no_repeat_ngram_size: 0,
            temperatures: vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
            compression_ratio_threshold: Some(2.4),
            log_prob_threshold: Some(-1.0),
            no_speech_threshold: Some(0.6),
            condition_on_previous_text: true,
            prompt_reset_on_temperature: 0.5,
            initial_prompt: None,
            initial_prompt_tokens: None,
            prompt_every_window: false,
            hotwords: None,
            prefix: None,
            without_timestamps: false,
            suppress_blank: true,
            suppress_tokens: vec![-1],
            max_initial_timestamp: 1.0,
            language: None,
            task: Task::Transcribe,
            max_new_tokens: None,
            clip_timestamps: Vec::new(),
            hallucination_silence_threshold: None,
            language_detection_threshold: 0.5,
            language_detection_segments: 1,
            multilingual: false,
            seed: 0,
            word_timestamps: false,
            token_logprobs: false,
            prepend_punctuations: super::words::DEFAULT_PREPEND_PUNCTUATIONS.to_string(),
            append_punctuations: super::words::DEFAULT_APPEND_PUNCTUATIONS.to_string(),
            cancel: dicta_core::Cancel::default(),
            vad: None,
            diarize: None,
            channels: dicta_core::ChannelMode::Mix,
            progress: crate::progress::Progress::default(),
            final_window: super::final_window::FinalWindow::Auto,
        }
    }
}

impl DecodeOptions {
    /// Greedy decoding at temperature 0 only, no fallback (fast, deterministic).
    pub fn greedy() -> Self {
        Self {
            beam_size: 1,
            temperatures: vec![0.0],
            ..Self::default()
        }
    }

    /// Checks ranges; the message names the option and the value given.
    pub fn validate(&self) -> Result<()> {
        if let Some(v) = &self.vad {
            v.validate()?;
        }
        if let Some(d) = &self.diarize {
            d.validate()?;
        }
        if self.beam_size == 0 {
            return Err(Error::invalid_input("beam_size must be >= 1, got 0"));
        }
        if self.initial_prompt.is_some() && self.initial_prompt_tokens.is_some() {
            return Err(Error::invalid_input(
                "initial_prompt is given both as text and as token ids; give one",
            ));
        }
        if self.prompt_every_window && self.condition_on_previous_text {
            return Err(Error::invalid_input(
                "prompt_every_window needs condition_on_previous_text off (every window's prompt \
                 is the initial prompt alone)",
            ));
        }
        if self.best_of == 0 {
            return Err(Error::invalid_input("best_of must be >= 1, got 0"));
        }
        if self.patience.is_nan() || self.patience <= 0.0 {
            return Err(Error::invalid_input(format!(
                "patience must be > 0, got {}",
                self.patience
            )));
        }
        if !self.length_penalty.is_finite() {
            return Err(Error::invalid_input(format!(
                "length_penalty must be finite, got {}",
                self.length_penalty
            )));
        }
        decoding::repetition_penalty(Some(self.repetition_penalty))?;
        if self.temperatures.is_empty() {
            return Err(Error::invalid_input("temperatures must not be empty"));
        }
        if let Some(t) = self
            .temperatures
            .iter()
            .find(|t| !t.is_finite() || **t < 0.0)
        {
            return Err(Error::invalid_input(format!(
                "temperatures must be finite and >= 0, got {t}"
            )));
        }
        decoding::suppress_tokens(&self.suppress_tokens)?;
        if self.max_initial_timestamp.is_nan() || self.max_initial_timestamp < 0.0 {
            return Err(Error::invalid_input(format!(
                "max_initial_timestamp must be >= 0, got {}",
                self.max_initial_timestamp
            )));
        }
        if self.max_new_tokens == Some(0) {
            return Err(Error::invalid_input("max_new_tokens must be >= 1, got 0"));
        }
        dicta_core::clips::validate(&self.clip_timestamps)?;
        decoding::language_detection(
            Some(self.language_detection_segments),
            Some(self.language_detection_threshold),
        )?;
        decoding::hallucination_silence(
            self.hallucination_silence_threshold,
            self.word_timestamps,
            "word_timestamps",
        )?;
        decoding::clips_without_vad(!self.clip_timestamps.is_empty(), self.vad.is_some())
    }

    /// The clips of [`Self::clip_timestamps`] in mel frames for a recording of
    /// `content_frames` frames, as faster-whisper's seek loop reads them: each time rounded to
    /// a frame (ties to even), an odd count closed by the recording's end, no list meaning
    /// the whole recording, ends past the recording clamped to it. A clip that starts at or
    /// after its end is kept (the seek loop passes over it).
    pub fn clip_frames(&self, content_frames: usize) -> Vec<(usize, usize)> {
        let mut points: Vec<usize> = self
            .clip_timestamps
            .iter()
            .map(|&s| super::segments::frames_at(s))
            .collect();
        if points.is_empty() {
            points.push(0);
        }
        if points.len() % 2 == 1 {
            points.push(content_frames);
        }
        points
            .chunks(2)
            .map(|c| (c[0], c[1].min(content_frames)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_faster_whisper() {
        let o = DecodeOptions::default();
        assert_eq!(o.beam_size, 5);
        assert_eq!(o.temperatures, vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(o.compression_ratio_threshold, Some(2.4));
        assert_eq!(o.log_prob_threshold, Some(-1.0));
        assert_eq!(o.no_speech_threshold, Some(0.6));
        assert_eq!(o.suppress_tokens, vec![-1]);
        assert!(o.suppress_blank && o.condition_on_previous_text && !o.without_timestamps);
        assert!(!o.word_timestamps);
        assert_eq!(o.prepend_punctuations, "\"'“¿([{-");
        assert_eq!(o.append_punctuations, "\"'.。,，!！?？:：”)]}、");
        o.validate().unwrap();
    }

    #[test]
    fn validation_names_the_option() {
        let o = DecodeOptions {
            beam_size: 0,
            ..Default::default()
        };
        assert!(o.validate().unwrap_err().message.contains("beam_size"));
        let o = DecodeOptions {
            temperatures: vec![0.0, -0.5],
            ..Default::default()
        };
        assert!(o.validate().unwrap_err().message.contains("-0.5"));
        for bad in [vec![-1.0], vec![f64::NAN], vec![1e12], vec![0.0; 2049]] {
            let o = DecodeOptions {
                clip_timestamps: bad,
                ..Default::default()
            };
            assert!(o
                .validate()
                .unwrap_err()
                .message
                .contains("clip_timestamps"));
        }
        let o = DecodeOptions {
            clip_timestamps: vec![1.0],
            vad: Some(Default::default()),
            ..Default::default()
        };
        assert!(o.validate().unwrap_err().message.contains("vad_filter"));
    }

    #[test]
    fn clips_are_read_as_faster_whisper_reads_them() {
        let clips = |ts: &[f64], frames: usize| {
            DecodeOptions {
                clip_timestamps: ts.to_vec(),
                ..Default::default()
            }
            .clip_frames(frames)
        };
        assert_eq!(clips(&[], 900), vec![(0, 900)]);
        // An odd count ends at the recording's end; ends past it are clamped.
        assert_eq!(clips(&[1.5, 4.0, 6.0], 900), vec![(150, 400), (600, 900)]);
        assert_eq!(clips(&[2.0, 20.0], 900), vec![(200, 900)]);
        // Python's round: ties to even (0.125 s = 12.5 frames → 12; 0.135 → 13.5 → 14).
        assert_eq!(clips(&[0.125, 0.135], 900), vec![(12, 14)]);
        // Empty or reversed clips are kept for the seek loop to pass over.
        assert_eq!(clips(&[5.0, 3.0], 900), vec![(500, 300)]);
    }
}
