//! How a multichannel recording is heard: mixed to mono, or each channel on its own.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// What a transcription does with a recording's channels (`--channels`, the server's
/// `channels` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelMode {
    /// The channels are averaged after resampling (faster-whisper's `decode_audio`).
    #[default]
    Mix,
    /// Each channel is transcribed on its own (faster-whisper's `split_stereo=True` samples)
    /// and the segments of all channels are merged by start time, each carrying its channel.
    Split,
}

impl ChannelMode {
    /// The names accepted by [`ChannelMode::parse`].
    pub const NAMES: &'static str = "mix, split";

    /// `"mix"` or `"split"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelMode::Mix => "mix",
            ChannelMode::Split => "split",
        }
    }

    /// Parses `"mix"` or `"split"`; any other value is `InvalidInput` naming the valid ones.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "mix" => Ok(ChannelMode::Mix),
            "split" => Ok(ChannelMode::Split),
            other => Err(Error::invalid_input(format!(
                "channels must be one of {}, got {other:?}",
                Self::NAMES
            ))),
        }
    }
}

impl std::str::FromStr for ChannelMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

impl std::fmt::Display for ChannelMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_refuses_others_naming_the_valid_ones() {
        assert_eq!(ChannelMode::parse("split").unwrap(), ChannelMode::Split);
        assert_eq!("mix".parse::<ChannelMode>().unwrap(), ChannelMode::Mix);
        let e = ChannelMode::parse("stereo").unwrap_err();
        assert!(e.message.contains("mix, split") && e.message.contains("stereo"));
        let j: ChannelMode = serde_json::from_str("\"split\"").unwrap();
        assert_eq!(j, ChannelMode::Split);
        assert_eq!(ChannelMode::default().to_string(), "mix");
    }
}
