//! Whisper's decoder on candle, with an external, batch-aware decoder cache, and the weight
//! loading both halves share (the encoder is in [`super::encoder`]).
//!
//! Weights arrive as a map in Hugging Face names (see [`WeightMap`]); both the CTranslate2 and the HF
//! loader produce it. At build time q/k/v are fused (one matmul per attention) and the attention scale
//! is folded into the query projection, so no per-token work is spent on either.

use super::cache::CrossKv;
use super::config::WhisperConfig;
use super::quant::{ComputeType, Linear};
use crate::kernels;
use crate::kernels::cross_lowp::{blocked_len, quantize_head, KEY_BLOCK};
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::LayerNorm;
use dicta_core::{Error, Result};
use std::collections::HashMap;

/// Maps a candle error to an internal Dicta error.
pub(crate) fn ce(e: candle_core::Error) -> Error {
    Error::internal(format!("tensor backend: {e}"))
}

/// Named tensors in Hugging Face Whisper names (any float dtype), plus the file they came from.
pub(crate) struct WeightMap {
    pub tensors: HashMap<String, Tensor>,
    pub source: String,
}

impl WeightMap {
    /// Removes `name`, checks its shape, and returns it as f32 on `dev`.
    pub(super) fn take(&mut self, name: &str, shape: &[usize], dev: &Device) -> Result<Tensor> {
        let t = self.tensors.remove(name).ok_or_else(|| {
            Error::model_load(format!(
                "{}: variable {name} is missing; the file is incomplete or not a Whisper checkpoint",
                self.source
            ))
        })?;
        if t.dims() != shape {
            return Err(Error::model_load(format!(
                "{}: variable {name} has shape {:?}, expected {shape:?} from the config",
                self.source,
                t.dims()
            )));
        }
        to_f32(&t).and_then(|t| t.to_device(dev)).map_err(ce)
    }
}

/// The float32 CPU tensor `t` as float16 when every value survives the round trip, else `t`.
fn f16_if_exact(t: Tensor) -> candle_core::Result<Tensor> {
    use rayon::prelude::*;
    let half = super::quant::with_values(&t, |v| {
        let h: Vec<half::f16> = v.par_iter().map(|&x| half::f16::from_f32(x)).collect();
        let exact = h
            .par_iter()
            .zip(v.par_iter())
            .all(|(h, x)| h.to_f32().to_bits() == x.to_bits());
        exact.then_some(h)
    })?;
    match half {
        Some(h) => Tensor::from_vec(h, t.dims(), &Device::Cpu),
        None => Ok(t),
    }
}

/// `t` as float32. A contiguous float16 CPU tensor (a Hugging Face float16 checkpoint;
/// CTranslate2's float16 weights arrive converted) widens in parallel
/// ([`kernels::widen_f16`]); candle's `to_dtype` converts one element at a time on one thread,
/// which took a quarter of tiny.en's loading (the 20 M-element embedding alone).
fn to_f32(t: &Tensor) -> candle_core::Result<Tensor> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let (candle_core::Storage::Cpu(candle_core::CpuStorage::F16(v)), Some((a, b))) =
            (&*storage, layout.contiguous_offsets())
        {
            return Tensor::from_vec(kernels::widen_f16(&v[a..b]), t.dims(), &Device::Cpu);
        }
    }
    t.to_dtype(DType::F32)
}

fn linear(
    wm: &mut WeightMap,
    p: &str,
    i: usize,
    o: usize,
    bias: bool,
    dev: &Device,
) -> Result<Linear> {
    let w = wm.take(&format!("{p}.weight"), &[o, i], dev)?;
    let b = if bias {
        Some(wm.take(&format!("{p}.bias"), &[o], dev)?)
    } else {
        None
    };
    Linear::new(w, b).map_err(ce)
}

/// Whisper's layer-norm epsilon.
pub(super) const LN_EPS: f64 = 1e-5;

