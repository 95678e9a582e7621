//! LocalAgreement-2 (Macháček et al., "Turning Whisper into Real-Time Transcription System",
//! 2023): a word is confirmed once two consecutive hypotheses of the growing buffer agree on it
//! as part of their common prefix. A plain struct; the session feeds it hypotheses.

use dicta_core::Word;

/// How many committed words are kept to drop words a new hypothesis repeats at its start.
const MAX_NGRAM: usize = 5;

/// Seconds before the end of a decode's audio within which an estimated word may be cut off.
const CUT_OFF: f64 = 0.05;

/// How many committed words a hypothesis with estimated word times is aligned against.
const MAX_OVERLAP: usize = 64;

/// Seconds of slack when dropping hypothesis words that end before the committed text.
const TIME_SLACK: f64 = 0.1;

/// The LocalAgreement-2 state of one stream.
#[derive(Debug, Clone, Default)]
pub struct LocalAgreement {
    /// The last [`MAX_OVERLAP`] committed words: the last [`MAX_NGRAM`] of them for n-gram
    /// de-duplication, all of them for aligning a decode after a cut (estimated times).
    committed_tail: Vec<Word>,
    /// End time of the last committed word (seconds from stream start).
    committed_end: f64,
    /// The unconfirmed rest of the previous hypothesis.
    pending: Vec<Word>,
    /// Committed words still inside the decoded buffer (a new hypothesis starts with them).
    in_buffer: Vec<Word>,
    /// Word times are spread estimates, not timestamps (models without timestamps): where a
    /// hypothesis does not start with the committed words of the buffer, the committed words
    /// it re-says are found by aligning its start with the committed text, never by time.
    estimated_times: bool,
    /// The buffer was cut since the last hypothesis (estimated-times mode): its committed
    /// words were sorted by estimated times from an older decode, so they are not trusted.
    cut: bool,
    /// Where the decoded buffer starts (seconds from stream start).
    buffer_start: f64,
    /// Where the audio of the latest hypothesis ends (estimated-times mode; 0: unknown).
    decoded_end: f64,
    /// Where the audio of the hypothesis that left `pending` ended.
    pending_until: f64,
    /// End of the last word handed out: committed words never go back in time, even when
    /// `committed_end` is re-anchored earlier.
    emitted_end: f64,
}

/// Text key words are compared by: lower case without surrounding punctuation.
fn key(w: &str) -> String {
    w.trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase()
}

/// Hesitation sounds that models write in one re-decode and leave out of the next ("Um, I
/// have a cold" / "I have a cold so"). Agreement steps over them: a strict prefix would
/// confirm nothing while they flip, the buffer would grow, and its forced cut could drop the
/// words behind them. (Scoring normalizers drop them too.)
const FILLERS: [&str; 9] = ["um", "uh", "hmm", "mm", "mhm", "ah", "er", "eh", "erm"];

fn is_filler(w: &Word) -> bool {
    FILLERS.contains(&key(&w.word).as_str())
}

/// Whether two word keys are spellings of nearly the same sound ("happened" / "happen",
/// "levels" / "level"): at most a third of the longer one's characters differ.
fn similar(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    3 * edit_row(&a, &b)[b.len()] <= a.len().max(b.len())
}

/// Edit distances (unit substitutions, insertions, deletions) between all of `a` and each
/// prefix of `b`: `row[j]` is the distance to `b[..j]`.
fn edit_row<T: PartialEq>(a: &[T], b: &[T]) -> Vec<usize> {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, y) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(x != y))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev
}

