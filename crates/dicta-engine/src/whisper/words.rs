//! Word-level timestamps as faster-whisper computes them (`word_timestamps=True`).
//!
//! The pipeline, step by step as CTranslate2's `WhisperReplica::align` and faster-whisper's
//! `find_alignment` / `add_word_timestamps` run it:
//! 1. the cross-attention probabilities of the alignment heads over the content frames
//!    (`[A, L, F]`, see [`alignment_matrix`]) are standardised along the token axis, median
//!    filtered along time (width 7, reflected edges), averaged over heads;
//! 2. [`negative_dtw`] finds the monotonic token → frame path through the negated matrix;
//! 3. tokens are grouped into words ([`split_to_word_tokens`]) and each word takes the frames
//!    where its first and next word's first token start ([`find_alignment`]);
//! 4. long words at sentence ends are clipped and punctuation is merged into its neighbours
//!    ([`clip_and_merge`]);
//! 5. words are assigned to the window's segments, shifted to recording time, rounded to
//!    0.01 s, and the first/last words of each segment are adjusted against pauses and the
//!    segment's own timestamps ([`place_words`]).
//!
//! Everything here is pure arithmetic on plain slices; the model pass lives in `window.rs`.

use dicta_core::Result;

/// Width of the median filter applied along time.
pub const MEDIAN_FILTER_WIDTH: usize = 7;
/// Encoder frames per second (one frame = 20 ms).
pub const TOKENS_PER_SECOND: f64 = 50.0;
/// faster-whisper's default `prepend_punctuations`.
pub const DEFAULT_PREPEND_PUNCTUATIONS: &str = "\"'“¿([{-";
/// faster-whisper's default `append_punctuations`.
pub const DEFAULT_APPEND_PUNCTUATIONS: &str = "\"'.。,，!！?？:：”)]}、";
/// Python's `string.punctuation` (a word piece that is a substring of it stands alone).
const ASCII_PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
/// Marks ending a sentence (a word after one of them may not be overly long).
const SENTENCE_END_MARKS: &str = ".。!！?？";
/// Language codes written without spaces: words are split at unicode boundaries instead.
const NO_SPACE_LANGUAGES: [&str; 6] = ["zh", "ja", "th", "lo", "my", "yue"];

/// One word of a window's alignment, times in seconds from the window start.
#[derive(Debug, Clone, PartialEq)]
pub struct WordTiming {
    /// Text as decoded (leading space kept; empty once merged into a neighbour).
    pub word: String,
    /// Its tokens (empty once merged into a neighbour).
    pub tokens: Vec<u32>,
    /// Start (s, window time).
    pub start: f64,
    /// End (s, window time).
    pub end: f64,
    /// Mean probability of its tokens.
    pub probability: f32,
}

/// A window's words after [`clip_and_merge`], with the duration statistics
/// [`place_words`] needs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WindowWords {
    /// Words in order (merged punctuation leaves empty entries, as in faster-whisper).
    pub words: Vec<WordTiming>,
    /// Median non-zero word duration, at most 0.7 s (0 without words).
    pub median_duration: f64,
    /// Twice the median.
    pub max_duration: f64,
    /// Probability of each text token of the window, in order (over the text vocabulary,
    /// given the audio and the tokens before it).
    pub token_probs: Vec<f32>,
}

/// A word placed in recording time (rounded to 0.01 s like faster-whisper).
#[derive(Debug, Clone, PartialEq)]
pub struct PlacedWord {
    /// Text as decoded (leading space kept).
    pub word: String,
    /// Start (s).
    pub start: f64,
    /// End (s).
    pub end: f64,
    /// Mean token probability.
    pub probability: f32,
}

/// Timing of one segment of a window, as [`place_words`] reads and adjusts it.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentSpan {
    /// Start (s, recording time).
    pub start: f64,
    /// End (s, recording time).
    pub end: f64,
    /// Number of its text tokens (ids below `<|endoftext|>`).
    pub text_tokens: usize,
}

