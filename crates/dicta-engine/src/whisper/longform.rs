//! Long-form planning and merging for the batched mode: fixed 30 s windows with overlap,
//! and the merge of consecutive windows' segments at their overlaps.
//!
//! Merge: both windows transcribe the overlap, so the tail of the earlier window and the head
//! of the later one should contain the same words. Each segment's words get approximate times
//! (spread over the segment by character position). Within the overlap (plus a little slack)
//! we look for the longest run of identical normalised words; the recording is cut in the
//! middle of that run, keeping the earlier window's words before the cut and the later
//! window's words after it, so each word of the run appears once. Without a common run of at
//! least two words (silence, or the windows disagree), the cut falls at the overlap's
//! midpoint by time. Cutting in the middle keeps both windows away from their edges, where
//! Whisper drops or garbles partial words.

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

#[derive(Debug, Clone)]
struct WordItem {
    window: usize,
    segment: usize,
    /// Text with its leading whitespace.
    text: String,
    norm: String,
    time: f64,
}

fn normalise(w: &str) -> String {
    w.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(|c| c.to_lowercase())
        .collect()
}

/// Splits a segment into words with times spread by character offset.
fn words_of(window: usize, segment: usize, s: &WindowSegment) -> Vec<WordItem> {
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
            window,
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
    out
}

/// Longest run of equal non-empty normalised words: (start in a, start in b, length).
fn longest_common_run(a: &[WordItem], b: &[WordItem]) -> (usize, usize, usize) {
    let mut best = (0, 0, 0);
    let mut prev = vec![0usize; b.len() + 1];
    for (i, wa) in a.iter().enumerate() {
        let mut cur = vec![0usize; b.len() + 1];
        for (j, wb) in b.iter().enumerate() {
            if !wa.norm.is_empty() && wa.norm == wb.norm {
                cur[j + 1] = prev[j] + 1;
                if cur[j + 1] > best.2 {
                    best = (i + 1 - cur[j + 1], j + 1 - cur[j + 1], cur[j + 1]);
                }
            }
        }
        prev = cur;
    }
    best
}

