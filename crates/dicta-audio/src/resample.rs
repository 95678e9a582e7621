//! Resampling, down-mixing and 16-bit quantisation, by default exactly as FFmpeg does them.
//!
//! Whisper users' reference transcripts come from two pipelines: faster-whisper's
//! `decode_audio` (PyAV: libswresample converting to mono `s16` at 16 kHz) and openai-whisper's
//! `ffmpeg -ac 1 -ar 16000 -f s16le`. Both run libswresample with its default options and hand
//! the model 16-bit samples. Greedy Whisper decoding is sensitive enough that a different (even
//! a better) resampler changes some transcripts, so the default path here reproduces
//! libswresample bit for bit:
//!
//! - [`resample`]: swr's Kaiser-windowed polyphase filter, its mirrored edges and its output
//!   length ([`output_len`]), computed in `f32` with the same rounding as FFmpeg's x86 FMA3
//!   kernel;
//! - [`downmix_to_mono`]: swr's stereo → mono matrix (the mean), applied after resampling as
//!   swr does;
//! - [`quantize_i16`]: the final `s16` conversion (round half to even, saturate), which
//!   faster-whisper then divides by 32768.
//!
//! [`resample_sinc`] keeps a higher-quality resampler (rubato, 256-tap windowed sinc, about
//! 90 dB from soxr) for callers who do not need to match those references.

mod sinc;
mod swr;

use dicta_core::{Error, Result};

pub use sinc::{resample_sinc, sinc_output_len};

/// Number of samples [`resample`] returns for `n` input samples, which is what libswresample
/// returns once flushed: about `n * to_rate / from_rate`, rounded up or down by its edge rules.
/// Equal rates return `n`; a zero rate returns 0.
pub fn output_len(n: usize, from_rate: u32, to_rate: u32) -> usize {
    if from_rate == to_rate {
        return n;
    }
    swr::Swr::new(from_rate, to_rate).map_or(0, |s| s.output_len(n))
}

/// Resamples mono `samples` from `from_rate` to `to_rate` Hz exactly as libswresample does with
/// its default options (the resampler behind PyAV, faster-whisper and the `ffmpeg` CLI).
///
/// Output sample `m` sits at input time `m * from_rate / to_rate`; the input is mirrored
/// around its first sample and half a filter of its last samples is reflected at the end, as
/// swr does, and the length is [`output_len`]. Inputs shorter than about one filter length
/// (0.3 ms at 8 kHz to 2 ms at 48 kHz) give no output, as in swr. Equal rates return a copy.
/// The result is not quantised; apply [`quantize_i16`] to get what an `s16` pipeline returns.
///
/// Errors: [`dicta_core::ErrorKind::InvalidInput`] when a rate is zero or past
/// [`crate::MAX_SAMPLE_RATE`].
pub fn resample(samples: &[f32], from_rate: u32, to_rate: u32) -> Result<Vec<f32>> {
    let max = crate::MAX_SAMPLE_RATE;
    if from_rate == 0 || to_rate == 0 || from_rate > max || to_rate > max {
        return Err(Error::invalid_input(format!(
            "cannot resample from {from_rate} Hz to {to_rate} Hz: sample rates must be 1 to {max} Hz"
        )));
    }
    if from_rate == to_rate {
        return Ok(samples.to_vec());
    }
    Ok(swr::Swr::new(from_rate, to_rate)?.process(samples))
}

/// Rounds every sample to the 16-bit grid in place, as FFmpeg's float → `s16` conversion does
/// (`lrintf(x * 32768)`: half to even, saturated to `[-32768, 32767]`), and scales back by
/// 1/32768 as faster-whisper does. Samples already on the grid are unchanged, and a zero is
/// +0.0 (an integer has no negative zero; `+ 0.0` turns the −0.0 that rounding a tiny negative
/// sample gives into it, so the bytes are faster-whisper's too).
pub fn quantize_i16(samples: &mut [f32]) {
    for v in samples.iter_mut() {
        *v = (*v * 32_768.0).round_ties_even().clamp(-32_768.0, 32_767.0) / 32_768.0 + 0.0;
    }
}

