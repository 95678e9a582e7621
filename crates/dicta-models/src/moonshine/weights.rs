//! Moonshine weights out of ONNX Runtime `.ort` files (the exports `moonshine-voice` and
//! `moonshine-cpp` ship): each layer's tensors are found through the node that consumes them,
//! dequantized to f32 and stored under Hugging Face `MoonshineForConditionalGeneration` names.
//!
//! Matmul weights are dynamically quantized in these files (`MatMulIntegerToFloat`,
//! `DynamicQuantizeMatMul`: 8-bit `B [in, out]` with a per-tensor or per-column scale and zero
//! point); they are stored here as `(B − zero_point) · scale`, transposed to `[out, in]`.

use std::collections::HashMap;

use crate::ort::{DataType, GraphInfo, Initializer, Node, OrtModel};
use dicta_core::{Error, Result};

/// f32 tensors by canonical name: (shape, row-major values).
pub type Tensors = HashMap<String, (Vec<usize>, Vec<f32>)>;

/// A matmul's weights as stored: 8-bit `B [k, n]` with per-tensor scale and zero point.
#[derive(Debug, Clone)]
pub struct QuantizedMatmul {
    /// Input features.
    pub k: usize,
    /// Output features.
    pub n: usize,
    /// The stored integers, row-major `[k, n]` (`0..=255`, or `-128..=127` when `signed`).
    pub values: Vec<i32>,
    /// `i8` storage (else `u8`).
    pub signed: bool,
    /// Zero point.
    pub zero_point: i32,
    /// Scale.
    pub scale: f32,
}

/// A dense layer's `[out, in]` shape, weights and optional bias.
type Dense = (Vec<usize>, Vec<f32>, Option<Vec<f32>>);

/// Stored 8-bit matmuls by canonical layer name (`encoder.layers.0.self_attn.q_proj`).
pub type Quantized = HashMap<String, QuantizedMatmul>;

fn missing(what: &str) -> Error {
    Error::model_load(format!("Moonshine .ort: {what} not found"))
}

/// One graph of a model, with lookups by node-name prefix.
struct View<'a> {
    model: &'a OrtModel,
    graph: usize,
}

