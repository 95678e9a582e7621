//! CTC prefix beam search with optional word n-gram LM fusion and hotwords, matching
//! pyctcdecode 0.5's `BeamSearchDecoderCTC.decode` step for step: candidate expansion,
//! `_merge_beams`, LM scoring with cached states, outlier pruning, top-`beam_width`,
//! history pruning and the final end-of-sentence scoring.

mod arena;
mod fusion;
mod pyset;

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::hotword::{Hotword, HotwordScorer};
use crate::hypothesis::{Hypothesis, WordSpan};
use crate::logprobs::{LogProbs, RowNormalizer};
use crate::vocab::{VocabKind, Vocabulary, BPE_WORD_START};
use arena::{Partials, Spans, Texts, Words, ROOT};
use dicta_core::{Error, Result};
pub use fusion::{LmFusion, LmWeights, Unigrams};
use pyset::PySet;

/// Beam search settings (defaults follow the issue: beam 25, pyctcdecode's pruning constants).
#[derive(Debug, Clone, PartialEq)]
pub struct BeamConfig {
    /// Beams kept after each frame.
    pub beam_width: usize,
    /// Beams scoring below the best by more than this (natural log) are dropped.
    pub beam_prune_logp: f64,
    /// Tokens below this log-prob are not expanded (the frame's best token always is).
    pub token_min_logp: f64,
    /// Keep one beam per (last `order - 1` words, unfinished word, last token).
    pub prune_history: bool,
    /// Hotwords and their weights.
    pub hotwords: Vec<Hotword>,
}

impl Default for BeamConfig {
    fn default() -> Self {
        Self {
            beam_width: 25,
            beam_prune_logp: -10.0,
            token_min_logp: -5.0,
            prune_history: true,
            hotwords: Vec::new(),
        }
    }
}

/// `last_char` of a beam: none yet (start, or after the final flush) or a canonical token.
const LAST_NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Beam {
    text: u32,
    part: u32,
    last: u32,
    spans: u32,
    part_frames: (i32, i32),
    score: f64,
}

#[derive(Clone, Copy)]
struct Scored {
    beam: Beam,
    total: f64,
    /// Position before sorting: ties keep this order, as Python's stable sort does.
    idx: u32,
}

/// A prefix beam search decoder for one vocabulary and optional LM.
#[derive(Debug, Clone)]
pub struct BeamDecoder {
    vocab: Vocabulary,
    fusion: Option<Arc<LmFusion>>,
    config: BeamConfig,
    hot: HotwordScorer,
}

struct Search<'a> {
    d: &'a BeamDecoder,
    fusion: Option<&'a LmFusion>,
    words: Words,
    partials: Partials,
    texts: Texts,
    spans: Spans,
}