/// Down-mixes planes of equal length to mono as libswresample does when asked for a mono
/// layout: the mean of the channels, computed in `f32` as `0.5 * l + 0.5 * r` for stereo.
///
/// `int16_source` selects swr's integer path, which it uses when nothing is resampled and the
/// input is 16-bit (or 8-bit) PCM: `(l + r + 1) >> 1` on the 16-bit values. Planes of unequal
/// length are cut to the shortest. No planes give an empty result.
pub fn downmix_to_mono(planes: &[Vec<f32>], int16_source: bool) -> Vec<f32> {
    let n = planes.iter().map(Vec::len).min().unwrap_or(0);
    match planes {
        [] => Vec::new(),
        [mono] => mono.clone(),
        [l, r] if int16_source => l[..n]
            .iter()
            .zip(&r[..n])
            .map(|(a, b)| {
                let (a, b) = ((a * 32_768.0) as i32, (b * 32_768.0) as i32);
                ((a + b + 1) >> 1) as f32 / 32_768.0
            })
            .collect(),
        [l, r] => l[..n]
            .iter()
            .zip(&r[..n])
            .map(|(a, b)| 0.5 * a + 0.5 * b)
            .collect(),
        // swr weights surround layouts by their channel roles; the plain mean is our
        // approximation for those (rare in speech input).
        _ => {
            let scale = 1.0 / planes.len() as f32;
            let mut out = planes[0][..n].to_vec();
            for p in &planes[1..] {
                for (o, v) in out.iter_mut().zip(p) {
                    *o += v;
                }
            }
            out.iter_mut().for_each(|o| *o *= scale);
            out
        }
    }
}

/// The whole reference conversion of decoded planes (one per channel, at `from_rate`) to
/// mono 16 kHz-style output at `to_rate`: each plane resampled with [`resample`], down-mixed
/// with [`downmix_to_mono`] and quantised with [`quantize_i16`] — the order libswresample
/// uses when asked for mono `s16`. `int16_source` tells whether the input was 8/16-bit PCM.
///
/// Errors: [`dicta_core::ErrorKind::InvalidInput`] when a rate is zero.
pub fn to_mono_like_ffmpeg(
    planes: &[Vec<f32>],
    from_rate: u32,
    to_rate: u32,
    int16_source: bool,
) -> Result<Vec<f32>> {
    let mut mono = if from_rate == to_rate {
        downmix_to_mono(planes, int16_source)
    } else {
        let resampled = planes
            .iter()
            .map(|p| resample(p, from_rate, to_rate))
            .collect::<Result<Vec<_>>>()?;
        downmix_to_mono(&resampled, false)
    };
    quantize_i16(&mut mono);
    Ok(mono)
}

/// [`to_mono_like_ffmpeg`] (and, for one plane, resample + [`quantize_i16`]) applied block by
/// block as a decoder produces the planes: the same samples bit for bit, while holding only
/// one block and about a filter of history per channel instead of the whole recording at
/// its native rate and channel count.
#[derive(Debug)]
pub(crate) struct ToMono {
    /// One streaming resampler per channel; empty when the rates are equal.
    streams: Vec<swr::SwrStream>,
    /// Resampled blocks of each channel (multichannel input only).
    scratch: Vec<Vec<f32>>,
    int16_source: bool,
}

impl ToMono {
    /// A converter for `channels` planes at `from_rate` Hz to mono at `to_rate` Hz.
    ///
    /// Errors: [`dicta_core::ErrorKind::InvalidInput`] when a rate is zero.
    pub(crate) fn new(
        channels: usize,
        from_rate: u32,
        to_rate: u32,
        int16_source: bool,
    ) -> Result<Self> {
        let streams = if from_rate == to_rate {
            Vec::new()
        } else {
            let swr = swr::Swr::new(from_rate, to_rate)?;
            (0..channels.max(1))
                .map(|_| swr::SwrStream::new(swr.clone()))
                .collect()
        };
        Ok(Self {
            streams,
            scratch: vec![Vec::new(); channels.max(1)],
            int16_source,
        })
    }

    /// Converts the next block (one plane per channel, equal lengths); appends to `out`.
    pub(crate) fn feed(&mut self, planes: &[Vec<f32>], out: &mut Vec<f32>) {
        let start = out.len();
        match (planes, self.streams.as_mut_slice()) {
            ([mono], []) => out.extend_from_slice(mono),
            ([mono], [stream]) => stream.feed(mono, out),
            (_, []) => out.extend(downmix_to_mono(planes, self.int16_source)),
            (_, streams) => {
                for ((p, st), o) in planes.iter().zip(streams).zip(&mut self.scratch) {
                    o.clear();
                    st.feed(p, o);
                }
                out.extend(downmix_to_mono(&self.scratch, false));
            }
        }
        quantize_i16(&mut out[start..]);
    }

