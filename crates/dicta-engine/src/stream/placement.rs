//! Where a stream decode's words lie in the stream: Whisper's timestamps moved to stream time,
//! or, for models without timestamps (Moonshine), each segment's words spread over the voiced
//! frames of the buffer.

use dicta_core::{Transcript, Word};

use super::whisper::{WhisperGeometry, SILENCE};
use super::SAMPLE_RATE;

/// Voiced 10 ms frames of a buffer, for spreading words without timestamps over speech.
pub(super) struct Voicing {
    /// `cum[f]`: voiced frames among frames `0..f`.
    cum: Vec<u32>,
}

/// Frame of the voicing estimate: 10 ms at 16 kHz.
const VOICE_FRAME: usize = SAMPLE_RATE / 100;

/// A frame is voiced when its RMS is within this many dB of the buffer's loudest frame (and
/// above [`SILENCE`]).
const VOICE_RANGE_DB: f32 = 35.0;

pub(super) fn geometry_voicing(g: &WhisperGeometry, buffer: &[f32]) -> Option<Voicing> {
    g.cut_at_pauses.then(|| Voicing::new(buffer))
}

impl Voicing {
    pub(super) fn new(samples: &[f32]) -> Self {
        let rms: Vec<f32> = samples
            .chunks(VOICE_FRAME)
            .map(|c| (c.iter().map(|x| x * x).sum::<f32>() / c.len() as f32).sqrt())
            .collect();
        let loudest = rms.iter().copied().fold(0.0f32, f32::max);
        let floor = (loudest * 10f32.powf(-VOICE_RANGE_DB / 20.0)).max(SILENCE);
        let mut cum = Vec::with_capacity(rms.len() + 1);
        cum.push(0u32);
        for r in rms {
            cum.push(cum[cum.len() - 1] + u32::from(r >= floor));
        }
        Self { cum }
    }

    /// The time (seconds from the buffer start) of voiced position `v` within frames
    /// `from..to`: voiced frames count, pauses do not. A start (`end == false`) lands at
    /// the beginning of a voiced frame, an end at the end of one, never inside a pause.
    fn time(&self, from: usize, to: usize, v: f64, end: bool) -> f64 {
        let base = f64::from(self.cum[from]);
        let target = base + v;
        let mut f = from;
        while f < to {
            let (lo, hi) = (f64::from(self.cum[f]), f64::from(self.cum[f + 1]));
            let voiced = hi > lo;
            if voiced && (if end { hi >= target } else { hi > target }) {
                let frac = (target - lo).clamp(0.0, 1.0);
                return (f as f64 + frac) * VOICE_FRAME as f64 / SAMPLE_RATE as f64;
            }
            f += 1;
        }
        to as f64 * VOICE_FRAME as f64 / SAMPLE_RATE as f64
    }

    /// Voiced frames among `from..to`.
    fn count(&self, from: usize, to: usize) -> f64 {
        f64::from(self.cum[to] - self.cum[from])
    }

    fn frames(&self) -> usize {
        self.cum.len() - 1
    }
}

/// Words of a transcript with absolute times, and its segments' absolute ends; times are
/// clamped to `limit` (the end of the decoded audio), since Whisper's timestamps may overshoot a
/// short buffer. Segments without word timings get their words spread over the segment by
/// character count: over its voiced frames when `voicing` is given (and has any), else over
/// its whole span.
///
/// "Words" without a letter or digit (a lone "." or "-") are dropped: they carry no text, and
/// Whisper emits runs of them on silence or noise; confirmed, their spread times would push the
/// committed end past real speech that follows, and that speech would be lost.
pub(super) fn words_of(
    t: &Transcript,
    offset: f64,
    limit: f64,
    voicing: Option<&Voicing>,
) -> (Vec<Word>, Vec<f64>) {
    let mut words = Vec::new();
    let mut ends = Vec::new();
    let clamp = |s: f64| (offset + s).min(limit);
    let has_text = |w: &str| w.chars().any(char::is_alphanumeric);
    for seg in &t.segments {
        ends.push(clamp(seg.end));
        if !seg.words.is_empty() {
            words.extend(
                seg.words
                    .iter()
                    .filter(|w| has_text(&w.word))
                    .map(|w| Word {
                        speaker: None,
                        word: w.word.trim().to_string(),
                        start: clamp(w.start),
                        end: clamp(w.end),
                        probability: w.probability,
                    }),
            );
            continue;
        }
        let parts: Vec<&str> = seg.text.split_whitespace().collect();
        let total = parts
            .iter()
            .map(|p| p.chars().count())
            .sum::<usize>()
            .max(1) as f64;
        let span = (seg.end - seg.start).max(0.0);
        // Frames of the segment in the voicing estimate, when it has voiced ones.
        let frames = voicing.and_then(|v| {
            let to_frame = |s: f64| (s * SAMPLE_RATE as f64 / VOICE_FRAME as f64) as usize;
            let (from, to) = (to_frame(seg.start), to_frame(seg.end).min(v.frames()));
            (from < to && v.count(from, to) > 0.0).then_some((v, from, to))
        });
        let at_char = |chars: usize, end: bool| match frames {
            Some((v, from, to)) => v.time(from, to, v.count(from, to) * chars as f64 / total, end),
            None => seg.start + span * chars as f64 / total,
        };
        let mut at = 0usize;
        for p in parts {
            let n = p.chars().count();
            let s = at_char(at, false);
            at += n;
            let e = at_char(at, true);
            if has_text(p) {
                words.push(Word {
                    speaker: None,
                    word: p.to_string(),
                    start: clamp(s),
                    end: clamp(e),
                    probability: None,
                });
            }
        }
    }
    (words, ends)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dicta_core::{Segment, Transcript};

    #[test]
    fn words_without_timestamps_are_spread_over_voiced_frames() {
        // 1 s of tone, 2 s of near-silence, 1 s of tone; a timestamp-free segment of two
        // equally long words over the whole buffer.
        let tone = |n: usize| {
            (0..n)
                .map(|i| 0.3 * (i as f32 * 0.05).sin())
                .collect::<Vec<_>>()
        };
        let mut audio = tone(SAMPLE_RATE);
        audio.extend(vec![1e-4f32; 2 * SAMPLE_RATE]);
        audio.extend(tone(SAMPLE_RATE));
        let t = Transcript {
            id: String::new(),
            audio: String::new(),
            text: "hello there".into(),
            language: None,
            language_probability: None,
            all_language_probs: None,
            duration: 4.0,
            segments: vec![Segment::new(0.0, 4.0, "hello there")],
            warnings: Vec::new(),
        };
        let voicing = Voicing::new(&audio);
        let (words, _) = words_of(&t, 10.0, 14.0, Some(&voicing));
        let times: Vec<(f64, f64)> = words.iter().map(|w| (w.start, w.end)).collect();
        // Each word lies on one stretch of tone, and neither spans the pause.
        assert!(
            (times[0].0 - 10.0).abs() < 0.02 && (times[0].1 - 11.0).abs() < 0.02,
            "{times:?}"
        );
        assert!(
            (times[1].0 - 13.0).abs() < 0.02 && (times[1].1 - 14.0).abs() < 0.02,
            "{times:?}"
        );
        // Without the voicing estimate the words split the buffer in halves.
        let (words, _) = words_of(&t, 10.0, 14.0, None);
        assert!((words[0].end - 12.0).abs() < 0.02, "{:?}", words[0]);
    }
}