pub(super) fn layer_norm(wm: &mut WeightMap, p: &str, d: usize, dev: &Device) -> Result<LayerNorm> {
    let w = wm.take(&format!("{p}.weight"), &[d], dev)?;
    let b = wm.take(&format!("{p}.bias"), &[d], dev)?;
    Ok(LayerNorm::new(w, b, LN_EPS))
}

/// Loads q/k/v projections of `p` as one fused [3d, d] layer (k has no bias in Whisper) with the
/// 1/√head_dim attention scale folded into q. `parts` selects which of q, k, v to fuse.
fn fused_proj(
    wm: &mut WeightMap,
    p: &str,
    d: usize,
    n_head: usize,
    parts: &[&str],
    dev: &Device,
) -> Result<Linear> {
    let scale = 1.0 / ((d / n_head) as f64).sqrt();
    let mut ws = Vec::new();
    let mut bs = Vec::new();
    for part in parts {
        let pp = format!("{p}.{part}_proj");
        let mut w = wm.take(&format!("{pp}.weight"), &[d, d], dev)?;
        let mut b = if *part == "k" {
            Tensor::zeros(d, DType::F32, dev).map_err(ce)?
        } else {
            wm.take(&format!("{pp}.bias"), &[d], dev)?
        };
        if *part == "q" {
            w = (w * scale).map_err(ce)?;
            b = (b * scale).map_err(ce)?;
        }
        ws.push(w);
        bs.push(b);
    }
    Linear::new(
        Tensor::cat(&ws, 0).map_err(ce)?,
        Some(Tensor::cat(&bs, 0).map_err(ce)?),
    )
    .map_err(ce)
}

/// A linear layer quantized to `ct` and packed for its kernel (f32 layers on Dicta's panel
/// kernel, int8 ones as they are).
pub(super) fn packed(l: Linear, ct: ComputeType) -> Result<Linear> {
    l.quantize(ct).and_then(Linear::packed).map_err(ce)
}

/// [`fused_proj`] of `parts` under `p` for heads of `d / n_head`, [`packed`] at `ct`.
pub(super) fn packed_fused(
    wm: &mut WeightMap,
    p: &str,
    (d, n_head): (usize, usize),
    parts: &[&str],
    ct: ComputeType,
    dev: &Device,
) -> Result<Linear> {
    packed(fused_proj(wm, p, d, n_head, parts, dev)?, ct)
}

/// The `[d, d]` output projection `{p}.out_proj` (with bias), [`packed`] at `ct`.
pub(super) fn out_proj(
    wm: &mut WeightMap,
    p: &str,
    d: usize,
    ct: ComputeType,
    dev: &Device,
) -> Result<Linear> {
    packed(linear(wm, &format!("{p}.out_proj"), d, d, true, dev)?, ct)
}

/// A layer's self-attention weights under `{p}` (encoder and decoder layers alike): its layer
/// norm, the fused q/k/v projection for `n_head` heads and the output projection, [`packed`]
/// at `ct`.
pub(super) fn self_attention(
    wm: &mut WeightMap,
    p: &str,
    (d, n_head): (usize, usize),
    ct: ComputeType,
    dev: &Device,
) -> Result<(LayerNorm, Linear, Linear)> {
    let attn = format!("{p}.self_attn");
    Ok((
        layer_norm(wm, &format!("{p}.self_attn_layer_norm"), d, dev)?,
        packed_fused(wm, &attn, (d, n_head), &["q", "k", "v"], ct, dev)?,
        out_proj(wm, &attn, d, ct, dev)?,
    ))
}

/// Splits [N, T, k·d] into k contiguous tensors [N, H, T, Dh].
fn split_heads(x: &Tensor, k: usize, n_head: usize) -> candle_core::Result<Vec<Tensor>> {
    let (n, t, kd) = x.dims3()?;
    let dh = kd / k / n_head;
    let x = x
        .reshape((n, t, k, n_head, dh))?
        .permute((2, 0, 3, 1, 4))?
        .contiguous()?;
    (0..k).map(|i| x.get(i)).collect()
}