/// Whether words of `language` are split at unicode boundaries rather than spaces.
pub fn splits_on_unicode(language: &str) -> bool {
    NO_SPACE_LANGUAGES.contains(&language)
}

/// CTranslate2's alignment matrix: `probs` `[A, L, F]` (row-major; attention probabilities of
/// the A alignment heads for the L input tokens over the F content frames, each row summing to
/// one) → `[rows, F]` starting at token `first_row`.
///
/// Standardises every (head, frame) column along the token axis (zero mean, unit variance, no
/// epsilon), median filters every (head, token) row along time with `width`, then averages
/// the heads.
pub fn alignment_matrix(
    probs: &mut [f32],
    heads: usize,
    len: usize,
    frames: usize,
    width: usize,
    first_row: usize,
    rows: usize,
) -> Vec<f32> {
    debug_assert_eq!(probs.len(), heads * len * frames);
    let mut col = vec![0f64; frames];
    let mut sq = vec![0f64; frames];
    for a in 0..heads {
        let head = &mut probs[a * len * frames..(a + 1) * len * frames];
        col.iter_mut().for_each(|c| *c = 0.0);
        sq.iter_mut().for_each(|c| *c = 0.0);
        for row in head.chunks(frames) {
            for (c, &x) in col.iter_mut().zip(row) {
                *c += x as f64;
            }
        }
        let n = len as f64;
        col.iter_mut().for_each(|c| *c /= n);
        for row in head.chunks(frames) {
            for ((s, &x), &m) in sq.iter_mut().zip(row).zip(&col) {
                let d = x as f64 - m;
                *s += d * d;
            }
        }
        let inv: Vec<f64> = sq.iter().map(|s| 1.0 / (s / n).sqrt()).collect();
        for row in head.chunks_mut(frames) {
            for ((x, &m), &k) in row.iter_mut().zip(&col).zip(&inv) {
                *x = ((*x as f64 - m) * k) as f32;
            }
        }
    }
    let mut out = vec![0f32; rows * frames];
    let mut filtered = vec![0f32; frames];
    for a in 0..heads {
        for r in 0..rows {
            let l = first_row + r;
            let src = &probs[(a * len + l) * frames..(a * len + l + 1) * frames];
            median_filter(src, width, &mut filtered);
            for (o, &x) in out[r * frames..(r + 1) * frames].iter_mut().zip(&filtered) {
                *o += x;
            }
        }
    }
    let h = heads as f32;
    out.iter_mut().for_each(|x| *x /= h);
    out
}

/// Median of every `width`-wide window of `x` (edges reflected without repeating the edge
/// sample, as CTranslate2 and `scipy.ndimage` mode "reflect" … "mirror" do), into `out`.
/// Rows no longer than `width / 2` are copied unchanged.
pub fn median_filter(x: &[f32], width: usize, out: &mut [f32]) {
    let depth = x.len() as isize;
    let rank = (width / 2) as isize;
    if depth <= rank {
        out.copy_from_slice(x);
        return;
    }
    let mut window = vec![0f32; width];
    for j in 0..depth {
        for k in -rank..=rank {
            let mut read = (j + k).abs();
            if read >= depth {
                read = depth - (read - depth) - 2;
            }
            window[(k + rank) as usize] = x[read as usize];
        }
        let (_, m, _) = window.select_nth_unstable_by(rank as usize, |a, b| a.total_cmp(b));
        out[j as usize] = *m;
    }
}

