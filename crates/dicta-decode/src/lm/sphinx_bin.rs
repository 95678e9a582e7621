//! Reader for CMU Sphinx's binary trie LM ("Trie Language Model", `*.lm.bin`, written by
//! pocketsphinx's `ngram_model_trie_write_bin`). Layout, all little-endian:
//!
//! ```text
//! "Trie Language Model" | order: u8 | counts: u32 × order | i32 (unused)
//! quantiser bins, f32 × 65536 each: for orders 2..N-1 (prob bins, back-off bins), then order N prob bins
//! unigrams: (counts[0] + 1) × {prob: f32, backoff: f32, next: u32}   (the extra one ends the last range)
//! bit-packed middle orders, then the highest order; entry = word | quantised (back-off:16, prob:16) | next
//! word strings: i32 byte count, then NUL-terminated words in id order
//! ```
//!
//! Scores are natural-log-like "log floats" in base 1.0001 (the `logmath` base the file was
//! written with); they are converted to log10. Children of an entry are the range
//! `[next(entry), next(entry + 1))` of the order above; the trie is reversed (children add an
//! older word), so n-grams are re-keyed by their prefix and sorted into [`NgramTable`]s.

use dicta_core::{Error, ErrorKind, Result};
use rustc_hash::FxHashMap;

use super::arpa::finish_table;
use super::{NgramLm, NgramTable, MAX_ORDER};

pub(crate) const MAGIC: &[u8; 19] = b"Trie Language Model";
const BINS: usize = 1 << 16;
/// `logmath` base used by Sphinx tools when writing LMs.
const LOG_BASE: f64 = 1.0001;

fn corrupt(msg: impl Into<String>) -> Error {
    Error::new(
        ErrorKind::CorruptInput,
        format!("Sphinx binary LM: {}", msg.into()),
    )
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(corrupt(format!(
                "file ends at byte {} while reading {what} ({n} bytes needed at {})",
                self.bytes.len(),
                self.pos
            )));
        };
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn f32s(&mut self, n: usize, what: &str) -> Result<Vec<f32>> {
        let b = self.take(n * 4, what)?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

fn required_bits(max: u32) -> u32 {
    32 - max.leading_zeros()
}

/// One bit-packed order: `total_bits` per entry, fields at fixed bit offsets.
struct Packed<'a> {
    mem: &'a [u8],
    word_bits: u32,
    total_bits: u32,
    /// Bits of the `next` pointer (0 for the highest order).
    next_bits: u32,
    quant_bits: u32,
}

impl Packed<'_> {
    fn read(&self, bit: u64, bits: u32) -> Result<u32> {
        let byte = (bit >> 3) as usize;
        let b = self
            .mem
            .get(byte..byte + 4)
            .ok_or_else(|| corrupt("bit-packed n-gram data is truncated"))?;
        let v = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) >> (bit & 7);
        Ok(if bits >= 32 {
            v
        } else {
            v & ((1u32 << bits) - 1)
        })
    }

    fn word(&self, entry: u32) -> Result<u32> {
        self.read(
            u64::from(entry) * u64::from(self.total_bits),
            self.word_bits,
        )
    }

    /// (back-off code, prob code) of a middle entry, or (0, prob code) for the highest order.
    fn codes(&self, entry: u32) -> Result<(u32, u32)> {
        let at = u64::from(entry) * u64::from(self.total_bits) + u64::from(self.word_bits);
        if self.next_bits == 0 {
            Ok((0, self.read(at, 16)?))
        } else {
            Ok((self.read(at, 16)?, self.read(at + 16, 16)?))
        }
    }

    fn next(&self, entry: u32) -> Result<u32> {
        let at = u64::from(entry) * u64::from(self.total_bits)
            + u64::from(self.word_bits + self.quant_bits);
        self.read(at, self.next_bits)
    }
}