impl BeamDecoder {
    /// A decoder; `fusion` adds an n-gram LM. Fails on a zero beam width.
    pub fn new(
        vocab: Vocabulary,
        fusion: Option<Arc<LmFusion>>,
        config: BeamConfig,
    ) -> Result<Self> {
        if config.beam_width == 0 {
            return Err(Error::invalid_input("beam_width must be at least 1, got 0"));
        }
        let hot = HotwordScorer::new(&config.hotwords);
        Ok(Self {
            vocab,
            fusion,
            config,
            hot,
        })
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Vocabulary {
        &self.vocab
    }

    /// Decodes `[T, V]` scores (log-probs, logits or probabilities; normalised as pyctcdecode
    /// does) into the best hypothesis with word frame spans.
    pub fn decode(&self, logprobs: &LogProbs) -> Result<Hypothesis> {
        if logprobs.vocab() != self.vocab.len() {
            return Err(Error::invalid_input(format!(
                "log-probs have {} columns but the vocabulary has {} tokens",
                logprobs.vocab(),
                self.vocab.len()
            )));
        }
        let fusion = self.fusion.as_deref();
        let lm_vocab = fusion.map_or(0, |f| f.lm.vocab_size() as u32);
        let start = fusion.map_or(crate::lm::LmState::null(), |f| f.start_state());
        let mut s = Search {
            d: self,
            fusion,
            words: Words::new(lm_vocab),
            partials: Partials::new(
                fusion.map_or(0, |f| f.unigram_list().len()),
                logprobs.frames() * 8,
            ),
            texts: Texts::new(
                start,
                fusion.map_or(1, |f| f.lm.order()).saturating_sub(1).max(1),
            ),
            spans: Spans::new(),
        };
        Ok(s.run(logprobs))
    }
}

impl Search<'_> {
    fn run(&mut self, lp: &LogProbs) -> Hypothesis {
        let d = self.d;
        let cfg = &d.config;
        let vocab = &d.vocab;
        let is_bpe = vocab.kind() == VocabKind::Bpe;
        let blank = vocab.canonical(vocab.blank());
        let fusion = self.fusion;
        let unigrams: &[Box<str>] = fusion.map_or(&[], |f| f.unigram_list());

        let mut beams = vec![Beam {
            text: ROOT,
            part: ROOT,
            last: LAST_NONE,
            spans: 0,
            part_frames: (-1, -1),
            score: 0.0,
        }];
        let mut cands: Vec<Beam> = Vec::new();
        let mut merge: FxHashMap<(u32, u32, u32), u32> = FxHashMap::default();
        let mut scored: Vec<Scored> = Vec::new();
        let mut seen: FxHashSet<(u32, u32, u32)> = FxHashSet::default();
        let mut tokens: Vec<u32> = Vec::new();
        let (mut above, mut token_set) = (PySet::new(), PySet::new());
        let mut force_next_break = false;
        let mut norm = RowNormalizer::new(lp);

        for t in 0..lp.frames() {
            let row = norm.row(lp, t);
            let frame = t as i32;
            let mut best = 0;
            for (i, &v) in row.iter().enumerate() {
                if v > row[best] {
                    best = i;
                }
            }
            // Candidate tokens in the order pyctcdecode iterates its Python set.
            above.assign(
                (0..row.len())
                    .filter(|&i| row[i] >= cfg.token_min_logp)
                    .map(|i| i as u32),
            );
            above.union_one(best as u32, &mut token_set);
            tokens.clear();
            tokens.extend(token_set.iter());
            cands.clear();
            merge.clear();
            for &tok in &tokens {
                let p = row[tok as usize];
                let c = vocab.canonical(tok);
                let label = vocab.label(tok);
                for b in &beams {
                    let score = b.score + p;
                    let nb = if c == blank || b.last == c {
                        let part_frames = if c == blank {
                            b.part_frames
                        } else {
                            (b.part_frames.0, frame + 1)
                        };
                        Beam {
                            last: c,
                            part_frames,
                            score,
                            ..*b
                        }
                    } else if is_bpe && (label.starts_with(BPE_WORD_START) || force_next_break) {
                        force_next_break = false;
                        // pyctcdecode strips one leading and one trailing `▁`; a trailing one
                        // (even of a lone "▁") forces the next token to start a word.
                        let mut clean = label.strip_prefix(BPE_WORD_START).unwrap_or(label);
                        if label.ends_with(BPE_WORD_START) {
                            clean = clean.strip_suffix(BPE_WORD_START).unwrap_or(clean);
                            force_next_break = true;
                        }
                        let (text, spans) = self.finish_word(b);
                        let part = self.partials.step(ROOT, tok, true, clean, unigrams);
                        Beam {
                            text,
                            part,
                            last: c,
                            spans,
                            part_frames: (frame, frame + 1),
                            score,
                        }
                    } else if !is_bpe && label == " " {
                        let (text, spans) = self.finish_word(b);
                        Beam {
                            text,
                            part: ROOT,
                            last: c,
                            spans,
                            part_frames: (-1, -1),
                            score,
                        }
                    } else {
                        let part_frames = if b.part_frames.0 < 0 {
                            (frame, frame + 1)
                        } else {
                            (b.part_frames.0, frame + 1)
                        };
                        Beam {
                            part: self.partials.step(b.part, tok, false, label, unigrams),
                            last: c,
                            part_frames,
                            score,
                            ..*b
                        }
                    };
                    push_merged(&mut cands, &mut merge, nb);
                }
            }
            self.score_all(&cands, &mut scored);
            prune(&mut scored, cfg.beam_prune_logp, cfg.beam_width);
            beams.clear();
            if cfg.prune_history {
                seen.clear();
                for s in &scored {
                    let key = (
                        self.texts.nodes[s.beam.text as usize].history,
                        s.beam.part,
                        s.beam.last,
                    );
                    if seen.insert(key) {
                        beams.push(s.beam);
                    }
                }
            } else {
                beams.extend(scored.iter().map(|s| s.beam));
            }
        }

        // Flush unfinished words, merge, and score with the end of sentence.
        cands.clear();
        merge.clear();
        let mut next_words: Vec<(u32, u32)> = Vec::new();
        for b in &beams {
            let (text, spans) = self.finish_word(b);
            let nb = Beam {
                text,
                part: ROOT,
                last: LAST_NONE,
                spans,
                part_frames: (-1, -1),
                score: b.score,
            };
            let before = cands.len();
            let idx = push_merged(&mut cands, &mut merge, nb);
            if cands.len() > before {
                next_words.push((b.text, b.part));
            } else {
                next_words[idx] = (b.text, b.part);
            }
        }
        self.score_final(&cands, &next_words, &mut scored);
        prune(&mut scored, cfg.beam_prune_logp, cfg.beam_width);
        match scored.first() {
            Some(best) => self.hypothesis(&best.beam, best.total),
            None => Hypothesis {
                text: String::new(),
                words: Vec::new(),
                logit_score: 0.0,
                score: 0.0,
            },
        }
    }

