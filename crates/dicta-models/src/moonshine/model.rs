//! Moonshine encoder and decoder layers on candle.
//!
//! The encoder takes raw 16 kHz audio of any length (cost ∝ length): a conv stem (127/64 tanh,
//! group norm, 7/3 GELU, 3/2 GELU: 384 samples per frame), then pre-norm transformer layers with
//! partial rotary embeddings. The decoder is pre-norm with rotary self-attention, cross-attention
//! and a SwiGLU MLP. Each recording is encoded on its own (no padding, so batching cannot change
//! a row); the decoder steps many rows together, each attending to its own encoder frames.

use super::weights::{Quantized, Tensors, Weights as Loaded};
use crate::kernels;
use crate::kernels::int8::PackedU8Asym;
use crate::whisper::quant::{ComputeType, Linear};
use candle_core::{DType, Device, Tensor, D};
use dicta_core::{Error, Result};

/// Samples per encoder frame (conv strides 64 · 3 · 2).
pub const SAMPLES_PER_FRAME: usize = 384;

/// Shortest input the conv stem accepts (one output frame); shorter audio is zero-padded.
pub const MIN_SAMPLES: usize = 127 + 64 * (7 - 1 + 3 * (3 - 1));

fn ce(e: candle_core::Error) -> Error {
    Error::internal(format!("tensor backend: {e}"))
}

/// Shapes of a loaded Moonshine model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoonshineConfig {
    /// Hidden width (288 tiny, 416 base).
    pub d_model: usize,
    /// Attention heads (encoder and decoder).
    pub n_head: usize,
    /// Width per head.
    pub head_dim: usize,
    /// Leading dimensions of each head that rotate (partial rotary).
    pub rotary_dim: usize,
    /// Encoder layers.
    pub encoder_layers: usize,
    /// Decoder layers.
    pub decoder_layers: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Decoder start token.
    pub bos: u32,
    /// End of transcript token.
    pub eos: u32,
}

/// Output frames the encoder makes from `samples` samples (the conv stem's arithmetic).
pub fn encoder_frames(samples: usize) -> usize {
    let n = samples.max(MIN_SAMPLES);
    let c1 = (n - 127) / 64 + 1;
    let c2 = (c1 - 7) / 3 + 1;
    (c2 - 3) / 2 + 1
}

/// Tensors being moved into layers, with the compute type they are built for.
struct Weights {
    t: Tensors,
    q: Quantized,
    ct: ComputeType,
}

impl Weights {
    fn take(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let (dims, v) = self
            .t
            .remove(name)
            .ok_or_else(|| Error::model_load(format!("Moonshine: missing tensor {name}")))?;
        let n: usize = shape.iter().product();
        if dims.iter().product::<usize>() != n || v.len() != n {
            return Err(Error::model_load(format!(
                "Moonshine: {name} has shape {dims:?}, expected {shape:?}"
            )));
        }
        Tensor::from_vec(v, shape, &Device::Cpu).map_err(ce)
    }

    /// Output features of the layer `p`: from its stored 8-bit form when the loader kept no
    /// float weights for it.
    fn out_features(&self, p: &str) -> Result<usize> {
        match self.q.get(p) {
            Some(q) => Ok(q.n),
            None => Ok(self.dims(&format!("{p}.weight"))?[0]),
        }
    }

    fn dims(&self, name: &str) -> Result<Vec<usize>> {
        self.t
            .get(name)
            .map(|(d, _)| d.clone())
            .ok_or_else(|| Error::model_load(format!("Moonshine: missing tensor {name}")))
    }

    /// The layer `p` (`[out, in]`): for int8, the stored 8-bit weights run as onnxruntime
    /// runs them when the export has them; otherwise f32 weights (quantized per channel for
    /// int8).
    fn linear(&mut self, p: &str, out: usize, inp: usize, bias: bool) -> Result<Linear> {
        let stored = match self.ct {
            ComputeType::Int8 => self.q.remove(p),
            _ => None,
        };
        if let Some(q) = stored {
            if (q.k, q.n) != (inp, out) {
                return Err(Error::model_load(format!(
                    "Moonshine: {p} is [{}, {}], expected [{inp}, {out}]",
                    q.k, q.n
                )));
            }
            self.t.remove(&format!("{p}.weight"));
            let b = if bias {
                Some(
                    self.t
                        .remove(&format!("{p}.bias"))
                        .ok_or_else(|| {
                            Error::model_load(format!("Moonshine: missing tensor {p}.bias"))
                        })?
                        .1,
                )
            } else {
                None
            };
            let w = PackedU8Asym::new(&q.values, q.k, q.n, q.signed, q.zero_point, q.scale);
            return Ok(if q.float_product {
                Linear::asym_per_row(w, b)
            } else {
                Linear::onnx_quantized(w, b)
            });
        }
        let w = self.take(&format!("{p}.weight"), &[out, inp])?;
        let b = if bias {
            Some(self.take(&format!("{p}.bias"), &[out])?)
        } else {
            None
        };
        Linear::new(w, b)
            .and_then(|l| l.quantize(self.ct))
            .map_err(ce)
    }

