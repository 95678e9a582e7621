//! Decoding audio into mono `f32` samples, and loading it at Dicta's model rate (16 kHz).
//!
//! - [`decode_bytes`] / [`decode_path`]: WAV (PCM 8/16/24/32-bit int, 32/64-bit float), FLAC,
//!   MP3, OGG/Vorbis, MP4 (AAC, ALAC) and Matroska/WebM via symphonia, and Opus in Ogg and in
//!   WebM/Matroska via libopus (at 48 kHz, the pre-skip dropped as FFmpeg drops it), down-mixed
//!   to mono at the file's own rate ([`Audio`]).
//! - [`load_bytes`] / [`load_owned`] / [`load_path`]: the same at [`crate::SAMPLE_RATE`], exactly
//!   as faster-whisper's `decode_audio` converts it (see [`crate::resample`]); [`load_path_at`] /
//!   [`load_owned_at`] at another rate (its `sampling_rate`).
//! - [`load_channels_path`] / [`load_channels_owned`] / [`load_channels_owned_bounded`]: each
//!   channel on its own at 16 kHz (faster-whisper's `split_stereo=True` samples);
//!   [`load_channels_path_at`] / [`load_channels_owned_at`] at another rate.
//! - [`load_raw_pcm`]: headerless little-endian mono PCM ([`PcmEncoding`]).
//!
//! Every failure is a typed [`dicta_core::Error`] whose message starts with the input's name:
//! [`ErrorKind::EmptyInput`] (no bytes, or no samples), [`ErrorKind::UnsupportedFormat`]
//! (unknown container or codec), [`ErrorKind::CorruptInput`] (damage before any audio could be
//! decoded, NaN/Inf samples) and [`ErrorKind::Io`]. A file damaged after some audio (cut short,
//! a header that promises more than the file holds, undecodable packets) is not an error: the
//! audio before the damage is returned with a note ([`Loaded::warning`]), as FFmpeg-based tools
//! transcribe what is there. Damaged input never panics and never turns into silence.
//!
//! [`ErrorKind::EmptyInput`]: dicta_core::ErrorKind::EmptyInput
//! [`ErrorKind::UnsupportedFormat`]: dicta_core::ErrorKind::UnsupportedFormat
//! [`ErrorKind::CorruptInput`]: dicta_core::ErrorKind::CorruptInput
//! [`ErrorKind::Io`]: dicta_core::ErrorKind::Io

mod channels;
mod container;
mod mp4_trim;
mod pcm;
mod wav_fix;

use std::path::Path;

use dicta_core::{Error, ErrorKind, Result};

pub use channels::{
    load_channel_owned, load_channel_path, load_channels_owned, load_channels_owned_at,
    load_channels_owned_bounded, load_channels_path, load_channels_path_at, probe_channels_bytes,
    probe_channels_path, LoadedChannels,
};
pub use pcm::{decode_raw_pcm, PcmEncoding};

use crate::resample::{quantize_i16, resample, ToMono};
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
    let mut sink = Collect::new(bytes.len() as u64);
    // A damaged file keeps the audio before the damage; the note is logged.
    container::decode(owned_source(bytes, name)?, name, &mut sink)?;
    Ok(sink.into_mono())
}

/// Decodes a file from disk (streamed, not read into memory first), down-mixed to mono.
pub fn decode_path(path: &Path) -> Result<Audio> {
    let (source, len, name) = open(path)?;
    let mut sink = Collect::new(len);
    container::decode(source, &name, &mut sink)?;
    Ok(sink.into_mono())
}

/// Limits on one bounded load ([`load_owned_bounded`], [`load_path_bounded`]).
///
/// Decoding is streamed: each decoded block is resampled and down-mixed at once, so a load
/// never holds more than its 16 kHz mono output, whatever the file's rate and channel count.
pub struct Bounds<'a> {
    /// Most seconds of audio accepted. A header that declares more (beyond 1 % slack for
    /// estimated lengths) is refused before anything is decoded, and decoding stops with
    /// [`ErrorKind::LimitExceeded`] as soon as more has been decoded.
    pub max_seconds: f64,
    /// Names the limit in that error's message, e.g. `"max_audio_seconds (3600 s per request)"`.
    pub limit: &'a str,
    /// Called with the number of new 16 kHz samples after every decoded block; an error it
    /// returns stops decoding and is returned (e.g. a server-wide memory reservation).
    pub on_samples: &'a mut dyn FnMut(usize) -> Result<()>,
}