/// Parses a Sphinx binary trie LM held in memory.
pub fn parse_sphinx_bin(bytes: &[u8]) -> Result<NgramLm> {
    let mut c = Cursor { bytes, pos: 0 };
    if c.take(MAGIC.len(), "the header")? != MAGIC {
        return Err(corrupt("missing the \"Trie Language Model\" header"));
    }
    let order = usize::from(c.take(1, "the order")?[0]);
    if !(1..=MAX_ORDER).contains(&order) {
        return Err(corrupt(format!("order {order} is outside 1..={MAX_ORDER}")));
    }
    let counts: Vec<u32> = (0..order)
        .map(|_| c.u32("the n-gram counts"))
        .collect::<Result<_>>()?;
    // Every n-gram takes at least one bit of the file: a count past that is damage, refused
    // before anything is sized by it (an allocation failure would abort the process).
    let bits = (bytes.len() as u64).saturating_mul(8);
    if let Some(n) = counts.iter().find(|&&n| u64::from(n) > bits) {
        return Err(corrupt(format!(
            "the header announces {n} n-grams, more than a {}-byte file can hold",
            bytes.len()
        )));
    }
    let n1 = counts[0] as usize;
    let to_log10 = LOG_BASE.log10();
    let conv = |v: f32| (f64::from(v) * to_log10) as f32;

    // quantiser bins: (prob, back-off) per middle order, then prob for the highest
    let mut bins: Vec<(Vec<f32>, Vec<f32>)> = Vec::new();
    if order > 1 {
        c.u32("the quantiser type")?;
        for _ in 0..order - 2 {
            let p = c.f32s(BINS, "probability bins")?;
            let b = c.f32s(BINS, "back-off bins")?;
            bins.push((p, b));
        }
        bins.push((c.f32s(BINS, "probability bins")?, Vec::new()));
    }
    let mut uni_prob = Vec::with_capacity(n1 + 1);
    let mut uni_backoff = Vec::with_capacity(n1 + 1);
    let mut uni_next = Vec::with_capacity(n1 + 1);
    let raw = c.take((n1 + 1) * 12, "the unigrams")?;
    for u in raw.chunks_exact(12) {
        uni_prob.push(conv(f32::from_le_bytes([u[0], u[1], u[2], u[3]])));
        uni_backoff.push(conv(f32::from_le_bytes([u[4], u[5], u[6], u[7]])));
        uni_next.push(u32::from_le_bytes([u[8], u[9], u[10], u[11]]));
    }
    uni_prob.truncate(n1);
    uni_backoff.truncate(n1);

    // bit-packed orders 2..=N
    let word_bits = required_bits(counts[0]);
    let mut packed: Vec<Packed> = Vec::new();
    for k in 1..order {
        let highest = k == order - 1;
        let (quant_bits, next_bits) = if highest {
            (16, 0)
        } else {
            (32, required_bits(counts[k + 1]))
        };
        let total_bits = word_bits + quant_bits + next_bits;
        let size = ((1 + counts[k] as usize) * total_bits as usize).div_ceil(8) + 8;
        let mem = c.take(size, "bit-packed n-grams")?;
        packed.push(Packed {
            mem,
            word_bits,
            total_bits,
            next_bits,
            quant_bits,
        });
    }
    let nbytes = c.u32("the word-string size")? as usize;
    let strings = c.take(nbytes, "the word strings")?;
    let mut words: Vec<Box<str>> = Vec::with_capacity(n1 + 1);
    let mut index: FxHashMap<Box<str>, u32> = FxHashMap::default();
    for w in strings.split(|&b| b == 0).take(n1) {
        let w = std::str::from_utf8(w).map_err(|_| corrupt("a word is not UTF-8"))?;
        index.insert(w.into(), words.len() as u32);
        words.push(w.into());
    }
    if words.len() != n1 {
        return Err(corrupt(format!(
            "{} word strings for {n1} unigrams",
            words.len()
        )));
    }

    // The trie is reversed (as KenLM's): below unigram `w` are the bigrams "x w", below the
    // bigram "x w" the trigrams "y x w", and so on. Walk it order by order, remembering each
    // entry's parent and new (older) word, and key every n-gram by its prefix's index.
    let mut tables: Vec<NgramTable> = Vec::with_capacity(order.saturating_sub(1));
    // per level: (parent entry in the level below, the entry's own word); level 1 = unigrams
    let mut levels: Vec<Vec<(u32, u32)>> = vec![(0..n1 as u32).map(|w| (u32::MAX, w)).collect()];
    let mut ranges: Vec<(u32, u32)> = (0..n1).map(|w| (uni_next[w], uni_next[w + 1])).collect();
    let mut seq = [0u32; MAX_ORDER];
    for (k, pk) in packed.iter().enumerate() {
        let n = k + 2;
        let (prob_bins, bo_bins) = &bins[k];
        let has_backoff = pk.next_bits > 0;
        let mut t = NgramTable::default();
        let mut next_ranges = Vec::new();
        let mut entries = Vec::new();
        for (parent, &(begin, end)) in ranges.iter().enumerate() {
            if begin > end || end > counts[k + 1] {
                return Err(corrupt(format!(
                    "child range {begin}..{end} of a {}-gram is outside the {} {n}-grams",
                    n - 1,
                    counts[k + 1],
                )));
            }
            // the parent's words, oldest first: its own word, then up towards the unigram
            let mut at = (k, parent as u32);
            for slot in seq.iter_mut().take(n - 1) {
                let (up, w) = levels[at.0][at.1 as usize];
                *slot = w;
                at = (at.0.wrapping_sub(1), up);
            }
            for e in begin..end {
                let w = pk.word(e)?;
                if w as usize >= n1 {
                    return Err(corrupt(format!("word id {w} is not a unigram")));
                }
                // n-gram = w, seq[0..n-1]; its prefix is w, seq[0..n-2]; its last word seq[n-2]
                let mut prefix = w;
                for (j, &pw) in seq.iter().enumerate().take(n - 2) {
                    prefix = tables[j].find(prefix, pw).ok_or_else(|| {
                        corrupt(format!(
                            "a {n}-gram's context is not among the {}-grams",
                            j + 2
                        ))
                    })?;
                }
                let (bo, p) = pk.codes(e)?;
                t.keys.push(u64::from(prefix) << 32 | u64::from(seq[n - 2]));
                t.probs.push(conv(prob_bins[p as usize]));
                if has_backoff {
                    t.backoffs.push(conv(bo_bins[bo as usize]));
                    next_ranges.push((pk.next(e)?, pk.next(e + 1)?));
                    entries.push((parent as u32, w));
                }
            }
        }
        tables.push(finish_table(t, n)?);
        levels.push(entries);
        ranges = next_ranges;
    }
    tracing::debug!(?counts, "read Sphinx binary LM");
    NgramLm::from_parts(order, words, index, uni_prob, uni_backoff, tables)
}
