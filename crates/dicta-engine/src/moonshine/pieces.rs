//! Cutting long recordings at pauses into pieces Moonshine handles well.
//!
//! Moonshine's encoder takes any length, but its decoder was trained on utterances up to
//! ~30 s and drifts on longer inputs. A recording longer than `max` samples is cut at the
//! quietest 200 ms stretch (lowest energy) between `min` and `max` samples after the previous
//! cut; a recording without pauses is cut at `max`. The cut depends only on the samples, so
//! a recording is cut the same way alone and in a batch.

use std::ops::Range;

/// Energy frame: 10 ms at 16 kHz.
const FRAME: usize = 160;
/// Frames per pause window (200 ms).
const WINDOW: usize = 20;

/// Energy of each 10 ms frame of `samples` as prefix sums (`prefix[f]` = energy of frames
/// `0..f`).
fn energy_prefix(samples: &[f32]) -> Vec<f64> {
    let mut prefix = Vec::with_capacity(samples.len() / FRAME + 2);
    prefix.push(0.0);
    for c in samples.chunks(FRAME) {
        let e: f64 = c.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
        prefix.push(prefix.last().copied().unwrap_or(0.0) + e);
    }
    prefix
}

/// The centre of the quietest 200 ms of `samples` whose centre lies in `from..=to` (sample
/// indices; ties go to the later window), or `None` when no window fits.
pub fn quietest_point(samples: &[f32], from: usize, to: usize) -> Option<usize> {
    let to = to.min(samples.len());
    if to < from || samples.len() < FRAME * WINDOW {
        return None;
    }
    let prefix = energy_prefix(samples);
    let frames = prefix.len() - 1;
    let mut best: Option<(f64, usize)> = None;
    for f in from / FRAME..=to / FRAME {
        if f + WINDOW > frames {
            break;
        }
        let centre = f * FRAME + WINDOW * FRAME / 2;
        if centre < from || centre > to {
            continue;
        }
        let e = prefix[f + WINDOW] - prefix[f];
        if best.is_none_or(|(b, _)| e <= b) {
            best = Some((e, centre));
        }
    }
    best.map(|(_, c)| c)
}

/// Pieces of `samples` (consecutive, covering it): each at most `max` samples; every piece but
/// the last at least `min` (clamped to `max`).
pub fn cut_at_pauses(samples: &[f32], min: usize, max: usize) -> Vec<Range<usize>> {
    let n = samples.len();
    let max = max.max(FRAME * WINDOW);
    let min = min.min(max);
    if n <= max {
        return std::iter::once(0..n).collect();
    }
    // Energy per 10 ms frame, then prefix sums for windowed sums.
    let energy: Vec<f64> = samples
        .chunks(FRAME)
        .map(|c| c.iter().map(|&x| f64::from(x) * f64::from(x)).sum())
        .collect();
    let mut prefix = Vec::with_capacity(energy.len() + 1);
    prefix.push(0.0);
    for e in &energy {
        prefix.push(prefix.last().copied().unwrap_or(0.0) + e);
    }
    let window_sum = |f: usize| prefix[(f + WINDOW).min(energy.len())] - prefix[f];
    let mut pieces = Vec::new();
    let mut start = 0usize;
    while n - start > max {
        // Candidate windows whose centre lies in [start + min, start + max].
        let first = (start + min) / FRAME;
        let last = (start + max) / FRAME;
        let mut best: Option<(f64, usize)> = None;
        for f in first..=last {
            let centre = (f * FRAME + WINDOW * FRAME / 2).min(n);
            if centre <= start || centre > start + max {
                continue;
            }
            let e = window_sum(f);
            // Ties go to the later window: longer pieces, fewer cuts.
            if best.is_none_or(|(b, _)| e <= b) {
                best = Some((e, centre));
            }
        }
        let cut = best.map_or(start + max, |(_, c)| c);
        pieces.push(start..cut);
        start = cut;
    }
    pieces.push(start..n);
    pieces
}

/// Frames a pause lasts at least for [`cut_at_first_pauses`] (400 ms: between sentences, longer
/// than the breaks between a sentence's phrases).
const PAUSE: usize = 40;
/// How far below the recording's loud frames (their 95th percentile energy) a pause is: 35 dB.
const PAUSE_DB: f64 = 35.0;

