//! Incremental resampling of a live stream to 16 kHz with `dicta_audio`'s windowed-sinc
//! resampler ([`dicta_audio::resample::resample_sinc`]).
//!
//! That function works on a whole signal. A stream arrives in blocks, and
//! resampling each block on its own would zero-pad both edges of every block (clicks every
//! frame). Instead each call resamples the unconsumed input plus a left margin and emits only
//! the outputs whose filter support lies entirely inside that span; blocks start on input
//! indices that are multiples of the reduced rate step, so the output grid is the one-shot
//! grid. The result equals the one-shot resampling of the whole stream bit for bit (tested), at
//! the cost of re-filtering two margins per call.
//!
//! Why the sinc resampler and not `dicta_audio::resample::resample` (the libswresample port the
//! offline path uses for parity with faster-whisper): the sinc resampler pads the edges of its
//! input with zeros and returns `round(n · 16000 / rate)` samples, which is what makes the
//! block-wise computation exact; swr mirrors the edges and sizes its output by the filter
//! windows that fit, so blocks would not compose.

use dicta_audio::resample::{resample_sinc as resample, sinc_output_len as output_len};
use dicta_audio::SAMPLE_RATE;
use dicta_core::{Error, Result};

/// Input samples kept on each side of an output: at least half of `dicta_audio`'s 256-tap
/// windowed-sinc filter (taps are spaced at the input rate for up- and downsampling alike).
const MARGIN: u64 = 256;
/// Largest reduced input step accepted; a block must start on a multiple of it, so a large
/// one (exotic rates such as 44 101 Hz) would keep the whole stream buffered.
const MAX_STEP: u64 = 1000;

/// Turns blocks at `from` Hz into 16 kHz samples (or another rate) as they arrive.
#[derive(Debug)]
pub(crate) struct StreamResampler {
    from: u32,
    to: u32,
    /// Reduced ratio: one output step is `p / q` input samples.
    p: u64,
    q: u64,
    /// Input samples from absolute index `base` on.
    buf: Vec<f32>,
    /// Absolute input index of `buf[0]`; always a multiple of `p`.
    base: u64,
    /// Input samples received since the last [`StreamResampler::finish`].
    received: u64,
    /// Output samples returned since the last [`StreamResampler::finish`].
    emitted: u64,
}

impl StreamResampler {
    /// A resampler from `from` Hz. Errors (`InvalidInput`) for rates outside 1 kHz..=384 kHz or
    /// whose ratio to 16 kHz cannot be streamed without unbounded buffering.
    pub fn new(from: u32) -> Result<Self> {
        Self::between(from, SAMPLE_RATE)
    }

    /// A resampler from `from` Hz to `to` Hz (same limits on both).
    pub fn between(from: u32, to: u32) -> Result<Self> {
        if !(1_000..=384_000).contains(&to) {
            return Err(Error::invalid_input(format!(
                "an output rate must be between 1000 and 384000 Hz, got {to}"
            )));
        }
        if !(1_000..=384_000).contains(&from) {
            return Err(Error::invalid_input(format!(
                "sample_rate must be between 1000 and 384000 Hz, got {from}"
            )));
        }
        let g = gcd(u64::from(from), u64::from(to));
        let (p, q) = (u64::from(from) / g, u64::from(to) / g);
        if p > MAX_STEP {
            return Err(Error::invalid_input(format!(
                "sample_rate {from} Hz cannot be streamed (its ratio to {to} Hz is {p}/{q}); \
                 use a common rate such as 8000, 16000, 22050, 24000, 32000, 44100 or 48000"
            )));
        }
        Ok(Self {
            from,
            to,
            p,
            q,
            buf: Vec::new(),
            base: 0,
            received: 0,
            emitted: 0,
        })
    }

    /// Adds a block; returns the output samples that are now final.
    pub fn push(&mut self, samples: &[f32]) -> Result<Vec<f32>> {
        if self.from == self.to {
            return Ok(samples.to_vec());
        }
        self.buf.extend_from_slice(samples);
        self.received += samples.len() as u64;
        // Output m sits at input m·p/q and needs inputs up to MARGIN past it.
        let Some(avail) = self.received.checked_sub(MARGIN) else {
            return Ok(Vec::new());
        };
        let ready = avail * self.q / self.p;
        let out = self.emit_until(ready)?;
        // The next output needs inputs from (emitted·p/q − MARGIN) on; keep a block start
        // aligned to p so the output grid stays the one-shot grid.
        let keep = (self.emitted * self.p / self.q).saturating_sub(MARGIN) / self.p * self.p;
        if keep > self.base {
            self.buf.drain(..(keep - self.base) as usize);
            self.base = keep;
        }
        Ok(out)
    }

