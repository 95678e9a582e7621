//! Long-form planning and merging for the batched mode: fixed 30 s windows with overlap,
//! and the merge of a recording's chain of decoded windows.
//!
//! Merge: each segment's words get times (aligned word times when the window has them, else
//! spread over the segment by character position). Between consecutive windows the word
//! lists are aligned around the overlap, pairing only equal words whose times agree within
//! `MATCH_TOLERANCE` (2 s) (so two repetitions of a phrase a few seconds apart are never
//! paired); the transcript passes from the earlier window to the later one between two
//! consecutive agreeing words, the pair nearest to where the later window has left its
//! unreliable first seconds and the earlier window still has complete segments. Without
//! such a pair the cut is by time at that point, and never after the earlier window's last
//! complete segment, so nothing the earlier window did not say is dropped; the caller then
//! decodes a repair window from that timestamp ([`repair_start`]) and marks it as continuing
//! the earlier window, which makes that hand-over exact, as in the sequential seek loop.

use super::segments::{FRAMES_PER_SECOND, WINDOW_FRAMES};

/// One fixed window of the batched mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedWindow {
    /// First mel frame.
    pub start: usize,
    /// Frames of content (<= 3000).
    pub len: usize,
}

/// Cuts `content_frames` mel frames into 30 s windows whose starts are `30 - overlap` s apart;
/// the last window ends at the content end. A recording of at most 30 s is one window.
pub fn plan_windows(content_frames: usize, overlap_seconds: f32) -> Vec<PlannedWindow> {
    if content_frames <= WINDOW_FRAMES {
        return vec![PlannedWindow {
            start: 0,
            len: content_frames,
        }];
    }
    let overlap = ((overlap_seconds.max(0.0) * FRAMES_PER_SECOND as f32).round() as usize)
        .min(WINDOW_FRAMES / 2);
    let stride = WINDOW_FRAMES - overlap;
    let mut out = Vec::new();
    let mut start = 0;
    loop {
        let len = WINDOW_FRAMES.min(content_frames - start);
        out.push(PlannedWindow { start, len });
        if start + len >= content_frames {
            break;
        }
        start += stride;
    }
    out
}

/// A decoded segment of one window, times in seconds from the recording start.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowSegment {
    /// Start (s).
    pub start: f64,
    /// End (s).
    pub end: f64,
    /// Text as decoded (leading space kept).
    pub text: String,
    /// Tokens of the segment.
    pub tokens: Vec<u32>,
    /// Word timings (recording time) when word timestamps are on, else empty.
    pub words: Vec<dicta_core::Word>,
}

/// One decoded window as the merge sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowText {
    /// Window start (s from the recording start).
    pub start: f64,
    /// Window end (s).
    pub end: f64,
    /// Its segments in order; the last one may be the unfinished text after the last
    /// timestamp pair (it then ends at the window end).
    pub segments: Vec<WindowSegment>,
    /// The window was decoded from the previous window's last complete timestamp (a repair
    /// window): the hand-over is exact at `start`, as in the sequential seek loop.
    pub continues_previous: bool,
}

/// A merged segment: a whole or partial segment of one window.
#[derive(Debug, Clone, PartialEq)]
pub struct MergedSegment {
    /// Index of the window it came from.
    pub window: usize,
    /// Start (s).
    pub start: f64,
    /// End (s).
    pub end: f64,
    /// Text (leading space kept).
    pub text: String,
    /// Original tokens when the segment is whole; `None` when it was cut (re-tokenise the text).
    pub tokens: Option<Vec<u32>>,
}

/// Seconds after a window's start that may hold a sentence cut by the window edge (Whisper
/// skips or garbles it, yet stamps its first segment near the start).
const HEAD_UNRELIABLE: f64 = 2.0;
/// Most seconds between the estimated times of one word in two windows. Word times are
/// spread over their segment by characters, so they are rough; a repetition of a phrase a
/// few seconds later lies outside this and cannot be paired with the first one.
const MATCH_TOLERANCE: f64 = 2.0;
/// The hand-over aims this far past the point where the later window becomes reliable.
const HANDOVER_AIM: f64 = 1.5;