    /// The text and spans after the beam's unfinished word (if any) becomes a word.
    fn finish_word(&mut self, b: &Beam) -> (u32, u32) {
        if b.part == ROOT {
            return (b.text, b.spans);
        }
        let word = self.word_of(b.part);
        let text = self
            .texts
            .child(b.text, word, &self.words, self.fusion, &self.d.hot);
        (text, self.spans.push(b.spans, b.part_frames))
    }

    fn word_of(&mut self, part: u32) -> u32 {
        if let Some(w) = self.partials.nodes[part as usize].word {
            return w;
        }
        let w = self.words.intern(self.partials.text(part), self.fusion);
        self.partials.nodes[part as usize].word = Some(w);
        w
    }

    fn partial_term(&mut self, part: u32) -> f64 {
        let node = &self.partials.nodes[part as usize];
        if let Some(s) = node.score {
            return s;
        }
        let hot = &self.d.hot;
        let text = self.partials.text(part);
        let s = match self.fusion {
            Some(f) => {
                if !hot.is_empty() && hot.has_prefix(text) {
                    hot.partial_bonus(text)
                } else {
                    f.partial_score(node.is_oov(), node.chars as usize)
                }
            }
            None => hot.partial_bonus(text),
        };
        self.partials.nodes[part as usize].score = Some(s);
        s
    }

    /// pyctcdecode's `_get_lm_beams` for a frame.
    fn score_all(&mut self, cands: &[Beam], out: &mut Vec<Scored>) {
        out.clear();
        for b in cands {
            let node = &self.texts.nodes[b.text as usize];
            let total = if self.fusion.is_some() {
                let mut lm = node.raw + node.hot;
                if b.part != ROOT {
                    lm += self.partial_term(b.part);
                }
                b.score + lm
            } else {
                let hot = node.hot;
                b.score + hot + self.partial_term(b.part)
            };
            out.push(Scored {
                beam: *b,
                total,
                idx: out.len() as u32,
            });
        }
    }

