//! `config.json` and `preprocessor_config.json` of Hugging Face wav2vec2 folders, with the
//! defaults of transformers' `Wav2Vec2Config` / `Wav2Vec2FeatureExtractor` for missing keys.

use std::path::Path;

use dicta_core::{Error, Result};

use crate::ctc::util::read_json;

/// The subset of `Wav2Vec2Config` that inference needs.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(default)]
pub struct Wav2Vec2Config {
    /// Output width of the CTC head.
    pub vocab_size: Option<usize>,
    /// Transformer width `D`.
    pub hidden_size: usize,
    /// Number of transformer layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Feed-forward inner width.
    pub intermediate_size: usize,
    /// Feed-forward activation.
    pub hidden_act: String,
    /// Epsilon of the transformer and feature-projection layer norms.
    pub layer_norm_eps: f64,
    /// `"group"` (group norm on the first conv only) or `"layer"` (layer norm after every conv).
    pub feat_extract_norm: String,
    /// Activation after each feature-encoder conv (and the positional conv).
    pub feat_extract_activation: String,
    /// Output channels of each feature-encoder conv.
    pub conv_dim: Vec<usize>,
    /// Stride of each feature-encoder conv.
    pub conv_stride: Vec<usize>,
    /// Kernel width of each feature-encoder conv.
    pub conv_kernel: Vec<usize>,
    /// Whether the feature-encoder convs have biases.
    pub conv_bias: bool,
    /// Kernel width of the positional conv embedding.
    pub num_conv_pos_embeddings: usize,
    /// Groups of the positional conv embedding.
    pub num_conv_pos_embedding_groups: usize,
    /// Pre-layer-norm transformer (large "lv60" models) instead of post-layer-norm (base).
    pub do_stable_layer_norm: bool,
    /// CTC blank id (transformers uses the pad token as blank).
    pub pad_token_id: Option<u32>,
    /// Adapter stack after the encoder (not supported).
    pub add_adapter: bool,
    /// Per-layer attention adapters (MMS; not supported).
    pub adapter_attn_dim: Option<usize>,
    /// `model_type` from the file.
    pub model_type: Option<String>,
    /// `architectures` from the file.
    pub architectures: Option<Vec<String>>,
}

impl Default for Wav2Vec2Config {
    fn default() -> Self {
        Self {
            vocab_size: Some(32),
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: "gelu".into(),
            layer_norm_eps: 1e-5,
            feat_extract_norm: "group".into(),
            feat_extract_activation: "gelu".into(),
            conv_dim: vec![512; 7],
            conv_stride: vec![5, 2, 2, 2, 2, 2, 2],
            conv_kernel: vec![10, 3, 3, 3, 3, 2, 2],
            conv_bias: false,
            num_conv_pos_embeddings: 128,
            num_conv_pos_embedding_groups: 16,
            do_stable_layer_norm: false,
            pad_token_id: Some(0),
            add_adapter: false,
            adapter_attn_dim: None,
            model_type: None,
            architectures: None,
        }
    }
}

/// Normalisation of the feature encoder's convs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatExtractNorm {
    /// Group norm (one group per channel, over time) after the first conv only.
    Group,
    /// Layer norm over channels after every conv.
    Layer,
}

impl Wav2Vec2Config {
    /// Reads `dir/config.json` and checks that Dicta can run it.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let cfg: Self = read_json(&path)?;
        cfg.validate()
            .map_err(|e| e.context(path.display().to_string()))?;
        Ok(cfg)
    }

    /// The feature-encoder norm variant.
    pub fn norm(&self) -> FeatExtractNorm {
        if self.feat_extract_norm == "layer" {
            FeatExtractNorm::Layer
        } else {
            FeatExtractNorm::Group
        }
    }

    /// Output width of the CTC head.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size.unwrap_or(0)
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::model_load(m));
        if let Some(arch) = &self.architectures {
            if !arch.is_empty() && !arch.iter().any(|a| a.ends_with("ForCTC")) {
                return bad(format!(
                    "architectures {arch:?} has no CTC head; use a fine-tuned *ForCTC checkpoint"
                ));
            }
        }
        if !matches!(self.feat_extract_norm.as_str(), "group" | "layer") {
            return bad(format!(
                "feat_extract_norm is {:?}; expected \"group\" or \"layer\"",
                self.feat_extract_norm
            ));
        }
        let n = self.conv_dim.len();
        if n == 0 || self.conv_stride.len() != n || self.conv_kernel.len() != n {
            return bad(format!(
                "conv_dim/conv_stride/conv_kernel must be non-empty and of equal length, got {}/{}/{}",
                n,
                self.conv_stride.len(),
                self.conv_kernel.len()
            ));
        }
        if self.conv_stride.contains(&0) || self.conv_kernel.contains(&0) {
            return bad("conv_stride and conv_kernel entries must be positive".into());
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return bad(format!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        let groups = self.num_conv_pos_embedding_groups;
        if groups == 0
            || !self.hidden_size.is_multiple_of(groups)
            || self.num_conv_pos_embeddings == 0
        {
            return bad(format!(
                "positional conv: hidden_size {} / groups {groups} / kernel {} is not runnable",
                self.hidden_size, self.num_conv_pos_embeddings
            ));
        }
        if self.vocab_size() == 0 {
            return bad("vocab_size is missing or 0".into());
        }
        if self.add_adapter {
            return bad("add_adapter=true (encoder adapter stack) is not supported".into());
        }
        if self.adapter_attn_dim.is_some() {
            return bad(
                "adapter_attn_dim is set (MMS language adapters), which is not supported; \
                 merge the adapter into the weights or use a checkpoint without adapters"
                    .into(),
            );
        }
        super::act::Act::parse(&self.hidden_act)?;
        super::act::Act::parse(&self.feat_extract_activation)?;
        Ok(())
    }
}

/// The subset of `preprocessor_config.json` (`Wav2Vec2FeatureExtractor`) that shapes the input.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(default)]
pub struct PreprocessorConfig {
    /// Normalise each row to zero mean, unit variance (over its own samples).
    pub do_normalize: bool,
    /// Whether transformers passes an attention mask for padded batches. Checkpoints with
    /// `feat_extract_norm == "group"` were trained without one and set this to false.
    pub return_attention_mask: bool,
    /// Value used for padded samples.
    pub padding_value: f32,
    /// Expected input sample rate.
    pub sampling_rate: u32,
}

impl Default for PreprocessorConfig {
    fn default() -> Self {
        Self {
            do_normalize: true,
            return_attention_mask: false,
            padding_value: 0.0,
            sampling_rate: 16_000,
        }
    }
}

impl PreprocessorConfig {
    /// Reads `dir/preprocessor_config.json`. When the file is missing, falls back to what the
    /// transformers documentation prescribes for the variant: normalise, and use an attention
    /// mask only for layer-norm feature encoders.
    pub fn load(dir: &Path, norm: FeatExtractNorm) -> Result<Self> {
        let path = dir.join("preprocessor_config.json");
        let cfg = if path.exists() {
            read_json(&path)?
        } else {
            tracing::warn!(
                dir = %dir.display(),
                "no preprocessor_config.json; assuming do_normalize=true and an attention mask \
                 only for layer-norm feature encoders"
            );
            Self {
                return_attention_mask: norm == FeatExtractNorm::Layer,
                ..Self::default()
            }
        };
        if cfg.sampling_rate != 16_000 {
            return Err(Error::model_load(format!(
                "{}: sampling_rate is {}, but Dicta feeds wav2vec2 models 16000 Hz audio",
                path.display(),
                cfg.sampling_rate
            )));
        }
        Ok(cfg)
    }
}
