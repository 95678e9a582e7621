//! Splitting a window's tokens into timed segments (faster-whisper's
//! `_split_segments_by_timestamps`), and the seek that follows.

/// Seconds per timestamp token step.
pub const TIME_PRECISION: f64 = 0.02;
/// Mel frames per timestamp step (the encoder halves the frame rate).
pub const INPUT_STRIDE: usize = 2;
/// Mel frames per second.
pub const FRAMES_PER_SECOND: usize = 100;
/// Mel frames in one 30 s window.
pub const WINDOW_FRAMES: usize = 3000;

/// Seconds as mel frames the way faster-whisper rounds them (Python's `round`: ties to even;
/// negative times are frame 0).
pub fn frames_at(seconds: f64) -> usize {
    (seconds * FRAMES_PER_SECOND as f64).round_ties_even() as usize
}

/// A segment before its text is decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct RawSegment {
    /// Start in seconds from the start of the recording.
    pub start: f64,
    /// End in seconds.
    pub end: f64,
    /// Tokens including the enclosing timestamp tokens.
    pub tokens: Vec<u32>,
}

/// The result of splitting one window.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// Complete segments in order.
    pub segments: Vec<RawSegment>,
    /// Where the next window starts (mel frames).
    pub seek: usize,
    /// The tokens ended with a single timestamp (no speech after it in this window).
    pub single_timestamp_ending: bool,
}

/// Splits `tokens` (decoded from the window at mel frame `seek`, covering `segment_size`
/// frames) at consecutive timestamp pairs. With at least one pair, the unfinished text after
/// the last pair is dropped and the next window starts at the last timestamp, unless the
/// tokens end with a single timestamp; without pairs, the whole window is one segment.
pub fn split_by_timestamps(
    tokens: &[u32],
    timestamp_begin: u32,
    seek: usize,
    segment_size: usize,
) -> Split {
    let time_offset = seek as f64 / FRAMES_PER_SECOND as f64;
    let is_ts = |t: u32| t >= timestamp_begin;
    let n = tokens.len();
    let single_timestamp_ending = n >= 2 && !is_ts(tokens[n - 2]) && is_ts(tokens[n - 1]);
    let consecutive: Vec<usize> = (1..n)
        .filter(|&i| is_ts(tokens[i]) && is_ts(tokens[i - 1]))
        .collect();
    let mut segments = Vec::new();
    let new_seek;
    if !consecutive.is_empty() {
        let mut slices = consecutive;
        if single_timestamp_ending {
            slices.push(n);
        }
        let mut last = 0;
        for &cur in &slices {
            let sliced = &tokens[last..cur];
            let start_pos = sliced[0].saturating_sub(timestamp_begin) as f64;
            let end_pos = sliced[sliced.len() - 1].saturating_sub(timestamp_begin) as f64;
            segments.push(RawSegment {
                start: time_offset + start_pos * TIME_PRECISION,
                end: time_offset + end_pos * TIME_PRECISION,
                tokens: sliced.to_vec(),
            });
            last = cur;
        }
        new_seek = if single_timestamp_ending {
            seek + segment_size
        } else {
            let last_ts = tokens[last - 1].saturating_sub(timestamp_begin) as usize;
            if last_ts > 0 {
                seek + last_ts * INPUT_STRIDE
            } else {
                // The last complete segment closes at the window's start (`<|0.00|> … <|0.00|>`,
                // zero length, so dropped): seeking there would decode the same window again,
                // identically, forever (faster-whisper loops there; CTranslate2's timestamp rules
                // allow equal timestamps). Go on from the latest timestamp the window reached,
                // where its unfinished segment starts, or past the window.
                let furthest = tokens
                    .iter()
                    .filter(|&&t| is_ts(t))
                    .map(|&t| (t - timestamp_begin) as usize * INPUT_STRIDE)
                    .max()
                    .filter(|&f| f > 0)
                    .unwrap_or(segment_size);
                seek + furthest.min(segment_size)
            }
        };
    } else {
        let mut duration = segment_size as f64 / FRAMES_PER_SECOND as f64;
        if let Some(&last_ts) = tokens.iter().rev().find(|&&t| is_ts(t)) {
            if last_ts != timestamp_begin {
                duration = (last_ts - timestamp_begin) as f64 * TIME_PRECISION;
            }
        }
        segments.push(RawSegment {
            start: time_offset,
            end: time_offset + duration,
            tokens: tokens.to_vec(),
        });
        new_seek = seek + segment_size;
    }
    Split {
        segments,
        seek: new_seek,
        single_timestamp_ending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TB: u32 = 1000;

    #[test]
    fn pairs_split_and_seek_to_last_timestamp() {
        // <0.00> a b <2.00><2.00> c <4.00><4.40> d   (unfinished "d" dropped)
        let toks = [TB, 1, 2, TB + 100, TB + 100, 3, TB + 200, TB + 220, 4];
        let s = split_by_timestamps(&toks, TB, 500, 3000);
        assert_eq!(s.segments.len(), 2);
        assert_eq!(s.segments[0].tokens, vec![TB, 1, 2, TB + 100]);
        assert!((s.segments[0].start - 5.0).abs() < 1e-9);
        assert!((s.segments[0].end - 7.0).abs() < 1e-9);
        assert!((s.segments[1].end - 9.0).abs() < 1e-9);
        assert!(!s.single_timestamp_ending);
        // Seek to the last timestamp of the last complete pair: 500 + 200 * 2 frames.
        assert_eq!(s.seek, 900);
    }

    #[test]
    fn single_timestamp_ending_consumes_the_window() {
        let toks = [TB, 1, TB + 50, TB + 50, 2, TB + 90];
        let s = split_by_timestamps(&toks, TB, 0, 2400);
        assert!(s.single_timestamp_ending);
        assert_eq!(s.segments.len(), 2);
        assert_eq!(s.segments[1].tokens, vec![TB + 50, 2, TB + 90]);
        assert!((s.segments[1].end - 1.8).abs() < 1e-9);
        assert_eq!(s.seek, 2400);
    }

    #[test]
    fn a_zero_length_last_segment_still_moves_the_seek() {
        // <0.00> a b <0.00><1.00> (EOT): the only pair closes at the window's start. Seeking
        // to it would repeat this window forever; go on from the unfinished segment at 1.00.
        let toks = [TB, 1, 2, TB, TB + 50];
        let s = split_by_timestamps(&toks, TB, 600, 292);
        assert_eq!(s.segments.len(), 1);
        assert_eq!(s.segments[0].start, s.segments[0].end);
        assert_eq!(s.seek, 700);
        // Nothing beyond the start at all: past the window.
        let s = split_by_timestamps(&[TB, 1, TB, TB], TB, 600, 292);
        assert_eq!(s.seek, 892);
        // A later timestamp past the window's content stops at its end.
        let s = split_by_timestamps(&[TB, 1, TB, TB + 1400], TB, 600, 292);
        assert_eq!(s.seek, 892);
    }

    #[test]
    fn no_pairs_is_one_segment() {
        let s = split_by_timestamps(&[TB, 1, 2, TB + 150], TB, 3000, 1200);
        assert_eq!(s.segments.len(), 1);
        assert!((s.segments[0].start - 30.0).abs() < 1e-9);
        assert!((s.segments[0].end - 33.0).abs() < 1e-9);
        assert_eq!(s.seek, 4200);
        // Without any timestamp (without_timestamps): whole window duration.
        let s = split_by_timestamps(&[1, 2], TB, 0, 1200);
        assert!((s.segments[0].end - 12.0).abs() < 1e-9);
    }
}
