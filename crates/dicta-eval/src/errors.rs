//! Word and character error counts with jiwer-compatible alignment.
//!
//! jiwer 4 counts substitutions, deletions and insertions from RapidFuzz's Levenshtein opcodes.
//! The total distance is unique, but its split into S/D/I is not (two substitutions cost the
//! same as a deletion plus an insertion around a hit), so matching jiwer per pair means
//! reproducing RapidFuzz's choice: strip the common prefix and suffix, split huge problems
//! with Hirschberg's method at the same points, and backtrack each block with the same
//! preference order (delete, then insert, then diagonal). RapidFuzz reads those decisions from
//! bit-parallel difference vectors; here they come from the equivalent DP differences.

/// Edit operation counts between a reference and a hypothesis.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorCounts {
    /// Reference tokens replaced by a different hypothesis token.
    pub substitutions: usize,
    /// Reference tokens missing from the hypothesis.
    pub deletions: usize,
    /// Hypothesis tokens not in the reference.
    pub insertions: usize,
    /// Reference tokens matched exactly.
    pub hits: usize,
    /// Number of reference tokens (`hits + substitutions + deletions`).
    pub ref_len: usize,
}

impl ErrorCounts {
    /// `substitutions + deletions + insertions`.
    pub fn errors(&self) -> usize {
        self.substitutions + self.deletions + self.insertions
    }

    /// Error rate: errors / reference tokens. With an empty reference this follows jiwer and
    /// returns the number of insertions (0.0 when the hypothesis is empty too).
    pub fn rate(&self) -> f64 {
        if self.ref_len == 0 {
            self.insertions as f64
        } else {
            self.errors() as f64 / self.ref_len as f64
        }
    }

    /// Adds another pair's counts (corpus totals are sums of per-pair counts).
    pub fn add(&mut self, other: &ErrorCounts) {
        self.substitutions += other.substitutions;
        self.deletions += other.deletions;
        self.insertions += other.insertions;
        self.hits += other.hits;
        self.ref_len += other.ref_len;
    }
}

/// Word-level counts; words are whitespace-separated (jiwer's default transform splits on
/// single spaces after collapsing runs of whitespace, which is the same for normalized text).
pub fn word_errors(reference: &str, hypothesis: &str) -> ErrorCounts {
    let r: Vec<&str> = reference.split_whitespace().collect();
    let h: Vec<&str> = hypothesis.split_whitespace().collect();
    align_counts(&r, &h)
}

/// Character-level counts like jiwer's `cer`: both strings are stripped of surrounding
/// whitespace, then every Unicode scalar value counts, inner spaces included.
pub fn char_errors(reference: &str, hypothesis: &str) -> ErrorCounts {
    let r: Vec<char> = crate::pyre::py_strip(reference).chars().collect();
    let h: Vec<char> = crate::pyre::py_strip(hypothesis).chars().collect();
    align_counts(&r, &h)
}

/// Corpus WER over `(reference, hypothesis)` pairs: total errors / total reference words.
pub fn corpus_wer(pairs: &[(String, String)]) -> f64 {
    corpus_counts(pairs, word_errors).rate()
}

/// Corpus CER over `(reference, hypothesis)` pairs: total errors / total reference characters.
pub fn corpus_cer(pairs: &[(String, String)]) -> f64 {
    corpus_counts(pairs, char_errors).rate()
}

/// Sums per-pair counts computed by `f` (e.g. [`word_errors`] or [`char_errors`]).
pub fn corpus_counts(pairs: &[(String, String)], f: fn(&str, &str) -> ErrorCounts) -> ErrorCounts {
    let mut total = ErrorCounts::default();
    for (r, h) in pairs {
        total.add(&f(r, h));
    }
    total
}

/// Counts for turning `s1` (reference) into `s2` (hypothesis), with RapidFuzz's alignment.
pub fn align_counts<T: PartialEq>(s1: &[T], s2: &[T]) -> ErrorCounts {
    let mut ops = Ops::default();
    let max = s1.len().max(s2.len());
    align_hirschberg(s1, s2, max, &mut ops);
    ErrorCounts {
        substitutions: ops.sub,
        deletions: ops.del,
        insertions: ops.ins,
        hits: s1.len() - ops.sub - ops.del,
        ref_len: s1.len(),
    }
}

#[derive(Default)]
struct Ops {
    sub: usize,
    del: usize,
    ins: usize,
}

fn strip_common_affix<'a, T: PartialEq>(mut a: &'a [T], mut b: &'a [T]) -> (&'a [T], &'a [T]) {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    a = &a[prefix..];
    b = &b[prefix..];
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    (&a[..a.len() - suffix], &b[..b.len() - suffix])
}

/// RapidFuzz's `levenshtein_align_hirschberg`: the split thresholds are copied so that ties
/// are broken inside the same sub-problems.
fn align_hirschberg<T: PartialEq>(s1: &[T], s2: &[T], max: usize, ops: &mut Ops) {
    let (s1, s2) = strip_common_affix(s1, s2);
    let max = max.min(s1.len().max(s2.len()));
    let full_band = s1.len().min(2 * max + 1);
    let matrix_size = 2 * full_band * s2.len() / 8;
    if matrix_size < 1024 * 1024 || s1.len() < 65 || s2.len() < 10 {
        align_block(s1, s2, ops);
    } else {
        let (s1_mid, s2_mid, left, right) = hirschberg_split(s1, s2);
        align_hirschberg(&s1[..s1_mid], &s2[..s2_mid], left, ops);
        align_hirschberg(&s1[s1_mid..], &s2[s2_mid..], right, ops);
    }
}