impl Bounds<'_> {
    /// No limit at all.
    fn unbounded(f: &mut dyn FnMut(usize) -> Result<()>) -> Bounds<'_> {
        Bounds {
            max_seconds: f64::INFINITY,
            limit: "",
            on_samples: f,
        }
    }
}

/// 16 kHz mono samples of one input, with what was wrong with a damaged file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Loaded {
    /// Mono samples at [`SAMPLE_RATE`].
    pub samples: Vec<f32>,
    /// Set when the file is damaged (cut short, a header promising more than it holds,
    /// undecodable packets, a checksum mismatch) but some audio could be read: it says what was
    /// wrong and how many seconds were kept. Such a file is transcribed as far as it goes, as
    /// FFmpeg-based tools do, and the note travels with its result.
    pub warning: Option<String>,
}

/// Decodes a file from disk and returns mono samples at 16 kHz, ready for the models: the
/// samples faster-whisper's `decode_audio` returns for the same file (each channel resampled
/// as libswresample does, down-mixed, quantised to 16 bits; see [`crate::resample`]).
///
/// A damaged file gives the audio before the damage (see [`Loaded::warning`]; here the note is
/// only logged: use [`load_path_report`] to get it).
pub fn load_path(path: &Path) -> Result<Vec<f32>> {
    load_path_report(path).map(|l| l.samples)
}

/// [`load_path`], with the note on a damaged file.
pub fn load_path_report(path: &Path) -> Result<Loaded> {
    load_path_bounded(path, Bounds::unbounded(&mut |_| Ok(())))
}

/// [`load_path_report`] under [`Bounds`].
pub fn load_path_bounded(path: &Path, bounds: Bounds<'_>) -> Result<Loaded> {
    let (source, _, name) = open(path)?;
    convert(source, &name, bounds, Keep::Mix, SAMPLE_RATE).map(Converted::mono)
}

/// Decodes a file held in memory and returns mono samples at 16 kHz (as [`load_path`]).
pub fn load_bytes(bytes: &[u8], name: &str) -> Result<Vec<f32>> {
    load_owned(bytes.to_vec(), name)
}

/// Like [`load_bytes`], taking ownership of the buffer (no copy).
pub fn load_owned(bytes: Vec<u8>, name: &str) -> Result<Vec<f32>> {
    load_owned_report(bytes, name).map(|l| l.samples)
}

/// [`load_owned`], with the note on a damaged file.
pub fn load_owned_report(bytes: Vec<u8>, name: &str) -> Result<Loaded> {
    load_owned_bounded(bytes, name, Bounds::unbounded(&mut |_| Ok(())))
}

/// [`load_owned_report`] under [`Bounds`]: what a server runs on untrusted uploads, so that a
/// small file that expands to hours of multichannel audio is refused from its header or stopped
/// at the limit, never decoded whole.
pub fn load_owned_bounded(bytes: Vec<u8>, name: &str, bounds: Bounds<'_>) -> Result<Loaded> {
    let source = owned_source(bytes, name)?;
    convert(source, name, bounds, Keep::Mix, SAMPLE_RATE).map(Converted::mono)
}

/// Mono samples of a file on disk at `rate` Hz instead of 16 kHz, converted the same way (each
/// channel resampled as libswresample does, down-mixed, quantised to 16 bits): what
/// faster-whisper's `decode_audio(path, sampling_rate=rate)` returns.
///
/// Errors: as [`load_path`]; `InvalidInput` for a rate of 0 or above [`crate::MAX_SAMPLE_RATE`].
pub fn load_path_at(path: &Path, rate: u32) -> Result<Loaded> {
    let (source, _, name) = open(path)?;
    convert(
        source,
        &name,
        Bounds::unbounded(&mut |_| Ok(())),
        Keep::Mix,
        rate,
    )
    .map(Converted::mono)
}

/// [`load_path_at`] for a file held in memory.
pub fn load_owned_at(bytes: Vec<u8>, name: &str, rate: u32) -> Result<Loaded> {
    let source = owned_source(bytes, name)?;
    convert(
        source,
        name,
        Bounds::unbounded(&mut |_| Ok(())),
        Keep::Mix,
        rate,
    )
    .map(Converted::mono)
}

