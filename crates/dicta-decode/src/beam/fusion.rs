//! Shallow fusion of a word n-gram LM into CTC beam search, scored as pyctcdecode's
//! `LanguageModel` scores words and partial words.

use std::sync::Arc;

use crate::lm::{LmState, NgramLm};

/// pyctcdecode's average token length, past which partial-word penalties grow.
const AVG_TOKEN_LEN: usize = 6;

/// LM fusion weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LmWeights {
    /// Weight of the LM log-probability (natural-log units after conversion from log10).
    pub alpha: f64,
    /// Bonus per word (word insertion bonus).
    pub beta: f64,
    /// log10 offset for words and partial words outside the unigram list (pyctcdecode: -10).
    pub unk_score_offset: f64,
    /// Score sentence boundaries `<s>` and `</s>` (pyctcdecode's `lm_score_boundary`, default true).
    pub score_boundary: bool,
}

impl Default for LmWeights {
    fn default() -> Self {
        Self {
            alpha: 0.5,
            beta: 1.0,
            unk_score_offset: -10.0,
            score_boundary: true,
        }
    }
}

/// Which words count as known for partial-word scoring.
#[derive(Debug, Clone, PartialEq)]
pub enum Unigrams {
    /// Every LM word (pyctcdecode's behaviour when given an `.arpa` path).
    FromLm,
    /// An explicit list (filtered to words the LM knows, as pyctcdecode does).
    List(Vec<String>),
    /// No list: every partial word gets the unknown-word offset.
    None,
}

/// An n-gram LM plus fusion weights and the unigram list, shared by decoders.
#[derive(Debug)]
pub struct LmFusion {
    pub(crate) lm: Arc<NgramLm>,
    pub(crate) weights: LmWeights,
    /// Sorted unigrams for prefix queries; `None` when no list was given.
    sorted_unigrams: Option<Vec<Box<str>>>,
    /// Membership by LM word id; empty when the (filtered) list is empty.
    in_unigrams: Vec<bool>,
    /// `1 / log10(e)`, computed as pyctcdecode does.
    pub(crate) log_base_change: f64,
}

impl LmFusion {
    /// Combines a model, weights and a unigram list.
    pub fn new(lm: Arc<NgramLm>, weights: LmWeights, unigrams: Unigrams) -> Self {
        let list: Option<Vec<Box<str>>> = match unigrams {
            Unigrams::FromLm => Some(
                lm.words()
                    .filter(|w| lm.contains(w))
                    .map(Into::into)
                    .collect(),
            ),
            Unigrams::List(v) => Some(
                v.into_iter()
                    .filter(|w| lm.contains(w))
                    .map(Into::into)
                    .collect(),
            ),
            Unigrams::None => None,
        };
        let mut in_unigrams = Vec::new();
        let sorted_unigrams = list.map(|mut l| {
            if !l.is_empty() {
                in_unigrams = vec![false; lm.vocab_size()];
                for w in &l {
                    if let Some(id) = lm.word_id(w) {
                        in_unigrams[id as usize] = true;
                    }
                }
            }
            l.sort_unstable();
            l.dedup();
            l
        });
        Self {
            lm,
            weights,
            sorted_unigrams,
            in_unigrams,
            log_base_change: 1.0 / std::f64::consts::E.log10(),
        }
    }

    /// The model.
    pub fn lm(&self) -> &NgramLm {
        &self.lm
    }

    /// The weights.
    pub fn weights(&self) -> LmWeights {
        self.weights
    }

    /// Start context (`<s>` when boundaries are scored).
    pub(crate) fn start_state(&self) -> LmState {
        if self.weights.score_boundary {
            self.lm.begin_sentence()
        } else {
            LmState::null()
        }
    }

    /// Fused score of appending `word` (LM id, or `None` for a word the LM lacks) after
    /// `state`: `alpha * ln P(word | state) [+ unk offset] [+ ln P(</s>)] + beta`.
    pub(crate) fn word_score(
        &self,
        state: &LmState,
        word: Option<u32>,
        last: bool,
        out: &mut LmState,
    ) -> f64 {
        let id = word.unwrap_or(self.lm.unk_id());
        let mut score = f64::from(self.lm.score(state, id, out));
        let known = word.is_some_and(|id| id != self.lm.unk_id());
        let listed =
            self.in_unigrams.is_empty() || word.is_some_and(|id| self.in_unigrams[id as usize]);
        if !listed || !known {
            score += self.weights.unk_score_offset;
        }
        if last && self.weights.score_boundary {
            let mut end = LmState::null();
            score += f64::from(self.lm.score(out, self.lm.eos_id(), &mut end));
        }
        self.weights.alpha * score * self.log_base_change + self.weights.beta
    }

    /// The sorted unigram list (empty when none was given).
    pub(crate) fn unigram_list(&self) -> &[Box<str>] {
        self.sorted_unigrams.as_deref().unwrap_or(&[])
    }

    /// Penalty for an unfinished word of `chars` characters: the unknown offset when no listed
    /// word starts with it (always, without a list), grown by `len / 6` past six characters
    /// (not scaled by alpha, as in pyctcdecode).
    pub(crate) fn partial_score(&self, no_listed_word_starts_with_it: bool, chars: usize) -> f64 {
        let oov = self.sorted_unigrams.is_none() || no_listed_word_starts_with_it;
        let mut s = self.weights.unk_score_offset * if oov { 1.0 } else { 0.0 };
        if chars > AVG_TOKEN_LEN {
            s = s * chars as f64 / AVG_TOKEN_LEN as f64;
        }
        s
    }
}