#[derive(Debug, Clone)]
struct WordItem {
    segment: usize,
    /// Text with its leading whitespace.
    text: String,
    norm: String,
    time: f64,
}

/// A window's words and where its complete segments end.
struct Prepared {
    start: f64,
    end: f64,
    words: Vec<WordItem>,
    /// End of the last segment closed by a timestamp (the window start when none).
    complete_end: f64,
    /// Words before the unfinished tail.
    complete_words: usize,
}

impl Prepared {
    fn new(w: &WindowText) -> Self {
        let words: Vec<WordItem> = w
            .segments
            .iter()
            .enumerate()
            .flat_map(|(si, s)| words_of(si, s))
            .collect();
        // The unfinished tail is stamped to the window end; a segment closed exactly at the
        // window end is treated the same way (its last word may be cut).
        let tail = w
            .segments
            .last()
            .filter(|s| s.end >= w.end - 0.01)
            .map(|_| w.segments.len() - 1);
        let complete_end = match tail {
            Some(t) => w.segments[t].start,
            None => w.segments.last().map_or(w.start, |s| s.end),
        };
        let complete_words = match tail {
            Some(t) => words
                .iter()
                .position(|x| x.segment == t)
                .unwrap_or(words.len()),
            None => words.len(),
        };
        Self {
            start: w.start,
            end: w.end,
            words,
            complete_end: complete_end.max(w.start),
            complete_words,
        }
    }
}

fn normalise(w: &str) -> String {
    w.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(|c| c.to_lowercase())
        .collect()
}

/// Splits a segment into words with times spread by character offset (or the segment's
/// aligned word times when it has one per word).
fn words_of(segment: usize, s: &WindowSegment) -> Vec<WordItem> {
    let total = s.text.chars().count().max(1) as f64;
    let mut out = Vec::new();
    let mut current = String::new();
    let mut begin_char = 0usize;
    let mut pos = 0usize;
    let push = |out: &mut Vec<WordItem>, w: &str, begin: usize, end: usize| {
        if w.trim().is_empty() {
            return;
        }
        let mid = (begin + end) as f64 / 2.0 / total;
        out.push(WordItem {
            segment,
            text: w.to_string(),
            norm: normalise(w),
            time: s.start + (s.end - s.start) * mid,
        });
    };
    for c in s.text.chars() {
        if c.is_whitespace() && !current.trim().is_empty() {
            push(&mut out, &current, begin_char, pos);
            current.clear();
            begin_char = pos;
        }
        current.push(c);
        pos += 1;
    }
    push(&mut out, &current, begin_char, pos);
    // Aligned word timings, when the window has them, beat the spread by characters.
    if s.words.len() == out.len() {
        for (item, w) in out.iter_mut().zip(&s.words) {
            item.time = (w.start + w.end) / 2.0;
        }
    }
    out
}

/// Most matched word pairs in order (a longest common subsequence) where a pair must have the
/// same normalised text and estimated times at most `MATCH_TOLERANCE` (2 s) apart.
fn align(a: &[WordItem], b: &[WordItem]) -> Vec<(usize, usize)> {
    let m = b.len() + 1;
    let mut d = vec![0u32; (a.len() + 1) * m];
    let ok = |i: usize, j: usize| {
        !a[i].norm.is_empty()
            && a[i].norm == b[j].norm
            && (a[i].time - b[j].time).abs() <= MATCH_TOLERANCE
    };
    for i in 0..a.len() {
        for j in 0..b.len() {
            d[(i + 1) * m + j + 1] = if ok(i, j) {
                d[i * m + j] + 1
            } else {
                d[i * m + j + 1].max(d[(i + 1) * m + j])
            };
        }
    }
    let (mut i, mut j) = (a.len(), b.len());
    let mut pairs = Vec::new();
    while i > 0 && j > 0 {
        if ok(i - 1, j - 1) && d[i * m + j] == d[(i - 1) * m + j - 1] + 1 {
            pairs.push((i - 1, j - 1));
            i -= 1;
            j -= 1;
        } else if d[(i - 1) * m + j] >= d[i * m + j - 1] {
            i -= 1;
        } else {
            j -= 1;
        }
    }
    pairs.reverse();
    pairs
}

