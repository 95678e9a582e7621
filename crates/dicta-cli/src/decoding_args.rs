//! faster-whisper's decoding options beyond beam size, best-of and temperatures, as flags of
//! `dicta transcribe` (one transcription) and `dicta serve` (the server's defaults, which a
//! request's `parameters` override). Names are faster-whisper's with dashes; unset flags keep
//! faster-whisper's defaults ([`DecodeOptions::default`]).

use clap::Args;
use dicta_engine::whisper::DecodeOptions;

/// Whisper decoding options (faster-whisper's `transcribe` keywords).
#[derive(Debug, Clone, Args)]
pub struct DecodingArgs {
    /// Beam search stops after round(beam size × patience) finished hypotheses (default 1).
    #[arg(long)]
    pub patience: Option<f32>,
    /// Hypotheses are ranked by log-probability / length^this (default 1; 0 stops at the
    /// first finished beam).
    #[arg(long)]
    pub length_penalty: Option<f32>,
    /// Logits of tokens already sampled in a window are divided by this when positive and
    /// multiplied when negative (default 1: off; above 1 discourages repetition).
    #[arg(long)]
    pub repetition_penalty: Option<f32>,
    /// A token that would repeat an n-gram of this size within a window is never sampled
    /// (default 0: off).
    #[arg(long)]
    pub no_repeat_ngram_size: Option<usize>,
    /// Decode again at the next temperature when the gzip compression ratio of the text is
    /// above this (default 2.4; `none`: never for this reason).
    #[arg(long, value_parser = parse_threshold)]
    pub compression_ratio_threshold: Option<Threshold>,
    /// Decode again at the next temperature when the average token log-probability is below
    /// this (default -1.0; `none`: never for this reason).
    #[arg(long, value_parser = parse_threshold, allow_hyphen_values = true)]
    pub log_prob_threshold: Option<Threshold>,
    /// A window is silence (no text) when its no-speech probability is above this and its
    /// average log-probability below --log-prob-threshold (default 0.6; `none`: never).
    #[arg(long, value_parser = parse_threshold)]
    pub no_speech_threshold: Option<Threshold>,
    /// The previous text is dropped from the prompt after a window decoded above this
    /// temperature (default 0.5).
    #[arg(long)]
    pub prompt_reset_on_temperature: Option<f32>,
    /// Allow a blank or end-of-text as the first token of a window (suppressed by default).
    #[arg(long)]
    pub no_suppress_blank: bool,
    /// Token ids never sampled, comma-separated; -1 stands for the model's non-speech symbols
    /// (default -1; an empty value suppresses nothing but the task tokens).
    #[arg(long, value_parser = parse_token_list, allow_hyphen_values = true)]
    pub suppress_tokens: Option<TokenList>,
    /// The first timestamp of a window may not be later than this, in seconds (default 1.0).
    #[arg(long)]
    pub max_initial_timestamp: Option<f32>,
    /// At most this many tokens per window (default: half the model's text context).
    #[arg(long)]
    pub max_new_tokens: Option<usize>,
    /// With --word-timestamps: punctuation joined to the following word
    /// (default "\"'“¿([{-).
    #[arg(long)]
    pub prepend_punctuations: Option<String>,
    /// With --word-timestamps: punctuation joined to the preceding word
    /// (default "\"'.。,，!！?？:：”)]}、).
    #[arg(long)]
    pub append_punctuations: Option<String>,
    /// Whisper: words to bias every window towards (names, jargon), as faster-whisper's
    /// `hotwords` (before the previous text of each window's prompt; ignored with no words).
    /// Not `--hotword`, which boosts words of CTC beam search.
    #[arg(long)]
    pub hotwords: Option<String>,
    /// Whisper: text each recording's transcript starts with, as faster-whisper's `prefix`
    /// (forced at the start of the first window, after its first timestamp; that window then
    /// leaves out --hotwords).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Seed of the sampler at temperatures above 0 (default 0): the same seed gives the same
    /// draws, batched or alone.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Multilingual models without --language: detection stops at the first 30 s window whose
    /// most likely language is more probable than this (default 0.5).
    #[arg(long)]
    pub language_detection_threshold: Option<f32>,
    /// Multilingual models without --language: windows read for detection (default 1); when
    /// none passes the threshold, the language most of them chose wins.
    #[arg(long)]
    pub language_detection_segments: Option<usize>,
    /// Multilingual models: detect the language of every 30 s window and decode it in that
    /// language, for speech that switches language (faster-whisper's `multilingual`).
    #[arg(long)]
    pub multilingual: bool,
}

/// A fallback threshold, or none (faster-whisper's `None`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Threshold(pub Option<f32>);

/// Token ids given as one comma-separated value (possibly empty).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenList(pub Vec<i64>);

fn parse_token_list(s: &str) -> Result<TokenList, String> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<i64>()
                .map_err(|_| format!("expected comma-separated token ids, got {t:?}"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(TokenList)
}

fn parse_threshold(s: &str) -> Result<Threshold, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(Threshold(None));
    }
    s.parse::<f32>()
        .ok()
        .filter(|v| v.is_finite())
        .map(|v| Threshold(Some(v)))
        .ok_or_else(|| format!("expected a number or `none`, got {s:?}"))
}