impl<'a> View<'a> {
    fn info(&self) -> &'a GraphInfo {
        &self.model.graphs[self.graph]
    }

    /// The first node whose name is under `prefix/` and whose op type is one of `ops`.
    fn node(&self, prefix: &str, ops: &[&str]) -> Option<&'a Node> {
        let p = format!("{prefix}/");
        self.info()
            .nodes
            .iter()
            .find(|n| n.name.starts_with(&p) && ops.contains(&n.op_type.as_str()))
    }

    fn init(&self, name: &str) -> Result<&'a Initializer> {
        self.model
            .initializer(self.graph, name)
            .ok_or_else(|| missing(&format!("initializer {name:?}")))
    }

    fn f32s(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let t = self.init(name)?;
        Ok((t.dims.clone(), t.to_f32()?))
    }

    fn input(&self, n: &Node, i: usize) -> Result<(Vec<usize>, Vec<f32>)> {
        let name = n
            .input(i)
            .ok_or_else(|| missing(&format!("input {i} of node {:?}", n.name)))?;
        self.f32s(name)
    }

    /// Dequantizes 8-bit `q` with `scale` and `zero_point` (scalars, or one per column of the
    /// last axis).
    fn dequant(&self, q: &str, scale: &str, zp: Option<&str>) -> Result<(Vec<usize>, Vec<f32>)> {
        let t = self.init(q)?;
        if !matches!(t.dtype, DataType::U8 | DataType::I8 | DataType::F32) {
            return Err(Error::model_load(format!(
                "Moonshine .ort: {q:?} has type {:?}, expected 8-bit",
                t.dtype
            )));
        }
        let vals = t.to_f32()?;
        let scale = self.init(scale)?.to_f32()?;
        let zp = match zp {
            Some(z) => self.init(z)?.to_f32()?,
            None => vec![0.0],
        };
        let cols = *t.dims.last().unwrap_or(&1);
        let pick = |v: &[f32], c: usize| -> Result<f32> {
            match v.len() {
                1 => Ok(v[0]),
                n if n == cols => Ok(v[c]),
                n => Err(Error::model_load(format!(
                    "Moonshine .ort: {q:?}: {n} scales or zero points for {cols} columns"
                ))),
            }
        };
        let mut out = Vec::with_capacity(vals.len());
        for (i, v) in vals.iter().enumerate() {
            let c = i % cols.max(1);
            out.push((v - pick(&zp, c)?) * pick(&scale, c)?);
        }
        Ok((t.dims.clone(), out))
    }

    /// The stored form of an 8-bit matmul weight `b` with per-tensor `scale` and `zp`;
    /// `None` for float weights or per-column parameters.
    fn stored(&self, b: &str, scale: &str, zp: Option<&str>) -> Result<Option<QuantizedMatmul>> {
        let t = self.init(b)?;
        let signed = match t.dtype {
            DataType::U8 => false,
            DataType::I8 => true,
            _ => return Ok(None),
        };
        let scale = self.init(scale)?.to_f32()?;
        let zp = match zp {
            Some(z) => self.init(z)?.to_f32()?,
            None => vec![0.0],
        };
        let (&[k, n], &[scale], &[zp]) = (&t.dims[..], &scale[..], &zp[..]) else {
            return Ok(None);
        };
        Ok(Some(QuantizedMatmul {
            k,
            n,
            values: t.to_f32()?.into_iter().map(|v| v as i32).collect(),
            signed,
            zero_point: zp as i32,
            scale,
        }))
    }

    /// The stored 8-bit form of the matmul under `prefix`, when it has one.
    fn quantized(&self, prefix: &str) -> Result<Option<QuantizedMatmul>> {
        let Some(n) = self.node(prefix, &["MatMulIntegerToFloat", "DynamicQuantizeMatMul"]) else {
            return Ok(None);
        };
        let b = n
            .input(1)
            .ok_or_else(|| missing(&format!("{prefix} weight")))?;
        let (scale, zp) = if n.op_type == "MatMulIntegerToFloat" {
            (n.input(3), n.input(5))
        } else {
            (n.input(2), n.input(3))
        };
        let scale = scale.ok_or_else(|| missing("b_scale"))?;
        self.stored(b, scale, zp)
    }

    /// The `[out, in]` weight and optional bias of the matmul under `prefix`.
    fn linear(&self, prefix: &str) -> Result<Dense> {
        let n = self
            .node(
                prefix,
                &["MatMulIntegerToFloat", "DynamicQuantizeMatMul", "MatMul"],
            )
            .ok_or_else(|| missing(&format!("matmul node under {prefix}")))?;
        let b = n
            .input(1)
            .ok_or_else(|| missing(&format!("{prefix} weight")))?;
        let ((dims, w), bias) = match n.op_type.as_str() {
            // A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias
            "MatMulIntegerToFloat" => (
                self.dequant(b, n.input(3).ok_or_else(|| missing("b_scale"))?, n.input(5))?,
                n.input(6),
            ),
            // A, B, b_scale, b_zero_point, bias
            "DynamicQuantizeMatMul" => (
                self.dequant(b, n.input(2).ok_or_else(|| missing("b_scale"))?, n.input(3))?,
                n.input(4),
            ),
            _ => (self.f32s(b)?, None),
        };
        let [k, m] = dims[..] else {
            return Err(Error::model_load(format!(
                "Moonshine .ort: {prefix}: weight shape {dims:?} is not 2-D"
            )));
        };
        let mut t = vec![0f32; k * m];
        for i in 0..k {
            for j in 0..m {
                t[j * k + i] = w[i * m + j];
            }
        }
        let bias = match bias {
            Some(name) => Some(self.f32s(name)?.1),
            None => None,
        };
        Ok((vec![m, k], t, bias))
    }

    /// Gamma and beta of the layer norm under `prefix`.
    fn layer_norm(&self, prefix: &str) -> Result<(Vec<f32>, Vec<f32>)> {
        let n = self
            .node(prefix, &["LayerNormalization"])
            .ok_or_else(|| missing(&format!("layer norm under {prefix}")))?;
        let w = self.input(n, 1)?.1;
        let b = match n.input(2) {
            Some(name) => self.f32s(name)?.1,
            None => vec![0.0; w.len()],
        };
        Ok((w, b))
    }
}

