//! Compute types for Whisper and the dense layer that runs in either of them.
//!
//! `int8` stores the weights of the memory-bound layers as GGML q8_0 (blocks of 32 int8 values with
//! one f16 scale, ~1.06 bytes per weight instead of 4) and quantizes each activation row on the fly
//! in the same blocks, like CTranslate2's int8 (per-row weight scales, dynamic activation scales).
//! Every output row depends only on its own input row, so batching cannot change a row's result.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Module, Tensor};
use dicta_core::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// Row count up to which an f32 [`Linear`] multiplies in the W·xᵀ orientation.
const FEW_ROWS: usize = 16;

/// Numeric type the model computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ComputeType {
    /// f32 weights and activations everywhere.
    #[default]
    Float32,
    /// int8 (q8_0) weights for the decoder's linears and the vocabulary projection, activations
    /// quantized per row on the fly; the encoder, attention, layer norms and the cache stay f32.
    Int8,
}

impl ComputeType {
    /// The name used on the command line and in configs (`float32`, `int8`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Float32 => "float32",
            Self::Int8 => "int8",
        }
    }
}

impl fmt::Display for ComputeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ComputeType {
    type Err = Error;

    /// Accepts `float32` (also `f32`, `default`) and `int8`, case-insensitively.
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "float32" | "f32" | "default" => Ok(Self::Float32),
            "int8" => Ok(Self::Int8),
            other => Err(Error::invalid_input(format!(
                "compute type {other:?} is not supported; use float32 or int8"
            ))),
        }
    }
}

/// How to load a Whisper model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Numeric type of the weights that are stored in reduced precision.
    pub compute_type: ComputeType,
}

/// candle runs q8_0 through its repacked int8 tiles only when `in` is a multiple of this (and `out`
/// of [`PACK_OUT`]); elsewhere it falls back to a generic kernel that is slower than f32 gemm.
const PACK_IN: usize = 256;
const PACK_OUT: usize = 16;

/// Weight storage of a [`Linear`].
#[derive(Clone)]
enum Weight {
    /// [out, in] f32.
    F32(Tensor),
    /// [out_pad, in_pad] q8_0: zero-padded up to [`PACK_OUT`] / [`PACK_IN`] multiples so candle
    /// takes its fast int8 kernels; zero columns add nothing to the dot products.
    Q8 { w: QMatMul, in_pad: usize },
}

/// Whether this CPU has the int8 dot-product instructions candle's q8_0 tiles need (VNNI); on plain
/// AVX2 candle's q8_0 path is slower than its f32 gemm, so int8 keeps f32 weights there.
pub(crate) fn int8_kernels_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        (is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni"))
            || (is_x86_feature_detected!("avxvnni") && is_x86_feature_detected!("avx2"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        true
    }
}

/// Dense layer y = x·Wᵀ + b, applied to [.., in] as one 2-D matmul (avoids a gemv per batch row).
#[derive(Clone)]
pub(crate) struct Linear {
    w: Weight,
    /// [out]
    b: Option<Tensor>,
    out: usize,
}

impl Linear {
    /// An f32 layer from w [out, in] and b [out].
    pub fn new(w: Tensor, b: Option<Tensor>) -> candle_core::Result<Self> {
        let out = w.dim(0)?;
        Ok(Self {
            w: Weight::F32(w),
            b,
            out,
        })
    }

    /// Stores the weight as q8_0 for `ComputeType::Int8` (no-op for f32, for an already quantized
    /// layer, or when `in` is not a multiple of the 32-element block).
    pub fn quantize(self, ct: ComputeType) -> candle_core::Result<Self> {
        let Weight::F32(w) = &self.w else {
            return Ok(self);
        };
        if ct != ComputeType::Int8 || !w.device().is_cpu() {
            return Ok(self);
        }
        let (out, inp) = w.dims2()?;
        let (out_pad, in_pad) = (
            out.next_multiple_of(PACK_OUT),
            inp.next_multiple_of(PACK_IN),
        );
        let wp = w
            .pad_with_zeros(1, 0, in_pad - inp)?
            .pad_with_zeros(0, 0, out_pad - out)?;
        let q = QMatMul::from_qtensor(QTensor::quantize(&wp, GgmlDType::Q8_0)?)?;
        let l = Self {
            w: Weight::Q8 { w: q, in_pad },
            b: self.b,
            out,
        };
        // candle repacks the weights into its int8 tiles on the first call: pay that at load time.
        l.forward(&Tensor::zeros((1, inp), w.dtype(), w.device())?)?;
        Ok(l)
    }

    /// x: [.., in] → [.., out].
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let dims = x.dims().to_vec();
        let inner = dims[dims.len() - 1];
        let rows = x.elem_count() / inner;
        let x = x.reshape((rows, inner))?;
        let y = match &self.w {
            // For a few rows (decoder steps) W·xᵀ streams the weights once without repacking them and
            // is ~1.3–1.6× faster on CPU than x·Wᵀ; the big encoder matmuls keep the usual orientation.
            Weight::F32(w) if rows <= FEW_ROWS => w.matmul(&x.t()?)?.t()?,
            Weight::F32(w) => x.matmul(&w.t()?)?,
            Weight::Q8 { w, in_pad } => {
                let x = if *in_pad > inner {
                    x.pad_with_zeros(1, 0, in_pad - inner)?
                } else {
                    x.contiguous()?
                };
                let y = w.forward(&x)?;
                if y.dim(1)? > self.out {
                    y.narrow(1, 0, self.out)?
                } else {
                    y
                }
            }
        };
        let y = match &self.b {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        let mut out = dims;
        let n = out.len();
        out[n - 1] = self.out;
        y.reshape(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, IndexOp};

    fn max_abs(t: &Tensor) -> f32 {
        t.abs()
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.max(0))
            .and_then(|t| t.to_scalar::<f32>())
            .unwrap()
    }

    /// A q8_0 layer whose sizes need padding on both sides (in 384 → 512, out 100 → 112): output shape
    /// is unpadded, values track f32, and each row is the same alone as in a batch, bit for bit.
    #[test]
    fn int8_linear_tracks_f32_and_rows_are_independent() {
        if !int8_kernels_available() {
            return;
        }
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 0.05, (100, 384), &dev).unwrap();
        let b = Tensor::randn(0f32, 0.1, 100, &dev).unwrap();
        let f = Linear::new(w, Some(b)).unwrap();
        let q = f.clone().quantize(ComputeType::Int8).unwrap();
        assert!(matches!(q.w, Weight::Q8 { in_pad: 512, .. }));
        let x = Tensor::randn(0f32, 1.0, (2, 4, 384), &dev).unwrap();
        let (yf, yq) = (f.forward(&x).unwrap(), q.forward(&x).unwrap());
        assert_eq!(yq.dims(), &[2, 4, 100]);
        let rel = max_abs(&(&yq - &yf).unwrap()) / max_abs(&yf);
        assert!(rel < 0.02, "int8 vs f32 relative error {rel}");
        for n in 0..2 {
            for r in 0..4 {
                let alone = q.forward(&x.i((n, r..r + 1)).unwrap()).unwrap();
                let batched = yq.i((n, r..r + 1)).unwrap();
                assert_eq!(max_abs(&(alone - batched).unwrap()), 0.0, "row {n},{r}");
            }
        }
        // Float32 stays float32.
        let same = f.clone().quantize(ComputeType::Float32).unwrap();
        assert!(matches!(same.w, Weight::F32(_)));
    }
}
