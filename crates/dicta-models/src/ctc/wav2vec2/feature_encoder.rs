//! The convolutional feature encoder (raw samples → frames) and the feature projection.

use candle_core::{Module, Tensor};
use candle_nn::{GroupNorm, LayerNorm, Linear, VarBuilder};
use dicta_core::Result;

use super::act::Act;
use super::config::{FeatExtractNorm, Wav2Vec2Config};
use crate::ctc::util::load_err;

/// transformers builds these norms with PyTorch's default epsilon, not `layer_norm_eps`.
const CONV_NORM_EPS: f64 = 1e-5;

enum ConvNorm {
    None,
    /// Per-channel normalisation over the whole time axis (so it sees padding).
    Group(GroupNorm),
    /// Per-frame normalisation over channels.
    Layer(LayerNorm),
}

struct ConvLayer {
    weight: Tensor,
    bias: Option<Tensor>,
    stride: usize,
    norm: ConvNorm,
}

/// Strided conv stack of wav2vec2.
pub struct FeatureEncoder {
    layers: Vec<ConvLayer>,
    act: Act,
}

impl FeatureEncoder {
    /// Loads `conv_layers.{i}` from `vb` (the `feature_extractor` prefix).
    pub fn load(cfg: &Wav2Vec2Config, vb: VarBuilder) -> Result<Self> {
        let norm_kind = cfg.norm();
        let mut layers = Vec::with_capacity(cfg.conv_dim.len());
        let mut c_in = 1;
        for (i, ((&c_out, &k), &stride)) in cfg
            .conv_dim
            .iter()
            .zip(&cfg.conv_kernel)
            .zip(&cfg.conv_stride)
            .enumerate()
        {
            let vb = vb.pp(format!("conv_layers.{i}"));
            let ctx = format!("{}", vb.prefix());
            let weight = vb
                .get((c_out, c_in, k), "conv.weight")
                .map_err(load_err(&ctx))?;
            let bias = if cfg.conv_bias {
                Some(vb.get(c_out, "conv.bias").map_err(load_err(&ctx))?)
            } else {
                None
            };
            let norm = match norm_kind {
                FeatExtractNorm::Group if i == 0 => ConvNorm::Group(
                    candle_nn::group_norm(c_out, c_out, CONV_NORM_EPS, vb.pp("layer_norm"))
                        .map_err(load_err(&ctx))?,
                ),
                FeatExtractNorm::Group => ConvNorm::None,
                FeatExtractNorm::Layer => ConvNorm::Layer(
                    candle_nn::layer_norm(c_out, CONV_NORM_EPS, vb.pp("layer_norm"))
                        .map_err(load_err(&ctx))?,
                ),
            };
            layers.push(ConvLayer {
                weight,
                bias,
                stride,
                norm,
            });
            c_in = c_out;
        }
        Ok(Self {
            layers,
            act: super::act::Act::parse(&cfg.feat_extract_activation)?,
        })
    }

    /// `samples` `[B, L]` → features `[B, T, C]` (channels last, ready for the projection).
    pub fn forward(&self, samples: &Tensor) -> candle_core::Result<Tensor> {
        // `x` is `[B, C, L]`; layer-norm layers hand on a transposed view, which the next conv's
        // im2col reads strided, so no extra copy is made for it.
        let mut x = samples.unsqueeze(1)?;
        for layer in &self.layers {
            x = x.conv1d(&layer.weight, 0, layer.stride, 1, 1)?;
            if let Some(b) = &layer.bias {
                x = x.broadcast_add(&b.reshape((1, (), 1))?)?;
            }
            x = match &layer.norm {
                ConvNorm::None => self.act.apply(&x)?,
                ConvNorm::Group(gn) => self.act.apply(&gn.forward(&x)?)?,
                ConvNorm::Layer(ln) => {
                    let y = ln.forward(&x.transpose(1, 2)?.contiguous()?)?;
                    self.act.apply(&y)?.transpose(1, 2)?
                }
            };
        }
        x.transpose(1, 2)?.contiguous()
    }
}

/// Layer norm + linear from the conv width to the transformer width.
pub struct FeatureProjection {
    norm: LayerNorm,
    proj: Linear,
}

impl FeatureProjection {
    /// Loads `layer_norm` and `projection` from `vb` (the `feature_projection` prefix).
    pub fn load(cfg: &Wav2Vec2Config, vb: VarBuilder) -> Result<Self> {
        let c = *cfg.conv_dim.last().unwrap_or(&0);
        let ctx = vb.prefix();
        Ok(Self {
            norm: candle_nn::layer_norm(c, cfg.layer_norm_eps, vb.pp("layer_norm"))
                .map_err(load_err(&ctx))?,
            proj: candle_nn::linear(c, cfg.hidden_size, vb.pp("projection"))
                .map_err(load_err(&ctx))?,
        })
    }

    /// `[B, T, C]` → `[B, T, D]`.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.proj.forward(&self.norm.forward(x)?)
    }
}
