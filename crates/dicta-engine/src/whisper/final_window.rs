//! The last window of a recording (or of a lane of the batched long-form mode).
//!
//! Whisper often ends a window's text a few seconds before the window's end: it opens a new
//! segment (`<|26.00|><|26.00|>`) and stops, leaving the rest to the next window. Inside a
//! recording that is how the seek loop moves on. In the last window it costs a whole encoder
//! pass for the 1–4 s that remain (faster-whisper does the same): 7 of the 8 recordings of the
//! bench's 8x30s workload, one window in four of its mixed workload, and a window at the end of
//! each lane of a long recording.
//!
//! [`FinalWindow::Finish`] decodes that rest in the window that holds it, when the window has at
//! least [`MIN_PADDING_FRAMES`] of padding after its audio (the model can see the recording
//! end): where the model would stop right after opening a segment, and the audio from that
//! segment's start on still sounds ([`FinalRest::at_hold_point`]), end-of-text is masked, once
//! per hypothesis ([`super::logits::LogitRules::apply_row`]), and the model transcribes the
//! rest with the whole window's context. A rest that is silent ends the recording without
//! another window.

use super::logits::TimestampIds;

/// How the last window of a recording ends when the model stops before the end of its audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FinalWindow {
    /// faster-whisper's seek loop: the rest goes to one more window.
    Seek,
    /// The rest is decoded in the same window while it still sounds; a silent rest ends the
    /// recording.
    Finish,
    /// `Finish` with int8 weights, `Seek` with float32 (the reference path, token-identical
    /// to faster-whisper).
    #[default]
    Auto,
}

impl FinalWindow {
    /// Stable name ("seek", "finish" or "auto").
    pub fn as_str(&self) -> &'static str {
        match self {
            FinalWindow::Seek => "seek",
            FinalWindow::Finish => "finish",
            FinalWindow::Auto => "auto",
        }
    }

    /// Parses [`Self::as_str`]'s names.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "seek" => Some(FinalWindow::Seek),
            "finish" => Some(FinalWindow::Finish),
            "auto" => Some(FinalWindow::Auto),
            _ => None,
        }
    }

    /// Whether last windows are finished with weights of this compute type.
    pub fn finishes(&self, int8: bool) -> bool {
        match self {
            FinalWindow::Seek => false,
            FinalWindow::Finish => true,
            FinalWindow::Auto => int8,
        }
    }
}

/// How far under the window's loudest a timestamp step may be and still sound: 1.0 in
/// Whisper's log-mel (log10 power / 4), i.e. 40 dB.
const SOUND_RANGE: f32 = 1.0;
/// How far over the window's quietest step a step must be to sound (10 dB): a steady noise
/// floor is not sound, whatever its level.
const ABOVE_FLOOR: f32 = 0.25;
/// Padding (mel frames: 1 s) a last window needs after its audio to be finished in place. The
/// model then sees the recording end; where speech runs to the window's edge it cannot, and
/// a rest it was held to came out as repetitions and timestamps past the audio (the dev set's
/// 30.0 s conversation; 8x30s clips of 29.7–29.9 s).
pub const MIN_PADDING_FRAMES: usize = 100;
/// Sounding timestamp steps (20 ms each) a rest needs to be decoded: 200 ms, about a short word.
pub const MIN_SOUND_STEPS: usize = 10;

/// Where a last window's audio sounds, per timestamp step (two mel frames, 20 ms).
#[derive(Debug, Clone, PartialEq)]
pub struct FinalRest {
    /// `after[t]`: sounding steps from step `t` to the end of the content.
    after: Vec<u32>,
}

impl FinalRest {
    /// The sound of a window's log-mel `mel` `[n_mels, 3000]` (row-major) over its first
    /// `content_frames` frames: a step sounds when its loudest band is within 40 dB of the
    /// window's loudest and 10 dB over its quietest step.
    pub fn of(mel: &[f32], n_mels: usize, content_frames: usize) -> Self {
        let width = mel.len() / n_mels.max(1);
        let frames = content_frames.min(width);
        let steps = frames.div_ceil(2);
        let level: Vec<f32> = (0..steps)
            .map(|t| {
                (2 * t..(2 * t + 2).min(frames))
                    .flat_map(|f| (0..n_mels).map(move |b| mel[b * width + f]))
                    .fold(f32::NEG_INFINITY, f32::max)
            })
            .collect();
        let peak = level.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let floor = level.iter().copied().fold(f32::INFINITY, f32::min);
        let mut after = vec![0u32; steps + 1];
        for t in (0..steps).rev() {
            let sounds = level[t] >= peak - SOUND_RANGE && level[t] >= floor + ABOVE_FLOOR;
            after[t] = after[t + 1] + sounds as u32;
        }
        Self { after }
    }