    /// `_get_lm_beams(is_eos=True)`: each merged text is scored from the split (text, next
    /// word) of the last beam merged into it, as pyctcdecode's cache does.
    fn score_final(&mut self, cands: &[Beam], next_words: &[(u32, u32)], out: &mut Vec<Scored>) {
        out.clear();
        for (b, &(prev_text, next_part)) in cands.iter().zip(next_words) {
            let total = match self.fusion {
                Some(f) => {
                    let (word, bonus) = if next_part == ROOT {
                        (None, 0.0)
                    } else {
                        let w = self.word_of(next_part);
                        let bonus = if self.d.hot.is_empty() {
                            0.0
                        } else {
                            self.d.hot.word_bonus(self.words.text(w, Some(f)))
                        };
                        (Some(w), bonus)
                    };
                    let p = &self.texts.nodes[prev_text as usize];
                    let mut st = crate::lm::LmState::null();
                    let lm_id = word.and_then(|w| self.words.lm_id(w));
                    let raw = p.raw + f.word_score(&p.state, lm_id, true, &mut st);
                    b.score + (raw + (p.hot + bonus))
                }
                None => b.score + self.texts.nodes[b.text as usize].hot + 0.0,
            };
            out.push(Scored {
                beam: *b,
                total,
                idx: out.len() as u32,
            });
        }
    }

    fn hypothesis(&self, b: &Beam, total: f64) -> Hypothesis {
        let ids = self.texts.words_of(b.text);
        let spans = self.spans.collect(b.spans);
        let words: Vec<WordSpan> = ids
            .iter()
            .zip(&spans)
            .map(|(&w, &(s, e))| WordSpan {
                word: self.words.text(w, self.fusion).to_string(),
                start_frame: i64::from(s),
                end_frame: i64::from(e),
            })
            .collect();
        let text = ids
            .iter()
            .map(|&w| self.words.text(w, self.fusion))
            .collect::<Vec<_>>()
            .join(" ");
        Hypothesis {
            text,
            words,
            logit_score: b.score,
            score: total,
        }
    }
}

/// `_merge_beams`: beams with the same (text, unfinished word, last token) add their
/// probabilities; the merged entry keeps the first one's position and the last one's fields.
/// Returns the entry's index.
fn push_merged(
    cands: &mut Vec<Beam>,
    merge: &mut FxHashMap<(u32, u32, u32), u32>,
    nb: Beam,
) -> usize {
    match merge.entry((nb.text, nb.part, nb.last)) {
        std::collections::hash_map::Entry::Occupied(e) => {
            let i = *e.get() as usize;
            let s1 = cands[i].score;
            let s2 = nb.score;
            // pyctcdecode's `_sum_log_scores`, written the same way for identical rounding.
            let sum = if s1 >= s2 {
                s1 + (1.0 + (s2 - s1).exp()).ln()
            } else {
                s2 + (1.0 + (s1 - s2).exp()).ln()
            };
            cands[i] = Beam { score: sum, ..nb };
            i
        }
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert(cands.len() as u32);
            cands.push(nb);
            cands.len() - 1
        }
    }
}

/// Drops beams more than `-prune_logp` below the best, then keeps the best `width`
/// (stable: ties keep their order, as `heapq.nlargest`).
fn prune(scored: &mut Vec<Scored>, prune_logp: f64, width: usize) {
    let Some(max) = scored.iter().map(|s| s.total).reduce(f64::max) else {
        return;
    };
    let floor = max + prune_logp;
    scored.retain(|s| s.total >= floor);
    let order = |a: &Scored, b: &Scored| b.total.total_cmp(&a.total).then(a.idx.cmp(&b.idx));
    if scored.len() > width {
        scored.select_nth_unstable_by(width - 1, order);
        scored.truncate(width);
    }
    scored.sort_unstable_by(order);
}
