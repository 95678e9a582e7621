//! LocalAgreement-2 (Macháček et al., "Turning Whisper into Real-Time Transcription System",
//! 2023): a word is confirmed once two consecutive hypotheses of the growing buffer agree on it
//! as part of their common prefix. A plain struct; the session feeds it hypotheses.

use dicta_core::Word;

/// How many committed words are kept to drop words a new hypothesis repeats at its start.
const MAX_NGRAM: usize = 5;

/// Seconds of slack when dropping hypothesis words that end before the committed text.
const TIME_SLACK: f64 = 0.1;

/// The LocalAgreement-2 state of one stream.
#[derive(Debug, Clone, Default)]
pub struct LocalAgreement {
    /// The last few committed words (for n-gram de-duplication).
    committed_tail: Vec<Word>,
    /// End time of the last committed word (seconds from stream start).
    committed_end: f64,
    /// The unconfirmed rest of the previous hypothesis.
    pending: Vec<Word>,
    /// Committed words still inside the decoded buffer (a new hypothesis starts with them).
    in_buffer: Vec<Word>,
}

/// Text key words are compared by: lower case without surrounding punctuation.
fn key(w: &str) -> String {
    w.trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase()
}

impl LocalAgreement {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// End of the last committed word (0 before any).
    pub fn committed_end(&self) -> f64 {
        self.committed_end
    }

    /// Words of the latest hypothesis not confirmed yet.
    pub fn pending(&self) -> &[Word] {
        &self.pending
    }

    /// Inserts the hypothesis of the current buffer (absolute times) and returns the words it
    /// confirms: the longest common prefix with the previous hypothesis.
    pub fn insert(&mut self, hypothesis: Vec<Word>) -> Vec<Word> {
        let repeats = self
            .in_buffer
            .iter()
            .zip(&hypothesis)
            .take_while(|(a, b)| key(&a.word) == key(&b.word))
            .count();
        if repeats == self.in_buffer.len() {
            // The hypothesis starts with the committed words of the buffer: skip them by text,
            // which is exact where word times are estimates.
            let new: Vec<Word> = hypothesis.into_iter().skip(repeats).collect();
            return self.agree(new);
        }
        if let Some(skip) = self.aligned_prefix(&hypothesis) {
            // Re-worded committed text ("Hello. Hello?" → "Oh, hello."): skip what aligns
            // with it by text; word times of a re-decode are too rough to cut by.
            let new: Vec<Word> = hypothesis.into_iter().skip(skip).collect();
            return self.agree(new);
        }
        let mut new: Vec<Word> = hypothesis
            .into_iter()
            .filter(|w| w.start > self.committed_end - TIME_SLACK || self.committed_end == 0.0)
            .collect();
        // A hypothesis that re-words the committed text: drop the words it repeats.
        if !self.committed_tail.is_empty() && !new.is_empty() {
            let max_n = MAX_NGRAM.min(self.committed_tail.len()).min(new.len());
            for n in (1..=max_n).rev() {
                let tail = &self.committed_tail[self.committed_tail.len() - n..];
                if tail
                    .iter()
                    .zip(&new[..n])
                    .all(|(a, b)| key(&a.word) == key(&b.word))
                {
                    new.drain(..n);
                    break;
                }
            }
        }
        self.agree(new)
    }