    fn norm(&mut self, p: &str, d: usize) -> Result<LayerNorm> {
        LayerNorm::new(
            self.take(&format!("{p}.weight"), &[d])?,
            self.take(&format!("{p}.bias"), &[d])?,
        )
    }
}

/// ONNX `LayerNormalization` as onnxruntime's CPU kernel computes it (eps 1e-5): sequential
/// f32 sums of x and x², `σ = sqrt(E[x²] − E[x]² + eps)`, `y = (x − mean) / σ · γ + β`. The same
/// arithmetic matters here: the next layer quantizes its input to 8 bits per tensor, which turns
/// rounding differences into whole quantization steps.
struct LayerNorm {
    w: Vec<f32>,
    b: Vec<f32>,
}

impl LayerNorm {
    fn new(w: Tensor, b: Tensor) -> Result<Self> {
        Ok(Self {
            w: w.to_vec1::<f32>().map_err(ce)?,
            b: b.to_vec1::<f32>().map_err(ce)?,
        })
    }

    /// x [.., d] → [.., d].
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let d = self.w.len();
        let mut v = x.flatten_all()?.to_vec1::<f32>()?;
        let n = d as f32;
        for row in v.chunks_exact_mut(d) {
            let (mut mean, mut sq) = (0f32, 0f32);
            for &x in row.iter() {
                mean += x;
                sq += x * x;
            }
            mean /= n;
            let sd = (sq / n - mean * mean + 1e-5).sqrt();
            for ((y, g), b) in row.iter_mut().zip(&self.w).zip(&self.b) {
                *y = (*y - mean) / sd * g + b;
            }
        }
        Tensor::from_vec(v, x.dims(), x.device())
    }
}

/// Sum as Eigen's SSE reduction computes it (what onnxruntime's `InstanceNormalization` uses):
/// two 4-lane accumulators over 8-element strides, one more packet if it fits, lanes folded
/// `(0 + 2) + (1 + 3)`, then the remaining elements one by one.
fn eigen_sum(v: &[f32]) -> f32 {
    const P: usize = 4;
    let n = v.len();
    if n < P {
        return v.iter().fold(0.0, |s, &x| s + x);
    }
    let (end2, end1) = ((n / (2 * P)) * 2 * P, (n / P) * P);
    let mut r0: [f32; P] = v[..P].try_into().expect("4 lanes");
    if end1 > P {
        let mut r1: [f32; P] = v[P..2 * P].try_into().expect("4 lanes");
        for c in v[2 * P..end2].chunks_exact(2 * P) {
            for l in 0..P {
                r0[l] += c[l];
                r1[l] += c[P + l];
            }
        }
        for l in 0..P {
            r0[l] += r1[l];
        }
        if end1 > end2 {
            for l in 0..P {
                r0[l] += v[end2 + l];
            }
        }
    }
    let mut s = (r0[0] + r0[2]) + (r0[1] + r0[3]);
    for &x in &v[end1..] {
        s += x;
    }
    s
}

/// Group norm with one group over x [1, C, T] exactly as onnxruntime runs the export
/// (`InstanceNormalization` over the flattened tensor with Eigen reductions:
/// `s = 1 / sqrt(Σ(x − mean)² / n + eps)`, `y = x · s + (0 − mean · s)`), then `· γ + β`.
fn group_norm(x: &Tensor, gamma: &[f32], beta: &[f32]) -> candle_core::Result<Tensor> {
    let (_, c, t) = x.dims3()?;
    let mut v = x.flatten_all()?.to_vec1::<f32>()?;
    let n = v.len() as f32;
    let mean = eigen_sum(&v) / n;
    let sq: Vec<f32> = v.iter().map(|&x| (x - mean) * (x - mean)).collect();
    let scale = 1.0 / (eigen_sum(&sq) / n + 1e-5).sqrt();
    let shift = 0.0 - mean * scale;
    for (ch, row) in v.chunks_exact_mut(t).enumerate().take(c) {
        for y in row.iter_mut() {
            *y = (*y * scale + shift) * gamma[ch] + beta[ch];
        }
    }
    Tensor::from_vec(v, (1, c, t), x.device())
}