/// Dynamic time warping through `-x` (`x` is `[n, m]`, row-major): the path of (row, column)
/// pairs from (0, 0) to (n-1, m-1) maximising the summed `x`, moving diagonally, down or right.
/// Ties prefer moving right, then down (CTranslate2's `negative_dtw`).
pub fn negative_dtw(x: &[f32], n: usize, m: usize) -> Vec<(usize, usize)> {
    let w = m + 1;
    let mut cost = vec![f32::INFINITY; (n + 1) * w];
    let mut trace = vec![-1i8; (n + 1) * w];
    cost[0] = 0.0;
    for j in 1..=m {
        for i in 1..=n {
            let c0 = cost[(i - 1) * w + j - 1];
            let c1 = cost[(i - 1) * w + j];
            let c2 = cost[i * w + j - 1];
            let (c, t) = if c0 < c1 && c0 < c2 {
                (c0, 0)
            } else if c1 < c0 && c1 < c2 {
                (c1, 1)
            } else {
                (c2, 2)
            };
            cost[i * w + j] = -x[(i - 1) * m + j - 1] + c;
            trace[i * w + j] = t;
        }
    }
    for t in trace.iter_mut().take(w) {
        *t = 2;
    }
    for i in 0..=n {
        trace[i * w] = 1;
    }
    let (mut i, mut j) = (n, m);
    let mut path = Vec::with_capacity(n + m);
    while i > 0 && j > 0 {
        path.push((i - 1, j - 1));
        match trace[i * w + j] {
            0 => {
                i -= 1;
                j -= 1;
            }
            1 => i -= 1,
            _ => j -= 1,
        }
    }
    path.reverse();
    path
}

/// faster-whisper's `split_to_word_tokens`: groups `tokens` (text tokens followed by
/// `<|endoftext|>`) into words. `decode` turns token ids into text (special tokens → "").
/// Languages without spaces split wherever the text decodes to whole characters; others also
/// join pieces that neither start with a space nor are punctuation to the previous word.
pub fn split_to_word_tokens(
    tokens: &[u32],
    eot: u32,
    on_unicode: bool,
    decode: &mut dyn FnMut(&[u32]) -> Result<String>,
) -> Result<(Vec<String>, Vec<Vec<u32>>)> {
    let (subwords, subword_tokens) = split_on_unicode(tokens, decode)?;
    if on_unicode {
        return Ok((subwords, subword_tokens));
    }
    let mut words: Vec<String> = Vec::new();
    let mut word_tokens: Vec<Vec<u32>> = Vec::new();
    for (sub, toks) in subwords.into_iter().zip(subword_tokens) {
        let special = toks[0] >= eot;
        let with_space = sub.starts_with(' ');
        let punctuation = ASCII_PUNCTUATION.contains(sub.trim());
        if special || with_space || punctuation || words.is_empty() {
            words.push(sub);
            word_tokens.push(toks);
        } else if let (Some(w), Some(t)) = (words.last_mut(), word_tokens.last_mut()) {
            w.push_str(&sub);
            t.extend(toks);
        }
    }
    Ok((words, word_tokens))
}

fn split_on_unicode(
    tokens: &[u32],
    decode: &mut dyn FnMut(&[u32]) -> Result<String>,
) -> Result<(Vec<String>, Vec<Vec<u32>>)> {
    const REPLACEMENT: char = '\u{FFFD}';
    let full: Vec<char> = decode(tokens)?.chars().collect();
    let mut words = Vec::new();
    let mut word_tokens = Vec::new();
    let mut current: Vec<u32> = Vec::new();
    let mut offset = 0;
    for &t in tokens {
        current.push(t);
        let decoded = decode(&current)?;
        let bad = decoded
            .chars()
            .position(|c| c == REPLACEMENT)
            .map(|i| i + offset);
        // A replacement character is fine when the full text has one there too.
        if bad.is_none_or(|i| i < full.len() && full[i] == REPLACEMENT) {
            offset += decoded.chars().count();
            words.push(decoded);
            word_tokens.push(std::mem::take(&mut current));
        }
    }
    Ok((words, word_tokens))
}

