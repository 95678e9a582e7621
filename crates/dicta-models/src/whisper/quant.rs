//! Compute types for Whisper and the dense layer that runs in either of them.
//!
//! `int8` stores every linear layer's weights as int8 with one scale per output channel and
//! quantizes each activation row on the fly, like CTranslate2's int8 (per-row weight scales,
//! dynamic activation scales), through Dicta's byte dot-product kernels
//! ([`crate::kernels::int8`]). Every output row depends only on its own input row, so batching
//! cannot change a row's result.

use std::sync::Arc;

use crate::kernels::f32_input;
use crate::kernels::int8::{matmul_i8, matmul_u8_asym, PackedI8, PackedU8Asym};
use crate::kernels::panel::{matmul_panels, PackedF32};
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use dicta_core::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// Row count up to which an f32 [`Linear`] multiplies in the W·xᵀ orientation.
const FEW_ROWS: usize = 16;

/// Numeric type the model computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ComputeType {
    /// The model's own choice (`default`, as in faster-whisper): int8 where the CPU has vector
    /// int8 kernels (VNNI or AVX2), float32 elsewhere. For Whisper that is the fastest type within 0.3 WER
    /// points of float32 on the dev set; Moonshine's weights ship in 8 bits and run as
    /// onnxruntime runs them. `Float32` is the reference path, token-identical to
    /// faster-whisper float32.
    #[default]
    Auto,
    /// f32 weights and activations everywhere.
    Float32,
    /// int8 weights (per output channel) for every linear layer of encoder and decoder and the
    /// vocabulary projection, activations quantized per row on the fly; the cross-attention
    /// keys and values are stored in f16; the convolution stem, attention scores, layer norms
    /// and the self-attention cache stay f32.
    Int8,
}

impl ComputeType {
    /// The type a `model` loaded with `self` runs in: `Auto` is int8 on a CPU with int8
    /// dot-product kernels ([`crate::kernels::int8::int8_fast`]) and float32 elsewhere; `Int8`
    /// falls back to float32, with a warning, where those kernels cannot run (a CPU without
    /// AVX2 or VNNI, where float32 is faster, or another device, whose layers stay f32), so that stats
    /// and logs name the type that actually ran.
    pub fn resolve(self, on_cpu: bool, model: &str) -> ComputeType {
        let fast = on_cpu && crate::kernels::int8::int8_fast();
        match self {
            Self::Auto if fast => Self::Int8,
            Self::Auto => Self::Float32,
            Self::Int8 if !fast => {
                tracing::warn!(
                    model,
                    on_cpu,
                    "int8 needs a CPU with vector int8 kernels (AVX512-VNNI, AVX-VNNI or AVX2); \
                     computing in float32"
                );
                Self::Float32
            }
            ct => ct,
        }
    }

    /// The name used on the command line and in configs (`float32`, `int8`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "default",
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