/// Rotary angles of positions `start..start + len`: cos and sin, each `[len, rotary_dim / 2]`.
struct Rotary {
    cos: Vec<f32>,
    sin: Vec<f32>,
    half: usize,
}

impl Rotary {
    fn new(inv_freq: &[f32], start: usize, len: usize) -> Self {
        let half = inv_freq.len();
        let mut cos = Vec::with_capacity(len * half);
        let mut sin = Vec::with_capacity(len * half);
        for p in start..start + len {
            for &f in inv_freq {
                // f32 product, as the reference computes it (inv_freq · positions in float).
                let a = p as f32 * f;
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        Self { cos, sin, half }
    }
}

/// Rotates interleaved pairs (2i, 2i+1) of the first `2 · half` features of x [B, H, T, Dh]
/// by the angles of positions `T`: `(x₀ c − x₁ s, x₁ c + x₀ s)`; the rest pass through. One
/// pass over the data (the same roundings as the tensor-op formulation).
fn apply_rotary(x: &Tensor, rot: &Rotary) -> candle_core::Result<Tensor> {
    let (b, h, t, dh) = x.dims4()?;
    let half = rot.half;
    if 2 * half > dh || rot.cos.len() != t * half {
        candle_core::bail!(
            "rotary tables of {} positions × {half} for x {:?}",
            rot.cos.len() / half.max(1),
            x.dims()
        );
    }
    let mut v = x.flatten_all()?.to_vec1::<f32>()?;
    for (i, row) in v.chunks_exact_mut(dh).enumerate() {
        let p = i % t;
        let (c, s) = (
            &rot.cos[p * half..(p + 1) * half],
            &rot.sin[p * half..(p + 1) * half],
        );
        for (pair, (&c, &s)) in row[..2 * half].chunks_exact_mut(2).zip(c.iter().zip(s)) {
            let (x0, x1) = (pair[0], pair[1]);
            pair[0] = x0 * c - x1 * s;
            pair[1] = x1 * c + x0 * s;
        }
    }
    Tensor::from_vec(v, (b, h, t, dh), x.device())
}

/// [N, T, H·Dh] → [N, H, T, Dh] (contiguous).
fn heads(x: &Tensor, n_head: usize) -> candle_core::Result<Tensor> {
    let (n, t, hd) = x.dims3()?;
    x.reshape((n, t, n_head, hd / n_head))?
        .transpose(1, 2)?
        .contiguous()
}

/// [N, H, T, Dh] → [N, T, H·Dh].
fn merge(x: &Tensor) -> candle_core::Result<Tensor> {
    let (n, h, t, dh) = x.dims4()?;
    x.transpose(1, 2)?.reshape((n, t, h * dh))
}

struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
}

impl Attention {
    fn load(w: &mut Weights, p: &str, d: usize) -> Result<Self> {
        Ok(Self {
            q: w.linear(&format!("{p}.q_proj"), d, d, false)?,
            k: w.linear(&format!("{p}.k_proj"), d, d, false)?,
            v: w.linear(&format!("{p}.v_proj"), d, d, false)?,
            o: w.linear(&format!("{p}.o_proj"), d, d, false)?,
        })
    }
}

struct EncoderLayer {
    ln1: LayerNorm,
    attn: Attention,
    ln2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

struct DecoderLayer {
    ln1: LayerNorm,
    self_attn: Attention,
    ln2: LayerNorm,
    cross: Attention,
    ln3: LayerNorm,
    /// d → 2·ffn: the first half is the value, the second the SiLU gate.
    fc1: Linear,
    fc2: Linear,
}

/// Per-row decoder state: self-attention cache and each row's cross-attention keys and values.
pub struct MoonshineState {
    /// Per layer: self-attention K and V [B, H, L, Dh].
    self_kv: Vec<Option<(Tensor, Tensor)>>,
    /// Per layer, per row: cross-attention K and V [1, H, T_row, Dh].
    cross: Vec<Vec<(Tensor, Tensor)>>,
    /// Tokens fed so far (the same for every row).
    len: usize,
}

impl MoonshineState {
    /// Rows in the batch.
    pub fn rows(&self) -> usize {
        self.cross.first().map_or(0, Vec::len)
    }