/// [N, H, T, Dh] → [N, T, H·Dh].
fn merge_heads(x: &Tensor) -> candle_core::Result<Tensor> {
    let (n, h, t, dh) = x.dims4()?;
    x.transpose(1, 2)?.reshape((n, t, h * dh))
}

pub(super) struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl Mlp {
    fn load(wm: &mut WeightMap, p: &str, d: usize, ffn: usize, dev: &Device) -> Result<Self> {
        Ok(Self {
            fc1: linear(wm, &format!("{p}.fc1"), d, ffn, true, dev)?,
            fc2: linear(wm, &format!("{p}.fc2"), ffn, d, true, dev)?,
        })
    }
    /// [`Mlp::load`], quantized to `ct` and packed.
    pub(super) fn load_packed(
        wm: &mut WeightMap,
        p: &str,
        (d, ffn): (usize, usize),
        ct: ComputeType,
        dev: &Device,
    ) -> Result<Self> {
        Self::load(wm, p, d, ffn, dev)?.quantize(ct)?.packed()
    }
    fn quantize(self, ct: ComputeType) -> Result<Self> {
        Ok(Self {
            fc1: self.fc1.quantize(ct).map_err(ce)?,
            fc2: self.fc2.quantize(ct).map_err(ce)?,
        })
    }
    fn packed(self) -> Result<Self> {
        Ok(Self {
            fc1: self.fc1.packed().map_err(ce)?,
            fc2: self.fc2.packed().map_err(ce)?,
        })
    }
    pub(super) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if let Some(y) = super::quant::int8_mlp(&self.fc1, &self.fc2, x)? {
            return Ok(y);
        }
        self.fc2.forward(&kernels::gelu_erf(&self.fc1.forward(x)?)?)
    }
}

struct DecoderLayer {
    ln1: LayerNorm,
    qkv: Linear,
    self_out: Linear,
    ln2: LayerNorm,
    cross_q: Linear,
    cross_kv: Linear,
    cross_out: Linear,
    ln3: LayerNorm,
    mlp: Mlp,
}

/// Whisper's text decoder.
pub(crate) struct Decoder {
    /// [n_vocab, d]
    embed: Tensor,
    /// [n_text_ctx, d]
    pos: Tensor,
    /// [n_vocab, d]; usually the same weights as `embed` (tied).
    proj: Linear,
    layers: Vec<DecoderLayer>,
    ln: LayerNorm,
    n_head: usize,
    n_ctx: usize,
    /// The int8 compute type on the CPU: Dicta's own attention kernels, and cross-attention K/V
    /// kept in int8 (a decoder step reads all of them, so at batch 8 their size is most of the
    /// step's memory traffic).
    own_kernels: bool,
}

