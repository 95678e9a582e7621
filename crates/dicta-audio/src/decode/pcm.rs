//! Headerless little-endian mono PCM, as accepted by the server next to encoded files.

use std::fmt;
use std::str::FromStr;

use dicta_core::{Error, ErrorKind, Result};

use super::Audio;

/// Sample encoding of raw (headerless) PCM input. Always little-endian, mono.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PcmEncoding {
    /// Signed 16-bit integers; sample `s` becomes `s / 32768`.
    I16Le,
    /// IEEE-754 32-bit floats, taken as they are (must be finite).
    F32Le,
}

impl PcmEncoding {
    /// The stable name used in APIs and on the command line: `"i16_le"` or `"f32_le"`.
    pub fn as_str(self) -> &'static str {
        match self {
            PcmEncoding::I16Le => "i16_le",
            PcmEncoding::F32Le => "f32_le",
        }
    }

    /// Bytes per sample.
    pub fn sample_bytes(self) -> usize {
        match self {
            PcmEncoding::I16Le => 2,
            PcmEncoding::F32Le => 4,
        }
    }
}

impl fmt::Display for PcmEncoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PcmEncoding {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "i16_le" => Ok(PcmEncoding::I16Le),
            "f32_le" => Ok(PcmEncoding::F32Le),
            other => Err(Error::new(
                ErrorKind::UnsupportedFormat,
                format!("unknown raw PCM encoding {other:?} (expected \"i16_le\" or \"f32_le\")"),
            )),
        }
    }
}

/// Interprets `bytes` as headerless mono PCM at `sample_rate` (no resampling).
///
/// Errors: `EmptyInput` for no bytes, `InvalidInput` for a zero rate, `CorruptInput` when the
/// length is not a whole number of samples (truncated) or an `f32_le` sample is NaN/Inf.
pub fn decode_raw_pcm(
    bytes: &[u8],
    enc: PcmEncoding,
    sample_rate: u32,
    name: &str,
) -> Result<Audio> {
    if sample_rate == 0 || sample_rate > crate::MAX_SAMPLE_RATE {
        return Err(Error::invalid_input(format!(
            "{name}: raw PCM sample rate must be 1 to {} Hz, got {sample_rate}",
            crate::MAX_SAMPLE_RATE
        )));
    }
    if bytes.is_empty() {
        return Err(Error::new(
            ErrorKind::EmptyInput,
            format!("{name}: input is empty (0 bytes)"),
        ));
    }
    let width = enc.sample_bytes();
    if !bytes.len().is_multiple_of(width) {
        return Err(Error::new(
            ErrorKind::CorruptInput,
            format!(
                "{name}: truncated {enc} PCM: {} bytes is not a whole number of {width}-byte samples",
                bytes.len()
            ),
        ));
    }
    let samples: Vec<f32> = match enc {
        PcmEncoding::I16Le => bytes
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]) as f32 / 32768.0)
            .collect(),
        PcmEncoding::F32Le => {
            let samples: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            if let Some(i) = samples.iter().position(|s| !s.is_finite()) {
                return Err(Error::new(
                    ErrorKind::CorruptInput,
                    format!(
                        "{name}: sample {i} (at {:.3} s) is {} — non-finite samples are rejected",
                        i as f64 / sample_rate as f64,
                        samples[i]
                    ),
                ));
            }
            samples
        }
    };
    Ok(Audio {
        samples,
        sample_rate,
    })
}