/// faster-whisper's `find_alignment` after the model call: the DTW `path` (token row, frame)
/// over the rows `<|notimestamps|>`, text tokens; `words` / `word_tokens` from
/// [`split_to_word_tokens`] (ending with the `<|endoftext|>` word); `token_probs` per text
/// token. Each word starts where the path first reaches its first token and ends where it
/// reaches the next word's first token; its probability is the mean of its tokens'.
pub fn find_alignment(
    words: &[String],
    word_tokens: &[Vec<u32>],
    path: &[(usize, usize)],
    token_probs: &[f32],
) -> Vec<WordTiming> {
    if word_tokens.len() <= 1 {
        return Vec::new();
    }
    let mut boundaries = Vec::with_capacity(word_tokens.len());
    boundaries.push(0usize);
    for t in &word_tokens[..word_tokens.len() - 1] {
        boundaries.push(boundaries[boundaries.len() - 1] + t.len());
    }
    let jump_times: Vec<f64> = path
        .iter()
        .enumerate()
        .filter(|&(k, p)| k == 0 || p.0 != path[k - 1].0)
        .map(|(_, p)| p.1 as f64 / TOKENS_PER_SECOND)
        .collect();
    let at = |i: usize| {
        jump_times
            .get(i)
            .or(jump_times.last())
            .copied()
            .unwrap_or(0.0)
    };
    boundaries
        .windows(2)
        .zip(words.iter().zip(word_tokens))
        .map(|(b, (word, tokens))| {
            let probs = &token_probs[b[0].min(token_probs.len())..b[1].min(token_probs.len())];
            let sum: f32 = probs.iter().sum();
            WordTiming {
                word: word.clone(),
                tokens: tokens.clone(),
                start: at(b[0]),
                end: at(b[1]),
                probability: sum / probs.len().max(1) as f32,
            }
        })
        .collect()
}

/// The per-window part of `add_word_timestamps`: the median word duration (non-zero
/// durations, capped at 0.7 s), clipping of words longer than twice that at sentence ends,
/// then [`merge_punctuations`].
pub fn clip_and_merge(mut words: Vec<WordTiming>, prepend: &str, append: &str) -> WindowWords {
    let mut durations: Vec<f64> = words
        .iter()
        .map(|w| w.end - w.start)
        .filter(|&d| d != 0.0)
        .collect();
    durations.sort_by(f64::total_cmp);
    let n = durations.len();
    let median = match n {
        0 => 0.0,
        _ if n % 2 == 1 => durations[n / 2],
        _ => (durations[n / 2 - 1] + durations[n / 2]) / 2.0,
    };
    let median = median.min(0.7);
    let max = median * 2.0;
    if n > 0 {
        for i in 1..words.len() {
            if words[i].end - words[i].start > max {
                if SENTENCE_END_MARKS.contains(words[i].word.as_str()) {
                    words[i].end = words[i].start + max;
                } else if SENTENCE_END_MARKS.contains(words[i - 1].word.as_str()) {
                    words[i].start = words[i].end - max;
                }
            }
        }
    }
    merge_punctuations(&mut words, prepend, append);
    WindowWords {
        words,
        median_duration: median,
        max_duration: max,
        token_probs: Vec::new(),
    }
}

/// faster-whisper's `merge_punctuations`: a word made of a prepended punctuation (after a
/// space) joins the following word; an appended punctuation joins the preceding word (unless
/// that ends with a space). Merged entries stay, emptied.
pub fn merge_punctuations(words: &mut [WordTiming], prepended: &str, appended: &str) {
    if words.len() >= 2 {
        let mut i = words.len() as isize - 2;
        let mut j = words.len() - 1;
        while i >= 0 {
            let iu = i as usize;
            let prev = &words[iu];
            if prev.word.starts_with(' ') && prepended.contains(prev.word.trim()) {
                let (w, t) = (
                    std::mem::take(&mut words[iu].word),
                    std::mem::take(&mut words[iu].tokens),
                );
                let f = &mut words[j];
                f.word = w + &f.word;
                f.tokens = t.into_iter().chain(f.tokens.drain(..)).collect();
            } else {
                j = iu;
            }
            i -= 1;
        }
    }
    let (mut i, mut j) = (0, 1);
    while j < words.len() {
        if !words[i].word.ends_with(' ') && appended.contains(words[j].word.as_str()) {
            let w = std::mem::take(&mut words[j].word);
            let t = std::mem::take(&mut words[j].tokens);
            words[i].word.push_str(&w);
            words[i].tokens.extend(t);
        } else {
            i = j;
        }
        j += 1;
    }
}

