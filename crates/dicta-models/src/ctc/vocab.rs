//! CTC output vocabularies read from Hugging Face tokenizer files.

use std::collections::HashMap;
use std::path::Path;

use dicta_core::{Error, Result};

use super::util::read_json;

/// The tokens a CTC model emits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtcVocab {
    /// Token strings in id order (`tokens[id]`); ids missing from `vocab.json` are empty strings.
    pub tokens: Vec<String>,
    /// The CTC blank id (the `<pad>` token in Hugging Face wav2vec2 checkpoints).
    pub blank_id: u32,
    /// The token that separates words: `"|"` for character vocabularies, `"▁"` for
    /// SentencePiece-style ones where it prefixes word-initial pieces; `None` when there is none.
    pub word_delimiter: Option<String>,
}

#[derive(serde::Deserialize, Default)]
struct TokenizerConfig {
    word_delimiter_token: Option<String>,
}

impl CtcVocab {
    /// Reads `vocab.json` (token → id) and optional `tokenizer_config.json` from `dir`.
    ///
    /// `vocab_size` is the model's output width: ids at or above it (tokens the tokenizer adds,
    /// such as `<s>`/`</s>` in some checkpoints) are dropped, and ids missing below it become
    /// empty strings so that `tokens.len() == vocab_size` always.
    pub fn from_hf_folder(dir: &Path, vocab_size: usize, blank_id: u32) -> Result<Self> {
        let path = dir.join("vocab.json");
        let raw: serde_json::Value = read_json(&path)?;
        let map = raw.as_object().ok_or_else(|| {
            Error::model_load(format!("{}: expected an object token → id", path.display()))
        })?;
        let mut tokens = vec![String::new(); vocab_size];
        let mut dropped = 0usize;
        for (token, id) in map {
            let Some(id) = id.as_u64() else {
                // Multilingual checkpoints (e.g. MMS) nest one vocabulary per language.
                return Err(Error::model_load(format!(
                    "{}: token {token:?} maps to {id}, not an id; per-language vocabularies \
                     are not supported, export a single-language vocab.json",
                    path.display()
                )));
            };
            match tokens.get_mut(id as usize) {
                Some(slot) => *slot = token.clone(),
                None => dropped += 1,
            }
        }
        if dropped > 0 {
            tracing::debug!(
                dropped,
                vocab_size,
                "vocab.json ids beyond the CTC head ignored"
            );
        }
        if blank_id as usize >= vocab_size {
            return Err(Error::model_load(format!(
                "{}: blank id (pad_token_id) {blank_id} is outside the vocabulary of {vocab_size}",
                dir.display()
            )));
        }
        let tok_cfg_path = dir.join("tokenizer_config.json");
        let tok_cfg: TokenizerConfig = if tok_cfg_path.exists() {
            read_json(&tok_cfg_path)?
        } else {
            TokenizerConfig::default()
        };
        let word_delimiter = pick_word_delimiter(&tokens, tok_cfg.word_delimiter_token);
        Ok(Self {
            tokens,
            blank_id,
            word_delimiter,
        })
    }

    /// Number of tokens (the model's output width).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True when the vocabulary has no tokens.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Token → id lookup table.
    pub fn ids(&self) -> HashMap<&str, u32> {
        self.tokens
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.is_empty())
            .map(|(i, t)| (t.as_str(), i as u32))
            .collect()
    }
}

fn pick_word_delimiter(tokens: &[String], configured: Option<String>) -> Option<String> {
    let configured = configured.unwrap_or_else(|| "|".to_string());
    if tokens.contains(&configured) {
        Some(configured)
    } else if tokens.iter().any(|t| t.starts_with('▁')) {
        Some("▁".to_string())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delimiter_prefers_configured_then_sentencepiece() {
        let chars: Vec<String> = ["<pad>", "|", "a"].iter().map(|s| s.to_string()).collect();
        assert_eq!(pick_word_delimiter(&chars, None).as_deref(), Some("|"));
        let sp: Vec<String> = ["<blk>", "▁the", "s"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(pick_word_delimiter(&sp, None).as_deref(), Some("▁"));
        let none: Vec<String> = ["<pad>", "a"].iter().map(|s| s.to_string()).collect();
        assert_eq!(pick_word_delimiter(&none, Some("|".into())), None);
    }
}