impl Decoder {
    /// Loads the decoder; with `ct` = int8 the per-token linears and the vocabulary projection are
    /// quantized (the embedding lookup stays f32).
    pub fn load(
        wm: &mut WeightMap,
        c: &WhisperConfig,
        dev: &Device,
        ct: ComputeType,
    ) -> Result<Self> {
        // f32 layers on Dicta's panel kernel (int8 layers stay as they are).
        let q = |l: Linear| packed(l, ct);
        let d = c.n_text_state;
        let embed = wm.take("model.decoder.embed_tokens.weight", &[c.n_vocab, d], dev)?;
        let proj = if wm.tensors.contains_key("proj_out.weight") {
            wm.take("proj_out.weight", &[c.n_vocab, d], dev)?
        } else {
            embed.clone()
        };
        let proj = q(Linear::new(proj, None).map_err(ce)?)?;
        // With the projection quantized, the embedding is only read a few rows per step: kept
        // as float16 when that loses nothing (a float16 checkpoint), 40 MB instead of 80 MB
        // resident for tiny.en.
        let embed = if int8_on_cpu(ct, dev) {
            f16_if_exact(embed).map_err(ce)?
        } else {
            embed
        };
        let pos = wm.take(
            "model.decoder.embed_positions.weight",
            &[c.n_text_ctx, d],
            dev,
        )?;
        let mut layers = Vec::with_capacity(c.n_text_layer);
        let h = c.n_text_head;
        for i in 0..c.n_text_layer {
            let p = format!("model.decoder.layers.{i}");
            let (ln1, qkv, self_out) = self_attention(wm, &p, (d, h), ct, dev)?;
            layers.push(DecoderLayer {
                ln1,
                qkv,
                self_out,
                ln2: layer_norm(wm, &format!("{p}.encoder_attn_layer_norm"), d, dev)?,
                cross_q: packed_fused(wm, &format!("{p}.encoder_attn"), (d, h), &["q"], ct, dev)?,
                cross_kv: packed_fused(
                    wm,
                    &format!("{p}.encoder_attn"),
                    (d, h),
                    &["k", "v"],
                    ct,
                    dev,
                )?,
                cross_out: out_proj(wm, &format!("{p}.encoder_attn"), d, ct, dev)?,
                ln3: layer_norm(wm, &format!("{p}.final_layer_norm"), d, dev)?,
                mlp: Mlp::load_packed(wm, &p, (d, c.n_text_ffn), ct, dev)?,
            });
        }
        let ln = layer_norm(wm, "model.decoder.layer_norm", d, dev)?;
        Ok(Self {
            embed,
            pos,
            proj,
            layers,
            ln,
            n_head: h,
            n_ctx: c.n_text_ctx,
            own_kernels: int8_on_cpu(ct, dev),
        })
    }

    /// Cross-attention K/V of every layer from encoder states [W, T, d] (each [W, H, T, Dh]).
    /// On the CPU the windows are projected one at a time: each one's working set stays in
    /// cache (as `Whisper::per_rows` does for the encoder).
    pub fn cross_kv(&self, enc: &Tensor) -> candle_core::Result<Vec<CrossKv>> {
        if self.own_kernels {
            return self.cross_kv_i8(enc);
        }
        let n = enc.dim(0)?;
        if !enc.device().is_cpu() || n <= 1 {
            return self.cross_kv_f32(enc);
        }
        // One window at a time, then one copy per layer.
        let rows = (0..n)
            .map(|r| self.cross_kv_f32(&enc.narrow(0, r, 1)?))
            .collect::<candle_core::Result<Vec<_>>>()?;
        (0..self.layers.len())
            .map(|l| {
                let ks: Vec<_> = rows.iter().map(|r| r[l].k.clone()).collect();
                let vs: Vec<_> = rows.iter().map(|r| r[l].v.clone()).collect();
                Ok(CrossKv {
                    k: Tensor::cat(&ks, 0)?,
                    v: Tensor::cat(&vs, 0)?,
                    scales: None,
                })
            })
            .collect()
    }

    /// [`Decoder::cross_kv`] in f32, all windows of `enc` in one projection per layer.
    fn cross_kv_f32(&self, enc: &Tensor) -> candle_core::Result<Vec<CrossKv>> {
        self.layers
            .iter()
            .map(|l| {
                let kv = split_heads(&l.cross_kv.forward(enc)?, 2, self.n_head)?;
                Ok(CrossKv {
                    k: kv[0].clone(),
                    v: kv[1].clone(),
                    scales: None,
                })
            })
            .collect()
    }

