//! The transformer encoder of wav2vec2: positional conv embedding, self-attention layers in the
//! post-layer-norm (base) or pre-layer-norm ("stable", large lv60) arrangement.

use candle_core::{Module, Tensor, D};
use candle_nn::{LayerNorm, Linear, VarBuilder};
use dicta_core::Result;

use super::act::Act;
use super::config::Wav2Vec2Config;
use super::weights::weight_norm_conv;
use crate::ctc::util::load_err;

/// Grouped conv over time with "same" padding, added to the frames as a relative position signal.
struct PositionalConv {
    weight: Tensor,
    bias: Tensor,
    kernel: usize,
    groups: usize,
    act: Act,
}

impl PositionalConv {
    fn load(cfg: &Wav2Vec2Config, vb: VarBuilder) -> Result<Self> {
        let (d, k, groups) = (
            cfg.hidden_size,
            cfg.num_conv_pos_embeddings,
            cfg.num_conv_pos_embedding_groups,
        );
        let weight = weight_norm_conv(&vb, (d, d / groups, k))?;
        let bias = vb.get(d, "bias").map_err(load_err(vb.prefix()))?;
        Ok(Self {
            weight,
            bias,
            kernel: k,
            groups,
            act: Act::parse(&cfg.feat_extract_activation)?,
        })
    }

    /// `[B, T, D]` → `[B, T, D]`.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let t = x.dim(1)?;
        let y = x
            .transpose(1, 2)?
            .contiguous()?
            .conv1d(&self.weight, self.kernel / 2, 1, 1, self.groups)?
            .broadcast_add(&self.bias.reshape((1, (), 1))?)?;
        // An even kernel with k/2 padding yields one extra frame; transformers drops the last.
        let y = y.narrow(2, 0, t)?;
        self.act.apply(&y)?.transpose(1, 2)
    }
}

struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    heads: usize,
    scale: f64,
}

impl Attention {
    fn load(cfg: &Wav2Vec2Config, vb: VarBuilder) -> candle_core::Result<Self> {
        let d = cfg.hidden_size;
        Ok(Self {
            q: candle_nn::linear(d, d, vb.pp("q_proj"))?,
            k: candle_nn::linear(d, d, vb.pp("k_proj"))?,
            v: candle_nn::linear(d, d, vb.pp("v_proj"))?,
            out: candle_nn::linear(d, d, vb.pp("out_proj"))?,
            heads: cfg.num_attention_heads,
            scale: ((d / cfg.num_attention_heads) as f64).powf(-0.5),
        })
    }

    /// `x` `[B, T, D]`, `bias` `[B, 1, 1, T]` additive key mask (0 or a large negative) → `[B, T, D]`.
    fn forward(&self, x: &Tensor, bias: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let (b, t, d) = x.dims3()?;
        let dh = d / self.heads;
        let split = |y: Tensor| -> candle_core::Result<Tensor> {
            y.reshape((b, t, self.heads, dh))?
                .transpose(1, 2)?
                .contiguous()
        };
        let q = split((self.q.forward(x)? * self.scale)?)?;
        let k = split(self.k.forward(x)?)?;
        let v = split(self.v.forward(x)?)?;
        // [B, H, T, T]
        let mut scores = q.matmul(&k.t()?)?;
        if let Some(bias) = bias {
            scores = scores.broadcast_add(bias)?;
        }
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let y = probs.matmul(&v)?.transpose(1, 2)?.reshape((b, t, d))?;
        self.out.forward(&y)
    }
}

struct FeedForward {
    up: Linear,
    down: Linear,
    act: Act,
}