    /// Accepts `default` (also `auto`), `float32` (also `f32`) and `int8`, case-insensitively.
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "default" | "auto" => Ok(Self::Auto),
            "float32" | "f32" => Ok(Self::Float32),
            "int8" => Ok(Self::Int8),
            other => Err(Error::invalid_input(format!(
                "compute type {other:?} is not supported; use default, float32 or int8"
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

/// Weight storage of a [`Linear`].
#[derive(Clone)]
enum Weight {
    /// [out, in] f32.
    F32(Tensor),
    /// int8 per output channel, packed for [`matmul_i8`]; the bias is applied in its epilogue.
    I8(Arc<I8Linear>),
    /// f32 packed in channel panels ([`matmul_panels`]); the bias is applied in its epilogue.
    Panels(Arc<PanelLinear>),
    /// 8-bit weights as onnxruntime stores them, run with its per-tensor activation
    /// quantization ([`matmul_u8_asym`]); the bias is applied in the epilogue.
    U8Asym(Arc<AsymLinear>),
}

/// Calls `f` with the float32 values of `t` in row-major order: borrowed from a contiguous
/// CPU tensor (model loading packs every weight once; a copy of the 20 M-element vocabulary
/// projection cost more than packing it), copied otherwise.
pub(crate) fn with_values<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> candle_core::Result<R> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let candle_core::Storage::Cpu(cpu) = &*storage {
            if let Ok(v) = crate::kernels::f32_input(cpu, layout) {
                return Ok(f(v));
            }
        }
    }
    Ok(f(&t.flatten_all()?.to_vec1::<f32>()?))
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

    /// A layer computing exactly what onnxruntime's `MatMulIntegerToFloat` /
    /// `DynamicQuantizeMatMul` do with these 8-bit weights (see [`PackedU8Asym`]). Inputs
    /// `[N, T, in]` are quantized per leading item (T rows), `[rows, in]` per row.
    pub fn onnx_quantized(w: PackedU8Asym, bias: Option<Vec<f32>>) -> Self {
        Self::asym(w, bias, false)
    }

    /// These 8-bit weights with activations quantized per row (one scale and zero point per
    /// row of `[.., in]`): for exports that keep 8-bit weights but multiply in float, where
    /// finer activation steps stay closer to the float product than onnxruntime's per-tensor
    /// dynamic quantization.
    pub fn asym_per_row(w: PackedU8Asym, bias: Option<Vec<f32>>) -> Self {
        Self::asym(w, bias, true)
    }

    fn asym(w: PackedU8Asym, bias: Option<Vec<f32>>, per_row: bool) -> Self {
        let out = w.n();
        Self {
            w: Weight::U8Asym(Arc::new(AsymLinear { w, bias, per_row })),
            b: None,
            out,
        }
    }

    /// Stores the weight as int8 for `ComputeType::Int8` (no-op for f32, for an already
    /// quantized layer, or off the CPU).
    pub fn quantize(self, ct: ComputeType) -> candle_core::Result<Self> {
        let Weight::F32(w) = &self.w else {
            return Ok(self);
        };
        if ct != ComputeType::Int8 || !w.device().is_cpu() {
            return Ok(self);
        }
        let (out, inp) = w.dims2()?;
        let packed = with_values(w, |v| PackedI8::quantize(v, out, inp))?;
        let bias = match &self.b {
            Some(b) => Some(b.to_vec1::<f32>()?),
            None => None,
        };
        Ok(Self {
            w: Weight::I8(Arc::new(I8Linear { w: packed, bias })),
            b: None,
            out,
        })
    }

    /// Repacks f32 weights into channel panels for Dicta's own f32 kernel ([`matmul_panels`]):
    /// with a few rows (decoder steps) the weights then cross the memory bus once per call
    /// instead of being repacked by the GEMM, and with many (the encoder) each cached panel
    /// serves a block of rows (no-op for quantized layers and off the CPU).
    pub fn packed(self) -> candle_core::Result<Self> {
        let Weight::F32(w) = &self.w else {
            return Ok(self);
        };
        if !w.device().is_cpu() {
            return Ok(self);
        }
        let (out, inp) = w.dims2()?;
        let packed = with_values(w, |v| PackedF32::pack(v, out, inp))?;
        let bias = match &self.b {
            Some(b) => Some(b.to_vec1::<f32>()?),
            None => None,
        };
        Ok(Self {
            w: Weight::Panels(Arc::new(PanelLinear { w: packed, bias })),
            b: None,
            out,
        })
    }

    /// x: [rows, in] → `out` = [rows, out] row-major. An int8 layer writes straight into
    /// `out`, reusing its allocation: a beam-5 step's logits over 8 windows are 8.3 MB, which a
    /// new tensor zeroed, then copied into a new vector, page by fresh page, every step.
    pub fn forward_into(&self, x: &Tensor, out: &mut Vec<f32>) -> candle_core::Result<()> {
        let Weight::I8(op) = &self.w else {
            *out = self.forward(x)?.flatten_all()?.to_vec1::<f32>()?;
            return Ok(());
        };
        let (rows, _) = x.dims2()?;
        // Every element is written by the product (none is accumulated into), so growing the
        // buffer is the only fill.
        out.resize(rows * op.w.n(), 0.0);
        with_values(x, |x| {
            matmul_i8(x, rows, &op.w, op.bias.as_deref(), out);
        })
    }

    /// x: [.., in] → [.., out].
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let dims = x.dims().to_vec();
        let inner = dims[dims.len() - 1];
        let rows = x.elem_count() / inner;
        // Rows per activation-quantization group of the onnxruntime layer: one leading item.
        let per_row = matches!(&self.w, Weight::U8Asym(lin) if lin.per_row);
        let group = if dims.len() >= 3 && !per_row {
            dims[dims.len() - 2]
        } else {
            1
        };
        let x = x.reshape((rows, inner))?;
        let y = match &self.w {
            // For a few rows (decoder steps) W·xᵀ streams the weights once without repacking them and
            // is ~1.3–1.6× faster on CPU than x·Wᵀ; the big encoder matmuls keep the usual orientation.
            Weight::F32(w) if rows <= FEW_ROWS => w.matmul(&x.t()?)?.t()?,
            Weight::F32(w) => x.matmul(&w.t()?)?,
            Weight::I8(op) => x.contiguous()?.apply_op1_no_bwd(op.as_ref())?,
            Weight::Panels(op) => x.contiguous()?.apply_op1_no_bwd(op.as_ref())?,
            Weight::U8Asym(lin) => x.contiguous()?.apply_op1_no_bwd(&AsymCall { lin, group })?,
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

/// Rows per block of [`int8_mlp`]: the block's hidden activations (512 × ffn f32: 3 MB for
/// tiny, 4 MB for base) stay in cache between the two matmuls, and each matmul still has
/// 8 tasks of 64 rows for the threads.
const MLP_BLOCK: usize = 512;

/// `fc2(gelu_erf(fc1(x)))` for two int8 layers, `x` [.., in] → [.., out], a block of
/// [`MLP_BLOCK`] rows at a time; `None` unless both layers are int8 and `x` has more than one
/// block of rows (the encoder; a decoder step keeps the plain path). The hidden activations
/// of a 30 s window batch (12 000 rows × 1536 for tiny at batch 8: 74 MB, above the
/// allocator's mmap threshold, so page-faulted afresh twice per layer) never exist whole.
/// Every row's values are those of the unfused layers: each matmul row depends on its own
/// input row only, and GELU on its own element.
pub(crate) fn int8_mlp(
    fc1: &Linear,
    fc2: &Linear,
    x: &Tensor,
) -> candle_core::Result<Option<Tensor>> {
    let (Weight::I8(a), Weight::I8(b)) = (&fc1.w, &fc2.w) else {
        return Ok(None);
    };
    let dims = x.dims().to_vec();
    let inner = dims[dims.len() - 1];
    let rows = x.elem_count() / inner.max(1);
    if rows <= MLP_BLOCK || !x.device().is_cpu() {
        return Ok(None);
    }
    let op = I8Mlp {
        fc1: a.clone(),
        fc2: b.clone(),
    };
    let y = x
        .reshape((rows, inner))?
        .contiguous()?
        .apply_op1_no_bwd(&op)?;
    let mut out = dims;
    let n = out.len();
    out[n - 1] = fc2.out;
    Ok(Some(y.reshape(out)?))
}

/// Two int8 layers with the exact GELU between them (see [`int8_mlp`]).
struct I8Mlp {
    fc1: Arc<I8Linear>,
    fc2: Arc<I8Linear>,
}

impl CustomOp1 for I8Mlp {
    fn name(&self) -> &'static str {
        "dicta-int8-mlp"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_input(s, l)?;
        let (k, ffn, n) = (self.fc1.w.k(), self.fc1.w.n(), self.fc2.w.n());
        if self.fc2.w.k() != ffn {
            candle_core::bail!(
                "int8 MLP: fc1 gives {ffn} channels, fc2 takes {}",
                self.fc2.w.k()
            );
        }
        let m = x.len() / k;
        let mut out = vec![0f32; m * n];
        let mut h = vec![0f32; MLP_BLOCK.min(m) * ffn];
        let mut g = vec![0f32; MLP_BLOCK.min(m) * ffn];
        for r0 in (0..m).step_by(MLP_BLOCK) {
            let rows = MLP_BLOCK.min(m - r0);
            let (h, g) = (&mut h[..rows * ffn], &mut g[..rows * ffn]);
            matmul_i8(
                &x[r0 * k..(r0 + rows) * k],
                rows,
                &self.fc1.w,
                self.fc1.bias.as_deref(),
                h,
            );
            crate::kernels::gelu_erf_into(h, g);
            matmul_i8(
                g,
                rows,
                &self.fc2.w,
                self.fc2.bias.as_deref(),
                &mut out[r0 * n..(r0 + rows) * n],
            );
        }
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }
}

/// `[m, in] → [m, out]` through the int8 kernel, bias included.
pub(crate) struct I8Linear {
    w: PackedI8,
    bias: Option<Vec<f32>>,
}

impl CustomOp1 for I8Linear {
    fn name(&self) -> &'static str {
        "dicta-int8-linear"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_input(s, l)?;
        let (k, n) = (self.w.k(), self.w.n());
        let m = x.len() / k;
        let mut out = vec![0f32; m * n];
        matmul_i8(x, m, &self.w, self.bias.as_deref(), &mut out);
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }
}

/// `[m, in] → [m, out]` through the panel kernel, bias included.
pub(crate) struct PanelLinear {
    w: PackedF32,
    bias: Option<Vec<f32>>,
}

impl CustomOp1 for PanelLinear {
    fn name(&self) -> &'static str {
        "dicta-f32-panel-linear"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_input(s, l)?;
        let (k, n) = (self.w.k(), self.w.n());
        let m = x.len() / k;
        let mut out = vec![0f32; m * n];
        matmul_panels(x, m, &self.w, self.bias.as_deref(), &mut out);
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }
}

/// Weights and bias of an onnxruntime-quantized layer.
pub(crate) struct AsymLinear {
    w: PackedU8Asym,
    bias: Option<Vec<f32>>,
    /// Activations quantized per row rather than per leading item.
    per_row: bool,
}

/// One call of an [`AsymLinear`] with its quantization group size.
struct AsymCall<'a> {
    lin: &'a AsymLinear,
    group: usize,
}