    /// Ends the stream: returns the remaining samples (the tail is filtered against zeros, as
    /// the one-shot resampler does) and starts over for the next stream.
    pub fn finish(&mut self) -> Result<Vec<f32>> {
        let out = if self.from == self.to {
            Vec::new()
        } else {
            let total = output_len(self.received as usize, self.from, self.to) as u64;
            self.emit_until(total)?
        };
        self.buf.clear();
        (self.base, self.received, self.emitted) = (0, 0, 0);
        Ok(out)
    }

    /// Resamples the buffer and returns outputs `emitted..until` (absolute indices).
    fn emit_until(&mut self, until: u64) -> Result<Vec<f32>> {
        if until <= self.emitted {
            return Ok(Vec::new());
        }
        let block = resample(&self.buf, self.from, self.to)?;
        let offset = self.base / self.p * self.q;
        let lo = ((self.emitted - offset) as usize).min(block.len());
        let hi = ((until - offset) as usize).min(block.len());
        self.emitted = offset + hi as u64;
        Ok(block[lo..hi].to_vec())
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signal(n: usize, rate: u32) -> Vec<f32> {
        // A chirp plus a little deterministic noise: energy across the band.
        let mut x: u32 = 12345;
        (0..n)
            .map(|i| {
                let t = i as f32 / rate as f32;
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let noise = (x >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
                0.5 * (t * (300.0 + 2000.0 * t) * std::f32::consts::TAU).sin() + 0.05 * noise
            })
            .collect()
    }

    /// Any block split gives the one-shot resampling of the whole signal, bit for bit.
    #[test]
    fn blocks_of_any_size_match_one_shot_resampling() {
        for rate in [8_000u32, 22_050, 44_100, 48_000] {
            let input = signal(rate as usize * 3 / 2 + 17, rate);
            let whole = resample(&input, rate, SAMPLE_RATE).unwrap();
            for sizes in [&[1usize, 7, 160][..], &[441, 1000], &[4096], &[100_000]] {
                let mut r = StreamResampler::new(rate).unwrap();
                let mut out = Vec::new();
                let mut pos = 0;
                let mut i = 0;
                while pos < input.len() {
                    let n = sizes[i % sizes.len()].min(input.len() - pos);
                    out.extend(r.push(&input[pos..pos + n]).unwrap());
                    pos += n;
                    i += 1;
                }
                out.extend(r.finish().unwrap());
                assert_eq!(out.len(), whole.len(), "{rate} Hz, blocks {sizes:?}");
                let worst = out
                    .iter()
                    .zip(&whole)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                assert!(
                    worst == 0.0,
                    "{rate} Hz, blocks {sizes:?}: max diff {worst}"
                );
            }
        }
    }

    /// Upsampling (16 kHz to 48 kHz, as the noise reduction runs) composes the same way.
    #[test]
    fn upsampling_blocks_match_one_shot_resampling() {
        let input = signal(16_000 + 333, 16_000);
        let whole = resample(&input, 16_000, 48_000).unwrap();
        for size in [7usize, 160, 333, 20_000] {
            let mut r = StreamResampler::between(16_000, 48_000).unwrap();
            let mut out = Vec::new();
            for block in input.chunks(size) {
                out.extend(r.push(block).unwrap());
            }
            out.extend(r.finish().unwrap());
            assert_eq!(out, whole, "blocks of {size}");
        }
    }

    #[test]
    fn finish_starts_a_new_stream_and_16k_passes_through() {
        let input = signal(5000, 48_000);
        let mut r = StreamResampler::new(48_000).unwrap();
        let first: Vec<f32> = [r.push(&input).unwrap(), r.finish().unwrap()].concat();
        let again: Vec<f32> = [r.push(&input).unwrap(), r.finish().unwrap()].concat();
        assert_eq!(first, again);
        let mut same = StreamResampler::new(16_000).unwrap();
        assert_eq!(same.push(&input).unwrap(), input);
        assert!(same.finish().unwrap().is_empty());
    }

    #[test]
    fn unusable_rates_are_refused_by_value() {
        for rate in [0, 999, 400_000, 44_101] {
            let e = StreamResampler::new(rate).unwrap_err();
            assert!(e.message.contains(&rate.to_string()), "{}", e.message);
        }
    }
}
