//! Loading each channel of a file on its own at 16 kHz (`--channels split`).
//!
//! The samples of channel `c` are exactly what faster-whisper's `decode_audio(path,
//! split_stereo=True)` returns for it on a stereo file, and what [`super::load_path`] returns
//! for a mono file holding only that channel: each channel resampled by the same
//! libswresample-exact path ([`ToMono`] over one plane) and quantised to 16 bits. Files with
//! more than two channels give every channel (faster-whisper would mix them down to stereo
//! first).

use std::path::Path;

use dicta_core::{Error, ErrorKind, Result};

use super::{container, convert, open, owned_source, Bounds, Converted, Keep};
use crate::SAMPLE_RATE;

/// 16 kHz samples of every channel of one input (all of the same length), with what was
/// wrong with a damaged file (as [`super::Loaded::warning`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoadedChannels {
    /// One vector of 16 kHz samples per channel, in the file's channel order.
    pub channels: Vec<Vec<f32>>,
    /// Set when the file is damaged but some audio could be read.
    pub warning: Option<String>,
}

/// Decodes a file from disk and returns each channel at 16 kHz (see the module docs).
pub fn load_channels_path(path: &Path) -> Result<LoadedChannels> {
    load_channels_path_at(path, SAMPLE_RATE)
}

/// Each channel of a file on disk at `rate` Hz instead of 16 kHz: faster-whisper's
/// `decode_audio(path, sampling_rate=rate, split_stereo=True)` on a stereo file.
///
/// Errors: as [`load_channels_path`]; `InvalidInput` for a rate of 0 or above
/// [`crate::MAX_SAMPLE_RATE`].
pub fn load_channels_path_at(path: &Path, rate: u32) -> Result<LoadedChannels> {
    let (source, _, name) = open(path)?;
    convert(
        source,
        &name,
        Bounds::unbounded(&mut |_| Ok(())),
        Keep::All,
        rate,
    )
    .map(channels)
}

/// [`load_channels_path_at`] for a file held in memory.
pub fn load_channels_owned_at(bytes: Vec<u8>, name: &str, rate: u32) -> Result<LoadedChannels> {
    let source = owned_source(bytes, name)?;
    convert(
        source,
        name,
        Bounds::unbounded(&mut |_| Ok(())),
        Keep::All,
        rate,
    )
    .map(channels)
}

/// Decodes a file held in memory and returns each channel at 16 kHz.
pub fn load_channels_owned(bytes: Vec<u8>, name: &str) -> Result<LoadedChannels> {
    load_channels_owned_bounded(bytes, name, Bounds::unbounded(&mut |_| Ok(())))
}

/// [`load_channels_owned`] under [`Bounds`] (what the server runs on uploads): `max_seconds`
/// bounds the recording's duration, and `on_samples` is told of the new samples of *all*
/// channels after every block, so memory limits count everything held.
pub fn load_channels_owned_bounded(
    bytes: Vec<u8>,
    name: &str,
    bounds: Bounds<'_>,
) -> Result<LoadedChannels> {
    let source = owned_source(bytes, name)?;
    convert(source, name, bounds, Keep::All, SAMPLE_RATE).map(channels)
}

/// Channel `channel` (0 = first) of a file on disk at 16 kHz: the same samples as
/// `load_channels_path(path)?.channels[channel]`, but only that channel is resampled and held.
/// A channel the file does not have is `InvalidInput`.
pub fn load_channel_path(path: &Path, channel: usize) -> Result<super::Loaded> {
    let (source, _, name) = open(path)?;
    convert(
        source,
        &name,
        Bounds::unbounded(&mut |_| Ok(())),
        Keep::One(channel),
        SAMPLE_RATE,
    )
    .map(Converted::mono)
}

/// [`load_channel_path`] for a file held in memory.
pub fn load_channel_owned(bytes: Vec<u8>, name: &str, channel: usize) -> Result<super::Loaded> {
    let source = owned_source(bytes, name)?;
    convert(
        source,
        name,
        Bounds::unbounded(&mut |_| Ok(())),
        Keep::One(channel),
        SAMPLE_RATE,
    )
    .map(Converted::mono)
}

fn channels(c: Converted) -> LoadedChannels {
    LoadedChannels {
        channels: c.outputs,
        warning: c.warning,
    }
}

/// The number of channels of a file on disk, from its first decoded packet (nothing more is
/// decoded). Errors as [`super::load_path`] would give them for a file that has no audio.
pub fn probe_channels_path(path: &Path) -> Result<usize> {
    let (source, _, name) = open(path)?;
    probe(source, &name)
}

/// [`probe_channels_path`] for a file held in memory (the bytes are copied).
pub fn probe_channels_bytes(bytes: &[u8], name: &str) -> Result<usize> {
    probe(owned_source(bytes.to_vec(), name)?, name)
}

fn probe(source: Box<dyn symphonia::core::io::MediaSource>, name: &str) -> Result<usize> {
    let mut sink = Probe(None);
    let r = container::decode(source, name, &mut sink);
    match (sink.0, r) {
        (Some(n), _) => Ok(n),
        (None, Err(e)) => Err(e),
        (None, Ok(_)) => Err(Error::new(
            ErrorKind::EmptyInput,
            format!("{name}: the file contains no audio samples"),
        )),
    }
}

/// Records the channel count and stops decoding.
struct Probe(Option<usize>);

impl container::Sink for Probe {
    fn start(&mut self, info: &container::StreamInfo) -> Result<()> {
        self.0 = Some(info.channels.max(1));
        Err(Error::internal("channel count probed; decoding stops here"))
    }

    fn planes(&mut self, _: &[Vec<f32>]) -> Result<()> {
        Ok(())
    }
}
