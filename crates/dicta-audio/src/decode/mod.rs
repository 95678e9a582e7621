//! Decoding audio into mono `f32` samples, and loading it at Dicta's model rate (16 kHz).
//!
//! - [`decode_bytes`] / [`decode_path`]: WAV (PCM 8/16/24/32-bit int, 32/64-bit float), FLAC,
//!   MP3 and OGG/Vorbis via symphonia, down-mixed to mono at the file's own rate ([`Audio`]).
//! - [`load_bytes`] / [`load_owned`] / [`load_path`]: the same at [`crate::SAMPLE_RATE`], exactly
//!   as faster-whisper's `decode_audio` converts it (see [`crate::resample`]).
//! - [`load_raw_pcm`]: headerless little-endian mono PCM ([`PcmEncoding`]).
//!
//! Every failure is a typed [`dicta_core::Error`] whose message starts with the input's name:
//! [`ErrorKind::EmptyInput`] (no bytes, or no samples), [`ErrorKind::UnsupportedFormat`]
//! (unknown container or codec, e.g. Opus), [`ErrorKind::CorruptInput`] (truncation, a header that
//! promises more audio than the file holds, malformed packets, NaN/Inf samples) and
//! [`ErrorKind::Io`]. Damaged input never panics and never turns into silence.
//!
//! [`ErrorKind::EmptyInput`]: dicta_core::ErrorKind::EmptyInput
//! [`ErrorKind::UnsupportedFormat`]: dicta_core::ErrorKind::UnsupportedFormat
//! [`ErrorKind::CorruptInput`]: dicta_core::ErrorKind::CorruptInput
//! [`ErrorKind::Io`]: dicta_core::ErrorKind::Io

mod container;
mod pcm;

use std::path::Path;

use dicta_core::{Error, ErrorKind, Result};

pub use pcm::{decode_raw_pcm, PcmEncoding};

use crate::resample::{quantize_i16, resample, to_mono_like_ffmpeg};
use crate::SAMPLE_RATE;

/// Decoded audio: mono samples at the recording's native rate, nominally in [-1, 1].
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    /// Mono samples (the mean of all channels).
    pub samples: Vec<f32>,
    /// Samples per second.
    pub sample_rate: u32,
}

impl Audio {
    /// Duration in seconds.
    pub fn duration(&self) -> f64 {
        if self.sample_rate == 0 {
            return 0.0;
        }
        self.samples.len() as f64 / self.sample_rate as f64
    }

    /// Converts to mono samples at [`SAMPLE_RATE`] as faster-whisper's `decode_audio` does
    /// (libswresample's default resampler, then 16-bit quantisation; see
    /// [`crate::resample`]), so transcripts match those of Whisper's reference pipelines.
    /// 16-bit input already at 16 kHz passes through bit-exact (no copy).
    pub fn into_16k(self) -> Result<Vec<f32>> {
        let mut out = if self.sample_rate == SAMPLE_RATE {
            self.samples
        } else {
            resample(&self.samples, self.sample_rate, SAMPLE_RATE)?
        };
        quantize_i16(&mut out);
        Ok(out)
    }
}

/// Decodes a complete file held in memory (any supported container), down-mixed to mono.
///
/// `name` identifies the input in errors (a file name or a request label); its extension, if
/// any, is used only as a hint for format detection. The bytes are copied once because the
/// decoder needs to own its source; use [`decode_owned`] to avoid that copy.
pub fn decode_bytes(bytes: &[u8], name: &str) -> Result<Audio> {
    decode_owned(bytes.to_vec(), name)
}

/// Like [`decode_bytes`], taking ownership of the buffer (no copy).
pub fn decode_owned(bytes: Vec<u8>, name: &str) -> Result<Audio> {
    decode_owned_planes(bytes, name).map(mono)
}

fn decode_owned_planes(bytes: Vec<u8>, name: &str) -> Result<container::Decoded> {
    if bytes.is_empty() {
        return Err(empty(name));
    }
    let len = bytes.len() as u64;
    container::decode(Box::new(std::io::Cursor::new(bytes)), len, name)
}

/// Decodes a file from disk (streamed, not read into memory first), down-mixed to mono.
pub fn decode_path(path: &Path) -> Result<Audio> {
    decode_path_planes(path).map(mono)
}