    /// Whether at least [`MIN_SOUND_STEPS`] steps sound from timestamp step `step` on.
    pub fn sounds_from(&self, step: usize) -> bool {
        self.after.get(step).map_or(0, |&n| n as usize) >= MIN_SOUND_STEPS
    }

    /// Whether `generated` has just opened a segment, after an earlier segment and later than
    /// that one's start, at a time from which the audio still sounds: where stopping would
    /// leave a rest that sounds to another window. (The timestamp rules allow only text or
    /// end-of-text there, so masking end-of-text makes the model transcribe the rest.)
    pub fn at_hold_point(&self, generated: &[u32], ts: &TimestampIds) -> bool {
        let n = generated.len();
        let is_ts = |t: u32| t >= ts.timestamp_begin;
        if n < 3 || !is_ts(generated[n - 1]) || !is_ts(generated[n - 2]) {
            return false;
        }
        let Some(&earlier) = generated[..n - 2].iter().rev().find(|&&t| is_ts(t)) else {
            return false;
        };
        let start = generated[n - 1];
        start > earlier && self.sounds_from((start - ts.timestamp_begin) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::whisper::logits::tests::TS;

    /// A 2-band window of `frames` frames: loud (1.0) on `loud`, quiet (-1.0) elsewhere.
    fn window(frames: usize, loud: std::ops::Range<usize>) -> Vec<f32> {
        let mut m = vec![-1.0f32; 2 * 3000];
        for f in loud {
            m[3000 + f] = 1.0;
        }
        // Frames past the content are zero (as `transcriber::window` pads) and never count.
        for f in frames..3000 {
            m[f] = 0.0;
            m[3000 + f] = 0.0;
        }
        m
    }

    #[test]
    fn counts_sounding_steps_to_the_end_of_the_content() {
        let r = FinalRest::of(&window(100, 20..60), 2, 100);
        // Steps 10..30 sound (frames 20..60); 50 steps in all.
        assert_eq!(r.after.len(), 51);
        assert_eq!(r.after[0], 20);
        assert_eq!(r.after[25], 5);
        assert_eq!(r.after[30], 0);
        assert!(r.sounds_from(20) && !r.sounds_from(21));
        // 30 dB under the peak sounds, 50 dB does not; a steady floor never does.
        let mut m = window(100, 0..10);
        m[3000 + 80] = 1.0 - 0.75;
        m[3000 + 90] = 1.0 - 1.25;
        let r = FinalRest::of(&m, 2, 100);
        assert_eq!(r.after[40], 1);
        let flat = FinalRest::of(&window(100, 0..0), 2, 100);
        assert_eq!(flat.after[0], 0);
    }

    #[test]
    fn hold_points_are_later_segment_starts_where_the_rest_sounds() {
        // Sound from frame 40 (step 20) to the end (step 50).
        let r = FinalRest::of(&window(100, 40..100), 2, 100);
        let ts = |step: u32| TS.timestamp_begin + step;
        let held = |g: &[u32]| r.at_hold_point(g, &TS);
        // A segment opened at step 20 after one from 0 to 20: held.
        assert!(held(&[ts(0), 5, ts(20), ts(20)]));
        // Opened where only 9 sounding steps remain: let go.
        assert!(!held(&[ts(0), 5, ts(41), ts(41)]));
        // Opened at the earlier segment's start again (a loop): let go.
        assert!(!held(&[ts(0), 5, ts(20), ts(20), 6, ts(20), ts(20)]));
        // Inside a segment, after a closing timestamp, or with no segment before: let go.
        assert!(!held(&[ts(0), 5, ts(20), 7]));
        assert!(!held(&[ts(0), 5, ts(20)]));
        assert!(!held(&[ts(20), ts(20)]));
        assert!(!held(&[ts(20)]));
    }

    #[test]
    fn names_round_trip_and_auto_follows_the_weights() {
        for m in [FinalWindow::Seek, FinalWindow::Finish, FinalWindow::Auto] {
            assert_eq!(FinalWindow::parse(m.as_str()), Some(m));
        }
        assert_eq!(FinalWindow::parse("all"), None);
        assert!(FinalWindow::Auto.finishes(true) && !FinalWindow::Auto.finishes(false));
        assert!(FinalWindow::Finish.finishes(false) && !FinalWindow::Seek.finishes(true));
    }
}
