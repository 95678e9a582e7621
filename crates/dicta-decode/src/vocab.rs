//! CTC vocabularies: character (wav2vec2 `|` word delimiter) and BPE/sentencepiece (`▁` word start).
//!
//! Labels are normalised the way pyctcdecode's `Alphabet.build_alphabet` does, so decoders see
//! the same symbols: the blank becomes `""`, `|` becomes `" "`, `<unk>` becomes `⁇`.

use std::path::Path;

use dicta_core::{Error, ErrorKind, Result};

/// Word-start marker of sentencepiece vocabularies.
pub const BPE_WORD_START: char = '▁';
const UNK_CHAR: &str = "⁇";
const UNK_BPE: &str = "▁⁇▁";

/// Kind of vocabulary, which decides how tokens form words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VocabKind {
    /// One character a token; a space token (from `|`) separates words.
    Char,
    /// Sub-word tokens; a token starting with `▁` starts a new word.
    Bpe,
}

/// A normalised CTC vocabulary: `labels[i]` is the text of token `i`.
#[derive(Debug, Clone)]
pub struct Vocabulary {
    labels: Vec<String>,
    kind: VocabKind,
    blank: u32,
    /// For each token, the first token id with the same label (labels compare as strings).
    canonical: Vec<u32>,
}

fn is_special(label: &str, name: &str) -> bool {
    let b = label.as_bytes();
    b.len() == name.len() + 2
        && matches!((b[0], b[b.len() - 1]), (b'<', b'>') | (b'[', b']'))
        && label[1..label.len() - 1].eq_ignore_ascii_case(name)
}

impl Vocabulary {
    /// Builds a vocabulary from raw labels in token-id order (e.g. a wav2vec2 `vocab.json`
    /// sorted by id). BPE is detected as in pyctcdecode: any label starting with `##` or `▁`.
    pub fn from_labels(raw: &[String]) -> Result<Self> {
        if raw.is_empty() {
            return Err(Error::invalid_input("the vocabulary has no labels"));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = raw.iter().find(|l| !seen.insert(l.as_str())) {
            return Err(Error::invalid_input(format!(
                "the vocabulary contains {dup:?} twice"
            )));
        }
        let is_bpe = raw
            .iter()
            .any(|s| s.starts_with("##") || s.starts_with(BPE_WORD_START));
        let mut labels: Vec<String> = raw.to_vec();
        let kind = if is_bpe {
            if raw.iter().any(|s| s.contains(' ')) {
                return Err(Error::invalid_input(
                    "a BPE vocabulary (it has '▁' or '##' tokens) must not contain ' '",
                ));
            }
            if raw.iter().any(|s| s.starts_with("##")) {
                for l in labels.iter_mut() {
                    *l = convert_wordpiece(l);
                }
            }
            VocabKind::Bpe
        } else {
            if labels.iter().any(|l| l == "|") && !labels.iter().any(|l| l == " ") {
                let i = labels.iter().position(|l| l == "|").unwrap_or(0);
                labels[i] = " ".into();
            }
            VocabKind::Char
        };
        for l in labels.iter_mut() {
            if is_special(l, "pad") {
                l.clear();
            }
        }
        if kind == VocabKind::Char && !labels.iter().any(|l| l.is_empty()) {
            if let Some(i) = labels.iter().position(|l| l == "_") {
                labels[i].clear();
            }
        }
        let blank = labels.iter().position(|l| l.is_empty()).ok_or_else(|| {
            Error::invalid_input(
                "the vocabulary has no CTC blank (expected <pad>, [pad], '_' or an empty label)",
            )
        })? as u32;
        for l in labels.iter_mut() {
            if is_special(l, "unk") {
                *l = if kind == VocabKind::Bpe {
                    UNK_BPE
                } else {
                    UNK_CHAR
                }
                .into();
            }
        }
        let mut first: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
        let canonical = labels
            .iter()
            .enumerate()
            .map(|(i, l)| *first.entry(l.as_str()).or_insert(i as u32))
            .collect();
        Ok(Self {
            labels,
            kind,
            blank,
            canonical,
        })
    }

    /// Reads `vocab.json`: either an object `{token: id}` (Hugging Face) or an array of labels.
    pub fn from_json_path(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::from(e).context(path.display()))?;
        Self::from_json_str(&text).map_err(|e| e.context(path.display()))
    }

