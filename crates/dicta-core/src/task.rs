//! What Whisper is asked to do with the speech: one type and one parser for every interface
//! (the CLI, `/transcribe`, the WebSocket and gRPC streams, Python), so the same spellings are
//! taken everywhere.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Error, Result};

/// Transcribe the speech in its own language, or translate it into English (faster-whisper's
/// `task`; translation needs a multilingual Whisper model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Task {
    /// Transcribe in the spoken language.
    #[default]
    Transcribe,
    /// Translate into English (multilingual Whisper models only).
    Translate,
}

impl Task {
    /// `"transcribe"` or `"translate"` (as in OpenAI's `verbose_json` and faster-whisper).
    pub fn as_str(self) -> &'static str {
        match self {
            Task::Transcribe => "transcribe",
            Task::Translate => "translate",
        }
    }

    /// `"transcribe"` or `"translate"`, in any ASCII case, spaces around ignored; anything else
    /// is `InvalidInput` naming the valid values and the one given.
    pub fn parse(s: &str) -> Result<Self> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("transcribe") {
            Ok(Task::Transcribe)
        } else if t.eq_ignore_ascii_case("translate") {
            Ok(Task::Translate)
        } else {
            Err(Error::invalid_input(format!(
                "task must be \"transcribe\" or \"translate\", got {s:?}"
            )))
        }
    }
}

impl std::str::FromStr for Task {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

impl std::fmt::Display for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Task {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Task {
    /// A string, read by [`Task::parse`].
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Task::parse(&s).map_err(|e| serde::de::Error::custom(e.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_parser_for_text_and_json() {
        assert_eq!(Task::parse(" Translate ").unwrap(), Task::Translate);
        assert_eq!("transcribe".parse::<Task>().unwrap(), Task::Transcribe);
        let e = Task::parse("transcode").unwrap_err();
        assert!(e.message.contains("\"translate\"") && e.message.contains("transcode"));
        let j: Task = serde_json::from_str("\"TRANSLATE\"").unwrap();
        assert_eq!(j, Task::Translate);
        let e = serde_json::from_str::<Task>("\"x\"").unwrap_err();
        assert!(e.to_string().contains("task must be"), "{e}");
        assert_eq!(
            serde_json::to_string(&Task::Translate).unwrap(),
            "\"translate\""
        );
        assert_eq!(Task::default().to_string(), "transcribe");
    }
}
