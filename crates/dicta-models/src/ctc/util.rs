//! Small helpers shared by the CTC families: JSON files and candle error mapping.

use std::path::Path;

use dicta_core::{Error, Result};

/// Reads and parses a JSON file, mapping failures to `ModelLoad` errors that name the file.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::model_load(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::model_load(format!("cannot parse {}: {e}", path.display())))
}

/// Tensor backend failures at run time are Dicta bugs or resource exhaustion: `Internal`.
pub(crate) fn internal(e: candle_core::Error) -> Error {
    Error::internal(format!("tensor backend: {e}"))
}

/// Tensor failures while loading weights mean the folder does not match its config: `ModelLoad`.
pub(crate) fn load_err(
    context: impl std::fmt::Display,
) -> impl FnOnce(candle_core::Error) -> Error {
    move |e| Error::model_load(format!("{context}: {e}"))
}