impl FeedForward {
    fn load(cfg: &Wav2Vec2Config, vb: VarBuilder) -> Result<Self> {
        let ctx = vb.prefix();
        let (d, f) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Self {
            up: candle_nn::linear(d, f, vb.pp("intermediate_dense")).map_err(load_err(&ctx))?,
            down: candle_nn::linear(f, d, vb.pp("output_dense")).map_err(load_err(&ctx))?,
            act: Act::parse(&cfg.hidden_act)?,
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.down.forward(&self.act.apply(&self.up.forward(x)?)?)
    }
}

struct Layer {
    attention: Attention,
    layer_norm: LayerNorm,
    feed_forward: FeedForward,
    final_layer_norm: LayerNorm,
}

impl Layer {
    fn load(cfg: &Wav2Vec2Config, vb: VarBuilder) -> Result<Self> {
        let ctx = vb.prefix();
        let (d, eps) = (cfg.hidden_size, cfg.layer_norm_eps);
        Ok(Self {
            attention: Attention::load(cfg, vb.pp("attention")).map_err(load_err(&ctx))?,
            layer_norm: candle_nn::layer_norm(d, eps, vb.pp("layer_norm"))
                .map_err(load_err(&ctx))?,
            feed_forward: FeedForward::load(cfg, vb.pp("feed_forward"))?,
            final_layer_norm: candle_nn::layer_norm(d, eps, vb.pp("final_layer_norm"))
                .map_err(load_err(&ctx))?,
        })
    }

    /// Post-layer-norm layer (base models). `[B, T, D]` → `[B, T, D]`.
    fn forward_post(&self, x: &Tensor, bias: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let x = self
            .layer_norm
            .forward(&(x + self.attention.forward(x, bias)?)?)?;
        self.final_layer_norm
            .forward(&(&x + self.feed_forward.forward(&x)?)?)
    }

    /// Pre-layer-norm layer (`do_stable_layer_norm`). `[B, T, D]` → `[B, T, D]`.
    fn forward_pre(&self, x: &Tensor, bias: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let x = (x + self.attention.forward(&self.layer_norm.forward(x)?, bias)?)?;
        &x + self
            .feed_forward
            .forward(&self.final_layer_norm.forward(&x)?)?
    }
}

/// The transformer stack with its positional conv and outer layer norm.
pub struct Encoder {
    pos_conv: PositionalConv,
    layer_norm: LayerNorm,
    layers: Vec<Layer>,
    stable: bool,
}

impl Encoder {
    /// Loads from `vb` (the `encoder` prefix).
    pub fn load(cfg: &Wav2Vec2Config, vb: VarBuilder) -> Result<Self> {
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::load(cfg, vb.pp(format!("layers.{i}"))))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            pos_conv: PositionalConv::load(cfg, vb.pp("pos_conv_embed.conv"))?,
            layer_norm: candle_nn::layer_norm(
                cfg.hidden_size,
                cfg.layer_norm_eps,
                vb.pp("layer_norm"),
            )
            .map_err(load_err(vb.prefix()))?,
            layers,
            stable: cfg.do_stable_layer_norm,
        })
    }

    /// `x` `[B, T, D]`; `frame_mask` `[B, T]` (1 valid, 0 padding) when padding must be hidden
    /// from the model → `[B, T, D]`.
    pub fn forward(&self, x: &Tensor, frame_mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let (x, bias) = match frame_mask {
            Some(m) => {
                // Padded frames are zeroed (so the positional conv sees what it sees at a row's
                // end when run alone) and hidden from attention as keys.
                let x = x.broadcast_mul(&m.unsqueeze(2)?)?;
                let bias = ((m.affine(1.0, -1.0)? * f64::from(f32::MAX))?)
                    .unsqueeze(1)?
                    .unsqueeze(1)?;
                (x, Some(bias))
            }
            None => (x.clone(), None),
        };
        let mut x = (&x + self.pos_conv.forward(&x)?)?;
        if self.stable {
            for layer in &self.layers {
                x = layer.forward_pre(&x, bias.as_ref())?;
            }
            self.layer_norm.forward(&x)
        } else {
            x = self.layer_norm.forward(&x)?;
            for layer in &self.layers {
                x = layer.forward_post(&x, bias.as_ref())?;
            }
            Ok(x)
        }
    }
}

/// `[..., V]` logits → log-softmax over the last dim.
pub fn log_softmax(x: &Tensor) -> candle_core::Result<Tensor> {
    candle_nn::ops::log_softmax(x, D::Minus1)
}
