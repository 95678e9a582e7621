//! Whisper hyper-parameters and special tokens, read from the model folder (never hard-coded).

use super::tokenizer::WhisperTokenizer;
use dicta_core::{Error, Result};

/// Ids of Whisper's special tokens, looked up by name in the tokenizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecialTokens {
    /// `<|startoftranscript|>`.
    pub sot: u32,
    /// `<|endoftext|>`.
    pub eot: u32,
    /// `<|transcribe|>`.
    pub transcribe: u32,
    /// `<|translate|>`.
    pub translate: u32,
    /// `<|notimestamps|>`.
    pub no_timestamps: u32,
    /// `<|nospeech|>` (large-v3 and later) or `<|nocaptions|>` (older models).
    pub no_speech: u32,
    /// First timestamp token `<|0.00|>`; every id ≥ this is a timestamp (0.02 s steps).
    pub timestamp_begin: u32,
    /// `<|startofprev|>` (starts the previous-text prompt).
    pub sot_prev: u32,
    /// `<|startoflm|>`.
    pub sot_lm: u32,
}

impl SpecialTokens {
    /// Looks every special token up in `tok`; `what` names the file for error messages.
    pub fn from_tokenizer(tok: &WhisperTokenizer, what: &str) -> Result<Self> {
        let get = |name: &str| {
            tok.token_to_id(name).ok_or_else(|| {
                Error::model_load(format!(
                    "{what}: special token {name} is missing; use the tokenizer.json that came with the model"
                ))
            })
        };
        let no_timestamps = get("<|notimestamps|>")?;
        let no_speech = tok
            .token_to_id("<|nospeech|>")
            .or_else(|| tok.token_to_id("<|nocaptions|>"))
            .ok_or_else(|| {
                Error::model_load(format!(
                    "{what}: neither <|nospeech|> nor <|nocaptions|> is in the tokenizer"
                ))
            })?;
        Ok(Self {
            sot: get("<|startoftranscript|>")?,
            eot: get("<|endoftext|>")?,
            transcribe: get("<|transcribe|>")?,
            translate: get("<|translate|>")?,
            no_timestamps,
            no_speech,
            timestamp_begin: no_timestamps + 1,
            sot_prev: get("<|startofprev|>")?,
            sot_lm: get("<|startoflm|>")?,
        })
    }
}

/// Dimensions and decoding metadata of a Whisper checkpoint (names follow openai/whisper's `ModelDimensions`).
#[derive(Debug, Clone, PartialEq)]
pub struct WhisperConfig {
    /// Mel bins of the input features (80, or 128 for large-v3/turbo).
    pub n_mels: usize,
    /// Encoder positions (1500 = 3000 mel frames / 2).
    pub n_audio_ctx: usize,
    /// Encoder width.
    pub n_audio_state: usize,
    /// Encoder attention heads.
    pub n_audio_head: usize,
    /// Encoder layers.
    pub n_audio_layer: usize,
    /// Encoder feed-forward width.
    pub n_audio_ffn: usize,
    /// Vocabulary size (logit width).
    pub n_vocab: usize,
    /// Decoder positions (448).
    pub n_text_ctx: usize,
    /// Decoder width.
    pub n_text_state: usize,
    /// Decoder attention heads.
    pub n_text_head: usize,
    /// Decoder layers.
    pub n_text_layer: usize,
    /// Decoder feed-forward width.
    pub n_text_ffn: usize,
    /// Special token ids.
    pub special: SpecialTokens,
    /// Tokens never sampled (`suppress_tokens`; `-1` entries of HF configs are dropped).
    pub suppress_tokens: Vec<u32>,
    /// Tokens suppressed at the first sampled position (usually blank and `<|endoftext|>`).
    pub begin_suppress_tokens: Vec<u32>,
    /// Cross-attention heads that align with time, as (decoder layer, head).
    pub alignment_heads: Vec<(usize, usize)>,
    /// Whether the model has language tokens and a language-detection head (vocab ≥ 51865).
    pub is_multilingual: bool,
    /// Language codes ("en", "de", …) and their token ids, sorted by id; empty for English-only models.
    pub lang_ids: Vec<(String, u32)>,
}

impl WhisperConfig {
    /// Mel frames of one 30 s window the encoder expects (2 × `n_audio_ctx`).
    pub fn n_frames(&self) -> usize {
        2 * self.n_audio_ctx
    }

    /// Token id of a language code ("en" → `<|en|>`), if the model knows it.
    pub fn lang_id(&self, code: &str) -> Option<u32> {
        self.lang_ids
            .iter()
            .find(|(c, _)| c == code)
            .map(|(_, id)| *id)
    }

    /// Default alignment heads when a folder names none: every head of the last half of the decoder
    /// (what CTranslate2's converter does).
    pub(crate) fn default_alignment_heads(n_layer: usize, n_head: usize) -> Vec<(usize, usize)> {
        (n_layer / 2..n_layer)
            .flat_map(|l| (0..n_head).map(move |h| (l, h)))
            .collect()
    }

    /// Checks the dimensions are consistent so that a bad folder fails at load, not mid-request.
    pub(crate) fn validate(&self, what: &str) -> Result<()> {
        let bad = |m: String| Err(Error::model_load(format!("{what}: {m}")));
        if self.n_audio_state.checked_rem(self.n_audio_head) != Some(0) {
            return bad(format!(
                "encoder width {} is not divisible by {} heads",
                self.n_audio_state, self.n_audio_head
            ));
        }
        if self.n_text_state.checked_rem(self.n_text_head) != Some(0) {
            return bad(format!(
                "decoder width {} is not divisible by {} heads",
                self.n_text_state, self.n_text_head
            ));
        }
        if self.special.timestamp_begin as usize >= self.n_vocab {
            return bad(format!(
                "timestamp tokens start at {} but the vocabulary has {} entries",
                self.special.timestamp_begin, self.n_vocab
            ));
        }
        for &(l, h) in &self.alignment_heads {
            if l >= self.n_text_layer || h >= self.n_text_head {
                return bad(format!("alignment head ({l}, {h}) is outside the decoder"));
            }
        }
        Ok(())
    }
}
