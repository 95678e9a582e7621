//! Activation functions named in Hugging Face configs, with a multi-threaded CPU path.
//!
//! candle's CPU elementwise ops run on one thread; the activations here touch the largest
//! tensors of the model (the first conv outputs 512 channels × 1/5 of the samples), so on CPU
//! they run as a custom op split across rayon's pool.

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor};
use dicta_core::{Error, Result};
use rayon::prelude::*;

/// Elements per parallel task: large enough to amortise scheduling, small enough to balance.
const CHUNK: usize = 1 << 15;

/// An activation from `hidden_act` / `feat_extract_activation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Exact (erf) GELU: transformers' `"gelu"`.
    Gelu,
    /// Tanh-approximated GELU: `"gelu_new"`, `"gelu_pytorch_tanh"`.
    GeluTanh,
    /// `"relu"`.
    Relu,
    /// `"swish"` / `"silu"`.
    Silu,
}

impl Act {
    /// Parses a transformers activation name.
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "gelu" => Act::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Act::GeluTanh,
            "relu" => Act::Relu,
            "swish" | "silu" => Act::Silu,
            other => {
                return Err(Error::model_load(format!(
                    "activation {other:?} is not supported (gelu, gelu_new, relu, swish)"
                )))
            }
        })
    }

    /// The activation of one value (same formulas as candle's kernels).
    #[inline]
    pub fn scalar(self, v: f32) -> f32 {
        match self {
            Act::Gelu => {
                (candle_core::cpu::erf::erf_f32(v * std::f32::consts::FRAC_1_SQRT_2) + 1.0)
                    * 0.5
                    * v
            }
            Act::GeluTanh => {
                let c = (2.0f32 / std::f32::consts::PI).sqrt();
                0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
            }
            Act::Relu => v.max(0.0),
            Act::Silu => v / (1.0 + (-v).exp()),
        }
    }

    /// Applies the activation elementwise (any shape).
    pub fn apply(self, x: &Tensor) -> candle_core::Result<Tensor> {
        if x.device().is_cpu() && x.dtype() == DType::F32 {
            return x.contiguous()?.apply_op1_no_bwd(&ParallelAct(self));
        }
        match self {
            Act::Gelu => x.gelu_erf(),
            Act::GeluTanh => x.gelu(),
            Act::Relu => x.relu(),
            Act::Silu => x.silu(),
        }
    }
}

struct ParallelAct(Act);

impl CustomOp1 for ParallelAct {
    fn name(&self) -> &'static str {
        "dicta-parallel-act"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let src = crate::kernels::f32_input(s, l)?;
        let act = self.0;
        let mut out = vec![0f32; src.len()];
        out.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(o, x)| {
                for (o, &x) in o.iter_mut().zip(x) {
                    *o = act.scalar(x);
                }
            });
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
}

/// Per-channel normalisation over time followed by the activation, for `[B, C, L]` on CPU:
/// the first conv layer of group-norm wav2vec2 (`GroupNorm(num_groups = C)`), fused so its
/// largest tensor is read once for statistics and written once.
pub struct ChannelNormAct {
    gamma: Vec<f32>,
    beta: Vec<f32>,
    eps: f64,
    act: Act,
}

impl ChannelNormAct {
    /// `gamma`, `beta`: `[C]`.
    pub fn new(gamma: &Tensor, beta: &Tensor, eps: f64, act: Act) -> candle_core::Result<Self> {
        Ok(Self {
            gamma: gamma.to_dtype(DType::F32)?.to_vec1()?,
            beta: beta.to_dtype(DType::F32)?.to_vec1()?,
            eps,
            act,
        })
    }
}

impl CustomOp1 for ChannelNormAct {
    fn name(&self) -> &'static str {
        "dicta-channel-norm-act"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let src = crate::kernels::f32_input(s, l)?;
        let (_, c, t) = l.shape().dims3()?;
        if c != self.gamma.len() || t == 0 {
            candle_core::bail!(
                "channel norm: {c} channels, {t} frames, {} gains",
                self.gamma.len()
            )
        }
        let mut out = vec![0f32; src.len()];
        out.par_chunks_mut(t)
            .zip(src.par_chunks(t))
            .enumerate()
            .for_each(|(row, (o, x))| {
                let ch = row % c;
                let n = t as f64;
                let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
                let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
                let scale = self.gamma[ch] as f64 / (var + self.eps).sqrt();
                let (scale, shift) = (scale as f32, (self.beta[ch] as f64 - mean * scale) as f32);
                for (o, &v) in o.iter_mut().zip(x) {
                    *o = self.act.scalar(v * scale + shift);
                }
            });
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
}