/// Pieces of `samples` that end at the first pause once they are `after` samples long: the
/// quietest 200 ms of the first stretch of at least 400 ms that lies [`PAUSE_DB`] under the
/// recording's loud frames. A stretch of speech with no such pause within `max` samples is
/// cut as [`cut_at_pauses`] cuts (the quietest 200 ms between `min` and `max`). So a piece
/// holds one utterance where the speaker pauses between utterances, and no piece is cut
/// inside speech that fits in `max`.
pub fn cut_at_first_pauses(
    samples: &[f32],
    after: usize,
    min: usize,
    max: usize,
) -> Vec<Range<usize>> {
    let n = samples.len();
    let energy: Vec<f64> = samples
        .chunks(FRAME)
        .map(|c| c.iter().map(|&x| f64::from(x) * f64::from(x)).sum())
        .collect();
    let mut sorted = energy.clone();
    sorted.sort_by(f64::total_cmp);
    let loud = sorted.get(sorted.len() * 95 / 100).copied().unwrap_or(0.0);
    if loud <= 0.0 {
        return cut_at_pauses(samples, min, max);
    }
    let floor = loud * 10f64.powf(-PAUSE_DB / 10.0);
    let quiet: Vec<bool> = energy.iter().map(|&e| e <= floor).collect();
    let mut pieces = Vec::new();
    let mut start = 0usize;
    loop {
        // The first run of PAUSE quiet frames starting at or after `start + after` whose
        // middle fits in the piece; the cut goes to the middle of the run's quietest window.
        let from = (start + after).div_ceil(FRAME);
        let limit = ((start + max) / FRAME).min(energy.len());
        let mut cut = None;
        let mut f = from;
        while f < limit {
            if !quiet[f] {
                f += 1;
                continue;
            }
            let run_end = (f..energy.len())
                .find(|&g| !quiet[g])
                .unwrap_or(energy.len());
            if run_end - f >= PAUSE && run_end < energy.len() {
                // Centre of the run (a pause is silence on both sides of the cut).
                cut = Some(((f + run_end) / 2 * FRAME).min(start + max));
                break;
            }
            f = run_end;
        }
        match cut {
            Some(c) if c > start => {
                pieces.push(start..c);
                start = c;
            }
            _ if n - start > max => {
                let rest = cut_at_pauses(&samples[start..], min, max);
                let c = start + rest[0].end;
                pieces.push(start..c);
                start = c;
            }
            _ => break,
        }
    }
    pieces.push(start..n);
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(n: usize) -> Vec<f32> {
        (0..n).map(|i| (i as f32 * 0.1).sin() * 0.5).collect()
    }

    #[test]
    fn short_audio_is_one_piece() {
        assert_eq!(
            cut_at_pauses(&tone(1000), 10, 16_000),
            std::iter::once(0..1000).collect::<Vec<_>>()
        );
        assert_eq!(
            cut_at_pauses(&[], 10, 16_000),
            std::iter::once(0..0).collect::<Vec<_>>()
        );
    }

    /// Tones of `secs` seconds each, with `gap` seconds of a faint hum (−80 dBFS) between them.
    fn utterances(secs: &[f32], gap: f32) -> (Vec<f32>, Vec<std::ops::Range<usize>>) {
        let mut x = Vec::new();
        let mut gaps = Vec::new();
        for (i, &s) in secs.iter().enumerate() {
            if i > 0 {
                let g = (gap * 16_000.0) as usize;
                gaps.push(x.len()..x.len() + g);
                x.extend((0..g).map(|j| (j as f32 * 0.01).sin() * 1e-4));
            }
            x.extend(tone((s * 16_000.0) as usize));
        }
        (x, gaps)
    }

    #[test]
    fn first_pauses_end_pieces_once_they_are_long_enough() {
        // 3 s, 0.3 s, 2 s, 6 s, with 0.6 s pauses: the pause after 0.3 s of speech is skipped
        // (its piece, from the middle of the pause before, is not a second long before the next
        // 400 ms of quiet), every other ends a piece.
        let (x, gaps) = utterances(&[3.0, 0.3, 2.0, 6.0], 0.6);
        let p = cut_at_first_pauses(&x, 16_000, 8 * 16_000, 20 * 16_000);
        assert_eq!(p.len(), 3, "{p:?}");
        assert_eq!((p[0].start, p[2].end), (0, x.len()));
        for (w, gap) in p.windows(2).zip([&gaps[0], &gaps[2]]) {
            assert_eq!(w[0].end, w[1].start);
            assert!(gap.contains(&w[0].end), "cut {} not in {gap:?}", w[0].end);
        }
        // A pause shorter than 400 ms ends nothing.
        let (x, _) = utterances(&[3.0, 3.0], 0.3);
        assert_eq!(
            cut_at_first_pauses(&x, 16_000, 8 * 16_000, 20 * 16_000).len(),
            1
        );
        // Speech without pauses longer than `max` is cut as `cut_at_pauses` cuts.
        let x = tone(45 * 16_000);
        assert_eq!(
            cut_at_first_pauses(&x, 16_000, 8 * 16_000, 20 * 16_000),
            cut_at_pauses(&x, 8 * 16_000, 20 * 16_000)
        );
        // Silence alone: one piece; nothing at all: one empty piece.
        assert_eq!(
            cut_at_first_pauses(&vec![0.0; 50_000], 16_000, 1, 20 * 16_000).len(),
            1
        );
        let empty = cut_at_first_pauses(&[], 16_000, 1, 20 * 16_000);
        assert_eq!(empty, std::iter::once(0..0).collect::<Vec<_>>());
    }

    #[test]
    fn cuts_in_the_pause() {
        // 12 s of tone, 1 s of silence, 12 s of tone; pieces of at most 20 s.
        let mut x = tone(12 * 16_000);
        x.extend(vec![0.0; 16_000]);
        x.extend(tone(12 * 16_000));
        let p = cut_at_pauses(&x, 5 * 16_000, 20 * 16_000);
        assert_eq!(p.len(), 2);
        let cut = p[0].end;
        assert!((12 * 16_000..13 * 16_000).contains(&cut), "cut at {cut}");
        assert_eq!(p[1], cut..x.len());
    }

    #[test]
    fn pieces_cover_and_respect_bounds() {
        let x = tone(95 * 16_000 + 123);
        let p = cut_at_pauses(&x, 8 * 16_000, 20 * 16_000);
        assert_eq!(p.first().unwrap().start, 0);
        assert_eq!(p.last().unwrap().end, x.len());
        for w in p.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        for (i, r) in p.iter().enumerate() {
            assert!(r.len() <= 20 * 16_000);
            if i + 1 < p.len() {
                assert!(r.len() >= 8 * 16_000, "{r:?}");
            }
        }
    }
}