/// Merges the segments of consecutive windows (`windows[i]` = (window start s, window end s,
/// segments)) into one list without doubled or dropped words at the overlaps.
pub fn merge_windows(windows: &[(f64, f64, Vec<WindowSegment>)]) -> Vec<MergedSegment> {
    const SLACK: f64 = 1.0;
    let mut words: Vec<WordItem> = Vec::new();
    for (w, (win_start, _, segs)) in windows.iter().enumerate() {
        let new: Vec<WordItem> = segs
            .iter()
            .enumerate()
            .flat_map(|(si, s)| words_of(w, si, s))
            .collect();
        if w == 0 {
            words = new;
            continue;
        }
        let prev_end = windows[w - 1].1;
        let ov_start = *win_start;
        let tail_from = words
            .iter()
            .position(|x| x.time >= ov_start - SLACK)
            .unwrap_or(words.len());
        let head_to = new
            .iter()
            .position(|x| x.time > prev_end + SLACK)
            .unwrap_or(new.len());
        let (ia, ib, len) = longest_common_run(&words[tail_from..], &new[..head_to]);
        if len >= 2 {
            let keep_a = tail_from + ia + len / 2;
            let from_b = ib + len / 2;
            words.truncate(keep_a);
            words.extend(new.into_iter().skip(from_b));
        } else {
            // Where the earlier window stopped before the midpoint, its coverage ends there.
            let covered_to = words
                .last()
                .map_or(ov_start, |x| windows[x.window].2[x.segment].end);
            let mid = (ov_start + prev_end) / 2.0;
            let cut = mid.min(covered_to.max(ov_start));
            // When the earlier window fell silent before the midpoint, a later segment that
            // straddles the cut holds speech the earlier window missed. Word times inside a
            // segment are only spread by characters, so cutting through it by time would drop
            // its first words: take such a segment whole.
            let from_b = if covered_to < mid {
                new.iter()
                    .position(|x| windows[w].2[x.segment].end > cut)
                    .unwrap_or(new.len())
            } else {
                new.iter().position(|x| x.time >= cut).unwrap_or(new.len())
            };
            words.retain(|x| x.time < cut);
            words.extend(new.into_iter().skip(from_b));
        }
    }
    // Regroup consecutive words of the same window segment.
    let mut out: Vec<MergedSegment> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let (w, s) = (words[i].window, words[i].segment);
        let mut j = i;
        while j < words.len() && words[j].window == w && words[j].segment == s {
            j += 1;
        }
        let seg = &windows[w].2[s];
        let all = words_of(w, s, seg);
        let whole = j - i == all.len();
        let first = i == 0 || !(words[i - 1].window == w && words[i - 1].segment == s);
        let starts_at_seg_start =
            words[i].text == all[0].text && (words[i].time - all[0].time).abs() < 1e-9;
        let ends_at_seg_end = {
            let last = &all[all.len() - 1];
            words[j - 1].text == last.text && (words[j - 1].time - last.time).abs() < 1e-9
        };
        let text: String = words[i..j].iter().map(|x| x.text.as_str()).collect();
        out.push(MergedSegment {
            window: w,
            start: if first && starts_at_seg_start {
                seg.start
            } else {
                words[i].time
            },
            end: if ends_at_seg_end {
                seg.end
            } else {
                words[j - 1].time
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
        // Window 0: 0-30 s, window 1: 25-55 s. Both hear "the quick brown fox" around 26-28 s.
        let w0 = vec![
            seg(0.0, 10.0, " One two three four."),
            seg(24.0, 30.0, " Alpha beta the quick brown fox jum"),
        ];
        let w1 = vec![
            seg(25.0, 29.5, " the quick brown fox jumps over"),
            seg(29.5, 40.0, " the lazy dog."),
        ];
        let m = merge_windows(&[(0.0, 30.0, w0), (25.0, 55.0, w1)]);
        assert_eq!(
            joined(&m),
            "One two three four. Alpha beta the quick brown fox jumps over the lazy dog."
        );
        // The whole first segment keeps its tokens; the cut ones are re-tokenised.
        assert!(m[0].tokens.is_some());
        assert!(m[1].tokens.is_none() && m[2].tokens.is_none());
        assert!(m.windows(2).all(|p| p[0].start <= p[1].start));
    }

    #[test]
    fn no_common_words_cuts_at_the_midpoint() {
        let w0 = vec![seg(20.0, 29.0, " aaa bbb ccc ddd eee fff")];
        let w1 = vec![seg(25.0, 33.0, " xxx yyy zzz www")];
        let m = merge_windows(&[(0.0, 30.0, w0), (25.0, 55.0, w1)]);
        let text = joined(&m);
        // Words timed before 27.5 s come from window 0, later ones from window 1.
        assert!(text.starts_with("aaa bbb ccc"));
        assert!(text.contains("zzz www"));
        assert!(!text.contains("fff"));
    }

    #[test]
    fn segment_straddling_an_early_stop_is_kept_whole() {
        // Window 0 (250-280 s) stops talking at 276.44 s; window 1 (275-305 s) hears a sentence
        // from 275 s that window 0 missed. Its spread word times put "we must find" before
        // 276.44 s, yet none of it may be dropped.
        let w0 = vec![seg(270.0, 276.44, " go forward ten meters")];
        let w1 = vec![
            seg(275.0, 279.0, " we must find a new home in the stars"),
            seg(279.0, 283.0, " and then some"),
        ];
        let m = merge_windows(&[(250.0, 280.0, w0), (275.0, 305.0, w1)]);
        assert_eq!(
            joined(&m),
            "go forward ten meters we must find a new home in the stars and then some"
        );
    }
}