    /// Tokens fed so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True before the first step.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps only rows `keep` (ascending indices into the current rows), e.g. to drop finished
    /// rows between steps.
    pub fn select_rows(&mut self, keep: &[usize]) -> Result<()> {
        if keep.iter().any(|&i| i >= self.rows()) {
            return Err(Error::internal(format!(
                "select_rows {keep:?} of {} rows",
                self.rows()
            )));
        }
        if keep.is_empty() {
            self.self_kv.iter_mut().for_each(|kv| *kv = None);
        } else {
            let idx: Vec<u32> = keep.iter().map(|&i| i as u32).collect();
            let idx_t = Tensor::new(idx.as_slice(), &Device::Cpu).map_err(ce)?;
            let pick = |t: &Tensor| t.contiguous()?.index_select(&idx_t, 0);
            for kv in self.self_kv.iter_mut().flatten() {
                *kv = (pick(&kv.0).map_err(ce)?, pick(&kv.1).map_err(ce)?);
            }
        }
        for layer in &mut self.cross {
            *layer = keep.iter().map(|&i| layer[i].clone()).collect();
        }
        Ok(())
    }
}

/// A loaded Moonshine model (CPU, f32 or int8 linears).
pub struct Moonshine {
    config: MoonshineConfig,
    conv1: Tensor,
    gn_w: Vec<f32>,
    gn_b: Vec<f32>,
    conv2: (Tensor, Tensor),
    conv3: (Tensor, Tensor),
    enc_inv_freq: Vec<f32>,
    enc_layers: Vec<EncoderLayer>,
    enc_ln: LayerNorm,
    /// [V, d]
    embed: Tensor,
    dec_inv_freq: Vec<f32>,
    dec_layers: Vec<DecoderLayer>,
    dec_ln: LayerNorm,
    proj: Linear,
}

impl Moonshine {
    /// Builds the model from canonical tensors (see [`super::weights`]). `head_dim` comes from the
    /// export (its attention scale); `ct` = int8 stores every linear layer as int8.
    pub fn from_tensors(t: Loaded, head_dim: usize, ct: ComputeType) -> Result<Self> {
        let mut w = Weights {
            t: t.tensors,
            q: t.quantized,
            ct,
        };
        let conv1_dims = w.dims("conv1.weight")?;
        let d = conv1_dims[0];
        if head_dim == 0 || d % head_dim != 0 {
            return Err(Error::model_load(format!(
                "Moonshine: head width {head_dim} does not divide d_model {d}"
            )));
        }
        let n_head = d / head_dim;
        let count = |w: &Weights, p: &str| {
            (0..)
                .take_while(|i| w.t.contains_key(&format!("{p}.{i}.input_layernorm.weight")))
                .count()
        };
        let (n_enc, n_dec) = (count(&w, "encoder.layers"), count(&w, "decoder.layers"));
        let vocab = w.dims("decoder.embed_tokens.weight")?[0];
        let enc_ffn = w.out_features("encoder.layers.0.mlp.fc1")?;
        let dec_ffn2 = w.out_features("decoder.layers.0.mlp.fc1")?;
        let enc_inv_freq =
            w.t.remove("encoder.rotary.inv_freq")
                .map(|x| x.1)
                .unwrap_or_default();
        let dec_inv_freq =
            w.t.remove("decoder.rotary.inv_freq")
                .map(|x| x.1)
                .unwrap_or_default();
        if enc_inv_freq.is_empty()
            || 2 * enc_inv_freq.len() > head_dim
            || dec_inv_freq.len() != enc_inv_freq.len()
        {
            return Err(Error::model_load(format!(
                "Moonshine: rotary tables of {} / {} frequencies for heads of {head_dim}",
                enc_inv_freq.len(),
                dec_inv_freq.len()
            )));
        }
        let conv =
            |w: &mut Weights, p: &str, o: usize, i: usize, k: usize| -> Result<(Tensor, Tensor)> {
                Ok((
                    w.take(&format!("{p}.weight"), &[o, i, k])?,
                    w.take(&format!("{p}.bias"), &[o])?,
                ))
            };
        let conv1 = w.take("conv1.weight", &[d, 1, 127])?;
        let gn_w = w
            .take("groupnorm.weight", &[d])?
            .to_vec1::<f32>()
            .map_err(ce)?;
        let gn_b = w
            .take("groupnorm.bias", &[d])?
            .to_vec1::<f32>()
            .map_err(ce)?;
        let conv2 = conv(&mut w, "conv2", 2 * d, d, 7)?;
        let conv3 = conv(&mut w, "conv3", d, 2 * d, 3)?;
        let mut enc_layers = Vec::with_capacity(n_enc);
        for i in 0..n_enc {
            let p = format!("encoder.layers.{i}");
            enc_layers.push(EncoderLayer {
                ln1: w.norm(&format!("{p}.input_layernorm"), d)?,
                attn: Attention::load(&mut w, &format!("{p}.self_attn"), d)?,
                ln2: w.norm(&format!("{p}.post_attention_layernorm"), d)?,
                fc1: w.linear(&format!("{p}.mlp.fc1"), enc_ffn, d, true)?,
                fc2: w.linear(&format!("{p}.mlp.fc2"), d, enc_ffn, true)?,
            });
        }
        let enc_ln = w.norm("encoder.layer_norm", d)?;
        let embed = w.take("decoder.embed_tokens.weight", &[vocab, d])?;
        let mut dec_layers = Vec::with_capacity(n_dec);
        for i in 0..n_dec {
            let p = format!("decoder.layers.{i}");
            dec_layers.push(DecoderLayer {
                ln1: w.norm(&format!("{p}.input_layernorm"), d)?,
                self_attn: Attention::load(&mut w, &format!("{p}.self_attn"), d)?,
                ln2: w.norm(&format!("{p}.post_attention_layernorm"), d)?,
                cross: Attention::load(&mut w, &format!("{p}.encoder_attn"), d)?,
                ln3: w.norm(&format!("{p}.final_layernorm"), d)?,
                fc1: w.linear(&format!("{p}.mlp.fc1"), dec_ffn2, d, true)?,
                fc2: w.linear(&format!("{p}.mlp.fc2"), d, dec_ffn2 / 2, true)?,
            });
        }
        let dec_ln = w.norm("decoder.norm", d)?;
        let proj = w.linear("proj_out", vocab, d, false)?;
        Ok(Self {
            config: MoonshineConfig {
                d_model: d,
                n_head,
                head_dim,
                rotary_dim: 2 * enc_inv_freq.len(),
                encoder_layers: n_enc,
                decoder_layers: n_dec,
                vocab_size: vocab,
                bos: 1,
                eos: 2,
            },
            conv1,
            gn_w,
            gn_b,
            conv2,
            conv3,
            enc_inv_freq,
            enc_layers,
            enc_ln,
            embed,
            dec_inv_freq,
            dec_layers,
            dec_ln,
            proj,
        })
    }

