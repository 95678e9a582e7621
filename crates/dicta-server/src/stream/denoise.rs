//! Noise reduction of a live 16 kHz stream with RNNoise (`nnnoiseless`, the pure-Rust port of
//! Xiph's recurrent-network noise suppressor, with its model compiled in): what a Realtime
//! session's `audio.input.noise_reduction` runs on the audio its turn detector hears.
//!
//! Only the detector: Whisper transcribes the audio as it came better than the cleaned audio
//! (tiny.en on the dev set's short clips, `tools/realtime_noise/measure.py`: 16.60% → 17.32%
//! WER clean, 36.17% → 50.04% in white noise at 5 dB), while turns found on the cleaned audio
//! give a slightly lower WER (19.82% → 18.86% clean, 38.60% → 37.96% at 5 dB).
//!
//! RNNoise works on 10 ms frames of 48 kHz audio, so blocks go 16 kHz → 48 kHz → RNNoise →
//! 16 kHz through two [`StreamResampler`]s (exact block-wise, so the block size changes nothing).
//! The output is aligned with the input: RNNoise's one frame of delay is dropped, so output
//! sample `i` is input sample `i` cleaned, and times measured on the output (turns, words) are
//! the input's. It is only late: about 40 ms of audio (the resamplers' filter margins and one
//! frame) stays inside until more arrives.

use dicta_core::Result;
use nnnoiseless::DenoiseState;

use super::resample::StreamResampler;

/// RNNoise's rate.
const RATE: u32 = 48_000;
/// RNNoise reads and writes 16-bit sample values as floats.
const SCALE: f32 = 32_768.0;

/// A stream's noise suppressor (keeps the network's state across blocks).
pub(crate) struct Denoiser {
    up: StreamResampler,
    down: StreamResampler,
    state: Box<DenoiseState<'static>>,
    /// 48 kHz samples not yet a whole frame, already scaled to RNNoise's 16-bit range.
    pending: Vec<f32>,
    /// Output samples still to drop (RNNoise's first frame is its delay).
    skip: usize,
    frame: Vec<f32>,
}

impl std::fmt::Debug for Denoiser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Denoiser")
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl Denoiser {
    /// A suppressor for a 16 kHz stream.
    pub fn new() -> Result<Self> {
        Ok(Self {
            up: StreamResampler::between(dicta_audio::SAMPLE_RATE, RATE)?,
            down: StreamResampler::between(RATE, dicta_audio::SAMPLE_RATE)?,
            state: DenoiseState::new(),
            pending: Vec::new(),
            skip: DenoiseState::FRAME_SIZE,
            frame: vec![0.0; DenoiseState::FRAME_SIZE],
        })
    }

    /// Adds 16 kHz samples; returns the cleaned 16 kHz samples that are now final (they follow
    /// the previous call's).
    pub fn push(&mut self, samples: &[f32]) -> Result<Vec<f32>> {
        let up = self.up.push(samples)?;
        // Scaled on the way in, so that frames go to RNNoise straight from `pending`.
        self.pending.extend(up.iter().map(|x| x * SCALE));
        let n = DenoiseState::FRAME_SIZE;
        let whole = self.pending.len() / n * n;
        let mut clean = Vec::with_capacity(whole);
        for chunk in self.pending[..whole].chunks_exact(n) {
            // Non-finite samples never reach here (the session's decoders give finite
            // values); RNNoise's state would not recover from one.
            self.state.process_frame(&mut self.frame, chunk);
            clean.extend(self.frame.iter().map(|x| x / SCALE));
        }
        self.pending.drain(..whole);
        let drop = self.skip.min(clean.len());
        self.skip -= drop;
        self.down.push(&clean[drop..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 400 Hz tone that stops halfway, in white noise; and the noise alone.
    fn noisy(n: usize) -> (Vec<f32>, Vec<f32>) {
        let mut x: u32 = 7;
        let noise: Vec<f32> = (0..n)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                ((x >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.05
            })
            .collect();
        let tone: Vec<f32> = (0..n)
            .map(|i| {
                if i < n / 2 {
                    0.3 * (i as f32 * 400.0 / 16_000.0 * std::f32::consts::TAU).sin()
                } else {
                    0.0
                }
            })
            .collect();
        (tone.iter().zip(&noise).map(|(t, e)| t + e).collect(), noise)
    }

    fn rms(x: &[f32]) -> f32 {
        (x.iter().map(|v| v * v).sum::<f32>() / x.len().max(1) as f32).sqrt()
    }

    /// The block size changes nothing, and the output lines up with the input.
    #[test]
    fn blocks_of_any_size_give_the_same_output() {
        let (input, _) = noisy(16_000 * 2);
        let mut whole = Denoiser::new().unwrap();
        let one = whole.push(&input).unwrap();
        // Only the last ~40 ms is still inside.
        assert!(
            one.len() + 16 * 60 > input.len() && one.len() < input.len(),
            "{}",
            one.len()
        );
        for size in [7usize, 160, 999, 4_800] {
            let mut d = Denoiser::new().unwrap();
            let mut out = Vec::new();
            for block in input.chunks(size) {
                out.extend(d.push(block).unwrap());
            }
            assert_eq!(out, one[..out.len().min(one.len())], "blocks of {size}");
            assert!(
                out.len() + 16 * 60 > input.len(),
                "blocks of {size}: {}",
                out.len()
            );
        }
    }

    /// Real speech (JFK) in white noise at about 5 dB SNR: the noise between his phrases comes
    /// out far quieter, and the speech keeps most of its energy.
    #[test]
    fn noise_is_suppressed_around_real_speech() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data/openai_whisper/jfk.16k.wav"
        );
        let Ok(speech) = dicta_audio::decode::load_path(std::path::Path::new(path)) else {
            return;
        };
        let (_, noise) = noisy(speech.len());
        let input: Vec<f32> = speech.iter().zip(&noise).map(|(s, e)| s + e).collect();
        let mut d = Denoiser::new().unwrap();
        let out = d.push(&input).unwrap();
        // 20 ms frames (after the first second, which the network adapts in): the quietest
        // fifth of the speech's frames are the pauses, the loudest fifth speech.
        let frames: Vec<(f32, f32, f32)> = (50..out.len() / 320)
            .map(|k| {
                let r = k * 320..(k + 1) * 320;
                (
                    rms(&speech[r.clone()]),
                    rms(&input[r.clone()]),
                    rms(&out[r]),
                )
            })
            .collect();
        let mut order: Vec<usize> = (0..frames.len()).collect();
        order.sort_by(|&a, &b| frames[a].0.total_cmp(&frames[b].0));
        let fifth = frames.len() / 5;
        let mean = |ks: &[usize], f: fn(&(f32, f32, f32)) -> f32| {
            ks.iter().map(|&k| f(&frames[k])).sum::<f32>() / ks.len() as f32
        };
        let (quiet, loud) = (&order[..fifth], &order[order.len() - fifth..]);
        let (pause_in, pause_out) = (mean(quiet, |f| f.1), mean(quiet, |f| f.2));
        let (speech_in, speech_out) = (mean(loud, |f| f.0), mean(loud, |f| f.2));
        assert!(
            pause_out < 0.25 * pause_in,
            "pauses {pause_in} → {pause_out}"
        );
        assert!(
            speech_out > 0.5 * speech_in,
            "speech {speech_in} → {speech_out}"
        );
    }
}