impl CustomOp1 for AsymCall<'_> {
    fn name(&self) -> &'static str {
        "dicta-onnx-quantized-linear"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_input(s, l)?;
        let (k, n) = (self.lin.w.k(), self.lin.w.n());
        let m = x.len() / k;
        let mut out = vec![0f32; m * n];
        matmul_u8_asym(
            x,
            m,
            self.group,
            &self.lin.w,
            self.lin.bias.as_deref(),
            &mut out,
        );
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, IndexOp};

    /// The type that runs: int8 only on a CPU with the byte kernels, whether asked for or
    /// chosen by `Auto`; float32 whenever asked for.
    #[test]
    fn compute_types_resolve_to_what_runs() {
        let fast = crate::kernels::int8::int8_fast();
        let int8_here = if fast {
            ComputeType::Int8
        } else {
            ComputeType::Float32
        };
        assert_eq!(ComputeType::Auto.resolve(true, "test"), int8_here);
        assert_eq!(ComputeType::Int8.resolve(true, "test"), int8_here);
        for ct in [ComputeType::Auto, ComputeType::Int8, ComputeType::Float32] {
            assert_eq!(ct.resolve(false, "test"), ComputeType::Float32, "{ct}");
        }
        assert_eq!(
            ComputeType::Float32.resolve(true, "test"),
            ComputeType::Float32
        );
    }

    fn max_abs(t: &Tensor) -> f32 {
        t.abs()
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.max(0))
            .and_then(|t| t.to_scalar::<f32>())
            .unwrap()
    }

    /// The blocked int8 MLP gives the unfused layers' bits (rows over two blocks plus a part
    /// block, sizes off the tiles), and leaves few rows and f32 layers to the plain path.
    #[test]
    fn int8_mlp_equals_the_layers_one_after_the_other() {
        let dev = Device::Cpu;
        let (d, ffn) = (40usize, 150usize);
        let w1 = Tensor::randn(0f32, 0.3, (ffn, d), &dev).unwrap();
        let b1 = Tensor::randn(0f32, 0.1, ffn, &dev).unwrap();
        let w2 = Tensor::randn(0f32, 0.3, (d, ffn), &dev).unwrap();
        let b2 = Tensor::randn(0f32, 0.1, d, &dev).unwrap();
        let f32_1 = Linear::new(w1, Some(b1)).unwrap();
        let f32_2 = Linear::new(w2, Some(b2)).unwrap();
        let x = Tensor::randn(0f32, 1.0, (3, 2 * MLP_BLOCK / 3 + 5, d), &dev).unwrap();
        assert!(int8_mlp(&f32_1, &f32_2, &x).unwrap().is_none());
        if !crate::kernels::int8::int8_fast() {
            return;
        }
        let fc1 = f32_1.quantize(ComputeType::Int8).unwrap();
        let fc2 = f32_2.quantize(ComputeType::Int8).unwrap();
        let fused = int8_mlp(&fc1, &fc2, &x)
            .unwrap()
            .expect("int8 layers, many rows");
        let plain = fc2
            .forward(&crate::kernels::gelu_erf(&fc1.forward(&x).unwrap()).unwrap())
            .unwrap();
        assert_eq!(fused.dims(), plain.dims());
        let bits = |t: &Tensor| -> Vec<u32> {
            let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
            v.iter().map(|x| x.to_bits()).collect()
        };
        assert_eq!(bits(&fused), bits(&plain));
        assert!(int8_mlp(&fc1, &fc2, &x.i((.., ..4)).unwrap())
            .unwrap()
            .is_none());
    }

    /// An int8 layer with sizes that are not multiples of the kernel's tiles (out 100): output
    /// shape is right, values track f32, and each row is the same alone as in a batch, bit for bit.
    #[test]
    fn int8_linear_tracks_f32_and_rows_are_independent() {
        if !crate::kernels::int8::int8_fast() {
            return;
        }
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 0.05, (100, 384), &dev).unwrap();
        let b = Tensor::randn(0f32, 0.1, 100, &dev).unwrap();
        let f = Linear::new(w, Some(b)).unwrap();
        let q = f.clone().quantize(ComputeType::Int8).unwrap();
        assert!(matches!(q.w, Weight::I8(_)));
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