/// Where the transcript passes from window `a` (words from `a_from` on) to the next window `b`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cut {
    /// Both windows agree on two consecutive words: keep `a`'s words before `a_end`, `b`'s
    /// from `b_from`.
    Anchor { a_end: usize, b_from: usize },
    /// No agreement: `a`'s words before this time, `b`'s from it.
    Time(f64),
}

fn plan_cut(a: &Prepared, a_from: usize, b: &Prepared) -> Cut {
    // `b` is reliable from `lo`; `a`'s complete segments end at `hi`.
    let lo = b.start + HEAD_UNRELIABLE;
    let hi = a.complete_end.min(a.end);
    let target = (lo + HANDOVER_AIM).min(hi.max(lo));
    let a_lo = a.words[a_from.min(a.words.len())..]
        .iter()
        .position(|x| x.time >= b.start - MATCH_TOLERANCE)
        .map_or(a.words.len(), |p| p + a_from);
    let b_hi = b
        .words
        .iter()
        .position(|x| x.time > a.end + MATCH_TOLERANCE)
        .unwrap_or(b.words.len());
    let pairs = align(&a.words[a_lo..], &b.words[..b_hi]);
    let cost = |(i, j): (usize, usize)| {
        let t = (a.words[i].time + b.words[j].time) / 2.0;
        let outside = (lo - t).max(t - hi.max(lo)).max(0.0);
        outside * 10.0 + (t - target).abs()
    };
    let best = pairs
        .windows(2)
        .filter(|p| p[1].0 == p[0].0 + 1 && p[1].1 == p[0].1 + 1)
        .map(|p| (p[0].0 + a_lo, p[0].1))
        .min_by(|x, y| cost(*x).total_cmp(&cost(*y)));
    match best {
        Some((i, j)) => Cut::Anchor {
            a_end: i + 1,
            b_from: j + 1,
        },
        // `a` fell silent (or stopped) before `b` became reliable: what `b` heard after `a`'s
        // last complete segment is new.
        None if hi < lo => Cut::Time(hi),
        None => Cut::Time(target),
    }
}

/// Where a repair window should start between consecutive windows `a` and `b`: at `a`'s
/// last complete timestamp (where the sequential mode would seek) when the two windows share
/// no two consecutive words at consistent times in the overlap, so the merge could only cut
/// by estimated times. `None` when they agree, or when `a` heard nothing worth continuing.
pub fn repair_start(a: &WindowText, b: &WindowText) -> Option<f64> {
    let pa = Prepared::new(a);
    let pb = Prepared::new(b);
    match plan_cut(&pa, 0, &pb) {
        Cut::Anchor { .. } => None,
        Cut::Time(_) => {
            let l = pa.complete_end;
            (l > a.start + 1.0 && l < a.end).then_some(l)
        }
    }
}