impl DecodingArgs {
    /// Sets the options given on the command line; the others stay as they are in `o`.
    pub fn apply(&self, o: &mut DecodeOptions) {
        if let Some(v) = self.patience {
            o.patience = v;
        }
        if let Some(v) = self.length_penalty {
            o.length_penalty = v;
        }
        if let Some(v) = self.repetition_penalty {
            o.repetition_penalty = v;
        }
        if let Some(v) = self.no_repeat_ngram_size {
            o.no_repeat_ngram_size = v;
        }
        if let Some(Threshold(v)) = self.compression_ratio_threshold {
            o.compression_ratio_threshold = v;
        }
        if let Some(Threshold(v)) = self.log_prob_threshold {
            o.log_prob_threshold = v;
        }
        if let Some(Threshold(v)) = self.no_speech_threshold {
            o.no_speech_threshold = v;
        }
        if let Some(v) = self.prompt_reset_on_temperature {
            o.prompt_reset_on_temperature = v;
        }
        if self.no_suppress_blank {
            o.suppress_blank = false;
        }
        if let Some(TokenList(v)) = &self.suppress_tokens {
            o.suppress_tokens = v.clone();
        }
        if let Some(v) = self.max_initial_timestamp {
            o.max_initial_timestamp = v;
        }
        if self.max_new_tokens.is_some() {
            o.max_new_tokens = self.max_new_tokens;
        }
        if let Some(v) = &self.prepend_punctuations {
            o.prepend_punctuations = v.clone();
        }
        if let Some(v) = &self.append_punctuations {
            o.append_punctuations = v.clone();
        }
        if let Some(v) = &self.hotwords {
            o.hotwords = Some(v.clone());
        }
        if let Some(v) = &self.prefix {
            o.prefix = Some(v.clone());
        }
        if let Some(v) = self.seed {
            o.seed = v;
        }
        if let Some(v) = self.language_detection_threshold {
            o.language_detection_threshold = v;
        }
        if let Some(v) = self.language_detection_segments {
            o.language_detection_segments = v;
        }
        if self.multilingual {
            o.multilingual = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        d: DecodingArgs,
    }

    fn parse(args: &[&str]) -> DecodeOptions {
        let cli = Cli::try_parse_from(std::iter::once("t").chain(args.iter().copied())).unwrap();
        let mut o = DecodeOptions::default();
        cli.d.apply(&mut o);
        o
    }

    #[test]
    fn no_flags_keep_faster_whisper_defaults() {
        assert_eq!(parse(&[]), DecodeOptions::default());
    }

    #[test]
    fn every_flag_reaches_its_option() {
        let o = parse(&[
            "--patience",
            "2",
            "--length-penalty",
            "0.5",
            "--compression-ratio-threshold",
            "none",
            "--log-prob-threshold",
            "-0.5",
            "--no-speech-threshold",
            "0.9",
            "--prompt-reset-on-temperature",
            "0.3",
            "--no-suppress-blank",
            "--suppress-tokens",
            "-1,262,290",
            "--max-initial-timestamp",
            "10",
            "--max-new-tokens",
            "8",
            "--prepend-punctuations",
            "(",
            "--append-punctuations",
            ".",
            "--seed",
            "7",
            "--hotwords",
            "Dicta, MFA",
            "--prefix",
            "So,",
            "--repetition-penalty",
            "1.5",
            "--no-repeat-ngram-size",
            "3",
            "--language-detection-threshold",
            "0.8",
            "--language-detection-segments",
            "3",
            "--multilingual",
        ]);
        let want = DecodeOptions {
            patience: 2.0,
            length_penalty: 0.5,
            compression_ratio_threshold: None,
            log_prob_threshold: Some(-0.5),
            no_speech_threshold: Some(0.9),
            prompt_reset_on_temperature: 0.3,
            suppress_blank: false,
            suppress_tokens: vec![-1, 262, 290],
            max_initial_timestamp: 10.0,
            max_new_tokens: Some(8),
            prepend_punctuations: "(".into(),
            append_punctuations: ".".into(),
            seed: 7,
            hotwords: Some("Dicta, MFA".into()),
            prefix: Some("So,".into()),
            repetition_penalty: 1.5,
            no_repeat_ngram_size: 3,
            language_detection_threshold: 0.8,
            language_detection_segments: 3,
            multilingual: true,
            ..DecodeOptions::default()
        };
        assert_eq!(o, want);
    }

    #[test]
    fn an_empty_suppress_list_suppresses_nothing_and_bad_values_are_refused() {
        assert!(parse(&["--suppress-tokens", ""]).suppress_tokens.is_empty());
        assert_eq!(
            parse(&["--suppress-tokens", "-1", "--seed", "3"]).suppress_tokens,
            vec![-1]
        );
        for bad in ["warm", "nan", "inf"] {
            assert!(Cli::try_parse_from(["t", "--no-speech-threshold", bad]).is_err());
        }
        assert!(Cli::try_parse_from(["t", "--suppress-tokens", "1,x"]).is_err());
    }
}
