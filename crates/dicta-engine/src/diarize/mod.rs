//! Speaker diarization: who spoke when.

mod embed;

pub use embed::{cosine, SpeakerEncoder, MIN_CLIP};