    /// Flushes the resamplers (swr's end reflection); appends the last samples to `out`.
    pub(crate) fn finish(mut self, out: &mut Vec<f32>) {
        let start = out.len();
        let mut streams = std::mem::take(&mut self.streams);
        match streams.len() {
            0 => return,
            1 => streams.pop().expect("one stream").finish(out),
            _ => {
                for (st, o) in streams.into_iter().zip(&mut self.scratch) {
                    o.clear();
                    st.finish(o);
                }
                out.extend(downmix_to_mono(&self.scratch, false));
            }
        }
        quantize_i16(&mut out[start..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The block-by-block conversion equals the whole-signal one for every channel layout,
    /// resampled or not, integer or float source.
    #[test]
    fn to_mono_streamed_equals_whole_conversion() {
        let mut seed = 11u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((seed >> 16) as i32 - 32768) as f32 / 32768.0
        };
        for (channels, rate, int16) in [
            (1usize, 16_000u32, true),
            (1, 44_100, false),
            (2, 16_000, true),
            (2, 16_000, false),
            (2, 48_000, true),
            (3, 22_050, false),
            (6, 8000, true),
        ] {
            let n = 50_000;
            let planes: Vec<Vec<f32>> = (0..channels)
                .map(|_| (0..n).map(|_| next()).collect())
                .collect();
            let want = if channels == 1 {
                let mut m = resample(&planes[0], rate, 16_000).unwrap();
                quantize_i16(&mut m);
                m
            } else {
                to_mono_like_ffmpeg(&planes, rate, 16_000, int16).unwrap()
            };
            let mut conv = ToMono::new(channels, rate, 16_000, int16).unwrap();
            let mut got = Vec::new();
            for start in (0..n).step_by(1152) {
                let end = (start + 1152).min(n);
                let block: Vec<Vec<f32>> = planes.iter().map(|p| p[start..end].to_vec()).collect();
                conv.feed(&block, &mut got);
            }
            conv.finish(&mut got);
            assert_eq!(got, want, "{channels} ch at {rate} Hz, int16 {int16}");
        }
    }

    #[test]
    fn quantize_rounds_half_to_even_and_saturates() {
        let mut x = [
            0.5 / 32_768.0,
            1.5 / 32_768.0,
            -0.5 / 32_768.0,
            2.0,
            -2.0,
            0.25,
        ];
        quantize_i16(&mut x);
        assert_eq!(
            x,
            [0.0, 2.0 / 32_768.0, 0.0, 32_767.0 / 32_768.0, -1.0, 0.25]
        );
        // -0.5 steps round to zero, and it is +0.0 (as an integer sample's), not −0.0.
        assert!(x[2].is_sign_positive());
    }

    #[test]
    fn integer_stereo_downmix_rounds_half_up() {
        let l = vec![1.0 / 32_768.0, -3.0 / 32_768.0, 4.0 / 32_768.0];
        let r = vec![2.0 / 32_768.0, 0.0, -7.0 / 32_768.0];
        let m = downmix_to_mono(&[l.clone(), r.clone()], true);
        let want: Vec<f32> = [2.0f32, -1.0, -1.0].iter().map(|v| v / 32_768.0).collect();
        assert_eq!(m, want);
        let f = downmix_to_mono(&[l, r], false);
        assert_eq!(f[0], 1.5 / 32_768.0);
    }

    /// Lengths PyAV 18 (FFmpeg 8 libswresample) returns for very short inputs, where swr only
    /// starts filtering at the flush, and just past that regime.
    #[test]
    fn short_input_lengths_follow_swr() {
        for (from, n, want) in [
            (22_050u32, 30usize, 0usize),
            (22_050, 31, 18),
            (22_050, 43, 31),
            (22_050, 46, 34),
            (22_050, 47, 35),
            (22_050, 48, 35),
            (8000, 21, 0),
            (8000, 22, 34),
            (8000, 40, 80),
            (48_000, 66, 0),
            (48_000, 67, 17),
            (48_000, 100, 34),
            (44_100, 93, 34),
            (44_100, 100, 36),
        ] {
            assert_eq!(
                output_len(n, from, 16_000),
                want,
                "{n} samples at {from} Hz"
            );
            let y = resample(&vec![0.1; n], from, 16_000).unwrap();
            assert_eq!(y.len(), want);
        }
    }

    #[test]
    fn zero_rate_is_invalid_input() {
        let e = resample(&[0.0; 10], 0, 16_000).unwrap_err();
        assert_eq!(e.kind, dicta_core::ErrorKind::InvalidInput);
        assert_eq!(output_len(10, 0, 16_000), 0);
    }
}
