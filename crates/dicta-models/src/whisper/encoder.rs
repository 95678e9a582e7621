//! Whisper's audio encoder on candle: the convolution stem, then pre-norm self-attention layers.
//! Weights come from the loaders' [`WeightMap`]; with the int8 compute type on the CPU every
//! linear layer is quantized and the attention and stem run on Dicta's kernels.

use super::config::WhisperConfig;
use super::model::{int8_on_cpu, layer_norm, self_attention, Mlp, WeightMap, LN_EPS};
use super::quant::{ComputeType, Linear};
use crate::kernels;
use candle_core::{Device, IndexOp, Module, Tensor};
use candle_nn::{Conv1d, Conv1dConfig, LayerNorm};
use dicta_core::Result;

struct EncoderLayer {
    ln1: LayerNorm,
    qkv: Linear,
    out: Linear,
    ln2: LayerNorm,
    mlp: Mlp,
    n_head: usize,
    /// Attention scores on the byte kernels too (compute type int8 on the CPU).
    int8_attention: bool,
}

impl EncoderLayer {
    /// x: [N, T, d] → [N, T, d].
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let h = self.norm(&self.ln1, x)?;
        // Views of the fused [N, T, 3·d] projection: the kernel reads them through their strides.
        let qkv = self.qkv.forward(&h)?;
        let (n, t, d3) = qkv.dims3()?;
        let dh = d3 / 3 / self.n_head;
        let qkv = qkv.reshape((n, t, 3, self.n_head, dh))?;
        let part = |i: usize| qkv.i((.., .., i))?.transpose(1, 2);
        let attend = if self.int8_attention {
            kernels::attention::self_attention_int8
        } else {
            kernels::attention::self_attention
        };
        let a = attend(&part(0)?, &part(1)?, &part(2)?)?;
        let x = (x + self.out.forward(&a)?)?;
        let h = self.norm(&self.ln2, &x)?;
        x + self.mlp.forward(&h)?
    }

    /// The int8 compute type's layer norm is the vectorised kernel; float32 keeps candle's
    /// (the token-parity reference).
    fn norm(&self, ln: &LayerNorm, x: &Tensor) -> candle_core::Result<Tensor> {
        match (self.int8_attention, ln.bias()) {
            (true, Some(b)) => kernels::norm::layer_norm(x, ln.weight(), b, LN_EPS as f32),
            _ => ln.forward(x),
        }
    }
}

/// Whisper's audio encoder.
pub(crate) struct Encoder {
    conv1: Conv1d,
    conv2: Conv1d,
    /// The convolutions on Dicta's panel kernel (compute type int8 on the CPU).
    fast_stem: Option<super::stem::Stem>,
    /// [n_audio_ctx, d]
    pos: Tensor,
    layers: Vec<EncoderLayer>,
    ln_post: LayerNorm,
}

impl Encoder {
    /// Loads the encoder; with `ct` = int8 every linear layer is quantized (Dicta's VNNI kernel
    /// runs these compute-bound matmuls 2–3× faster than the f32 gemm; AVX2's about half that).
    pub fn load(
        wm: &mut WeightMap,
        c: &WhisperConfig,
        dev: &Device,
        ct: ComputeType,
    ) -> Result<Self> {
        let d = c.n_audio_state;
        let conv = |wm: &mut WeightMap, p: &str, i: usize, stride: usize| -> Result<Conv1d> {
            let w = wm.take(&format!("{p}.weight"), &[d, i, 3], dev)?;
            let b = wm.take(&format!("{p}.bias"), &[d], dev)?;
            let cfg = Conv1dConfig {
                padding: 1,
                stride,
                ..Default::default()
            };
            Ok(Conv1d::new(w, Some(b), cfg))
        };
        let conv1 = conv(wm, "model.encoder.conv1", c.n_mels, 1)?;
        let conv2 = conv(wm, "model.encoder.conv2", d, 2)?;
        let fast_stem = if int8_on_cpu(ct, dev) {
            Some(super::stem::Stem::new(&conv1, &conv2)?)
        } else {
            None
        };
        let pos = wm.take(
            "model.encoder.embed_positions.weight",
            &[c.n_audio_ctx, d],
            dev,
        )?;
        let mut layers = Vec::with_capacity(c.n_audio_layer);
        for i in 0..c.n_audio_layer {
            let p = format!("model.encoder.layers.{i}");
            let (ln1, qkv, out) = self_attention(wm, &p, (d, c.n_audio_head), ct, dev)?;
            layers.push(EncoderLayer {
                ln1,
                qkv,
                out,
                ln2: layer_norm(wm, &format!("{p}.final_layer_norm"), d, dev)?,
                mlp: Mlp::load_packed(wm, &p, (d, c.n_audio_ffn), ct, dev)?,
                n_head: c.n_audio_head,
                int8_attention: int8_on_cpu(ct, dev),
            });
        }
        let ln_post = layer_norm(wm, "model.encoder.layer_norm", d, dev)?;
        Ok(Self {
            conv1,
            conv2,
            fast_stem,
            pos,
            layers,
            ln_post,
        })
    }

    /// mel: [N, n_mels, 2·n_audio_ctx] → [N, n_audio_ctx, d].
    pub fn forward(&self, mel: &Tensor) -> candle_core::Result<Tensor> {
        let x = match &self.fast_stem {
            Some(stem) => stem.forward(mel)?,
            None => {
                let x = kernels::gelu_erf(&self.conv1.forward(mel)?)?;
                kernels::gelu_erf(&self.conv2.forward(&x)?)?.transpose(1, 2)?
            }
        };
        let mut x = x.broadcast_add(&self.pos)?;
        for l in &self.layers {
            x = l.forward(&x)?;
        }
        match self.layers.first() {
            Some(l) => l.norm(&self.ln_post, &x),
            None => self.ln_post.forward(&x),
        }
    }
}
