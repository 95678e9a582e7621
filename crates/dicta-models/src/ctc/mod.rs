//! CTC acoustic models: a model maps raw 16 kHz waveforms to per-frame log-probabilities over a
//! token vocabulary; decoding (greedy, beam, LM) lives in `dicta-decode`, outside the model.
//!
//! - [`CtcModel`]: the object-safe interface every CTC family implements.
//! - [`wav2vec2`]: the wav2vec2 family loaded from Hugging Face folders.
//! - [`load_ctc_model`]: picks the family from a folder's `config.json`.

mod util;
pub mod vocab;
pub mod wav2vec2;

use std::path::Path;

use candle_core::Device;
use dicta_core::{Error, Result};

pub use vocab::CtcVocab;
pub use wav2vec2::Wav2Vec2ForCtc;

/// A CTC acoustic model. Implementations hold only weights and configuration (no per-request
/// state), so one instance can serve many threads.
pub trait CtcModel: Send + Sync {
    /// Batched forward pass.
    ///
    /// `waveforms`: one slice per row (16 kHz mono, raw samples, unnormalised; the model applies
    /// its own input normalisation). Returns log-probs `[N, T_max, V]` (log-softmax over `V`) and
    /// the valid frame count of each row; frames past a row's length are padding.
    fn forward(&self, waveforms: &[&[f32]]) -> Result<CtcOutput>;

    /// The output vocabulary (tokens in id order, blank id, word delimiter).
    fn vocab(&self) -> &CtcVocab;

    /// Number of output frames the model produces for `n_samples` input samples.
    fn frames_for_samples(&self, n_samples: usize) -> usize;

    /// Input samples per output frame (the product of the feature-encoder strides, 320 for
    /// wav2vec2 = 20 ms at 16 kHz).
    fn samples_per_frame(&self) -> usize;
}

/// Output of [`CtcModel::forward`]: row-major log-probs `[n_rows, t_max, vocab_size]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CtcOutput {
    /// Log-probabilities, row-major `[n_rows, t_max, vocab_size]`.
    pub log_probs: Vec<f32>,
    /// Number of rows `N` (equals the number of input waveforms).
    pub n_rows: usize,
    /// Frames per row in `log_probs` (the longest row's frame count).
    pub t_max: usize,
    /// Vocabulary size `V`.
    pub vocab_size: usize,
    /// Valid frames of each row (`<= t_max`).
    pub lengths: Vec<usize>,
}

impl CtcOutput {
    /// The valid log-probs of row `i`, row-major `[lengths[i], vocab_size]`.
    ///
    /// Panics if `i >= n_rows` (like slice indexing).
    pub fn row(&self, i: usize) -> &[f32] {
        let start = i * self.t_max * self.vocab_size;
        &self.log_probs[start..start + self.lengths[i] * self.vocab_size]
    }
}

/// Loads the CTC model in `dir`, choosing the family from `config.json` (`model_type`,
/// `architectures`).
///
/// Errors: [`dicta_core::ErrorKind::ModelLoad`] when the folder is incomplete, describes a family
/// Dicta does not run, or has no CTC head.
pub fn load_ctc_model(dir: &Path, device: &Device) -> Result<Box<dyn CtcModel>> {
    let config = util::read_json::<serde_json::Value>(&dir.join("config.json"))?;
    let model_type = config
        .get("model_type")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let architectures: Vec<&str> = config
        .get("architectures")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|s| s.as_str()).collect())
        .unwrap_or_default();
    let is_wav2vec2 = model_type == "wav2vec2"
        || (model_type.is_empty() && architectures.iter().any(|a| a.starts_with("Wav2Vec2")));
    if !is_wav2vec2 {
        return Err(Error::model_load(format!(
            "{}: model_type {model_type:?} (architectures {architectures:?}) is not a CTC family \
             Dicta can run; supported: \"wav2vec2\" (Wav2Vec2ForCTC)",
            dir.display()
        )));
    }
    Ok(Box::new(Wav2Vec2ForCtc::load(dir, device)?))
}
