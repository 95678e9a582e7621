//! wav2vec2 CTC models (`Wav2Vec2ForCTC`) loaded from Hugging Face folders.
//!
//! A folder holds `config.json`, `model.safetensors` (or `pytorch_model.bin`), `vocab.json`,
//! `preprocessor_config.json` and optionally `tokenizer_config.json`. The config drives
//! everything, so both `facebook/wav2vec2-base-960h`-style (group-norm feature encoder,
//! post-layer-norm transformer) and `facebook/wav2vec2-large-960h-lv60-self`-style (layer-norm
//! feature encoder, pre-layer-norm transformer) folders load.
//!
//! Padding follows transformers per folder: when `preprocessor_config.json` says
//! `return_attention_mask: true` (layer-norm checkpoints) padded frames are hidden from the
//! model and each row of a batch equals that row run alone. Group-norm checkpoints were trained
//! without a mask and transformers runs them without one, so there the zero padding of a batch
//! changes the other rows' output (the group norm over time and the attention both see it),
//! exactly as in transformers.

mod act;
pub mod config;
mod encoder;
mod feature_encoder;
mod weights;

use std::path::Path;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::Linear;
use dicta_core::{Error, Result};

use self::config::{PreprocessorConfig, Wav2Vec2Config};
use self::encoder::Encoder;
use self::feature_encoder::{FeatureEncoder, FeatureProjection};
use super::util::{internal, load_err};
use super::{CtcModel, CtcOutput, CtcVocab};

/// Epsilon of transformers' zero-mean unit-variance input normalisation.
const NORMALIZE_EPS: f64 = 1e-7;

/// A wav2vec2 model with its CTC head.
pub struct Wav2Vec2ForCtc {
    config: Wav2Vec2Config,
    preprocessor: PreprocessorConfig,
    vocab: CtcVocab,
    device: Device,
    feature_encoder: FeatureEncoder,
    feature_projection: FeatureProjection,
    encoder: Encoder,
    lm_head: Linear,
}

impl Wav2Vec2ForCtc {
    /// Loads a Hugging Face `Wav2Vec2ForCTC` folder onto `device` (weights in f32).
    ///
    /// Errors: `ModelLoad` when a file is missing or malformed, a tensor is missing or has the
    /// wrong shape, or the config uses a feature Dicta does not run (adapters, other norms).
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let config = Wav2Vec2Config::load(dir)?;
        let preprocessor = PreprocessorConfig::load(dir, config.norm())?;
        let blank_id = config.pad_token_id.unwrap_or(0);
        let vocab = CtcVocab::from_hf_folder(dir, config.vocab_size(), blank_id)?;
        let vb = weights::open(dir, DType::F32, device)?;
        let wb = vb.pp("wav2vec2");
        let feature_encoder = FeatureEncoder::load(&config, wb.pp("feature_extractor"))?;
        let feature_projection = FeatureProjection::load(&config, wb.pp("feature_projection"))?;
        let encoder = Encoder::load(&config, wb.pp("encoder"))?;
        let lm_head = candle_nn::linear(config.hidden_size, config.vocab_size(), vb.pp("lm_head"))
            .map_err(load_err("lm_head"))?;
        tracing::info!(
            dir = %dir.display(),
            layers = config.num_hidden_layers,
            hidden = config.hidden_size,
            norm = %config.feat_extract_norm,
            stable_layer_norm = config.do_stable_layer_norm,
            attention_mask = preprocessor.return_attention_mask,
            vocab = config.vocab_size(),
            "loaded wav2vec2 CTC model"
        );
        Ok(Self {
            config,
            preprocessor,
            vocab,
            device: device.clone(),
            feature_encoder,
            feature_projection,
            encoder,
            lm_head,
        })
    }

    /// The model configuration.
    pub fn config(&self) -> &Wav2Vec2Config {
        &self.config
    }

    /// Whether padded batches hide padding from the model (so batched == alone).
    pub fn uses_attention_mask(&self) -> bool {
        self.preprocessor.return_attention_mask
    }

    /// Fewest samples that yield one frame (the conv stack's receptive field).
    fn receptive_field(&self) -> usize {
        let (k, s) = (&self.config.conv_kernel, &self.config.conv_stride);
        // Walking back from one output frame: each layer needs (n - 1) * stride + kernel inputs.
        k.iter().zip(s).rev().fold(1, |n, (&k, &s)| (n - 1) * s + k)
    }

    /// Normalised, padded input `[N, L]` as one flat buffer, with `L` at least the receptive
    /// field so the conv stack always yields a frame.
    fn prepare_input(&self, waveforms: &[&[f32]]) -> (Vec<f32>, usize) {
        let longest = waveforms.iter().map(|w| w.len()).max().unwrap_or(0);
        let l = longest.max(self.receptive_field());
        let pad = self.preprocessor.padding_value;
        let mut buf = vec![pad; waveforms.len() * l];
        for (row, w) in buf.chunks_exact_mut(l).zip(waveforms) {
            let dst = &mut row[..w.len()];
            if self.preprocessor.do_normalize && !w.is_empty() {
                // Statistics over the row's own samples, accumulated in f64 like numpy's var.
                let n = w.len() as f64;
                let mean = w.iter().map(|&v| v as f64).sum::<f64>() / n;
                let var = w.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
                let inv = 1.0 / (var + NORMALIZE_EPS).sqrt();
                for (d, &v) in dst.iter_mut().zip(w.iter()) {
                    *d = ((v as f64 - mean) * inv) as f32;
                }
            } else {
                dst.copy_from_slice(w);
            }
        }
        (buf, l)
    }

    /// `samples` `[N, L]` (already normalised and padded), `lengths` valid frames per row →
    /// log-probs `[N, T, V]`.
    fn forward_tensor(&self, samples: &Tensor, lengths: &[usize]) -> candle_core::Result<Tensor> {
        let features = self.feature_encoder.forward(samples)?; // [N, T, C]
        let (n, t, _) = features.dims3()?;
        let hidden = self.feature_projection.forward(&features)?; // [N, T, D]
        let frame_mask = if self.preprocessor.return_attention_mask {
            let mask: Vec<f32> = lengths
                .iter()
                .flat_map(|&len| (0..t).map(move |i| if i < len { 1.0 } else { 0.0 }))
                .collect();
            Some(Tensor::from_vec(mask, (n, t), &self.device)?)
        } else {
            None
        };
        let hidden = self.encoder.forward(&hidden, frame_mask.as_ref())?;
        encoder::log_softmax(&self.lm_head.forward(&hidden)?)
    }
}

