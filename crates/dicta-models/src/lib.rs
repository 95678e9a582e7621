//! Model families on candle and their weight loaders.
//!
//! - [`whisper`]: Whisper encoder-decoder (CTranslate2 and Hugging Face folders).
//! - [`ctc`]: CTC acoustic models (wav2vec2 family).
//! - [`moonshine`]: Moonshine encoder-decoder (ONNX Runtime `.ort` exports).
//! - [`vad`]: voice activity detection (Silero VAD).
//! - [`speaker`]: speaker embeddings (ECAPA-TDNN).

pub mod ctc;
pub mod kernels;
mod layers;
pub mod moonshine;
pub mod ort;
pub mod speaker;
pub mod vad;
pub mod whisper;
