//! Which languages and tasks a Whisper checkpoint can honour.

use dicta_core::{Error, Result};
use dicta_models::whisper::WhisperConfig;

use super::options::Task;

/// Checks `language` (a code such as `"de"`, or none: detected) and `task` against the model:
/// English-only models take only `"en"` and cannot translate; multilingual ones take the codes
/// of their language tokens. The error lists what works.
pub fn check_language_task(cfg: &WhisperConfig, language: Option<&str>, task: Task) -> Result<()> {
    if !cfg.is_multilingual {
        // Silently transcribing as English what the caller said is French (or "english")
        // would hide their mistake: refuse, naming what works.
        if let Some(l) = language.filter(|l| *l != "en") {
            return Err(Error::invalid_input(format!(
                "this model is English-only: language must be \"en\" or left out, got {l:?}"
            )));
        }
        if task == Task::Translate {
            return Err(Error::invalid_input(
                "this model is English-only and cannot translate; task must be \"transcribe\" (translation needs a multilingual model)",
            ));
        }
        return Ok(());
    }
    if let Some(l) = language {
        if cfg.lang_id(l).is_none() {
            let known: Vec<&str> = cfg.lang_ids.iter().map(|(c, _)| c.as_str()).collect();
            return Err(Error::invalid_input(format!(
                "unknown language code {l:?}; this model knows: {}",
                known.join(", ")
            )));
        }
    }
    Ok(())
}