    /// [`Decoder::cross_kv`] in int8 on the CPU: one window at a time (its f32 projection
    /// [T, 2·d] stays in cache), every (window, head) quantized with one scale per channel of
    /// keys and of values ([`quantize_head`]) straight into the heads' layout. A decoder
    /// step reads a quarter of the f32 bytes, which is what a batch of windows waits on (f16,
    /// before: 8-row steps 24% slower, and the 10-minute greedy transcription 13–15%).
    fn cross_kv_i8(&self, enc: &Tensor) -> candle_core::Result<Vec<CrossKv>> {
        let (n, t, d) = enc.dims3()?;
        let (h, dh) = (self.n_head, d / self.n_head);
        self.layers
            .iter()
            .map(|l| {
                let mut k = vec![0u8; n * h * blocked_len(t, dh)];
                let mut v = vec![0u8; n * t * d];
                let mut scales = vec![0f32; n * h * 2 * dh];
                for r in 0..n {
                    let kv = l.cross_kv.forward(&enc.narrow(0, r, 1)?)?.contiguous()?;
                    let (storage, layout) = kv.storage_and_layout();
                    let candle_core::Storage::Cpu(cpu) = &*storage else {
                        candle_core::bail!("int8 cross K/V are built on the CPU only")
                    };
                    let src = kernels::f32_input(cpu, layout)?;
                    kv_to_i8_heads(src, (t, h, dh), r, &mut k, &mut v, &mut scales);
                }
                let dev = enc.device();
                let nb = t.div_ceil(KEY_BLOCK);
                Ok(CrossKv {
                    k: Tensor::from_vec(k, (n, h, nb, KEY_BLOCK * dh), dev)?,
                    v: Tensor::from_vec(v, (n, h, t, dh), dev)?,
                    scales: Some(Tensor::from_vec(scales, (n, h, 2, dh), dev)?),
                })
            })
            .collect()
    }

    /// tokens: [N, L] u32 (new tokens) → hidden states [N, L, d] after the final layer norm;
    /// appends the new self-attention K/V to `cache`.
    pub fn forward(
        &self,
        tokens: &Tensor,
        cache: &mut super::cache::DecoderCache,
    ) -> Result<Tensor> {
        self.forward_with(tokens, cache, None)
    }

    /// Like [`Decoder::forward`], but each new position's self-attention is computed alone, over
    /// exactly the keys a one-token step at that position sees, with the one-token step's
    /// kernels: position `i` of a call gets the bits `L` one-token calls give it (the linear
    /// layers, layer norms and cross-attention already compute every row on its own).
    /// Speculative decoding verifies its drafts with this, so it stays lossless.
    pub fn forward_stepwise(
        &self,
        tokens: &Tensor,
        cache: &mut super::cache::DecoderCache,
    ) -> Result<Tensor> {
        self.run(tokens, cache, None, Mode::Stepwise)
    }

    /// Validates the call, then runs it from the cache's end.
    fn run(
        &self,
        tokens: &Tensor,
        cache: &mut super::cache::DecoderCache,
        probs: Option<&mut Vec<Tensor>>,
        mode: Mode,
    ) -> Result<Tensor> {
        let (n, l) = self.check(tokens, cache)?;
        let offset = cache.len();
        self.forward_inner(tokens, cache, n, l, offset, probs, mode)
            .map_err(ce)
    }

    /// Validates `tokens` [N, L] against `cache`; returns (N, L).
    fn check(&self, tokens: &Tensor, cache: &super::cache::DecoderCache) -> Result<(usize, usize)> {
        let (n, l) = tokens.dims2().map_err(|_| {
            Error::invalid_input(format!(
                "decode: tokens must be [N, L], got {:?}",
                tokens.dims()
            ))
        })?;
        if l == 0 {
            return Err(Error::invalid_input("decode: no tokens given (L = 0)"));
        }
        if n != cache.rows() {
            return Err(Error::invalid_input(format!(
                "decode: {n} token rows but the cache holds {} rows",
                cache.rows()
            )));
        }
        if cache.len() + l > self.n_ctx {
            return Err(Error::limit(
                "decoder context (n_text_ctx)",
                self.n_ctx,
                cache.len() + l,
            ));
        }
        Ok((n, l))
    }

    /// Like [`Decoder::forward`]; when `probs` is given, also pushes each layer's cross-attention
    /// probabilities [N, H, L, T_audio] (needs a cache whose rows are one per window).
    pub fn forward_with(
        &self,
        tokens: &Tensor,
        cache: &mut super::cache::DecoderCache,
        probs: Option<&mut Vec<Tensor>>,
    ) -> Result<Tensor> {
        self.run(tokens, cache, probs, Mode::All)
    }

