//! Long-form planning and merging for the batched mode: fixed 30 s windows with overlap,
//! and the merge of a recording's chain of decoded windows.
//!
//! Merge: each segment's words get times (aligned word times when the window has them, else
//! spread over the segment by character position). Between consecutive windows the word
//! lists are aligned around the overlap, pairing only equal words that both windows can have
//! heard and whose times agree within `MATCH_TOLERANCE` (2 s), each with its nearest
//! repetition (so a phrase said twice a few seconds apart is not paired with the wrong one);
//! the transcript passes from the earlier window to the later one between two consecutive
//! agreeing words, the pair nearest to where the later window has left its unreliable first
//! seconds and the earlier window still has complete segments. Without such a pair the cut
//! is by time at that point, and never after the earlier window's last complete segment, so
//! nothing the earlier window did not say is dropped; the caller then decodes a repair window
//! that hands over at that timestamp ([`repair_start`]), as the sequential seek loop would,
//! but whose audio starts at the pause just before it ([`repair_audio_start`]), since
//! Whisper's last timestamp often falls just after the next word's onset. Words the repair
//! hears again in that lead are not repeated.

use dicta_audio::mel::MelSpectrogram;

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
    /// Set on a repair window: the previous window's last complete timestamp, from which this
    /// window was decoded ([`repair_start`]; its audio may start a little earlier, at a pause,
    /// see [`repair_audio_start`]). The hand-over is exact there, as in the sequential seek
    /// loop: the previous window keeps its complete segments and this one follows whole.
    pub repairs_from: Option<f64>,
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
/// Seconds a word's estimated time may lie outside the other window and still be paired.
const EDGE_SLACK: f64 = 0.5;
/// The hand-over aims this far past the point where the later window becomes reliable.
const HANDOVER_AIM: f64 = 1.5;
/// Most seconds of audio a repair window takes before its hand-over time, to start at a pause.
pub const REPAIR_LEAD: f64 = 0.6;
/// Slack when comparing a segment's end with a hand-over time (timestamps are 20 ms apart).
const TIME_EPS: f64 = 0.01;

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
/// same normalised text and estimated times at most `MATCH_TOLERANCE` (2 s) apart; among
/// equally long matchings, the one whose pairs lie closest in time (so a phrase said twice
/// a few seconds apart pairs with its own repetition).
fn align(a: &[WordItem], b: &[WordItem]) -> Vec<(usize, usize)> {
    // Score: matches first, then closeness (< 1 in total, so it only breaks ties).
    let closeness = 1.0 / (a.len().min(b.len()) + 1) as f64;
    let gain = |i: usize, j: usize| -> Option<f64> {
        let dt = (a[i].time - b[j].time).abs();
        (!a[i].norm.is_empty() && a[i].norm == b[j].norm && dt <= MATCH_TOLERANCE)
            .then(|| 1.0 + closeness * (1.0 - dt / MATCH_TOLERANCE))
    };
    let m = b.len() + 1;
    let mut d = vec![0f64; (a.len() + 1) * m];
    for i in 0..a.len() {
        for j in 0..b.len() {
            let skip = d[i * m + j + 1].max(d[(i + 1) * m + j]);
            d[(i + 1) * m + j + 1] = match gain(i, j) {
                Some(g) => skip.max(d[i * m + j] + g),
                None => skip,
            };
        }
    }
    let (mut i, mut j) = (a.len(), b.len());
    let mut pairs = Vec::new();
    while i > 0 && j > 0 {
        let here = d[i * m + j];
        if gain(i - 1, j - 1).is_some_and(|g| here == d[(i - 1) * m + j - 1] + g) {
            pairs.push((i - 1, j - 1));
            i -= 1;
            j -= 1;
        } else if here == d[(i - 1) * m + j] {
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
    /// `b` is a repair window decoded for `a`'s hand-over at this time: `a`'s complete
    /// segments up to it, then all of `b` but what it repeats of them.
    Repair(f64),
}

fn plan_cut(a: &Prepared, a_from: usize, b: &Prepared) -> Cut {
    // `b` is reliable from `lo`; `a`'s complete segments end at `hi`.
    let lo = b.start + HEAD_UNRELIABLE;
    let hi = a.complete_end.min(a.end);
    let target = (lo + HANDOVER_AIM).min(hi.max(lo));
    // Only words both windows can have heard: `b` hears nothing before its start, `a` nothing
    // after its end (estimated times get a little slack).
    let a_lo = a.words[a_from.min(a.words.len())..]
        .iter()
        .position(|x| x.time >= b.start - EDGE_SLACK)
        .map_or(a.words.len(), |p| p + a_from);
    let b_hi = b
        .words
        .iter()
        .position(|x| x.time > a.end + EDGE_SLACK)
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

/// Where a repair window should hand over between consecutive windows `a` and `b`: at `a`'s
/// last complete timestamp (where the sequential mode would seek) when the two windows share
/// no two consecutive words at consistent times in the overlap, so the merge could only cut
/// by estimated times. `None` when they agree, or when `a` heard nothing worth continuing.
pub fn repair_start(a: &WindowText, b: &WindowText) -> Option<f64> {
    let pa = Prepared::new(a);
    let pb = Prepared::new(b);
    let l = pa.complete_end;
    (l > a.start + 1.0 && l < a.end && matches!(plan_cut(&pa, 0, &pb), Cut::Time(_))).then_some(l)
}

/// The first frame of a repair window that hands over at frame `handover`: the middle of the
/// last quietest stretch (mean log-mel over 30 ms) at most [`REPAIR_LEAD`] before it, so
/// the window starts inside a pause when there is one. Whisper's last
/// timestamp often falls just after the next word's onset, which a window starting exactly
/// there would lose; starting at the pause keeps that word whole in the repair window.
pub fn repair_audio_start(mel: &MelSpectrogram, handover: usize) -> usize {
    let handover = handover.min(mel.n_frames);
    let lead = (REPAIR_LEAD * FRAMES_PER_SECOND as f64).round() as usize;
    let loudness = |f: usize| -> f32 {
        let frames = f.saturating_sub(1)..(f + 2).min(mel.n_frames);
        let n = (frames.len() * mel.n_mels).max(1) as f32;
        frames
            .flat_map(|t| (0..mel.n_mels).map(move |m| mel.data[m * mel.n_frames + t]))
            .sum::<f32>()
            / n
    };
    // Log-mel units: 0.05 is about 2 dB.
    const QUIET_SLACK: f32 = 0.05;
    let lo = handover.saturating_sub(lead);
    let levels: Vec<f32> = (lo..handover.min(mel.n_frames.saturating_sub(1)) + 1)
        .map(loudness)
        .collect();
    let Some(min) = levels.iter().copied().reduce(f32::min) else {
        return handover;
    };
    let quiet = |i: usize| levels[i] <= min + QUIET_SLACK;
    let Some(last) = (0..levels.len()).rev().find(|&i| quiet(i)) else {
        return handover;
    };
    let first = (0..=last)
        .rev()
        .take_while(|&i| quiet(i))
        .last()
        .unwrap_or(last);
    lo + (first + last) / 2
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
            Some(b) => match chain[k + 1]
                .repairs_from
                .map_or_else(|| plan_cut(a, from, b), Cut::Repair)
            {
                Cut::Repair(h) => {
                    let a_end = a.words[from.min(a.complete_words)..a.complete_words]
                        .iter()
                        .position(|x| chain[k].segments[x.segment].end > h + TIME_EPS)
                        .map_or(a.complete_words, |p| p + from);
                    // The repair's audio starts up to `REPAIR_LEAD` early: when the earlier
                    // window's last timestamp came late, the repair hears its last words again.
                    let kept_tail = &a.words[from.min(a_end)..a_end];
                    (a_end, repeated_head(kept_tail, &b.words))
                }
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

/// Most words a repair window may repeat from the earlier window's tail (what fits in
/// `REPAIR_LEAD`).
const MAX_REPEATED_WORDS: usize = 3;

/// How many of `b`'s first words repeat the last words of `tail` (the longest run of at most
/// `MAX_REPEATED_WORDS` words, compared after normalisation).
fn repeated_head(tail: &[WordItem], b: &[WordItem]) -> usize {
    (1..=MAX_REPEATED_WORDS.min(tail.len()).min(b.len()))
        .rev()
        .find(|&n| {
            tail[tail.len() - n..]
                .iter()
                .zip(&b[..n])
                .all(|(x, y)| !x.norm.is_empty() && x.norm == y.norm)
        })
        .unwrap_or(0)
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
mod tests;
