//! faster-whisper's `hallucination_silence_threshold` (from openai-whisper): with word
//! timestamps, a segment whose words look made up (improbable, or far too short or long) and
//! that sits in silence is taken for a hallucination and dropped, and the seek loop moves past
//! it: the silence before such a segment is skipped, so the next window starts at the speech.
//! Ported from faster-whisper 1.2.1's `generate_segments`, rule for rule.

use super::segments::frames_at;
use super::words::{PlacedWord, SegmentSpan};

/// faster-whisper's punctuation set: a word that is a substring of it is not scored.
const PUNCTUATION: &str = "\"'“¿([{-\"'.。,，!！?？:：”)]}、";

/// Where one window of the seek loop stands, as the rules read it (seconds unless named).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WindowPlace {
    /// The window's start (`time_offset`).
    pub time_offset: f64,
    /// The window's start in mel frames (`previous_seek`).
    pub seek: usize,
    /// The audio the window holds (`segment_duration`).
    pub duration: f64,
    /// The end of a full 30 s window from its start (`window_end_time`).
    pub window_end: f64,
    /// The end of the last speech before this window (`last_speech_timestamp`).
    pub last_speech: f64,
    /// The recording's content (`content_duration`), and in frames.
    pub content_duration: f64,
    pub content_frames: usize,
}

/// What the rules make of a window's segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing to drop.
    Keep,
    /// The first segment with words is a hallucination after a long silence: the window gives
    /// no segments (nor previous text, nor a prompt reset) and the seek moves to where it
    /// started.
    SkipWindow { seek: usize },
    /// Segments from `from` on are dropped and the seek moves to the first dropped one.
    Truncate { from: usize, seek: usize },
}

/// How made up a word looks: improbable, shorter than 133 ms or longer than 2 s.
fn word_anomaly_score(w: &PlacedWord) -> f64 {
    let duration = w.end - w.start;
    let mut score = 0.0;
    if w.probability < 0.15 {
        score += 1.0;
    }
    if duration < 0.133 {
        score += (0.133 - duration) * 15.0;
    }
    if duration > 2.0 {
        score += duration - 2.0;
    }
    score
}

/// Whether a segment's first eight words (punctuation aside) look made up.
fn is_anomaly(words: Option<&[PlacedWord]>) -> bool {
    let Some(words) = words.filter(|w| !w.is_empty()) else {
        return false;
    };
    let scored: Vec<&PlacedWord> = words
        .iter()
        .filter(|w| !PUNCTUATION.contains(w.word.as_str()))
        .take(8)
        .collect();
    let score: f64 = scored.iter().map(|w| word_anomaly_score(w)).sum();
    score >= 3.0 || score + 0.01 >= scored.len() as f64
}

/// faster-whisper's rules over one window's segments `spans` (times after word alignment)
/// and their `words`, with `threshold` seconds of silence.
pub(crate) fn judge(
    threshold: f64,
    spans: &[SegmentSpan],
    words: &[Vec<PlacedWord>],
    at: &WindowPlace,
) -> Verdict {
    let with_words = |from: usize| (from..spans.len()).find(|&i| !words[i].is_empty());
    // A first segment that looks made up after a long silence: skip the silence.
    if let Some(first) = with_words(0) {
        if is_anomaly(Some(&words[first])) {
            let gap = spans[first].start - at.time_offset;
            if gap > threshold {
                return Verdict::SkipWindow {
                    seek: at.seek + frames_at(gap),
                };
            }
        }
    }
    // A made-up segment with silence (or more made-up text) on both sides ends the window.
    let mut last_end = at.last_speech;
    for (si, seg) in spans.iter().enumerate() {
        if words[si].is_empty() {
            continue;
        }
        if is_anomaly(Some(&words[si])) {
            let next = with_words(si + 1);
            let next_start = match next {
                Some(n) => words[n][0].start,
                None => at.time_offset + at.duration,
            };
            let silence_before = seg.start - last_end > threshold
                || seg.start < threshold
                || seg.start - at.time_offset < 2.0;
            let silence_after = next_start - seg.end > threshold
                || is_anomaly(next.map(|n| words[n].as_slice()))
                || at.window_end - seg.end < 2.0;
            if silence_before && silence_after {
                let mut seek = frames_at((at.time_offset + 1.0).max(seg.start));
                if at.content_duration - seg.end < threshold {
                    seek = at.content_frames;
                }
                return Verdict::Truncate { from: si, seek };
            }
        }
        last_end = seg.end;
    }
    Verdict::Keep
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(word: &str, start: f64, end: f64, probability: f32) -> PlacedWord {
        PlacedWord {
            word: word.into(),
            start,
            end,
            probability,
        }
    }

    fn span(start: f64, end: f64) -> SegmentSpan {
        SegmentSpan {
            start,
            end,
            text_tokens: 1,
        }
    }

    fn place() -> WindowPlace {
        WindowPlace {
            time_offset: 10.0,
            seek: 1000,
            duration: 30.0,
            window_end: 40.0,
            last_speech: 9.0,
            content_duration: 100.0,
            content_frames: 10_000,
        }
    }

    #[test]
    fn words_are_scored_as_faster_whisper_scores_them() {
        assert_eq!(word_anomaly_score(&w(" a", 0.0, 0.5, 0.9)), 0.0);
        assert_eq!(word_anomaly_score(&w(" a", 0.0, 0.5, 0.1)), 1.0);
        assert!((word_anomaly_score(&w(" a", 0.0, 3.0, 0.9)) - 1.0).abs() < 1e-12);
        assert!((word_anomaly_score(&w(" a", 0.0, 0.033, 0.9)) - 1.5).abs() < 1e-9);
        // Punctuation is not scored; one word scoring ≥ its count (minus 0.01) is anomalous.
        assert!(is_anomaly(Some(&[
            w(" a", 0.0, 0.5, 0.1),
            w(".", 0.5, 0.5, 0.0)
        ])));
        assert!(!is_anomaly(Some(&[w(" a", 0.0, 0.5, 0.9)])));
        assert!(!is_anomaly(None));
    }

    #[test]
    fn a_made_up_first_segment_after_silence_skips_the_silence() {
        let spans = [span(14.0, 15.0), span(15.0, 17.0)];
        let words = vec![
            vec![w(" uh", 14.0, 14.05, 0.05)],
            vec![w(" hello", 15.0, 17.0, 0.9)],
        ];
        // 4 s of silence before it: the window is skipped up to 14 s.
        assert_eq!(
            judge(2.0, &spans, &words, &place()),
            Verdict::SkipWindow { seek: 1400 }
        );
        // Under the threshold: it stays (and is followed by speech).
        assert_eq!(judge(5.0, &spans, &words, &place()), Verdict::Keep);
    }

    #[test]
    fn a_made_up_segment_between_silences_ends_the_window() {
        let spans = [span(10.5, 12.0), span(20.0, 20.2), span(30.0, 31.0)];
        let words = vec![
            vec![w(" real", 10.5, 12.0, 0.9)],
            vec![w(" uh", 20.0, 20.05, 0.05)],
            vec![w(" words", 30.0, 31.0, 0.9)],
        ];
        assert_eq!(
            judge(2.0, &spans, &words, &place()),
            Verdict::Truncate {
                from: 1,
                seek: 2000
            }
        );
        // Near the recording's end, the seek goes to its end.
        let end = WindowPlace {
            content_duration: 21.0,
            ..place()
        };
        assert_eq!(
            judge(2.0, &spans, &words, &end),
            Verdict::Truncate {
                from: 1,
                seek: 10_000
            }
        );
    }
}
