//! Model families on candle and their weight loaders.
//!
//! - [`whisper`]: Whisper encoder-decoder (CTranslate2 and Hugging Face folders).
//! - [`ctc`]: CTC acoustic models (wav2vec2 family).

pub mod ctc;
pub mod kernels;
pub mod moonshine;
pub mod ort;
pub mod whisper;
