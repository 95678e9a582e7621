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

/// Energy of each 10 ms frame of a recording, and its prefix sums for windowed sums; computed
/// once per recording, since every cut reads it.
struct Energy {
    /// Energy of frame `f` (the last frame may be short).
    frame: Vec<f64>,
    /// `prefix[f]` = energy of frames `0..f`.
    prefix: Vec<f64>,
    /// Samples in the recording.
    n: usize,
}

impl Energy {
    fn new(samples: &[f32]) -> Self {
        let frame: Vec<f64> = samples
            .chunks(FRAME)
            .map(|c| c.iter().map(|&x| f64::from(x) * f64::from(x)).sum())
            .collect();
        let mut prefix = Vec::with_capacity(frame.len() + 1);
        prefix.push(0.0);
        for e in &frame {
            prefix.push(prefix.last().copied().unwrap_or(0.0) + e);
        }
        Self {
            frame,
            prefix,
            n: samples.len(),
        }
    }

    fn frames(&self) -> usize {
        self.frame.len()
    }

    /// The centre (a sample index) of the quietest 200 ms window that starts at a frame in
    /// `frames` and whose centre `fits`; windows running past the end are clipped to it. Ties
    /// go to the later window: longer pieces, fewer cuts.
    fn quietest(
        &self,
        frames: std::ops::RangeInclusive<usize>,
        fits: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let last = self.frames();
        let mut best: Option<(f64, usize)> = None;
        for f in frames {
            let centre = (f * FRAME + WINDOW * FRAME / 2).min(self.n);
            if !fits(centre) {
                continue;
            }
            let e = self.prefix[(f + WINDOW).min(last)] - self.prefix[f.min(last)];
            if best.is_none_or(|(b, _)| e <= b) {
                best = Some((e, centre));
            }
        }
        best.map(|(_, c)| c)
    }

    /// Where the piece starting at `start` ends when the recording goes on for more than `max`
    /// samples after it: the centre of the quietest 200 ms between `min` and `max` samples in,
    /// or `start + max` when no window fits.
    fn next_cut(&self, start: usize, min: usize, max: usize) -> usize {
        let frames = (start + min) / FRAME..=(start + max) / FRAME;
        self.quietest(frames, |c| c > start && c <= start + max)
            .unwrap_or(start + max)
    }
}

/// The centre of the quietest 200 ms of `samples` whose centre lies in `from..=to` (sample
/// indices; ties go to the later window), or `None` when no window fits.
pub fn quietest_point(samples: &[f32], from: usize, to: usize) -> Option<usize> {
    let to = to.min(samples.len());
    if to < from || samples.len() < FRAME * WINDOW {
        return None;
    }
    let energy = Energy::new(samples);
    // Whole windows only: the last starts `WINDOW` frames before the end.
    let last = (to / FRAME).min(energy.frames() - WINDOW);
    energy.quietest(from / FRAME..=last, |c| (from..=to).contains(&c))
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
    let energy = Energy::new(samples);
    let mut pieces = Vec::new();
    let mut start = 0usize;
    while n - start > max {
        let cut = energy.next_cut(start, min, max);
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
    let all = Energy::new(samples);
    let energy = &all.frame;
    let mut sorted = energy.clone();
    let loud = if sorted.is_empty() {
        0.0
    } else {
        let at = sorted.len() * 95 / 100;
        *sorted.select_nth_unstable_by(at, f64::total_cmp).1
    };
    if loud <= 0.0 {
        return cut_at_pauses(samples, min, max);
    }
    // As `cut_at_pauses` bounds them, for pieces cut inside speech.
    let max_cut = max.max(FRAME * WINDOW);
    let min_cut = min.min(max_cut);
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
            _ if n - start > max_cut => {
                // No pause in reach: cut inside speech as `cut_at_pauses` would, on the energies
                // already computed (recomputing the remainder's per cut was quadratic on long
                // recordings without pauses).
                let c = all.next_cut(start, min_cut, max_cut);
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
        // After a pause, speech without pauses is cut as `cut_at_pauses` cuts the rest of the
        // recording from there (the energies are shared, the cuts the same).
        let (x, gaps) = utterances(&[3.0, 50.0], 0.6);
        let p = cut_at_first_pauses(&x, 16_000, 8 * 16_000, 20 * 16_000);
        assert!(gaps[0].contains(&p[0].end), "{p:?}");
        let at = p[0].end;
        let rest: Vec<_> = cut_at_pauses(&x[at..], 8 * 16_000, 20 * 16_000)
            .into_iter()
            .map(|r| r.start + at..r.end + at)
            .collect();
        assert_eq!(p[1..], rest[..]);
        // A `max` under one window still covers the recording without an empty piece.
        let p = cut_at_first_pauses(&tone(5000), 100, 1, 1000);
        assert_eq!((p[0].start, p.last().unwrap().end), (0, 5000));
        assert!(p.iter().all(|r| !r.is_empty()), "{p:?}");
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