/// Merges a chain of windows of one recording, in transcript order, into one list of
/// segments without doubled or dropped words at the hand-overs.
///
/// Between consecutive windows `a` and `b`: when `b` continues `a` (a repair window), `a`'s
/// complete segments are kept and `b` follows whole. Otherwise both word lists are aligned
/// around the overlap (same word, estimated times within `MATCH_TOLERANCE` (2 s), so different
/// repetitions of a phrase are not paired) and the transcript passes from `a` to `b` between
/// two consecutive agreeing words, the pair nearest to where `b` has left its unreliable
/// first seconds and `a` still has complete segments. Without such a pair the cut is by
/// estimated time at that point, never after `a`'s last complete segment, so words `a`
/// never said are not dropped from `b`.
pub fn merge_windows(chain: &[WindowText]) -> Vec<MergedSegment> {
    let prepared: Vec<Prepared> = chain.iter().map(Prepared::new).collect();
    // (window, word index) of every kept word, in order.
    let mut kept: Vec<(usize, usize)> = Vec::new();
    let mut from = 0usize;
    for k in 0..prepared.len() {
        let a = &prepared[k];
        let (a_end, next_from) = match prepared.get(k + 1) {
            None => (a.words.len(), 0),
            Some(_) if chain[k + 1].continues_previous => (a.complete_words, 0),
            Some(b) => match plan_cut(a, from, b) {
                Cut::Anchor { a_end, b_from } => (a_end, b_from),
                Cut::Time(t) => {
                    let a_end = a.words[from.min(a.words.len())..]
                        .iter()
                        .position(|x| x.time >= t)
                        .map_or(a.words.len(), |p| p + from)
                        .min(a.complete_words);
                    // When `a` stopped inside `b`'s unreliable head, `b`'s times there are
                    // rough too (its first segment is stamped from the window start): a
                    // segment of `b` reaching past the cut is taken whole, since `a` never
                    // said its words.
                    let early_stop = t < b.start + HEAD_UNRELIABLE;
                    // Never go back before what is already kept (an odd chain could
                    // otherwise repeat a stretch).
                    let last_kept = if a_end > from {
                        Some(a.words[a_end - 1].time)
                    } else {
                        kept.last().map(|&(w, i)| prepared[w].words[i].time)
                    };
                    let kept_to = last_kept.map_or(f64::MIN, |t| t - MATCH_TOLERANCE);
                    let b_from = b
                        .words
                        .iter()
                        .position(|x| {
                            x.time > kept_to
                                && if early_stop {
                                    chain[k + 1].segments[x.segment].end > t
                                } else {
                                    x.time >= t
                                }
                        })
                        .unwrap_or(b.words.len());
                    (a_end, b_from)
                }
            },
        };
        kept.extend((from..a_end.max(from)).map(|i| (k, i)));
        from = next_from;
    }
    regroup(chain, &prepared, &kept)
}