    /// Like [`Decoder::forward`], but the hidden state of the last new position only
    /// ([N, 1, d]). On the int8 path the last layer then runs past its self-attention K/V on
    /// that position alone (every op there works row by row: the same bits as the whole
    /// call's last position); a 226-token previous-text prompt skips ≈ a quarter of its
    /// attention and linear work.
    pub fn forward_last(
        &self,
        tokens: &Tensor,
        cache: &mut super::cache::DecoderCache,
    ) -> Result<Tensor> {
        let hidden = self.run(tokens, cache, None, Mode::Last)?;
        let kept = hidden.dim(1).map_err(ce)?;
        hidden.narrow(1, kept - 1, 1).map_err(ce)
    }

    #[allow(clippy::too_many_arguments)]
    fn forward_inner(
        &self,
        tokens: &Tensor,
        cache: &mut super::cache::DecoderCache,
        n: usize,
        l: usize,
        offset: usize,
        mut probs: Option<&mut Vec<Tensor>>,
        mode: Mode,
    ) -> candle_core::Result<Tensor> {
        let stepwise = mode == Mode::Stepwise;
        // The last layer past its K/V on the last position only (int8 path, see `forward_last`).
        let trim = mode == Mode::Last && self.own_kernels && l > 1;
        let n_layers = self.layers.len();
        let d = self.embed.dim(1)?;
        let emb = self
            .embed
            .index_select(&tokens.flatten_all()?, 0)?
            .to_dtype(DType::F32)?
            .reshape((n, l, d))?;
        let starts = cache.starts().to_vec();
        let mut x = if starts.is_empty() {
            emb.broadcast_add(&self.pos.narrow(0, offset, l)?)?
        } else {
            // Left-padded rows: each row's own positions (padding at 0, never attended to).
            let idx: Vec<u32> = starts
                .iter()
                .flat_map(|&s| (offset..offset + l).map(move |j| j.saturating_sub(s) as u32))
                .collect();
            let idx = Tensor::from_vec(idx, n * l, emb.device())?;
            (emb + self.pos.index_select(&idx, 0)?.reshape((n, l, d))?)?
        };
        if !starts.is_empty() && !self.own_kernels {
            candle_core::bail!(
                "left-padded rows need the int8 decoder (the float32 path is the parity reference \
                 and keeps candle's attention)"
            );
        }
        // Causal mask among the new positions; cached positions are all visible.
        let mask = if l > 1 && !stepwise {
            let total = offset + l;
            let m: Vec<f32> = (0..l)
                .flat_map(|i| {
                    (0..total).map(move |j| {
                        if j > offset + i {
                            f32::NEG_INFINITY
                        } else {
                            0.0
                        }
                    })
                })
                .collect();
            Some(Tensor::from_vec(m, (l, total), x.device())?)
        } else {
            None
        };
        cache.reserve(offset + l)?;
        // The beams of a window read their shared prompt from one row (the same values).
        let sources = cache.prefix_sources();
        let shared = sources
            .as_ref()
            .map(|(source, shared)| kernels::SharedPrefix {
                source,
                shared: *shared,
            });
        for (li, layer) in self.layers.iter().enumerate() {
            // Self-attention over cached + new positions.
            let h = layer.ln1.forward(&x)?;
            let qkv = split_heads(&layer.qkv.forward(&h)?, 3, self.n_head)?;
            let (k, v) = cache.append(li, &qkv[1], &qkv[2], offset)?;
            // int8: causal attention over the cache in place (f16 on the CPU), each position as
            // a one-token step computes it (so also the verification pass's rule below). The
            // float32 path keeps candle's matmuls: it is the token-parity reference.
            let causal = |q: &Tensor, offset: usize| {
                if cache.f16_self_kv() {
                    kernels::attend_causal_f16(q, &k, &v, offset, &starts, shared)
                } else {
                    kernels::attend_causal_shared(q, &k, &v, offset, &starts, shared)
                }
            };
            let a = if trim && li + 1 == n_layers {
                x = x.narrow(1, l - 1, 1)?.contiguous()?;
                merge_heads(&causal(&qkv[0].narrow(2, l - 1, 1)?, offset + l - 1)?)?
            } else if self.own_kernels {
                merge_heads(&causal(&qkv[0], offset)?)?
            } else if stepwise && l > 1 {
                // One query at a time over its own prefix, as a one-token step computes it.
                let per = (0..l)
                    .map(|i| {
                        let q = qkv[0].narrow(2, i, 1)?.contiguous()?;
                        let (k, v) = (
                            k.narrow(2, 0, offset + i + 1)?,
                            v.narrow(2, 0, offset + i + 1)?,
                        );
                        let p = kernels::softmax_last_dim(&q.matmul(&k.t()?)?)?;
                        p.matmul(&v)
                    })
                    .collect::<candle_core::Result<Vec<_>>>()?;
                merge_heads(&Tensor::cat(&per, 2)?)?
            } else {
                let mut s = qkv[0].matmul(&k.t()?)?;
                if let Some(m) = &mask {
                    s = s.broadcast_add(m)?;
                }
                let p = kernels::softmax_last_dim(&s)?;
                merge_heads(&p.matmul(&v)?)?
            };
            x = (x + layer.self_out.forward(&a)?)?;
            // Cross-attention; rows that share a window use that window's K/V without copying it.
            let h = layer.ln2.forward(&x)?;
            let q = split_heads(&layer.cross_q.forward(&h)?, 1, self.n_head)?.remove(0);
            let (a, p) = cache.cross_attend(li, &q, probs.is_some())?;
            if let (Some(out), Some(p)) = (probs.as_deref_mut(), p) {
                out.push(p);
            }
            x = (x + layer.cross_out.forward(&a)?)?;
            let h = layer.ln3.forward(&x)?;
            x = (&x + layer.mlp.forward(&h)?)?;
        }
        cache.advance(l);
        self.ln.forward(&x)
    }