/// What [`convert`] gives: one output per kept channel (or the mix), and the note on a
/// damaged file.
struct Converted {
    outputs: Vec<Vec<f32>>,
    warning: Option<String>,
}

impl Converted {
    /// The one output of [`Keep::Mix`] or [`Keep::One`] (empty when nothing was decoded).
    fn mono(mut self) -> Loaded {
        Loaded {
            samples: self.outputs.pop().unwrap_or_default(),
            warning: self.warning,
        }
    }
}

/// Every loader's body: decodes `source` through a [`ToRate`] keeping `keep` at `rate` Hz under
/// `bounds`.
fn convert(
    source: Box<dyn symphonia::core::io::MediaSource>,
    name: &str,
    bounds: Bounds<'_>,
    keep: Keep,
    rate: u32,
) -> Result<Converted> {
    let mut sink = ToRate::keeping(name, bounds, keep).at(rate)?;
    let warning = container::decode(source, name, &mut sink)?;
    Ok(Converted {
        outputs: sink.finish_all()?,
        warning,
    })
}

fn owned_source(bytes: Vec<u8>, name: &str) -> Result<Box<dyn symphonia::core::io::MediaSource>> {
    if bytes.is_empty() {
        return Err(empty(name));
    }
    Ok(Box::new(std::io::Cursor::new(bytes)))
}

fn open(path: &Path) -> Result<(Box<dyn symphonia::core::io::MediaSource>, u64, String)> {
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
    Ok((Box::new(file), len, name))
}

/// Keeps every decoded plane at the file's own rate (for [`Audio`]).
struct Collect {
    planes: Vec<Vec<f32>>,
    sample_rate: u32,
    byte_len: u64,
}

impl Collect {
    fn new(byte_len: u64) -> Self {
        Self {
            planes: Vec::new(),
            sample_rate: 0,
            byte_len,
        }
    }

    /// Down-mixes the planes to the mean of the channels.
    fn into_mono(self) -> Audio {
        let mut planes = self.planes.into_iter();
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
        samples.shrink_to_fit();
        Audio {
            samples,
            sample_rate: self.sample_rate,
        }
    }
}

impl container::Sink for Collect {
    fn start(&mut self, info: &container::StreamInfo) -> Result<()> {
        // Reserve from the declared length, but never trust a header for more than the file
        // could plausibly hold (a lying header must not trigger a huge allocation).
        let reserve = info
            .declared_frames
            .unwrap_or(0)
            .min(self.byte_len.saturating_mul(2)) as usize;
        self.planes = (0..info.channels)
            .map(|_| Vec::with_capacity(reserve))
            .collect();
        self.sample_rate = info.sample_rate;
        Ok(())
    }

    fn planes(&mut self, planes: &[Vec<f32>]) -> Result<()> {
        for (o, p) in self.planes.iter_mut().zip(planes) {
            o.extend_from_slice(p);
        }
        Ok(())
    }
}

/// Which channels a [`ToRate`] load keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Keep {
    /// One 16 kHz mono output: the channels resampled, then down-mixed.
    Mix,
    /// Every channel on its own (`--channels split`).
    All,
    /// Only this channel (the others are decoded but not resampled).
    One(usize),
}

/// Converts each decoded block to 16 kHz (or [`ToRate::at`] another rate) at once
/// ([`crate::resample::ToMono`]: the channels [`Keep`] asks for, each resampled as a mono file
/// of it would be, or the mix) and enforces [`Bounds`] over everything held.
struct ToRate<'a, 'b> {
    name: &'a str,
    /// Output rate (Hz).
    out_rate: u32,
    bounds: Bounds<'b>,
    keep: Keep,
    /// One converter per output; none before the first decoded block.
    convs: Vec<ToMono>,
    out: Vec<Vec<f32>>,
    rate: u32,
    frames: u64,
    /// Input frames allowed (`max_seconds` at the file's rate).
    max_frames: f64,
}

