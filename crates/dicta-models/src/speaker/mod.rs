//! Speaker embedding models. [`ecapa`]: SpeechBrain's ECAPA-TDNN (192-d), fed with the
//! filterbanks of `dicta_audio::fbank`.

pub mod ecapa;

pub use ecapa::{Ecapa, EMBEDDING};

/// Filterbank channels the models take.
pub const N_MELS: usize = 80;

/// File name of the ECAPA weights inside a fetched folder (as SpeechBrain saves them).
pub const ECAPA_FILE: &str = "embedding_model.ckpt";
