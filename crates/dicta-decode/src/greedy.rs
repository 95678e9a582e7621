//! Greedy (best-path) CTC decoding.

use crate::hypothesis::{Hypothesis, WordSpan};
use crate::logprobs::LogProbs;
use crate::vocab::{VocabKind, Vocabulary, BPE_WORD_START};
use dicta_core::{Error, Result};

/// Best-path decoding of `[T, V]` scores: take the arg-max token per frame (first on ties),
/// merge repeats, drop blanks; a space token (character vocabularies) or a `▁` prefix (BPE)
/// starts a new word. Word spans cover the frames of their tokens' runs.
pub fn greedy_decode(logprobs: &LogProbs, vocab: &Vocabulary) -> Result<Hypothesis> {
    if logprobs.vocab() != vocab.len() {
        return Err(Error::invalid_input(format!(
            "log-probs have {} columns but the vocabulary has {} tokens",
            logprobs.vocab(),
            vocab.len()
        )));
    }
    let mut words: Vec<WordSpan> = Vec::new();
    let mut current: Option<WordSpan> = None;
    let mut prev: Option<u32> = None;
    let mut logit_score = 0.0f64;
    let flush = |cur: &mut Option<WordSpan>, words: &mut Vec<WordSpan>| {
        if let Some(w) = cur.take() {
            if !w.word.is_empty() {
                words.push(w);
            }
        }
    };
    for t in 0..logprobs.frames() {
        let row = logprobs.row(t);
        let (best, &lp) =
            row.iter().enumerate().fold(
                (0, &row[0]),
                |acc, (i, v)| if *v > *acc.1 { (i, v) } else { acc },
            );
        logit_score += f64::from(lp);
        let tok = vocab.canonical(best as u32);
        let end = t as i64 + 1;
        if Some(tok) == prev {
            if let Some(w) = current.as_mut() {
                if tok != vocab.blank() {
                    w.end_frame = end;
                }
            }
            continue;
        }
        prev = Some(tok);
        if tok == vocab.blank() {
            continue;
        }
        let label = vocab.label(tok);
        let (starts_word, text) = match vocab.kind() {
            VocabKind::Char if label == " " => {
                flush(&mut current, &mut words);
                continue;
            }
            VocabKind::Char => (false, label),
            VocabKind::Bpe => match label.strip_prefix(BPE_WORD_START) {
                Some(rest) => (true, rest.trim_end_matches(BPE_WORD_START)),
                None => (false, label),
            },
        };
        if starts_word {
            flush(&mut current, &mut words);
        }
        match current.as_mut() {
            Some(w) => {
                w.word.push_str(text);
                w.end_frame = end;
            }
            None => {
                current = Some(WordSpan {
                    word: text.to_string(),
                    start_frame: t as i64,
                    end_frame: end,
                })
            }
        }
    }
    flush(&mut current, &mut words);
    let text = words
        .iter()
        .map(|w| w.word.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    Ok(Hypothesis {
        text,
        words,
        logit_score,
        score: logit_score,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_hot(path: &[usize], v: usize) -> LogProbs {
        let mut data = vec![-20.0f32; path.len() * v];
        for (t, &k) in path.iter().enumerate() {
            data[t * v + k] = 0.0;
        }
        LogProbs::new(data, path.len(), v).unwrap()
    }

    #[test]
    fn char_vocab_collapses_repeats_and_splits_on_the_delimiter() {
        let labels: Vec<String> = ["<pad>", "|", "a", "b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let vocab = Vocabulary::from_labels(&labels).unwrap();
        // frames: _ a a _ a | | b b _
        let h = greedy_decode(&one_hot(&[0, 2, 2, 0, 2, 1, 1, 3, 3, 0], 4), &vocab).unwrap();
        assert_eq!(h.text, "aa b");
        let spans: Vec<_> = h
            .words
            .iter()
            .map(|w| (w.word.as_str(), w.start_frame, w.end_frame))
            .collect();
        assert_eq!(spans, vec![("aa", 1, 5), ("b", 7, 9)]);
    }

    #[test]
    fn bpe_vocab_starts_words_at_the_marker() {
        let labels: Vec<String> = ["<pad>", "▁he", "llo", "▁wor", "ld"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let vocab = Vocabulary::from_labels(&labels).unwrap();
        let h = greedy_decode(&one_hot(&[1, 1, 2, 0, 3, 4, 4], 5), &vocab).unwrap();
        assert_eq!(h.text, "hello world");
        assert_eq!((h.words[1].start_frame, h.words[1].end_frame), (4, 7));
        assert!(
            greedy_decode(&one_hot(&[1], 4), &vocab).is_err(),
            "V mismatch is refused"
        );
    }
}