impl<'a, 'b> ToRate<'a, 'b> {
    fn keeping(name: &'a str, bounds: Bounds<'b>, keep: Keep) -> Self {
        Self {
            name,
            out_rate: SAMPLE_RATE,
            bounds,
            keep,
            convs: Vec::new(),
            out: Vec::new(),
            rate: 0,
            frames: 0,
            max_frames: f64::INFINITY,
        }
    }

    /// This converter with output at `rate` Hz.
    ///
    /// Errors: `InvalidInput` for a rate of 0 or above [`crate::MAX_SAMPLE_RATE`].
    fn at(mut self, rate: u32) -> Result<Self> {
        if rate == 0 || rate > crate::MAX_SAMPLE_RATE {
            return Err(Error::invalid_input(format!(
                "{}: cannot convert to {rate} Hz: the output rate must be 1 to {} Hz",
                self.name,
                crate::MAX_SAMPLE_RATE
            )));
        }
        self.out_rate = rate;
        Ok(self)
    }

    fn too_long(&self, detail: String) -> Error {
        Error::new(
            ErrorKind::LimitExceeded,
            format!(
                "{} is exceeded: {} is longer than the {:.1} s allowed ({detail})",
                self.bounds.limit, self.name, self.bounds.max_seconds
            ),
        )
    }

    /// Samples held over all outputs.
    fn held(&self) -> usize {
        self.out.iter().map(Vec::len).sum()
    }

    fn report(&mut self, before: usize) -> Result<()> {
        let new = self.held() - before;
        if new > 0 {
            (self.bounds.on_samples)(new)?;
        }
        Ok(())
    }

    /// Every output (one per kept channel, or the mix), flushed.
    fn finish_all(mut self) -> Result<Vec<Vec<f32>>> {
        let before = self.held();
        for (conv, out) in std::mem::take(&mut self.convs)
            .into_iter()
            .zip(&mut self.out)
        {
            conv.finish(out);
        }
        self.report(before)?;
        self.out.iter_mut().for_each(|c| c.shrink_to_fit());
        Ok(self.out)
    }
}

impl container::Sink for ToRate<'_, '_> {
    fn start(&mut self, info: &container::StreamInfo) -> Result<()> {
        self.rate = info.sample_rate;
        self.max_frames = self.bounds.max_seconds * f64::from(info.sample_rate);
        if let Some(n) = info.declared_frames {
            // 1 % slack: MP3 lengths may be estimates.
            if n as f64 > self.max_frames * 1.01 {
                return Err(self.too_long(format!(
                    "its header declares {:.1} s; nothing was decoded",
                    n as f64 / f64::from(info.sample_rate)
                )));
            }
        }
        let mono = || ToMono::new(1, info.sample_rate, self.out_rate, info.int16);
        let channels = info.channels.max(1);
        self.convs = match self.keep {
            Keep::Mix => vec![ToMono::new(
                info.channels,
                info.sample_rate,
                self.out_rate,
                info.int16,
            )?],
            Keep::All => (0..channels).map(|_| mono()).collect::<Result<_>>()?,
            Keep::One(c) if c >= channels => {
                return Err(Error::invalid_input(format!(
                    "{}: has no channel {c} (it has {channels})",
                    self.name
                )))
            }
            Keep::One(_) => vec![mono()?],
        };
        self.out = vec![Vec::new(); self.convs.len()];
        Ok(())
    }

    fn planes(&mut self, planes: &[Vec<f32>]) -> Result<()> {
        self.frames += planes.first().map_or(0, Vec::len) as u64;
        if self.frames as f64 > self.max_frames {
            return Err(self.too_long(format!(
                "decoding stopped at {:.1} s",
                self.frames as f64 / f64::from(self.rate)
            )));
        }
        let before = self.held();
        match self.keep {
            Keep::Mix => {
                if let (Some(conv), Some(out)) = (self.convs.first_mut(), self.out.first_mut()) {
                    conv.feed(planes, out);
                }
            }
            Keep::All => {
                for ((plane, conv), out) in planes.iter().zip(&mut self.convs).zip(&mut self.out) {
                    conv.feed(std::slice::from_ref(plane), out);
                }
            }
            Keep::One(c) => {
                if let (Some(plane), Some(conv), Some(out)) =
                    (planes.get(c), self.convs.first_mut(), self.out.first_mut())
                {
                    conv.feed(std::slice::from_ref(plane), out);
                }
            }
        }
        self.report(before)
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
