//! Drafts from reference token sequences ("prompt lookup decoding"): a streaming session
//! re-decodes a buffer that grew by a second since its last decode, and the new hypothesis
//! mostly repeats the last one. Each round drafts the tokens that followed, in the row's
//! reference, the latest n-gram of the row's own tokens; the main model verifies them in one
//! pass ([`super::speculative::speculative_greedy`]), so the result is plain greedy decoding's,
//! token for token, whatever the reference holds.

use dicta_core::Result;

use super::speculative::{Drafter, SpecCounters};

/// Tokens drafted per round by default: a streaming hypothesis is mostly the last one again,
/// and one verification pass over many positions costs about as much as a few one-token steps.
pub const LOOKUP_DRAFT_TOKENS: usize = 24;

/// Tokens a row drafts past what it last accepted, after a draft that was not accepted whole.
const MIN_DRAFT: usize = 4;

/// Longest n-gram of a row's own tokens looked up in its reference.
const MAX_NGRAM: usize = 3;

/// A [`Drafter`] over one reference sequence per row.
pub(crate) struct LookupDrafter<'a> {
    /// Per live row: its reference, ending with EOT (so that a draft may end the search).
    refs: Vec<Vec<u32>>,
    /// Per live row: where in its reference the next token is expected.
    cursors: Vec<usize>,
    /// Per live row: where its last draft started in its reference, and its length.
    starts: Vec<usize>,
    lens: Vec<usize>,
    /// Per live row: the length of its next draft. A verification pass costs about one
    /// decoder step per few positions (the vocabulary projection of every position), so a row
    /// whose drafts keep failing drafts less: twice the length after a draft accepted whole,
    /// a few past what was accepted otherwise.
    want: Vec<usize>,
    max_draft: usize,
    /// Where drafted and accepted tokens are counted.
    stats: &'a SpecCounters,
}

impl<'a> LookupDrafter<'a> {
    /// `refs[r]`: the reference of row `r` (its EOT is appended here); `max_draft` ≥ 1.
    pub fn new(refs: Vec<Vec<u32>>, eot: u32, max_draft: usize, stats: &'a SpecCounters) -> Self {
        let rows = refs.len();
        Self {
            refs: refs
                .into_iter()
                .map(|mut r| {
                    r.push(eot);
                    r
                })
                .collect(),
            cursors: vec![0; rows],
            starts: vec![0; rows],
            lens: vec![0; rows],
            want: vec![max_draft.max(1); rows],
            max_draft: max_draft.max(1),
            stats,
        }
    }
}

/// Where in `reference` the token after `seq` is expected: after the longest of `seq`'s last
/// 1…[`MAX_NGRAM`] tokens found in `reference`, the occurrence closest to `cursor` (at or past
/// it preferred, as a hypothesis moves forward through its reference).
fn continuation(reference: &[u32], seq: &[u32], cursor: usize) -> Option<usize> {
    for n in (1..=MAX_NGRAM.min(seq.len())).rev() {
        let tail = &seq[seq.len() - n..];
        let best = reference
            .windows(n)
            .enumerate()
            .filter(|(_, w)| *w == tail)
            .map(|(p, _)| p + n)
            .min_by_key(|&next| {
                if next >= cursor {
                    (0, next - cursor)
                } else {
                    (1, cursor - next)
                }
            });
        if best.is_some() {
            return best;
        }
    }
    None
}

impl Drafter for LookupDrafter<'_> {
    fn max_draft(&self) -> usize {
        self.max_draft
    }

    fn draft(&mut self, seqs: &[&[u32]], budgets: &[usize]) -> Result<Vec<Vec<u32>>> {
        Ok(seqs
            .iter()
            .enumerate()
            .map(|(i, seq)| {
                let reference = &self.refs[i];
                let Some(at) = continuation(reference, seq, self.cursors[i]) else {
                    self.starts[i] = self.cursors[i];
                    self.lens[i] = 0;
                    return Vec::new();
                };
                self.starts[i] = at;
                let end = (at + budgets[i].min(self.want[i])).min(reference.len());
                self.lens[i] = end - at;
                reference[at..end].to_vec()
            })
            .collect())
    }

    fn advance(&mut self, i: usize, accepted: usize, own: Option<u32>) {
        // Past the accepted drafts and the model's own token (which the next lookup checks).
        self.cursors[i] = self.starts[i] + accepted + usize::from(own.is_some());
        if self.lens[i] > 0 {
            self.want[i] = if accepted == self.lens[i] {
                (2 * self.want[i]).min(self.max_draft)
            } else {
                (accepted + MIN_DRAFT).min(self.max_draft)
            };
        }
    }

    fn keep_rows(&mut self, keep: &[u32]) -> Result<()> {
        let refs = std::mem::take(&mut self.refs);
        self.refs = keep.iter().map(|&i| refs[i as usize].clone()).collect();
        self.cursors = keep.iter().map(|&i| self.cursors[i as usize]).collect();
        self.starts = keep.iter().map(|&i| self.starts[i as usize]).collect();
        self.lens = keep.iter().map(|&i| self.lens[i as usize]).collect();
        self.want = keep.iter().map(|&i| self.want[i as usize]).collect();
        Ok(())
    }

    fn record(&self, drafted: usize, accepted: usize) {
        self.stats.add(drafted, accepted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continues_after_the_longest_matching_ngram_nearest_the_cursor() {
        let r = [7, 1, 2, 3, 9, 1, 2, 4, 5];
        // "1 2" occurs twice; the cursor picks the later one once the search has moved on.
        assert_eq!(continuation(&r, &[1, 2], 0), Some(3));
        assert_eq!(continuation(&r, &[1, 2], 6), Some(7));
        // The trigram "9 1 2" decides over the cursor.
        assert_eq!(continuation(&r, &[9, 1, 2], 0), Some(7));
        // An unseen last token: nothing to draft.
        assert_eq!(continuation(&r, &[1, 8], 0), None);
        assert_eq!(continuation(&r, &[], 0), None);
    }

    #[test]
    fn drafts_respect_budgets_and_end_with_eot() {
        let stats = SpecCounters::default();
        let mut d = LookupDrafter::new(vec![vec![5, 6, 7, 8], vec![1, 2]], 99, 3, &stats);
        let out = d.draft(&[&[5], &[1]], &[10, 10]).unwrap();
        assert_eq!(out, vec![vec![6, 7, 8], vec![2, 99]]);
        let out = d.draft(&[&[5], &[1]], &[1, 0]).unwrap();
        assert_eq!(out, vec![vec![6], vec![]]);
        // Row 0 accepted one draft and chose its own token: the cursor moves past both; the
        // draft was accepted whole, so the next may be longer (up to the maximum).
        d.advance(0, 1, Some(7));
        assert_eq!(d.cursors[0], 3);
        assert_eq!(d.want[0], 3);
        d.draft(&[&[5, 6, 7], &[1]], &[10, 10]).unwrap();
        d.advance(0, 0, Some(9));
        assert_eq!(d.want[0], MIN_DRAFT.min(3));
        d.keep_rows(&[1]).unwrap();
        assert_eq!(d.refs, vec![vec![1, 2, 99]]);
    }
}