    /// hidden: [.., d] → logits [.., n_vocab].
    pub fn logits(&self, hidden: &Tensor) -> candle_core::Result<Tensor> {
        self.proj.forward(hidden)
    }

    /// [`Self::logits`] of hidden states [N, d] into `out` ([N, V] row-major), reusing its
    /// allocation where the projection is int8.
    pub fn logits_into(&self, hidden: &Tensor, out: &mut Vec<f32>) -> candle_core::Result<()> {
        self.proj.forward_into(hidden, out)
    }

    pub fn n_head(&self) -> usize {
        self.n_head
    }

    /// Whether the int8 path's own kernels run (int8 on the CPU).
    pub(crate) fn own_kernels(&self) -> bool {
        self.own_kernels
    }

    /// Whether rows may be left-padded ([`super::cache::DecoderCache::set_left_padding`]):
    /// the int8 decoder's own attention kernel masks per row.
    pub fn supports_left_padding(&self) -> bool {
        self.own_kernels
    }
}

/// What a decoder call computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every new position, prompts with a causal mask.
    All,
    /// Every new position, each as a one-token step computes it (speculative verification).
    Stepwise,
    /// Every position's K/V, but the hidden state of the last position only.
    Last,
}

/// One window's fused cross K/V projection `src` [T, 2, H, Dh] (f32) quantized into `k`
/// (blocked keys [N, H, ⌈T/16⌉, 16·Dh]), `v` ([N, H, T, Dh]) and `scales` ([N, H, 2, Dh]) at
/// window `r`, as `kernels::quantize_kv_i8` lays them out; heads in parallel.
fn kv_to_i8_heads(
    src: &[f32],
    (t, h, dh): (usize, usize, usize),
    r: usize,
    k: &mut [u8],
    v: &mut [u8],
    scales: &mut [f32],
) {
    use rayon::prelude::*;
    let d = h * dh;
    let block = blocked_len(t, dh);
    let kr = &mut k[r * h * block..(r + 1) * h * block];
    let vr = &mut v[r * h * t * dh..(r + 1) * h * t * dh];
    let sr = &mut scales[r * h * 2 * dh..(r + 1) * h * 2 * dh];
    kr.par_chunks_mut(block)
        .zip(vr.par_chunks_mut(t * dh))
        .zip(sr.par_chunks_mut(2 * dh))
        .enumerate()
        .for_each(|(hh, ((kh, vh), sh))| {
            let at = |j: usize| j * 2 * d + hh * dh;
            let key = |j: usize| &src[at(j)..at(j) + dh];
            let value = |j: usize| &src[at(j) + d..at(j) + d + dh];
            quantize_head((t, dh), key, value, kh, vh, sh);
        });
}

