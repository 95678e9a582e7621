//! Whisper's byte-level BPE tokenizer (a thin wrapper over HF `tokenizers`).

use dicta_core::{Error, Result};
use std::collections::HashMap;
use std::path::Path;

/// Whisper tokenizer loaded from a folder's `tokenizer.json`.
pub struct WhisperTokenizer {
    inner: tokenizers::Tokenizer,
    /// First special id (`<|endoftext|>`); every id at or above it is special or a timestamp.
    eot: u32,
    /// GPT-2 byte-level alphabet: printable char → original byte.
    byte_decoder: HashMap<char, u8>,
}

impl std::fmt::Debug for WhisperTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhisperTokenizer")
            .field("vocab", &self.inner.get_vocab_size(true))
            .finish()
    }
}

/// GPT-2's reversible byte ↔ printable-char map (`bytes_to_unicode`), inverted.
fn byte_decoder() -> HashMap<char, u8> {
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32).collect();
    printable.extend(0xA1..=0xAC);
    printable.extend(0xAE..=0xFF);
    let mut map = HashMap::with_capacity(256);
    let mut extra = 0u32;
    for b in 0u32..256 {
        let c = if printable.contains(&b) {
            b
        } else {
            extra += 1;
            255 + extra
        };
        map.insert(char::from_u32(c).unwrap_or('\u{0}'), b as u8);
    }
    map
}

impl WhisperTokenizer {
    /// Loads `tokenizer.json`; errors name the file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| {
            Error::model_load(format!(
                "{}: cannot read the tokenizer ({e}); copy tokenizer.json from the model's repository",
                path.display()
            ))
        })?;
        let eot = inner.token_to_id("<|endoftext|>").ok_or_else(|| {
            Error::model_load(format!(
                "{}: <|endoftext|> is missing; this is not a Whisper tokenizer",
                path.display()
            ))
        })?;
        Ok(Self {
            inner,
            eot,
            byte_decoder: byte_decoder(),
        })
    }

    /// Text → token ids, without any special tokens.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| Error::internal(format!("tokenizer encode: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Token ids → text. Special and timestamp tokens (ids ≥ `<|endoftext|>`) are skipped.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let text_ids: Vec<u32> = ids.iter().copied().filter(|&t| t < self.eot).collect();
        self.inner
            .decode(&text_ids, false)
            .map_err(|e| Error::internal(format!("tokenizer decode: {e}")))
    }

    /// Id of a token string such as `<|en|>`.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Token string of an id, in the BPE alphabet (a leading space shows as `Ġ`).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The raw UTF-8 bytes a token stands for (a token may hold part of a multi-byte character, so this
    /// is bytes, not a `String`). Special tokens return their literal text. Use it for `suppress_blank`
    /// and splitting words on spaces.
    pub fn token_bytes(&self, id: u32) -> Option<Vec<u8>> {
        let tok = self.inner.id_to_token(id)?;
        if id >= self.eot {
            return Some(tok.into_bytes());
        }
        tok.chars()
            .map(|c| self.byte_decoder.get(&c).copied())
            .collect()
    }

    /// Number of entries, including added special tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The wrapped HF tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}
