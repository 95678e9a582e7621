//! Lanes of the batched long-form mode. A recording longer than one window is cut into lanes of
//! about equal length (at least [`MIN_LANE_FRAMES`], at most one per batch row), each cut at
//! the quietest stretch near its ideal boundary, so that a cut falls where nobody speaks and no
//! word straddles two lanes. Every lane then runs faster-whisper's seek loop on its own, and the
//! windows of all lanes of all recordings share model calls: a single long recording fills the
//! batch instead of decoding one window at a time, while its transcript only differs from the
//! sequential mode's around the few lane cuts.
//!
//! Why lanes and not one span per 30 s window (tried first, session 11): Whisper often ends a
//! window's text a few seconds before its end and leaves the rest to the next window; with a
//! span per window that rest is decoded again as a short, mostly padded window, where
//! hallucinations and temperature fallbacks were frequent (tiny.en, 1-hour workload: +1.7 WER
//! points with fallback, and no faster). A lane pays that only once, at its end.

use super::segments::WINDOW_FRAMES;

/// Samples per mel frame (10 ms at 16 kHz).
const HOP: usize = 160;
/// Frames over which energy is summed when looking for a pause (200 ms: shorter than most
/// pauses between phrases, longer than the gaps inside a word).
const PAUSE_FRAMES: usize = 20;
/// Shortest lane of the batched mode (60 s): shorter lanes cut more often, and each cut costs
/// some accuracy.
pub const MIN_LANE_FRAMES: usize = 2 * WINDOW_FRAMES;
/// Shortest lane of the automatic mode when windows condition on the previous text (6 min):
/// a lane starts without that prompt, and lanes this long keep the words it costs within a few
/// tenths of a WER point.
pub const AUTO_MIN_LANE_FRAMES: usize = 12 * WINDOW_FRAMES;

/// The shortest lane of the automatic mode: [`AUTO_MIN_LANE_FRAMES`] when windows condition on
/// the previous window's text, [`MIN_LANE_FRAMES`] when they do not. Without conditioning every
/// window is decoded from its audio alone, so a cut only moves where windows start, as any
/// window boundary does: on the bench's 4-minute mixtures (8 seeds, session 25) 60 s lanes were
/// 0.9 WER points better than sequential on average greedy and 0.8 better with beam 5 and
/// temperature fallback, while with conditioning they were 0.7 worse.
pub fn auto_min_lane(condition_on_previous_text: bool) -> usize {
    if condition_on_previous_text {
        AUTO_MIN_LANE_FRAMES
    } else {
        MIN_LANE_FRAMES
    }
}

/// How far from its ideal place (on either side) a cut looks for a pause (5 s).
pub const SEARCH_FRAMES: usize = 500;