fn put_linear(out: &mut Weights, name: &str, v: &View<'_>, prefix: &str) -> Result<()> {
    if let Some(q) = v.quantized(prefix)? {
        out.quantized.insert(name.to_string(), q);
    }
    let out = &mut out.tensors;
    let (dims, w, b) = v.linear(prefix)?;
    if let Some(b) = b {
        out.insert(format!("{name}.bias"), (vec![b.len()], b));
    }
    out.insert(format!("{name}.weight"), (dims, w));
    Ok(())
}

/// Canonical f32 tensors plus the stored 8-bit form of quantized matmuls.
#[derive(Debug, Default)]
pub struct Weights {
    /// f32 tensors (quantized matmuls dequantized).
    pub tensors: Tensors,
    /// The quantized matmuls as stored.
    pub quantized: Quantized,
}

impl Weights {
    fn insert(&mut self, name: String, t: (Vec<usize>, Vec<f32>)) {
        self.tensors.insert(name, t);
    }

    /// Adds another file's weights.
    pub fn extend(&mut self, other: Weights) {
        self.tensors.extend(other.tensors);
        self.quantized.extend(other.quantized);
    }
}

fn put_norm(out: &mut Weights, name: &str, (w, b): (Vec<f32>, Vec<f32>)) {
    out.insert(format!("{name}.weight"), (vec![w.len()], w));
    out.insert(format!("{name}.bias"), (vec![b.len()], b));
}

/// Counts `prefix{i}/…` layers present as layer-norm nodes.
fn count_layers(v: &View<'_>, prefix: &str) -> usize {
    (0..)
        .take_while(|i| {
            v.node(
                &format!("{prefix}{i}/input_layernorm"),
                &["LayerNormalization"],
            )
            .is_some()
        })
        .count()
}

fn rotary(v: &View<'_>, prefix: &str) -> Result<Vec<f32>> {
    let n = v
        .node(prefix, &["Expand"])
        .ok_or_else(|| missing(&format!("rotary frequencies under {prefix}")))?;
    Ok(v.input(n, 0)?.1)
}

/// Reads the encoder file into canonical tensors (`encoder.*`, `conv*`, `groupnorm.*`).
pub fn encoder_tensors(model: &OrtModel) -> Result<Weights> {
    let v = View { model, graph: 0 };
    let mut out = Weights::default();
    for (i, conv) in ["conv1", "conv2", "conv3"].iter().enumerate() {
        let n = v
            .info()
            .nodes
            .iter()
            .find(|n| n.name == format!("/{conv}/Conv"))
            .ok_or_else(|| missing(&format!("/{conv}/Conv")))?;
        let (dims, w) = v.input(n, 1)?;
        out.insert(format!("{conv}.weight"), (dims, w));
        if let Some(b) = n.input(2) {
            let b = v.f32s(b)?.1;
            out.insert(format!("{conv}.bias"), (vec![b.len()], b));
        } else if i > 0 {
            return Err(missing(&format!("{conv} bias")));
        }
    }
    let gn = |name: &str| -> Result<Vec<f32>> {
        let n = v
            .info()
            .nodes
            .iter()
            .find(|n| n.name == name)
            .ok_or_else(|| missing(name))?;
        Ok(v.input(n, 1)?.1)
    };
    put_norm(
        &mut out,
        "groupnorm",
        (gn("/groupnorm/Mul")?, gn("/groupnorm/Add")?),
    );
    let inv = rotary(&v, "/rotary_emb")?;
    out.insert("encoder.rotary.inv_freq".into(), (vec![inv.len()], inv));
    let layers = count_layers(&v, "/layers.");
    if layers == 0 {
        return Err(missing("encoder layers"));
    }
    for i in 0..layers {
        let (p, c) = (format!("/layers.{i}"), format!("encoder.layers.{i}"));
        put_norm(
            &mut out,
            &format!("{c}.input_layernorm"),
            v.layer_norm(&format!("{p}/input_layernorm"))?,
        );
        put_norm(
            &mut out,
            &format!("{c}.post_attention_layernorm"),
            v.layer_norm(&format!("{p}/post_attention_layernorm"))?,
        );
        for proj in ["q_proj", "k_proj", "v_proj", "o_proj"] {
            put_linear(
                &mut out,
                &format!("{c}.self_attn.{proj}"),
                &v,
                &format!("{p}/self_attn/{proj}"),
            )?;
        }
        for fc in ["fc1", "fc2"] {
            put_linear(
                &mut out,
                &format!("{c}.mlp.{fc}"),
                &v,
                &format!("{p}/mlp/{fc}"),
            )?;
        }
    }
    // The final norm is either a plain LayerNormalization or fused with the last residual add
    // (SkipLayerNormalization: input, skip, gamma, beta).
    let final_norm = match v.node("/layer_norm", &["LayerNormalization"]) {
        Some(_) => v.layer_norm("/layer_norm")?,
        None => {
            let n = v
                .info()
                .nodes
                .iter()
                .find(|n| {
                    n.op_type == "SkipLayerNormalization"
                        && n.outputs.iter().any(|o| v.info().outputs.contains(o))
                })
                .ok_or_else(|| missing("encoder final layer norm"))?;
            let w = v.input(n, 2)?.1;
            let b = match n.input(3) {
                Some(b) => v.f32s(b)?.1,
                None => vec![0.0; w.len()],
            };
            (w, b)
        }
    };
    put_norm(&mut out, "encoder.layer_norm", final_norm);
    Ok(out)
}