    /// The model's shapes.
    pub fn config(&self) -> &MoonshineConfig {
        &self.config
    }

    /// Encodes one recording of 16 kHz samples → [T, d] with T = [`encoder_frames`]`(len)`.
    /// Audio shorter than [`MIN_SAMPLES`] is zero-padded to it.
    pub fn encode(&self, samples: &[f32]) -> Result<Tensor> {
        self.encode_inner(samples).map_err(ce)
    }

    fn encode_inner(&self, samples: &[f32]) -> candle_core::Result<Tensor> {
        let mut audio = samples.to_vec();
        if audio.len() < MIN_SAMPLES {
            audio.resize(MIN_SAMPLES, 0.0);
        }
        let n = audio.len();
        let x = Tensor::from_vec(audio, (1, 1, n), &Device::Cpu)?;
        let x = x.conv1d(&self.conv1, 0, 64, 1, 1)?.tanh()?;
        let x = group_norm(&x, &self.gn_w, &self.gn_b)?;
        let conv =
            |x: &Tensor, (w, b): &(Tensor, Tensor), stride: usize| -> candle_core::Result<Tensor> {
                let y = x.conv1d(w, 0, stride, 1, 1)?;
                kernels::gelu_erf(&y.broadcast_add(&b.reshape((1, (), 1))?)?)
            };
        let x = conv(&x, &self.conv2, 3)?;
        let x = conv(&x, &self.conv3, 2)?;
        let mut x = x.transpose(1, 2)?.contiguous()?;
        let t = x.dim(1)?;
        let rot = Rotary::new(&self.enc_inv_freq, 0, t);
        for l in &self.enc_layers {
            x = self.encoder_layer(l, &x, &rot)?;
        }
        self.enc_ln.forward(&x)?.squeeze(0)
    }