/// Python's `round(x, 2)` (correctly rounded from the binary value).
pub fn round2(x: f64) -> f64 {
    format!("{x:.2}").parse().unwrap_or(x)
}

/// The per-segment part of `add_word_timestamps`: hands the window's words to its segments in
/// order (each takes words until it has as many tokens as its text), shifts them by
/// `time_offset` and rounds to 0.01 s, then
/// - shortens the first word (and the second) when it follows a pause longer than four median
///   durations yet lasts longer than the maximum,
/// - prefers the segment's own start when the first word starts more than 0.5 s before it
///   (otherwise the segment starts at its first word), and likewise at the end.
///
/// `last_speech` is the end of the previous speech (updated per segment with words). Returns
/// the words of every segment; segment times are adjusted in place.
pub fn place_words(
    window: &WindowWords,
    segments: &mut [SegmentSpan],
    time_offset: f64,
    mut last_speech: f64,
) -> Vec<Vec<PlacedWord>> {
    let (median, max) = (window.median_duration, window.max_duration);
    let alignment = &window.words;
    let mut word_index = 0;
    let mut out = Vec::with_capacity(segments.len());
    for seg in segments.iter_mut() {
        let mut saved = 0;
        let mut words: Vec<PlacedWord> = Vec::new();
        while word_index < alignment.len() && saved < seg.text_tokens {
            let t = &alignment[word_index];
            if !t.word.is_empty() {
                words.push(PlacedWord {
                    word: t.word.clone(),
                    start: round2(time_offset + t.start),
                    end: round2(time_offset + t.end),
                    probability: t.probability,
                });
            }
            saved += t.tokens.len();
            word_index += 1;
        }
        if !words.is_empty() {
            let first_long = words[0].end - words[0].start > max;
            let second_long = words.len() > 1 && words[1].end - words[0].start > max * 2.0;
            if words[0].end - last_speech > median * 4.0 && (first_long || second_long) {
                if words.len() > 1 && words[1].end - words[1].start > max {
                    let boundary = (words[1].end / 2.0).max(words[1].end - max);
                    words[0].end = boundary;
                    words[1].start = boundary;
                }
                words[0].start = (words[0].end - max).max(0.0);
            }
            if seg.start < words[0].end && seg.start - 0.5 > words[0].start {
                words[0].start = (words[0].end - median).min(seg.start).max(0.0);
            } else {
                seg.start = words[0].start;
            }
            let last = words.len() - 1;
            if seg.end > words[last].start && seg.end + 0.5 < words[last].end {
                words[last].end = (words[last].start + median).max(seg.end);
            } else {
                seg.end = words[last].end;
            }
            last_speech = seg.end;
        }
        out.push(words);
    }
    out
}