fn decode_path_planes(path: &Path) -> Result<container::Decoded> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path)
        .map_err(|e| Error::new(ErrorKind::Io, format!("{name}: cannot open: {e}")))?;
    let len = file
        .metadata()
        .map_err(|e| Error::new(ErrorKind::Io, format!("{name}: cannot stat: {e}")))?
        .len();
    if len == 0 {
        return Err(empty(&name));
    }
    container::decode(Box::new(file), len, &name)
}

/// Decodes a file from disk and returns mono samples at 16 kHz, ready for the models: the
/// samples faster-whisper's `decode_audio` returns for the same file (each channel resampled
/// as libswresample does, down-mixed, quantised to 16 bits; see [`crate::resample`]).
pub fn load_path(path: &Path) -> Result<Vec<f32>> {
    to_16k(decode_path_planes(path)?)
}

/// Decodes a file held in memory and returns mono samples at 16 kHz (as [`load_path`]).
pub fn load_bytes(bytes: &[u8], name: &str) -> Result<Vec<f32>> {
    load_owned(bytes.to_vec(), name)
}

/// Like [`load_bytes`], taking ownership of the buffer (no copy).
pub fn load_owned(bytes: Vec<u8>, name: &str) -> Result<Vec<f32>> {
    decode_owned_planar(bytes, name)?.into_16k()
}

/// Decoded audio with its channels kept apart: what [`load_owned`] converts, for callers that
/// check the duration before paying for the conversion (a server enforcing its limits).
#[derive(Debug)]
pub struct PlanarAudio(container::Decoded);

impl PlanarAudio {
    /// Duration in seconds.
    pub fn duration(&self) -> f64 {
        match (self.0.planes.first(), self.0.sample_rate) {
            (Some(p), rate) if rate > 0 => p.len() as f64 / f64::from(rate),
            _ => 0.0,
        }
    }

    /// Mono samples at [`SAMPLE_RATE`], exactly as [`load_owned`] returns them (each channel
    /// resampled before the down-mix, as faster-whisper's `decode_audio` does).
    pub fn into_16k(self) -> Result<Vec<f32>> {
        to_16k(self.0)
    }
}

/// Mono audio as one plane, converted exactly as [`Audio::into_16k`] would.
impl From<Audio> for PlanarAudio {
    fn from(a: Audio) -> Self {
        PlanarAudio(container::Decoded {
            planes: vec![a.samples],
            sample_rate: a.sample_rate,
            int16: false,
        })
    }
}

/// Decodes a complete file held in memory without down-mixing it (see [`PlanarAudio`]).
pub fn decode_owned_planar(bytes: Vec<u8>, name: &str) -> Result<PlanarAudio> {
    decode_owned_planes(bytes, name).map(PlanarAudio)
}

/// Multichannel input is resampled channel by channel before the down-mix, as swr does, so the
/// result matches the reference bit for bit (mixing first differs by 1 LSB here and there).
fn to_16k(d: container::Decoded) -> Result<Vec<f32>> {
    if let [_] = d.planes.as_slice() {
        return mono(d).into_16k();
    }
    to_mono_like_ffmpeg(&d.planes, d.sample_rate, SAMPLE_RATE, d.int16)
}

/// Down-mixes decoded planes to the mean of the channels.
fn mono(d: container::Decoded) -> Audio {
    let sample_rate = d.sample_rate;
    let mut planes = d.planes.into_iter();
    let mut samples = planes.next().unwrap_or_default();
    let mut count = 1.0f32;
    for plane in planes {
        for (o, v) in samples.iter_mut().zip(&plane) {
            *o += v;
        }
        count += 1.0;
    }
    if count > 1.0 {
        samples.iter_mut().for_each(|o| *o /= count);
    }
    Audio {
        samples,
        sample_rate,
    }
}

/// Interprets headerless little-endian mono PCM at `sample_rate` and returns mono samples at
/// 16 kHz. See [`decode_raw_pcm`] for the checks made.
pub fn load_raw_pcm(
    bytes: &[u8],
    enc: PcmEncoding,
    sample_rate: u32,
    name: &str,
) -> Result<Vec<f32>> {
    decode_raw_pcm(bytes, enc, sample_rate, name)?.into_16k()
}

fn empty(name: &str) -> Error {
    Error::new(
        ErrorKind::EmptyInput,
        format!("{name}: input is empty (0 bytes)"),
    )
}