/// Splits at `s2_mid = len2 / 2` and the first `s1_mid` with minimal total distance
/// (RapidFuzz's `find_hirschberg_pos`). Returns (s1_mid, s2_mid, left cost, right cost).
fn hirschberg_split<T: PartialEq>(s1: &[T], s2: &[T]) -> (usize, usize, usize, usize) {
    let s2_mid = s2.len() / 2;
    let left = last_row(s1, &s2[..s2_mid]);
    let r1: Vec<&T> = s1.iter().rev().collect();
    let r2: Vec<&T> = s2[s2_mid..].iter().rev().collect();
    let right = last_row(&r1, &r2);
    let n = s1.len();
    let mut best = (usize::MAX, 0, 0, 0);
    for i in 0..=n {
        let total = left[i] + right[n - i];
        if total < best.0 {
            best = (total, i, left[i], right[n - i]);
        }
    }
    (best.1, s2_mid, best.2, best.3)
}

/// Last DP row: `row[i]` = distance(`s1[..i]`, `s2`).
fn last_row<T: PartialEq>(s1: &[T], s2: &[T]) -> Vec<usize> {
    let mut row: Vec<usize> = (0..=s1.len()).collect();
    for (j, c2) in s2.iter().enumerate() {
        let mut diag = row[0];
        row[0] = j + 1;
        for i in 1..=s1.len() {
            let up = row[i];
            let sub = diag + usize::from(s1[i - 1] != *c2);
            row[i] = sub.min(up + 1).min(row[i - 1] + 1);
            diag = up;
        }
    }
    row
}

/// Full-matrix alignment of one block with RapidFuzz's `recover_alignment` preferences.
///
/// Column `c` counts consumed `s1` items, row `r` consumed `s2` items. Only the horizontal
/// differences `D[r][c] - D[r][c-1]` are needed (+1 = "VP", -1 = "VN"), stored as two bits.
fn align_block<T: PartialEq>(s1: &[T], s2: &[T], ops: &mut Ops) {
    let (n, m) = (s1.len(), s2.len());
    if n == 0 || m == 0 {
        ops.del += n;
        ops.ins += m;
        return;
    }
    let mut vp = BitGrid::new(m, n);
    let mut vn = BitGrid::new(m, n);
    let mut row: Vec<usize> = (0..=n).collect();
    for r in 1..=m {
        let mut diag = row[0];
        row[0] = r;
        for c in 1..=n {
            let up = row[c];
            let sub = diag + usize::from(s1[c - 1] != s2[r - 1]);
            row[c] = sub.min(up + 1).min(row[c - 1] + 1);
            diag = up;
            if row[c] > row[c - 1] {
                vp.set(r - 1, c - 1);
            } else if row[c] < row[c - 1] {
                vn.set(r - 1, c - 1);
            }
        }
    }
    let (mut r, mut c) = (m, n);
    while r > 0 && c > 0 {
        if vp.get(r - 1, c - 1) {
            ops.del += 1;
            c -= 1;
        } else {
            r -= 1;
            if r > 0 && vn.get(r - 1, c - 1) {
                ops.ins += 1;
            } else {
                c -= 1;
                if s1[c] != s2[r] {
                    ops.sub += 1;
                }
            }
        }
    }
    ops.del += c;
    ops.ins += r;
}

/// Row-major bit matrix.
struct BitGrid {
    words_per_row: usize,
    bits: Vec<u64>,
}

impl BitGrid {
    fn new(rows: usize, cols: usize) -> Self {
        let words_per_row = cols.div_ceil(64);
        Self {
            words_per_row,
            bits: vec![0; rows * words_per_row],
        }
    }
    fn set(&mut self, r: usize, c: usize) {
        self.bits[r * self.words_per_row + c / 64] |= 1 << (c % 64);
    }
    fn get(&self, r: usize, c: usize) -> bool {
        self.bits[r * self.words_per_row + c / 64] >> (c % 64) & 1 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_resolve_like_rapidfuzz() {
        // jiwer: "a b" -> "b c" is two substitutions, not delete + hit + insert.
        let e = word_errors("a b", "b c");
        assert_eq!(
            (e.substitutions, e.deletions, e.insertions, e.hits),
            (2, 0, 0, 0)
        );
    }

    #[test]
    fn empty_sides() {
        let e = word_errors("", "x y");
        assert_eq!((e.insertions, e.ref_len), (2, 0));
        assert_eq!(e.rate(), 2.0);
        let e = word_errors("x y", "");
        assert_eq!((e.deletions, e.rate()), (2, 1.0));
        assert_eq!(word_errors("", "").rate(), 0.0);
    }

    #[test]
    fn counts_are_consistent() {
        let e = char_errors(" kitten ", "sitting");
        assert_eq!(e.errors(), 3);
        assert_eq!(e.hits + e.substitutions + e.deletions, e.ref_len);
    }
}
