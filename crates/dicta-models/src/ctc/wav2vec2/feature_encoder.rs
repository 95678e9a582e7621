//! The convolutional feature encoder (raw samples → frames) and the feature projection.

use candle_core::{DType, Module, Tensor};
use candle_nn::{GroupNorm, LayerNorm, Linear, VarBuilder};
use dicta_core::Result;

use super::act::{Act, ChannelNormAct};
use super::config::{FeatExtractNorm, Wav2Vec2Config};
use crate::ctc::util::load_err;

/// transformers builds these norms with PyTorch's default epsilon, not `layer_norm_eps`.
const CONV_NORM_EPS: f64 = 1e-5;

enum ConvNorm {
    None,
    /// Per-channel normalisation over the whole time axis (so it sees padding); the fused op
    /// is the CPU path of the same computation.
    Group(GroupNorm, ChannelNormAct),
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
            let ctx = vb.prefix();
            let weight = vb
                .get((c_out, c_in, k), "conv.weight")
                .map_err(load_err(&ctx))?;
            let bias = if cfg.conv_bias {
                Some(vb.get(c_out, "conv.bias").map_err(load_err(&ctx))?)
            } else {
                None
            };
            let norm = match norm_kind {
                FeatExtractNorm::Group if i == 0 => {
                    let get = |n: &str| vb.get(c_out, n).map_err(load_err(&ctx));
                    let (gamma, beta) = (get("layer_norm.weight")?, get("layer_norm.bias")?);
                    let fused = ChannelNormAct::new(
                        &gamma,
                        &beta,
                        CONV_NORM_EPS,
                        Act::parse(&cfg.feat_extract_activation)?,
                    )
                    .map_err(load_err(&ctx))?;
                    let gn = GroupNorm::new(gamma, beta, c_out, c_out, CONV_NORM_EPS)
                        .map_err(load_err(&ctx))?;
                    ConvNorm::Group(gn, fused)
                }
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
            x = if x.dim(1)? == 1 {
                first_conv(&x.squeeze(1)?, &layer.weight, layer.stride)?
            } else {
                x.conv1d(&layer.weight, 0, layer.stride, 1, 1)?
            };
            if let Some(b) = &layer.bias {
                x = x.broadcast_add(&b.reshape((1, (), 1))?)?;
            }
            x = match &layer.norm {
                ConvNorm::None => self.act.apply(&x)?,
                ConvNorm::Group(_, fused) if x.device().is_cpu() && x.dtype() == DType::F32 => {
                    x.contiguous()?.apply_op1_no_bwd(fused)?
                }
                ConvNorm::Group(gn, _) => self.act.apply(&gn.forward(&x)?)?,
                ConvNorm::Layer(ln) => {
                    let y = ln.forward(&x.transpose(1, 2)?.contiguous()?)?;
                    self.act.apply(&y)?.transpose(1, 2)?
                }
            };
        }
        x.transpose(1, 2)?.contiguous()
    }
}

/// Conv of the raw samples (one input channel): `x` `[B, L]`, `weight` `[C, 1, K]` → `[B, C, T]`.
///
/// candle's im2col conv produces `[B, T, C]` and transposes it with a full copy; with a single
/// input channel the unfolded input `[B, K, T]` is tiny, so one matmul writes `[B, C, T]` directly.
fn first_conv(x: &Tensor, weight: &Tensor, stride: usize) -> candle_core::Result<Tensor> {
    let (b, l) = x.dims2()?;
    let (c, _, k) = weight.dims3()?;
    let t = (l - k) / stride + 1;
    // Tap j of frame i is x[i * stride + j]: view x[j .. j + t * stride] as [T, stride] and
    // keep column 0. Right-pad by `stride` so the last view stays in bounds.
    let x = x.pad_with_zeros(1, 0, stride)?;
    let taps = (0..k)
        .map(|j| {
            x.narrow(1, j, t * stride)?
                .reshape((b, t, stride))?
                .narrow(2, 0, 1)?
                .squeeze(2)
        })
        .collect::<candle_core::Result<Vec<_>>>()?;
    let unfolded = Tensor::stack(&taps, 1)?; // [B, K, T]
    weight.reshape((c, k))?.broadcast_left(b)?.matmul(&unfolded)
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