/// Reads the merged decoder file (its no-cache `If` branch holds every weight) into canonical
/// tensors (`decoder.*`, `proj_out.weight`).
pub fn decoder_tensors(model: &OrtModel) -> Result<Weights> {
    let graph = model.graphs[0]
        .nodes
        .iter()
        .find(|n| n.op_type == "If")
        .and_then(|n| match n.attrs.get("else_branch") {
            Some(crate::ort::AttrValue::Graph(g)) => Some(*g),
            _ => None,
        })
        .unwrap_or(0);
    let v = View { model, graph };
    let mut out = Weights::default();
    let gather = v
        .node("/model/decoder/embed_tokens", &["Gather"])
        .ok_or_else(|| missing("token embedding"))?;
    let table = gather
        .input(0)
        .ok_or_else(|| missing("token embedding table"))?;
    let embed = if v.init(table)?.dtype == DataType::F32 {
        v.f32s(table)?
    } else {
        let dq = v
            .node("/model/decoder/embed_tokens", &["DequantizeLinear"])
            .ok_or_else(|| missing("token embedding scale"))?;
        let scale = dq
            .input(1)
            .ok_or_else(|| missing("token embedding scale"))?;
        // Per-tensor here; a per-row (axis 0) scale would need `dequant` by rows.
        if v.init(scale)?.len() != 1 {
            return Err(Error::model_load(
                "Moonshine .ort: per-row token embedding scales are not supported",
            ));
        }
        v.dequant(table, scale, dq.input(2))?
    };
    out.insert("decoder.embed_tokens.weight".into(), embed);
    let inv = rotary(&v, "/model/decoder/rotary_emb")?;
    out.insert("decoder.rotary.inv_freq".into(), (vec![inv.len()], inv));
    let layers = count_layers(&v, "/model/decoder/layers.");
    if layers == 0 {
        return Err(missing("decoder layers"));
    }
    for i in 0..layers {
        let (p, c) = (
            format!("/model/decoder/layers.{i}"),
            format!("decoder.layers.{i}"),
        );
        for norm in [
            "input_layernorm",
            "post_attention_layernorm",
            "final_layernorm",
        ] {
            put_norm(
                &mut out,
                &format!("{c}.{norm}"),
                v.layer_norm(&format!("{p}/{norm}"))?,
            );
        }
        for attn in ["self_attn", "encoder_attn"] {
            for proj in ["q_proj", "k_proj", "v_proj", "o_proj"] {
                put_linear(
                    &mut out,
                    &format!("{c}.{attn}.{proj}"),
                    &v,
                    &format!("{p}/{attn}/{proj}"),
                )?;
            }
        }
        for fc in ["fc1", "fc2"] {
            put_linear(
                &mut out,
                &format!("{c}.mlp.{fc}"),
                &v,
                &format!("{p}/mlp/{fc}"),
            )?;
        }
    }
    put_norm(
        &mut out,
        "decoder.norm",
        v.layer_norm("/model/decoder/norm")?,
    );
    put_linear(&mut out, "proj_out", &v, "/proj_out")?;
    Ok(out)
}

/// Attention scale of the first encoder layer's fused score matmul (`alpha` = 1/√head_dim),
/// when the export fused it.
pub fn score_scale(model: &OrtModel) -> Option<f32> {
    let v = View { model, graph: 0 };
    v.node("/layers.0/self_attn", &["FusedMatMul"])
        .and_then(|n| n.attr_float("alpha"))
}