/// How many words at the start of `hypothesis` re-say the end of `committed`: the prefix
/// whose alignment with some suffix of `committed` scores best (+1 per shared word, 0 per
/// word spelled nearly the same, −1 per other substituted, inserted or left-out word;
/// fillers stepped over), 0 when no alignment scores above 0. Ties go to the shorter
/// prefix: words are dropped only on evidence.
fn overlap(committed: &[Word], hypothesis: &[Word]) -> usize {
    let c: Vec<String> = committed
        .iter()
        .filter(|w| !is_filler(w))
        .map(|w| key(&w.word))
        .collect();
    // Hypothesis words without fillers, each with its index + 1 in `hypothesis`.
    let h: Vec<(String, usize)> = hypothesis
        .iter()
        .enumerate()
        .filter(|(_, w)| !is_filler(w))
        .map(|(i, w)| (key(&w.word), i + 1))
        .take(c.len() + c.len() / 2 + 2)
        .collect();
    if c.is_empty() || h.is_empty() {
        return 0;
    }
    // prev[b]: best score of some suffix of the committed words so far against h[..b]; the
    // suffix may start anywhere (an empty one scores 0), the prefix must start at h[0].
    let mut prev: Vec<i32> = (0..=h.len()).map(|b| -(b as i32)).collect();
    for word in &c {
        let mut cur = vec![0i32; h.len() + 1];
        for b in 1..=h.len() {
            let step = if *word == h[b - 1].0 {
                1
            } else if similar(word, &h[b - 1].0) {
                0
            } else {
                -1
            };
            cur[b] = (prev[b - 1] + step).max(prev[b] - 1).max(cur[b - 1] - 1);
        }
        prev = cur;
    }
    let (mut best, mut at) = (0, 0);
    for (b, &score) in prev.iter().enumerate().skip(1) {
        if score > best {
            (best, at) = (score, h[b - 1].1);
        }
    }
    at
}

/// The common prefix of `old` and `new` with fillers stepped over on both sides: how many
/// words of each it spans, up to and including its last shared word.
fn agreed_prefix(old: &[Word], new: &[Word]) -> (usize, usize) {
    let (mut i, mut j, mut agreed) = (0, 0, (0, 0));
    loop {
        while old.get(i).is_some_and(is_filler) {
            i += 1;
        }
        while new.get(j).is_some_and(is_filler) {
            j += 1;
        }
        match (old.get(i), new.get(j)) {
            (Some(a), Some(b)) if key(&a.word) == key(&b.word) => {
                i += 1;
                j += 1;
                agreed = (i, j);
            }
            _ => return agreed,
        }
    }
}