/// faster-whisper's `get_end`: the end of the last word of the last segment that has words,
/// else the end of the last segment.
pub fn last_end(segments: &[SegmentSpan], words: &[Vec<PlacedWord>]) -> Option<f64> {
    words
        .iter()
        .rev()
        .find_map(|w| w.last().map(|w| w.end))
        .or_else(|| segments.last().map(|s| s.end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wt(word: &str, tokens: &[u32], start: f64, end: f64) -> WordTiming {
        WordTiming {
            word: word.into(),
            tokens: tokens.to_vec(),
            start,
            end,
            probability: 1.0,
        }
    }

    #[test]
    fn median_filter_reflects_edges() {
        let x = [5.0, 1.0, 4.0, 2.0, 3.0];
        let mut out = [0.0; 5];
        median_filter(&x, 3, &mut out);
        // Edges mirror: [1,5,1] → 1, …, [2,3,2] → 2.
        assert_eq!(out, [1.0, 4.0, 2.0, 3.0, 2.0]);
        let mut short = [0.0; 2];
        median_filter(&[9.0, 1.0], 7, &mut short);
        assert_eq!(short, [9.0, 1.0]);
    }

    #[test]
    fn dtw_follows_the_maximum_and_covers_every_row() {
        // Token 0 lives in frames 0-1, token 1 in frames 2-4, token 2 in frame 5.
        let x = [
            1.0, 1.0, 0.0, 0.0, 0.0, 0.0, //
            0.0, 0.0, 1.0, 1.0, 1.0, 0.0, //
            0.0, 0.0, 0.0, 0.0, 0.0, 1.0,
        ];
        let p = negative_dtw(&x, 3, 6);
        // (Checked against a line-by-line Python port of CTranslate2's negative_dtw.) Vertical
        // steps cost the cell again, so the path enters each token at its first strong frame.
        assert_eq!(
            p,
            vec![
                (0, 0),
                (0, 1),
                (1, 1),
                (1, 2),
                (1, 3),
                (1, 4),
                (2, 4),
                (2, 5)
            ]
        );
        let jumps: Vec<(usize, usize)> = p
            .iter()
            .enumerate()
            .filter(|&(k, q)| k == 0 || q.0 != p[k - 1].0)
            .map(|(_, q)| *q)
            .collect();
        assert_eq!(jumps, vec![(0, 0), (1, 1), (2, 4)]);
        // More tokens than frames still visits every row.
        let p = negative_dtw(&[1.0, 0.0, 0.0, 1.0, 0.5, 0.5], 3, 2);
        assert_eq!(p, vec![(0, 0), (1, 0), (1, 1), (2, 1)]);
    }

    #[test]
    fn standardised_rows_average_over_heads() {
        // Two heads, two tokens, one frame: standardising makes each column (-1, 1).
        let mut probs = vec![0.2, 0.8, 0.6, 0.4];
        let m = alignment_matrix(&mut probs, 2, 2, 1, 7, 0, 2);
        assert!(
            (m[0] - 0.0).abs() < 1e-6 && (m[1] - 0.0).abs() < 1e-6,
            "{m:?}"
        );
        let mut probs = vec![0.2, 0.8, 0.3, 0.7];
        let m = alignment_matrix(&mut probs, 2, 2, 1, 7, 1, 1);
        assert!((m[0] - 1.0).abs() < 1e-6, "{m:?}");
    }

    #[test]
    fn words_split_on_spaces_and_punctuation() {
        // Tokens map to pieces; 99 is <|endoftext|> (decodes to nothing).
        let pieces = [" Hello", ",", " wor", "ld", "!", " i", ".e", "."];
        let mut decode = |ids: &[u32]| -> Result<String> {
            Ok(ids
                .iter()
                .filter(|&&i| i < 99)
                .map(|&i| pieces[i as usize])
                .collect())
        };
        let (w, t) =
            split_to_word_tokens(&[0, 1, 2, 3, 4, 5, 6, 7, 99], 99, false, &mut decode).unwrap();
        assert_eq!(w, vec![" Hello", ",", " world", "!", " i.e", ".", ""]);
        assert_eq!(t[2], vec![2, 3]);
        assert_eq!(t[6], vec![99]);
        let (w, _) = split_to_word_tokens(&[0, 2, 3, 99], 99, true, &mut decode).unwrap();
        assert_eq!(w, vec![" Hello", " wor", "ld", ""]);
    }

    #[test]
    fn partial_utf8_tokens_stay_together() {
        // "é" split over two byte tokens: the first alone decodes to U+FFFD.
        let mut decode = |ids: &[u32]| -> Result<String> {
            let bytes: Vec<u8> = ids
                .iter()
                .flat_map(|&i| match i {
                    0 => vec![b' ', 0xC3],
                    1 => vec![0xA9],
                    _ => vec![],
                })
                .collect();
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        };
        let (w, t) = split_to_word_tokens(&[0, 1, 9], 9, true, &mut decode).unwrap();
        assert_eq!(w, vec![" é", ""]);
        assert_eq!(t[0], vec![0, 1]);
    }

    #[test]
    fn alignment_takes_jumps_at_word_starts() {
        let words: Vec<String> = [" a", " bc", ""].iter().map(|s| s.to_string()).collect();
        let toks = vec![vec![1], vec![2, 3], vec![99]];
        // Rows: <|notimestamps|>→a (frames 0-2), b (3-4), c (5), eot row (6-9).
        let path = [
            (0, 0),
            (0, 1),
            (0, 2),
            (1, 3),
            (1, 4),
            (2, 5),
            (3, 6),
            (3, 7),
        ];
        let a = find_alignment(&words, &toks, &path, &[0.5, 1.0, 0.5]);
        assert_eq!(a.len(), 2);
        assert_eq!((a[0].start, a[0].end), (0.0, 0.06));
        assert_eq!((a[1].start, a[1].end), (0.06, 0.12));
        assert!((a[1].probability - 0.75).abs() < 1e-6);
        assert!(find_alignment(&words[2..], &toks[2..], &path, &[]).is_empty());
    }

    #[test]
    fn punctuation_merges_into_neighbours() {
        let mut w = vec![
            wt(" \"", &[1], 0.0, 0.1),
            wt(" Hi", &[2], 0.1, 0.5),
            wt(",", &[3], 0.5, 0.6),
            wt(" you", &[4], 0.6, 0.9),
            wt(".\"", &[5], 0.9, 1.0),
        ];
        merge_punctuations(
            &mut w,
            DEFAULT_PREPEND_PUNCTUATIONS,
            DEFAULT_APPEND_PUNCTUATIONS,
        );
        let texts: Vec<&str> = w.iter().map(|w| w.word.as_str()).collect();
        // ".\"" is not a substring of the append set, so it stays a word of its own.
        assert_eq!(texts, vec!["", " \" Hi,", "", " you", ".\""]);
        assert_eq!(w[1].tokens, vec![1, 2, 3]);
        assert!(w[0].tokens.is_empty() && w[2].tokens.is_empty());
    }

    #[test]
    fn long_words_are_clipped_at_sentence_ends() {
        let w = vec![
            wt(" One", &[1], 0.0, 0.2),
            wt(".", &[2], 0.2, 0.3),
            wt(" Two", &[3], 0.3, 3.3),
            wt(" three", &[4], 3.3, 3.6),
        ];
        let ww = clip_and_merge(w, DEFAULT_PREPEND_PUNCTUATIONS, DEFAULT_APPEND_PUNCTUATIONS);
        // Durations 0.2, 0.1, 3.0, 0.3 → median 0.25, max 0.5.
        assert!((ww.median_duration - 0.25).abs() < 1e-12);
        assert!((ww.words[2].start - 2.8).abs() < 1e-12);
        assert_eq!(ww.words[0].word, " One.");
    }

    #[test]
    fn placement_follows_token_counts_and_adjusts_segment_edges() {
        let ww = WindowWords {
            words: vec![
                wt(" a", &[1], 0.0, 0.3),
                wt(" b", &[2, 3], 0.3, 0.6),
                wt("", &[], 0.6, 0.6),
                wt(" c", &[4], 2.0, 2.4),
            ],
            median_duration: 0.3,
            max_duration: 0.6,
            token_probs: Vec::new(),
        };
        let mut segs = vec![
            SegmentSpan {
                start: 10.0,
                end: 10.62,
                text_tokens: 3,
            },
            SegmentSpan {
                start: 11.0,
                end: 12.0,
                text_tokens: 1,
            },
        ];
        let words = place_words(&ww, &mut segs, 10.0, 9.9);
        assert_eq!(words[0].len(), 2);
        assert_eq!((words[0][1].start, words[0][1].end), (10.3, 10.6));
        // The segment takes its words' edges.
        assert_eq!((segs[0].start, segs[0].end), (10.0, 10.6));
        // " c" (12.0-12.4): its segment keeps starting at its first word.
        assert_eq!(words[1].len(), 1);
        assert_eq!((segs[1].start, segs[1].end), (12.0, 12.4));
        assert_eq!(last_end(&segs, &words), Some(12.4));
        assert_eq!(round2(0.1 + 0.2), 0.3);
    }
}