    /// Parses the JSON forms accepted by [`Vocabulary::from_json_path`].
    pub fn from_json_str(text: &str) -> Result<Self> {
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("vocabulary JSON: {e}")))?;
        let labels: Vec<String> = match value {
            serde_json::Value::Array(items) => items
                .into_iter()
                .map(|v| match v {
                    serde_json::Value::String(s) => Ok(s),
                    other => Err(Error::invalid_input(format!(
                        "vocabulary array entries must be strings, found {other}"
                    ))),
                })
                .collect::<Result<_>>()?,
            serde_json::Value::Object(map) => {
                let mut pairs = Vec::with_capacity(map.len());
                for (tok, id) in map {
                    let id = id.as_u64().ok_or_else(|| {
                        Error::invalid_input(format!("vocabulary id of {tok:?} is not an integer"))
                    })? as usize;
                    pairs.push((id, tok));
                }
                pairs.sort();
                for (i, (id, tok)) in pairs.iter().enumerate() {
                    if *id != i {
                        return Err(Error::invalid_input(format!(
                            "vocabulary ids must be 0..{} without gaps; {tok:?} has id {id}",
                            pairs.len()
                        )));
                    }
                }
                pairs.into_iter().map(|(_, t)| t).collect()
            }
            _ => {
                return Err(Error::invalid_input(
                    "vocabulary JSON must be an object {token: id} or an array of labels",
                ))
            }
        };
        Self::from_labels(&labels)
    }

    /// Number of tokens (the `V` of `[T, V]` log-probs).
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when there are no tokens (never, for a built vocabulary).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Normalised label of token `id`.
    pub fn label(&self, id: u32) -> &str {
        &self.labels[id as usize]
    }

    /// Character or BPE.
    pub fn kind(&self) -> VocabKind {
        self.kind
    }

    /// Id of the CTC blank.
    pub fn blank(&self) -> u32 {
        self.blank
    }

    /// Tokens with equal labels share one canonical id (pyctcdecode compares labels as strings).
    pub fn canonical(&self, id: u32) -> u32 {
        self.canonical[id as usize]
    }
}

fn convert_wordpiece(token: &str) -> String {
    if let Some(rest) = token.strip_prefix("##") {
        rest.to_string()
    } else if token.is_empty()
        || token == "▁"
        || token == UNK_BPE
        || ((token.starts_with('<') || token.starts_with('['))
            && (token.ends_with('>') || token.ends_with(']'))
            && token.chars().count() > 2)
    {
        token.to_string()
    } else {
        format!("{BPE_WORD_START}{token}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn wav2vec2_char_vocab_is_normalised() {
        let v = Vocabulary::from_json_str(r#"{"<pad>":0,"<unk>":1,"|":2,"a":3,"b":4}"#).unwrap();
        assert_eq!(v.kind(), VocabKind::Char);
        assert_eq!(v.blank(), 0);
        assert_eq!(v.label(1), "⁇");
        assert_eq!(v.label(2), " ");
        assert_eq!(v.len(), 5);
    }

    #[test]
    fn sentencepiece_vocab_is_bpe() {
        let v =
            Vocabulary::from_labels(&labels(&["<blank>", "▁the", "re", "<unk>", "[PAD]"])).unwrap();
        assert_eq!(v.kind(), VocabKind::Bpe);
        assert_eq!(v.blank(), 4);
        assert_eq!(v.label(3), "▁⁇▁");
    }

    #[test]
    fn bad_vocabularies_are_refused() {
        assert!(Vocabulary::from_labels(&labels(&["a", "b"])).is_err()); // no blank
        assert!(Vocabulary::from_labels(&labels(&["<pad>", "a", "a"])).is_err());
        assert!(Vocabulary::from_json_str(r#"{"<pad>":0,"a":2}"#).is_err());
    }
}
