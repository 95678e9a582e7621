//! faster-whisper's `clip_timestamps` as users give them: seconds `start, end, start, end, …`
//! (the last end defaulting to the recording's end), as a list of numbers or as one
//! comma-separated text (`"0,10.5,20"`). The seek loop that reads them is Whisper's
//! (`dicta_engine::whisper::DecodeOptions::clip_frames`).

use crate::{Error, Result};

/// Most values in one `clip_timestamps` (1024 clips).
pub const MAX_VALUES: usize = 2048;
/// Latest time (a week, in seconds): far past any recording, and small enough that a frame
/// index cannot overflow.
pub const MAX_SECONDS: f64 = 7.0 * 24.0 * 3600.0;

/// `clip_timestamps` in either of faster-whisper's forms.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum ClipTimestamps {
    /// Seconds as numbers: `[0, 10.5, 20]`.
    List(Vec<f64>),
    /// Seconds as one comma-separated text: `"0,10.5,20"` (empty: none).
    Text(String),
    /// One start: from there to the end.
    One(f64),
}

impl ClipTimestamps {
    /// The seconds, checked ([`validate`]).
    pub fn seconds(&self) -> Result<Vec<f64>> {
        let s = match self {
            ClipTimestamps::List(v) => v.clone(),
            ClipTimestamps::Text(t) => parse(t)?,
            ClipTimestamps::One(t) => vec![*t],
        };
        validate(&s)?;
        Ok(s)
    }
}

/// Seconds from one comma-separated text (blank items are skipped, as faster-whisper's
/// `float()` of each item is not: an empty text is no clips).
pub fn parse(text: &str) -> Result<Vec<f64>> {
    let items: Vec<&str> = text
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    if items.len() > MAX_VALUES {
        return Err(too_many(items.len()));
    }
    items
        .into_iter()
        .map(|t| {
            t.parse::<f64>().map_err(|_| {
                Error::invalid_input(format!(
                    "clip_timestamps must be comma-separated seconds, got {t:?}"
                ))
            })
        })
        .collect()
}

/// At most [`MAX_VALUES`] values, each finite and within `0..=`[`MAX_SECONDS`].
pub fn validate(seconds: &[f64]) -> Result<()> {
    if seconds.len() > MAX_VALUES {
        return Err(too_many(seconds.len()));
    }
    if let Some(t) = seconds
        .iter()
        .find(|t| !t.is_finite() || **t < 0.0 || **t > MAX_SECONDS)
    {
        return Err(Error::invalid_input(format!(
            "clip_timestamps must be seconds in 0..={MAX_SECONDS}, got {t}"
        )));
    }
    Ok(())
}

fn too_many(n: usize) -> Error {
    Error::invalid_input(format!(
        "clip_timestamps holds {n} values; at most {MAX_VALUES}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_give_the_same_seconds_and_bad_ones_are_refused() {
        let text: ClipTimestamps = serde_json::from_str("\" 0, 10.5,20 \"").unwrap();
        let list: ClipTimestamps = serde_json::from_str("[0, 10.5, 20]").unwrap();
        assert_eq!(text.seconds().unwrap(), vec![0.0, 10.5, 20.0]);
        assert_eq!(list.seconds().unwrap(), vec![0.0, 10.5, 20.0]);
        let one: ClipTimestamps = serde_json::from_str("5").unwrap();
        assert_eq!(one.seconds().unwrap(), vec![5.0]);
        assert!(ClipTimestamps::Text(String::new())
            .seconds()
            .unwrap()
            .is_empty());
        for bad in [
            ClipTimestamps::Text("0,x".into()),
            ClipTimestamps::Text("-1".into()),
            ClipTimestamps::List(vec![f64::INFINITY]),
            ClipTimestamps::List(vec![1e9]),
            ClipTimestamps::List(vec![1.0; MAX_VALUES + 1]),
            ClipTimestamps::Text("1,".repeat(MAX_VALUES + 1)),
        ] {
            let e = bad.seconds().unwrap_err();
            assert!(e.message.contains("clip_timestamps"), "{}", e.message);
        }
    }
}
