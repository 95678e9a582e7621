//! Whisper encoder-decoder on candle.
//!
//! Loads CTranslate2 folders (`model.bin`, as used by faster-whisper) and Hugging Face folders
//! (`model.safetensors`); [`convert_ct2_to_hf`] turns the first into the second. The model only does
//! the math: the decoding policy (greedy/beam, timestamps, fallback) lives in `dicta-engine`, and the
//! per-request state lives in a [`DecoderCache`] owned by the caller.

mod cache;
mod config;
mod convert;
mod ct2;
mod encoder;
mod hf;
mod model;
pub(crate) mod quant;
mod stem;
mod tokenizer;

pub use cache::DecoderCache;
pub use config::{SpecialTokens, WhisperConfig};
pub use convert::convert_ct2_to_hf;
pub use quant::{ComputeType, LoadOptions};
pub use tokenizer::WhisperTokenizer;

use candle_core::{Device, Tensor};
use dicta_core::{Error, Result};
use encoder::Encoder;
use model::{ce, Decoder};
use std::path::Path;

/// On-disk layout a model was loaded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// CTranslate2 folder (`model.bin` + `config.json` + `tokenizer.json`).
    CTranslate2,
    /// Hugging Face transformers folder (`model.safetensors` + `config.json` + `tokenizer.json`, …).
    HuggingFace,
}

/// A loaded Whisper model on one device (f32 weights, or int8 linear layers for [`ComputeType::Int8`]).
pub struct Whisper {
    /// Dimensions, special tokens and decoding metadata.
    pub config: WhisperConfig,
    /// The model's tokenizer.
    pub tokenizer: WhisperTokenizer,
    /// Folder layout the weights came from.
    pub format: WeightFormat,
    encoder: Encoder,
    decoder: Decoder,
    device: Device,
    compute_type: ComputeType,
}

impl std::fmt::Debug for Whisper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Whisper")
            .field("config", &self.config)
            .field("format", &self.format)
            .finish()
    }
}