    /// How many words at the start of `hypothesis` re-say the committed words of the buffer:
    /// the prefix length with the smallest word edit distance to them (the longest such prefix
    /// on ties). `None` when nothing is committed in the buffer or less than half of it aligns.
    fn aligned_prefix(&self, hypothesis: &[Word]) -> Option<usize> {
        let n = self.in_buffer.len();
        if n == 0 {
            return None;
        }
        let committed: Vec<String> = self.in_buffer.iter().map(|w| key(&w.word)).collect();
        let max_j = hypothesis.len().min(n + n / 2 + 2);
        let hyp: Vec<String> = hypothesis[..max_j].iter().map(|w| key(&w.word)).collect();
        // prev[j]: edit distance between the committed words so far and hyp[..j].
        let mut prev: Vec<usize> = (0..=max_j).collect();
        for (i, c) in committed.iter().enumerate() {
            let mut cur = vec![i + 1; max_j + 1];
            for j in 1..=max_j {
                cur[j] = (prev[j - 1] + usize::from(*c != hyp[j - 1]))
                    .min(prev[j] + 1)
                    .min(cur[j - 1] + 1);
            }
            prev = cur;
        }
        let (best, dist) = prev
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))?;
        (2 * dist <= n).then_some(best)
    }

    /// Confirms the common prefix of `new` and the pending words; `new`'s rest becomes pending.
    fn agree(&mut self, mut new: Vec<Word>) -> Vec<Word> {
        let agreed = self
            .pending
            .iter()
            .zip(&new)
            .take_while(|(a, b)| key(&a.word) == key(&b.word))
            .count();
        let rest = new.split_off(agreed);
        self.pending = rest;
        self.commit(&mut new);
        new
    }

    /// Confirms every pending word (end of stream or a forced cut) and returns them.
    pub fn flush(&mut self) -> Vec<Word> {
        let mut words = std::mem::take(&mut self.pending);
        self.commit(&mut words);
        words
    }

    /// The decoded buffer now starts at `time` (seconds): committed words before it are no
    /// longer part of new hypotheses.
    pub fn buffer_starts_at(&mut self, time: f64) {
        self.in_buffer.retain(|w| w.start >= time);
    }

    /// Commits `words`, moving their (estimated) times so that committed text never goes back
    /// in time.
    fn commit(&mut self, words: &mut [Word]) {
        for w in words.iter_mut() {
            w.start = w.start.max(self.committed_end);
            w.end = w.end.max(w.start);
            self.committed_end = w.end;
        }
        self.committed_tail.extend_from_slice(words);
        self.in_buffer.extend_from_slice(words);
        let excess = self.committed_tail.len().saturating_sub(MAX_NGRAM);
        self.committed_tail.drain(..excess);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(spec: &[(&str, f64)]) -> Vec<Word> {
        spec.iter()
            .map(|&(w, s)| Word {
                speaker: None,
                word: w.to_string(),
                start: s,
                end: s + 0.4,
                probability: None,
            })
            .collect()
    }

    fn texts(w: &[Word]) -> Vec<&str> {
        w.iter().map(|w| w.word.as_str()).collect()
    }

    #[test]
    fn confirms_the_common_prefix_of_two_hypotheses() {
        let mut la = LocalAgreement::new();
        assert!(la.insert(words(&[("and", 0.0), ("so", 0.5)])).is_empty());
        let c = la.insert(words(&[("and", 0.0), ("so,", 0.5), ("my", 1.0)]));
        assert_eq!(texts(&c), ["and", "so,"]);
        assert_eq!(texts(la.pending()), ["my"]);
        // Later hypotheses still start at 0 s (the buffer was not trimmed): committed words
        // are not confirmed twice.
        let c = la.insert(words(&[
            ("And", 0.0),
            ("so", 0.5),
            ("my", 1.0),
            ("fellow", 1.5),
        ]));
        assert_eq!(texts(&c), ["my"]);
        assert_eq!(texts(&la.flush()), ["fellow"]);
        assert!(la.flush().is_empty());
    }

    #[test]
    fn committed_words_are_skipped_by_text_when_times_move() {
        let mut la = LocalAgreement::new();
        la.insert(words(&[("can", 2.0), ("do", 2.5)]));
        la.insert(words(&[("can", 2.0), ("do", 2.5), ("for", 3.0)]));
        // Re-decoded: estimated times shifted early; "for" must not be lost.
        let c = la.insert(words(&[
            ("can", 1.8),
            ("do", 2.2),
            ("for", 2.6),
            ("you", 3.1),
        ]));
        assert_eq!(texts(&c), ["for"]);
        assert_eq!(texts(la.pending()), ["you"]);
        // After a trim after "do", the hypothesis starts with the committed "for".
        la.buffer_starts_at(2.6);
        let c = la.insert(words(&[("for", 2.6), ("you", 3.0), ("too", 3.5)]));
        assert_eq!(texts(&c), ["you"]);
        assert_eq!(texts(la.pending()), ["too"]);
    }

    #[test]
    fn reworded_committed_words_are_skipped_by_alignment() {
        let mut la = LocalAgreement::new();
        let h = words(&[
            ("Hello.", 6.0),
            ("Hello?", 6.5),
            ("Hello?", 7.0),
            ("I", 7.5),
        ]);
        la.insert(h.clone());
        assert_eq!(texts(&la.insert(h)), ["Hello.", "Hello?", "Hello?", "I"]);
        // The re-decode merges two words into "Oh, hello." and spreads times differently
        // (everything earlier than the committed end): the new words must survive.
        let re = words(&[
            ("Hello?", 5.0),
            ("Oh,", 5.5),
            ("hello.", 5.8),
            ("I", 6.0),
            ("didn't", 6.3),
            ("know", 6.6),
        ]);
        assert!(la.insert(re.clone()).is_empty());
        assert_eq!(texts(la.pending()), ["didn't", "know"]);
        assert_eq!(texts(&la.insert(re)), ["didn't", "know"]);
    }

    #[test]
    fn disagreement_confirms_nothing() {
        let mut la = LocalAgreement::new();
        la.insert(words(&[("ask", 0.0), ("not", 0.5)]));
        assert!(la.insert(words(&[("as", 0.0), ("knot", 0.5)])).is_empty());
        assert_eq!(texts(la.pending()), ["as", "knot"]);
    }

    #[test]
    fn drops_repeated_committed_words() {
        let mut la = LocalAgreement::new();
        la.insert(words(&[("your", 1.0), ("country", 1.5)]));
        la.insert(words(&[("your", 1.0), ("country", 1.5)]));
        // A re-decode whose first word starts a bit early still repeats "country".
        let c = la.insert(words(&[("country", 1.85), ("can", 2.4)]));
        assert!(c.is_empty());
        assert_eq!(texts(la.pending()), ["can"]);
    }
}