impl LocalAgreement {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty state for hypotheses whose word times are estimates (spread over the buffer):
    /// they can be seconds off, so dropping the words that start before the committed end
    /// would lose speech the buffer still holds.
    pub fn with_estimated_times() -> Self {
        Self {
            estimated_times: true,
            ..Self::default()
        }
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
        let after_cut = std::mem::take(&mut self.cut);
        let (said, repeats) = agreed_prefix(&self.in_buffer, &hypothesis);
        let skip = if self.in_buffer[said..].iter().all(is_filler) && !(after_cut && said == 0) {
            // The hypothesis starts with the committed words of the buffer: skip them by text,
            // which is exact where word times are estimates.
            Some(repeats)
        } else if let Some(skip) = self.aligned_prefix(&hypothesis) {
            // Re-worded committed text ("Hello. Hello?" → "Oh, hello."): skip what aligns
            // with it by text; word times of a re-decode are too rough to cut by.
            Some(skip)
        } else if after_cut {
            // The first decode after a cut, with estimated times: which committed words the
            // cut kept was a guess from an older decode's estimates, so the words this one
            // re-says are found by text alone (none, when its start matches nothing).
            Some(overlap(&self.committed_tail, &hypothesis))
        } else {
            None
        };
        if let Some(skip) = skip {
            if self.estimated_times {
                // Re-anchor on this decode's own estimates: the committed words of the
                // buffer are the ones it re-says, as it says them, and they end where the
                // last of them does (at the buffer's start when it re-says none).
                self.in_buffer = hypothesis[..skip].to_vec();
                self.committed_end = match skip {
                    0 => self.buffer_start,
                    k => hypothesis[k - 1].end,
                };
            }
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
        let row = edit_row(&committed, &hyp);
        let (best, dist) = row
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))?;
        (2 * dist <= n).then_some(best)
    }

    /// The next hypothesis decodes audio up to `time` (seconds from stream start). With
    /// estimated times, a word whose estimate reaches the end of its decoded audio may be cut
    /// off there ("mentioning" for "mention in", "You" for the start of "Montreal"), so it is
    /// not confirmed until a decode that heard past it agrees.
    pub fn decoded_until(&mut self, time: f64) {
        self.decoded_end = time;
    }

    /// Confirms the common prefix of `new` and the pending words; `new`'s rest becomes pending.
    fn agree(&mut self, mut new: Vec<Word>) -> Vec<Word> {
        let eligible = if self.estimated_times && self.pending_until > 0.0 {
            let limit = self.pending_until - CUT_OFF;
            self.pending.iter().take_while(|w| w.end < limit).count()
        } else {
            self.pending.len()
        };
        self.pending_until = self.decoded_end;
        let (_, agreed) = agreed_prefix(&self.pending[..eligible], &new);
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
        self.cut = self.estimated_times;
        self.buffer_start = time;
    }

    /// Commits `words`, moving their (estimated) times so that committed text never goes back
    /// in time.
    fn commit(&mut self, words: &mut [Word]) {
        for w in words.iter_mut() {
            w.start = w.start.max(self.emitted_end);
            w.end = w.end.max(w.start);
            self.emitted_end = w.end;
            self.committed_end = w.end;
        }
        self.committed_tail.extend_from_slice(words);
        self.in_buffer.extend_from_slice(words);
        let excess = self.committed_tail.len().saturating_sub(MAX_OVERLAP);
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
    fn fillers_that_come_and_go_do_not_block_agreement() {
        let mut la = LocalAgreement::new();
        la.insert(words(&[
            ("Um,", 6.0),
            ("I", 6.3),
            ("have", 6.6),
            ("a", 6.9),
        ]));
        // The re-decode leaves the filler out: "I have a" still agrees.
        let c = la.insert(words(&[
            ("I", 6.2),
            ("have", 6.5),
            ("a", 6.8),
            ("cold", 7.0),
        ]));
        assert_eq!(texts(&c), ["I", "have", "a"]);
        // And puts one back in the middle: it is confirmed with the words around it.
        let c = la.insert(words(&[
            ("I", 6.2),
            ("have", 6.5),
            ("a", 6.8),
            ("uh", 6.9),
            ("cold,", 7.0),
            ("so", 7.4),
        ]));
        assert_eq!(texts(&c), ["uh", "cold,"]);
        // After a trim, a hypothesis that drops the committed filler still skips the
        // committed words by text.
        la.buffer_starts_at(6.2);
        let c = la.insert(words(&[
            ("I", 6.2),
            ("have", 6.5),
            ("a", 6.8),
            ("cold", 7.0),
            ("so", 7.4),
        ]));
        assert_eq!(texts(&c), ["so"]);
    }

    #[test]
    fn estimated_times_find_re_said_words_by_text() {
        let mut la = LocalAgreement::with_estimated_times();
        let h = words(&[("levels", 5.0), ("are", 6.5), ("okay.", 6.9)]);
        la.insert(h.clone());
        assert_eq!(texts(&la.insert(h)), ["levels", "are", "okay."]);
        // The estimates put "are" after the cut at 6.0, but the re-decode starts after it,
        // with words estimated before the committed end: none is lost.
        la.buffer_starts_at(6.0);
        let h = words(&[
            ("Um,", 6.0),
            ("I", 6.3),
            ("have", 6.6),
            ("a", 6.9),
            ("cold", 7.2),
        ]);
        assert!(la.insert(h.clone()).is_empty());
        assert_eq!(texts(&la.insert(h)), ["Um,", "I", "have", "a", "cold"]);
        // A cut too early: the re-decode re-says committed words, partly re-worded.
        la.buffer_starts_at(7.5);
        let h = words(&[
            ("I've", 6.0),
            ("a", 6.2),
            ("cold,", 6.4),
            ("so", 6.8),
            ("this", 7.0),
        ]);
        assert!(la.insert(h.clone()).is_empty());
        assert_eq!(texts(la.pending()), ["so", "this"]);
        assert_eq!(texts(&la.insert(h)), ["so", "this"]);
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