/// The int8 compute type on the CPU: where the encoder's attention scores run in int8 and the
/// cross-attention K/V are stored in int8 (Dicta's own kernels). Float32, and every other
/// device, keep candle's sums, which the faster-whisper parity of the float32 path rests on.
pub(super) fn int8_on_cpu(ct: ComputeType, dev: &Device) -> bool {
    ct == ComputeType::Int8 && dev.is_cpu()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embeddings_become_float16_only_when_exact() {
        let exact: Vec<f32> = (0..4096)
            .map(|i| half::f16::from_bits((i * 13) as u16 & 0x7bff).to_f32())
            .collect();
        let t = Tensor::from_vec(exact.clone(), (64, 64), &Device::Cpu).unwrap();
        let h = f16_if_exact(t).unwrap();
        assert_eq!(h.dtype(), DType::F16);
        let back = h.to_dtype(DType::F32).unwrap().flatten_all().unwrap();
        assert_eq!(back.to_vec1::<f32>().unwrap(), exact);
        // One value float16 cannot hold keeps the whole tensor float32.
        let mut inexact = exact;
        inexact[777] = 0.1;
        let t = Tensor::from_vec(inexact, (64, 64), &Device::Cpu).unwrap();
        assert_eq!(f16_if_exact(t).unwrap().dtype(), DType::F32);
    }

    /// The parallel, per-window quantization writes what `kernels::quantize_kv_i8` writes from
    /// candle's split into heads (keys blocked, the last block zero-padded; the same scales),
    /// at every window of a batch.
    #[test]
    fn int8_heads_equal_split_heads_then_quantize() {
        let (n, t, h, dh) = (3usize, 37usize, 2usize, 5usize);
        let d = h * dh;
        // Channels of different ranges; some values fall on half steps.
        let x: Vec<f32> = (0..n * t * 2 * d)
            .map(|i| (i as f32 * 0.731).sin() * (1.0 + (i % d) as f32) + (i % 4) as f32 * 0.125)
            .collect();
        let xt = Tensor::from_vec(x.clone(), (n, t, 2 * d), &Device::Cpu).unwrap();
        let want = split_heads(&xt, 2, h).unwrap();
        let (wk, wv, ws) = kernels::quantize_kv_i8(&want[0], &want[1]).unwrap();
        let (mut k, mut v) = (vec![0u8; n * h * blocked_len(t, dh)], vec![0u8; n * t * d]);
        let mut scales = vec![0f32; n * h * 2 * dh];
        for r in 0..n {
            let src = &x[r * t * 2 * d..(r + 1) * t * 2 * d];
            kv_to_i8_heads(src, (t, h, dh), r, &mut k, &mut v, &mut scales);
        }
        let u8s = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<u8>().unwrap();
        assert_eq!(k, u8s(&wk));
        assert_eq!(v, u8s(&wv));
        let ws: Vec<f32> = ws.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(scales, ws);
        // Not all zeros: the check above compares something.
        assert!(k.iter().filter(|&&x| x != 0).count() > k.len() / 2);
    }
}