/// The lanes `(start, end)` in mel frames of a recording of `content_frames` frames (16 kHz
/// `audio`), for batches of `batch_size` windows: `min(batch_size, content_frames /
/// min_lane)` lanes (at least one) tiling `0..content_frames`. Each cut is the centre of
/// the quietest 200 ms within [`SEARCH_FRAMES`] of `k · content_frames / lanes` (the earliest
/// on ties).
pub fn lanes(
    audio: &[f32],
    content_frames: usize,
    batch_size: usize,
    min_lane: usize,
) -> Vec<(usize, usize)> {
    let n = (content_frames / min_lane.max(1)).clamp(1, batch_size.max(1));
    if n == 1 {
        return vec![(0, content_frames)];
    }
    // Energy of each frame as prefix sums, for 200 ms sums in O(1).
    let mut prefix = Vec::with_capacity(content_frames + 1);
    prefix.push(0f64);
    let mut acc = 0f64;
    for j in 0..content_frames {
        let from = (j * HOP).min(audio.len());
        let to = ((j + 1) * HOP).min(audio.len());
        acc += audio[from..to]
            .iter()
            .map(|&s| f64::from(s) * f64::from(s))
            .sum::<f64>();
        prefix.push(acc);
    }
    let stretch = |centre: usize| {
        let a = centre.saturating_sub(PAUSE_FRAMES / 2);
        let b = (centre + PAUSE_FRAMES / 2).min(content_frames);
        prefix[b] - prefix[a]
    };
    let mut out = Vec::with_capacity(n);
    let mut start = 0;
    for k in 1..n {
        let ideal = k * content_frames / n;
        let lo = ideal.saturating_sub(SEARCH_FRAMES).max(start + 1);
        let hi = (ideal + SEARCH_FRAMES).min(content_frames - 1);
        let mut best = ideal.clamp(lo, hi);
        let mut best_e = f64::INFINITY;
        for c in lo..=hi {
            let e = stretch(c);
            if e < best_e {
                best = c;
                best_e = e;
            }
        }
        out.push((start, best));
        start = best;
    }
    out.push((start, content_frames));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tone with silent gaps of 0.3 s starting at `pauses` (seconds).
    fn speech_with_pauses(seconds: usize, pauses: &[f32]) -> Vec<f32> {
        (0..seconds * 16_000)
            .map(|i| {
                let t = i as f32 / 16_000.0;
                if pauses.iter().any(|&p| t >= p && t < p + 0.3) {
                    0.0
                } else {
                    (t * 440.0 * std::f32::consts::TAU).sin() * 0.3
                }
            })
            .collect()
    }

    #[test]
    fn cuts_fall_in_the_pause_nearest_each_boundary_and_lanes_tile_the_recording() {
        // 240 s, 4 lanes of ~60 s; pauses 3 s before, 2 s after and at the ideal cuts, plus
        // decoys farther than 5 s away.
        let pauses = [52.0, 57.0, 122.0, 172.0, 180.0, 190.0];
        let audio = speech_with_pauses(240, &pauses);
        let frames = audio.len() / HOP;
        let lanes = lanes(&audio, frames, 8, MIN_LANE_FRAMES);
        assert_eq!(lanes.len(), 4, "{lanes:?}");
        assert_eq!((lanes[0].0, lanes[3].1), (0, frames));
        for w in lanes.windows(2) {
            assert_eq!(w[0].1, w[1].0, "lanes tile: {lanes:?}");
        }
        let cuts: Vec<f32> = lanes.iter().skip(1).map(|l| l.0 as f32 / 100.0).collect();
        for (cut, pause) in cuts.iter().zip([57.0, 122.0, 180.0]) {
            assert!(
                *cut >= pause && *cut <= pause + 0.3,
                "cut at {cut} s, pause at {pause} s"
            );
        }
    }

    #[test]
    fn the_lane_count_follows_the_length_and_the_batch() {
        let audio = vec![0.5f32; 720 * 16_000];
        let frames = audio.len() / HOP;
        let m = MIN_LANE_FRAMES;
        assert_eq!(
            lanes(&audio[..16_000 * 119], 11_900, 8, m),
            vec![(0, 11_900)]
        );
        assert_eq!(lanes(&audio[..16_000 * 120], 12_000, 8, m).len(), 2);
        assert_eq!(lanes(&audio, frames, 8, m).len(), 8);
        assert_eq!(lanes(&audio, frames, 3, m).len(), 3);
        assert_eq!(lanes(&audio, frames, 0, m).len(), 1);
        // The automatic mode's lanes: 6 minutes at least when conditioning on previous text,
        // as the batched mode's without.
        assert_eq!(auto_min_lane(false), m);
        let auto = auto_min_lane(true);
        assert_eq!(lanes(&audio[..16_000 * 719], 71_900, 8, auto).len(), 1);
        assert_eq!(lanes(&audio, frames, 8, auto).len(), 2);
        // Without any pause a cut lands within the search range of its ideal place.
        for (k, l) in lanes(&audio, frames, 4, m).iter().enumerate().skip(1) {
            assert!(l.0.abs_diff(k * frames / 4) <= SEARCH_FRAMES, "{l:?}");
        }
    }
}