impl CtcModel for Wav2Vec2ForCtc {
    /// `waveforms`: N rows of raw 16 kHz samples → log-probs `[N, T_max, V]` + valid frames per
    /// row. Rows shorter than the receptive field (400 samples for wav2vec2) have 0 frames.
    fn forward(&self, waveforms: &[&[f32]]) -> Result<CtcOutput> {
        let vocab_size = self.config.vocab_size();
        let lengths: Vec<usize> = waveforms
            .iter()
            .map(|w| self.frames_for_samples(w.len()))
            .collect();
        let n_rows = waveforms.len();
        if lengths.iter().all(|&l| l == 0) {
            return Ok(CtcOutput {
                log_probs: Vec::new(),
                n_rows,
                t_max: 0,
                vocab_size,
                lengths,
            });
        }
        if let Some((i, _)) = waveforms
            .iter()
            .enumerate()
            .find(|(_, w)| w.iter().any(|v| !v.is_finite()))
        {
            return Err(Error::invalid_input(format!(
                "waveform {i} contains a non-finite sample (NaN or infinity)"
            )));
        }
        let (buf, l) = self.prepare_input(waveforms);
        let run = || -> candle_core::Result<(Vec<f32>, usize)> {
            let samples = Tensor::from_vec(buf, (n_rows, l), &self.device)?;
            let lp = self.forward_tensor(&samples, &lengths)?;
            let t = lp.dim(1)?;
            Ok((lp.flatten_all()?.to_vec1::<f32>()?, t))
        };
        let (log_probs, t_all) = run().map_err(internal)?;
        // Inputs were padded up to the receptive field; report only up to the longest row.
        let t_max = lengths.iter().copied().max().unwrap_or(0);
        let log_probs = if t_all == t_max {
            log_probs
        } else {
            log_probs
                .chunks_exact(t_all * vocab_size)
                .flat_map(|row| &row[..t_max * vocab_size])
                .copied()
                .collect()
        };
        Ok(CtcOutput {
            log_probs,
            n_rows,
            t_max,
            vocab_size,
            lengths,
        })
    }

    fn vocab(&self) -> &CtcVocab {
        &self.vocab
    }

    fn frames_for_samples(&self, n_samples: usize) -> usize {
        let (k, s) = (&self.config.conv_kernel, &self.config.conv_stride);
        k.iter().zip(s).fold(
            n_samples,
            |n, (&k, &s)| {
                if n < k {
                    0
                } else {
                    (n - k) / s + 1
                }
            },
        )
    }

    fn samples_per_frame(&self) -> usize {
        self.config.conv_stride.iter().product()
    }
}