impl Whisper {
    /// Detects the folder format (`model.bin` → CTranslate2; `model.safetensors` → Hugging Face) and
    /// loads in float32 on `device`: the reference path, token-identical to faster-whisper
    /// float32. [`Whisper::load_with`] with default options picks int8 where the CPU has it.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let opts = LoadOptions {
            compute_type: ComputeType::Float32,
        };
        Self::load_with(dir, device, &opts)
    }

    /// Like [`Whisper::load`], with the compute type (and future options) in `opts`.
    pub fn load_with(dir: &Path, device: &Device, opts: &LoadOptions) -> Result<Self> {
        let (format, config, tokenizer, mut weights) = if dir.join("model.bin").is_file() {
            let (c, t, w) = ct2::load(dir)?;
            (WeightFormat::CTranslate2, c, t, w)
        } else if dir.join("model.safetensors").is_file()
            || dir.join("model.safetensors.index.json").is_file()
        {
            let (c, t, w) = hf::load(dir)?;
            (WeightFormat::HuggingFace, c, t, w)
        } else {
            return Err(Error::model_load(format!(
                "{}: no model.bin (CTranslate2) or model.safetensors (Hugging Face) found; \
                 point to a Whisper model folder or fetch one with `dicta models fetch`",
                dir.display()
            )));
        };
        config.validate(&weights.source)?;
        // The default is the fastest type whose dev-set WER stays within 0.3 points of float32
        // (issue #13's rule): int8 where the CPU has vector int8 kernels (VNNI or AVX2; tiny.en
        // 18.91% both, 1.5-2.4x faster with VNNI, 1.5-2.0x on AVX2; docs/benchmarks.md), float32
        // elsewhere. float32 stays the reference that is token-identical to faster-whisper
        // float32.
        let ct = opts.compute_type.resolve(device.is_cpu(), "Whisper");
        let encoder = Encoder::load(&mut weights, &config, device, ct)?;
        let decoder = Decoder::load(&mut weights, &config, device, ct)?;
        if !weights.tensors.is_empty() {
            let mut names: Vec<_> = weights.tensors.keys().cloned().collect();
            names.sort();
            return Err(Error::model_load(format!(
                "{}: unknown variables {names:?}; this is not a Whisper checkpoint Dicta understands",
                weights.source
            )));
        }
        tracing::info!(
            dir = %dir.display(),
            ?format,
            layers = config.n_audio_layer,
            width = config.n_audio_state,
            compute_type = %ct,
            "loaded Whisper"
        );
        Ok(Self {
            config,
            tokenizer,
            format,
            encoder,
            decoder,
            device: device.clone(),
            compute_type: ct,
        })
    }

    /// Compute type the model was loaded with.
    pub fn compute_type(&self) -> ComputeType {
        self.compute_type
    }

    /// Whether a decoder cache may hold left-padded rows
    /// ([`DecoderCache::set_left_padding`]; the int8 decoder on the CPU), so that windows
    /// whose prompts differ in length decode in one batch.
    pub fn supports_left_padding(&self) -> bool {
        self.decoder.supports_left_padding()
    }

    /// Device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// mel: [N, n_mels, 2·n_audio_ctx] f32 → encoder states [N, n_audio_ctx, n_audio_state].
    pub fn encode(&self, mel: &Tensor) -> Result<Tensor> {
        let want = (self.config.n_mels, self.config.n_frames());
        match mel.dims() {
            &[_, m, t] if (m, t) == want => {}
            d => {
                return Err(Error::invalid_input(format!(
                    "encode: mel has shape {d:?}, expected [N, {}, {}]",
                    want.0, want.1
                )))
            }
        }
        self.per_rows(mel, |x| self.encoder.forward(x)).map_err(ce)
    }

    /// Runs `f` on the batch `x` [N, ..]: whole on accelerators; row by row on the CPU, where the
    /// encoder's matmuls are already large per row and a whole batch's intermediates (hundreds of MB)
    /// cost more in page faults and cache misses than batching saves.
    fn per_rows(
        &self,
        x: &Tensor,
        f: impl Fn(&Tensor) -> candle_core::Result<Tensor>,
    ) -> candle_core::Result<Tensor> {
        let n = x.dim(0)?;
        if !self.device.is_cpu() || n <= 1 {
            return f(x);
        }
        let rows = (0..n)
            .map(|r| f(&x.narrow(0, r, 1)?))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Tensor::cat(&rows, 0)
    }

    /// Builds a decoder cache for a batch: computes the cross-attention K/V of every decoder layer once
    /// from encoder states [N, n_audio_ctx, n_audio_state]; self-attention K/V start empty.
    pub fn new_cache(&self, encoder_out: &Tensor) -> Result<DecoderCache> {
        let want = (self.config.n_audio_ctx, self.config.n_text_state);
        match encoder_out.dims() {
            &[_, t, d] if (t, d) == want => {}
            d => {
                return Err(Error::invalid_input(format!(
                    "new_cache: encoder states have shape {d:?}, expected [N, {}, {}]",
                    want.0, want.1
                )))
            }
        }
        let cross = self.decoder.cross_kv(encoder_out).map_err(ce)?;
        let h = self.decoder.n_head();
        let cache = DecoderCache::new(cross, h, self.config.n_text_state / h)?;
        // The int8 decoder's own kernels read f16 self-attention K/V (half the bytes a step reads).
        Ok(if self.decoder.own_kernels() {
            cache.with_f16_self_kv()
        } else {
            cache
        })
    }

    /// tokens: [N, L] u32 (the new tokens of each row since the last call; on the first call the whole
    /// prompt) → logits [N, L, n_vocab] f32. Appends to the self-attention cache.
    pub fn decode(&self, tokens: &Tensor, cache: &mut DecoderCache) -> Result<Tensor> {
        let hidden = self.decoder.forward(tokens, cache)?;
        self.decoder.logits(&hidden).map_err(ce)
    }

    /// Verification pass of speculative decoding: tokens [N, L] (the new tokens of each row) →
    /// logits [N, L, n_vocab], where position `i` of each row has exactly the logits (the same
    /// bits) a one-token [`Whisper::decode_last`] call at that position gives (see
    /// `Decoder::forward_stepwise`). Appends to the self-attention cache; roll back rejected
    /// positions with [`DecoderCache::truncate`].
    pub fn decode_verify(&self, tokens: &Tensor, cache: &mut DecoderCache) -> Result<Tensor> {
        let hidden = self.decoder.forward_stepwise(tokens, cache)?;
        self.decoder.logits(&hidden).map_err(ce)
    }

    /// Like [`Whisper::decode`], but the logits of one position per row only: tokens [N, L],
    /// `pick[i]` < L → logits [N, n_vocab] of position `pick[i]` of row `i` (rows fed with
    /// padding after their last real token, as a speculative draft step does).
    pub fn decode_pick(
        &self,
        tokens: &Tensor,
        cache: &mut DecoderCache,
        pick: &[u32],
    ) -> Result<Tensor> {
        let hidden = self.decoder.forward(tokens, cache)?;
        let (n, l, d) = hidden.dims3().map_err(ce)?;
        if pick.len() != n || pick.iter().any(|&j| j as usize >= l) {
            return Err(Error::invalid_input(format!(
                "decode_pick: {} positions for {n} rows of {l}",
                pick.len()
            )));
        }
        let idx: Vec<u32> = pick
            .iter()
            .enumerate()
            .map(|(i, &j)| (i * l) as u32 + j)
            .collect();
        let idx = Tensor::new(idx.as_slice(), &self.device).map_err(ce)?;
        let rows = hidden
            .reshape((n * l, d))
            .and_then(|h| h.index_select(&idx, 0))
            .map_err(ce)?;
        self.decoder.logits(&rows).map_err(ce)
    }

    /// Cross-attention weights of the alignment heads for word timestamps (what faster-whisper's
    /// `find_alignment` runs DTW on): teacher-forces `tokens` [N, L] (the whole sequence: prompt, text,
    /// `<|endoftext|>`) over encoder states [N, n_audio_ctx, d] in one pass →
    /// [N, A, L, n_audio_ctx] softmax probabilities, one slice per `config.alignment_heads` entry, in order.
    pub fn alignment_weights(&self, encoder_out: &Tensor, tokens: &Tensor) -> Result<Tensor> {
        Ok(self.alignment(encoder_out, tokens)?.0)
    }

    /// [`Whisper::alignment_weights`] plus the logits of every position from the same pass:
    /// encoder states [N, n_audio_ctx, d], tokens [N, L] → (weights [N, A, L, n_audio_ctx],
    /// logits [N, L, n_vocab]). Rows may be padded at the end (attention is causal, so padding
    /// never changes earlier positions).
    pub fn alignment(&self, encoder_out: &Tensor, tokens: &Tensor) -> Result<(Tensor, Tensor)> {
        let mut cache = self.new_cache(encoder_out)?;
        let mut probs = Vec::with_capacity(self.config.n_text_layer);
        let hidden = self
            .decoder
            .forward_with(tokens, &mut cache, Some(&mut probs))?;
        let heads = self
            .config
            .alignment_heads
            .iter()
            .map(|&(l, h)| probs[l].narrow(1, h, 1))
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(ce)?;
        let weights = Tensor::cat(&heads, 1).map_err(ce)?;
        let logits = self.decoder.logits(&hidden).map_err(ce)?;
        Ok((weights, logits))
    }

    /// Like [`Whisper::decode`] but returns only the last position's logits [N, n_vocab] (the hot path:
    /// the vocabulary projection runs for one position per row).
    pub fn decode_last(&self, tokens: &Tensor, cache: &mut DecoderCache) -> Result<Tensor> {
        let last = self.last_hidden(tokens, cache)?;
        self.decoder.logits(&last).map_err(ce)
    }

    /// [`Self::decode_last`] with the logits [N, n_vocab] written row-major into `logits`,
    /// reusing its allocation (the int8 projection writes there directly; decoder loops call
    /// this every step).
    pub fn decode_last_into(
        &self,
        tokens: &Tensor,
        cache: &mut DecoderCache,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        let last = self.last_hidden(tokens, cache)?;
        self.decoder.logits_into(&last, logits).map_err(ce)
    }

    /// The decoder's hidden state [N, d] at each row's last new position.
    fn last_hidden(&self, tokens: &Tensor, cache: &mut DecoderCache) -> Result<Tensor> {
        let hidden = self.decoder.forward_last(tokens, cache)?;
        hidden.squeeze(1).map_err(ce)
    }
}