/// Joins consecutive kept words of the same window segment back into segments.
fn regroup(
    chain: &[WindowText],
    prepared: &[Prepared],
    kept: &[(usize, usize)],
) -> Vec<MergedSegment> {
    let word = |(w, i): (usize, usize)| &prepared[w].words[i];
    let mut out: Vec<MergedSegment> = Vec::new();
    let mut i = 0;
    while i < kept.len() {
        let w = kept[i].0;
        let s = word(kept[i]).segment;
        let mut j = i;
        while j < kept.len() && kept[j].0 == w && word(kept[j]).segment == s {
            j += 1;
        }
        let seg = &chain[w].segments[s];
        let all: Vec<usize> = (0..prepared[w].words.len())
            .filter(|&x| prepared[w].words[x].segment == s)
            .collect();
        let starts_at_seg_start = kept[i].1 == all[0];
        let ends_at_seg_end = kept[j - 1].1 == all[all.len() - 1];
        let whole = starts_at_seg_start && ends_at_seg_end && j - i == all.len();
        let text: String = kept[i..j].iter().map(|&k| word(k).text.as_str()).collect();
        out.push(MergedSegment {
            window: w,
            start: if starts_at_seg_start {
                seg.start
            } else {
                word(kept[i]).time
            },
            end: if ends_at_seg_end {
                seg.end
            } else {
                word(kept[j - 1]).time
            },
            text,
            tokens: whole.then(|| seg.tokens.clone()),
        });
        i = j;
    }
    // Word times are estimates and windows disagree slightly: keep segments ordered and
    // non-overlapping.
    for k in 1..out.len() {
        let prev_end = out[k - 1].end;
        let s = &mut out[k];
        s.start = s.start.max(prev_end);
        s.end = s.end.max(s.start);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(start: f64, end: f64, text: &str) -> WindowSegment {
        WindowSegment {
            start,
            end,
            text: text.to_string(),
            tokens: vec![1, 2, 3],
            words: Vec::new(),
        }
    }

    fn win(start: f64, end: f64, segments: Vec<WindowSegment>) -> WindowText {
        WindowText {
            start,
            end,
            segments,
            continues_previous: false,
        }
    }

    fn joined(m: &[MergedSegment]) -> String {
        m.iter()
            .map(|s| s.text.as_str())
            .collect::<String>()
            .trim()
            .to_string()
    }

    #[test]
    fn plan_covers_content_with_overlap() {
        assert_eq!(
            plan_windows(2500, 5.0),
            vec![PlannedWindow {
                start: 0,
                len: 2500
            }]
        );
        assert_eq!(plan_windows(3000, 5.0).len(), 1);
        let p = plan_windows(24000, 5.0);
        assert_eq!(
            p[0],
            PlannedWindow {
                start: 0,
                len: 3000
            }
        );
        assert_eq!(p[1].start, 2500);
        let last = p.last().unwrap();
        assert_eq!(last.start + last.len, 24000);
        for w in p.windows(2) {
            assert!(w[1].start < w[0].start + w[0].len, "windows overlap");
        }
    }

    #[test]
    fn common_run_in_overlap_is_kept_once() {
        // Window 0: 0-30 s (its unfinished tail from 24 s), window 1: 25-55 s. Both hear
        // "the quick brown fox" around 26-28 s; window 1 missed "alpha beta" at its edge.
        let w0 = vec![
            seg(0.0, 10.0, " One two three four."),
            seg(24.0, 30.0, " Alpha beta the quick brown fox jum"),
        ];
        let w1 = vec![
            seg(25.0, 29.5, " the quick brown fox jumps over"),
            seg(29.5, 40.0, " the lazy dog."),
        ];
        let chain = [win(0.0, 30.0, w0), win(25.0, 55.0, w1)];
        let m = merge_windows(&chain);
        assert_eq!(
            joined(&m),
            "One two three four. Alpha beta the quick brown fox jumps over the lazy dog."
        );
        // The whole first segment keeps its tokens; the cut ones are re-tokenised.
        assert!(m[0].tokens.is_some());
        assert!(m[1].tokens.is_none() && m[2].tokens.is_none());
        assert!(m.windows(2).all(|p| p[0].start <= p[1].start));
        assert_eq!(repair_start(&chain[0], &chain[1]), None);
    }

    #[test]
    fn repetitions_are_paired_by_time_not_by_longest_run() {
        // Speech: "montreal forced aligner" at 21-24, 24.5-27.5 and 28-31 s, then "yes".
        // Window 0 (0-30) hears the first two and the unfinished start of the third; window 1
        // (25-55) garbles the second into "aligner" and hears the third. The longest common
        // run pairs window 0's second repetition with window 1's third (5 s apart): cutting
        // in it would drop one repetition.
        let w0 = vec![
            seg(10.0, 20.0, " start here"),
            seg(21.0, 24.0, " montreal forced aligner"),
            seg(24.5, 27.5, " montreal forced aligner"),
            seg(28.0, 30.0, " montreal forced"),
        ];
        let w1 = vec![
            seg(25.0, 27.5, " aligner"),
            seg(28.0, 31.0, " montreal forced aligner"),
            seg(31.5, 32.5, " yes"),
        ];
        let m = merge_windows(&[win(0.0, 30.0, w0), win(25.0, 55.0, w1)]);
        assert_eq!(
            joined(&m),
            "start here montreal forced aligner montreal forced aligner \
             montreal forced aligner yes"
        );
    }

    #[test]
    fn no_common_words_cuts_where_both_are_reliable_and_asks_for_repair() {
        let w0 = vec![seg(20.0, 29.0, " aaa bbb ccc ddd eee fff")];
        let w1 = vec![seg(25.0, 33.0, " xxx yyy zzz www")];
        let chain = [win(0.0, 30.0, w0), win(25.0, 55.0, w1)];
        let m = merge_windows(&chain);
        // Cut at 28.5 s (window 1 reliable from 27 s, aim 1.5 s later): earlier words from
        // window 0, later ones from window 1.
        assert_eq!(joined(&m), "aaa bbb ccc ddd eee fff zzz www");
        // A repair window continues window 0 from its last timestamp.
        assert_eq!(repair_start(&chain[0], &chain[1]), Some(29.0));
    }

    #[test]
    fn repair_window_takes_over_exactly_at_its_start() {
        // Window 0 ends "go forward ten meters" at 276.44 s, then an unfinished tail; the
        // repair window starts there, and window 1 (275-305) missed "we" at its edge.
        let w0 = vec![
            seg(270.0, 276.44, " go forward ten meters"),
            seg(276.44, 280.0, " we must"),
        ];
        let rep = vec![
            seg(276.44, 279.0, " we must find a new home in the stars"),
            seg(279.5, 283.0, " this is all very high pitched"),
        ];
        let w1 = vec![
            seg(275.0, 279.0, " must find a new home in the stars"),
            seg(279.5, 283.0, " this is all very high pitched"),
            seg(284.0, 290.0, " i really don't know"),
        ];
        let chain = [
            win(250.0, 280.0, w0),
            WindowText {
                continues_previous: true,
                ..win(276.44, 306.44, rep)
            },
            win(275.0, 305.0, w1),
        ];
        assert_eq!(repair_start(&chain[0], &chain[2]), Some(276.44));
        let m = merge_windows(&chain);
        assert_eq!(
            joined(&m),
            "go forward ten meters we must find a new home in the stars \
             this is all very high pitched i really don't know"
        );
        // Whole segments keep their tokens and times.
        assert_eq!((m[0].start, m[0].end), (270.0, 276.44));
        assert!(m[0].tokens.is_some());
    }

    #[test]
    fn earlier_window_silent_keeps_all_of_the_later_one() {
        let w1 = vec![
            seg(25.2, 27.0, " hello there"),
            seg(27.5, 31.0, " general kenobi"),
        ];
        let chain = [win(0.0, 30.0, vec![]), win(25.0, 55.0, w1)];
        assert_eq!(repair_start(&chain[0], &chain[1]), None);
        assert_eq!(joined(&merge_windows(&chain)), "hello there general kenobi");
    }

    #[test]
    fn later_window_starting_mid_sentence_defers_to_the_earlier_one() {
        // Window 1 starts inside "the cat sat on the mat today", hears only its end and
        // stamps it from its window start.
        let w0 = vec![
            seg(20.0, 23.0, " hello"),
            seg(23.5, 28.5, " the cat sat on the mat today"),
            seg(28.5, 30.0, " and"),
        ];
        let w1 = vec![
            seg(25.0, 28.4, " on the mat today"),
            seg(28.6, 31.0, " and then we left"),
        ];
        let m = merge_windows(&[win(0.0, 30.0, w0), win(25.0, 55.0, w1)]);
        assert_eq!(
            joined(&m),
            "hello the cat sat on the mat today and then we left"
        );
    }

    #[test]
    fn segment_straddling_an_early_stop_is_kept_whole() {
        // Window 0 (250-280 s) stops talking at 276.44 s; window 1 (275-305 s) hears a sentence
        // from 275 s that window 0 missed. Its spread word times put "we must find" before
        // 276.44 s, yet none of it may be dropped (when no repair window was decoded).
        let w0 = vec![seg(270.0, 276.44, " go forward ten meters")];
        let w1 = vec![
            seg(275.0, 279.0, " we must find a new home in the stars"),
            seg(279.0, 283.0, " and then some"),
        ];
        let m = merge_windows(&[win(250.0, 280.0, w0), win(275.0, 305.0, w1)]);
        assert_eq!(
            joined(&m),
            "go forward ten meters we must find a new home in the stars and then some"
        );
    }
}