    /// x [1, T, d] → [1, T, d].
    fn encoder_layer(
        &self,
        l: &EncoderLayer,
        x: &Tensor,
        rot: &Rotary,
    ) -> candle_core::Result<Tensor> {
        let nh = self.config.n_head;
        let scale = (self.config.head_dim as f64).powf(-0.5);
        let h = l.ln1.forward(x)?;
        let q = apply_rotary(&heads(&l.attn.q.forward(&h)?, nh)?, rot)?;
        let k = apply_rotary(&heads(&l.attn.k.forward(&h)?, nh)?, rot)?;
        let v = heads(&l.attn.v.forward(&h)?, nh)?;
        let a = kernels::attention::self_attention(&(q * scale)?, &k, &v)?;
        let x = (x + l.attn.o.forward(&a)?)?;
        let h = l.ln2.forward(&x)?;
        x + l.fc2.forward(&kernels::gelu_erf(&l.fc1.forward(&h)?)?)?
    }

    /// A decoder state for rows attending to `encoded` (one [T_row, d] per row).
    pub fn start(&self, encoded: &[Tensor]) -> Result<MoonshineState> {
        let nh = self.config.n_head;
        let mut cross = Vec::with_capacity(self.dec_layers.len());
        for l in &self.dec_layers {
            let mut rows = Vec::with_capacity(encoded.len());
            for e in encoded {
                let e = e.unsqueeze(0).map_err(ce)?;
                let k = heads(&l.cross.k.forward(&e).map_err(ce)?, nh).map_err(ce)?;
                let v = heads(&l.cross.v.forward(&e).map_err(ce)?, nh).map_err(ce)?;
                rows.push((k, v));
            }
            cross.push(rows);
        }
        Ok(MoonshineState {
            self_kv: vec![None; self.dec_layers.len()],
            cross,
            len: 0,
        })
    }

    /// Feeds one token per row and returns the next-token logits [B, V].
    pub fn step(&self, tokens: &[u32], state: &mut MoonshineState) -> Result<Tensor> {
        if tokens.len() != state.rows() {
            return Err(Error::internal(format!(
                "Moonshine step: {} tokens for {} rows",
                tokens.len(),
                state.rows()
            )));
        }
        self.step_inner(tokens, state).map_err(ce)
    }

    fn step_inner(
        &self,
        tokens: &[u32],
        state: &mut MoonshineState,
    ) -> candle_core::Result<Tensor> {
        let b = tokens.len();
        let nh = self.config.n_head;
        let scale = (self.config.head_dim as f64).powf(-0.5);
        let ids = Tensor::new(tokens, &Device::Cpu)?;
        let mut x = self.embed.index_select(&ids, 0)?.reshape((b, 1, ()))?;
        let rot = Rotary::new(&self.dec_inv_freq, state.len, 1);
        for (li, l) in self.dec_layers.iter().enumerate() {
            let h = l.ln1.forward(&x)?;
            let q = apply_rotary(&heads(&l.self_attn.q.forward(&h)?, nh)?, &rot)?;
            let k = apply_rotary(&heads(&l.self_attn.k.forward(&h)?, nh)?, &rot)?;
            let v = heads(&l.self_attn.v.forward(&h)?, nh)?;
            let (k, v) = match state.self_kv[li].take() {
                Some((pk, pv)) => (Tensor::cat(&[pk, k], 2)?, Tensor::cat(&[pv, v], 2)?),
                None => (k, v),
            };
            let (a, _) = kernels::attend_few_queries(&(q * scale)?, &k, &v, false)?;
            state.self_kv[li] = Some((k, v));
            x = (x + l.self_attn.o.forward(&merge(&a)?)?)?;

            let h = l.ln2.forward(&x)?;
            let q = (heads(&l.cross.q.forward(&h)?, nh)? * scale)?;
            let mut rows = Vec::with_capacity(b);
            for (r, (ck, cv)) in state.cross[li].iter().enumerate() {
                rows.push(kernels::attend_few_queries(&q.narrow(0, r, 1)?, ck, cv, false)?.0);
            }
            x = (x + l.cross.o.forward(&merge(&Tensor::cat(&rows, 0)?)?)?)?;

            let h = l.ln3.forward(&x)?;
            let up = l.fc1.forward(&h)?;
            let half = up.dim(D::Minus1)? / 2;
            let gated =
                (up.narrow(D::Minus1, half, half)?.silu()? * up.narrow(D::Minus1, 0, half)?)?;
            x = (x + l.fc2.forward(&gated)?)?;
        }
        state.len += 1;
        let h = self.dec_ln.forward(&x)?;
        self.proj
            .forward(&h)?
            .reshape((b, ()))?
            .to_dtype(DType::F32)
    }
}
