//! Moonshine weights out of ONNX Runtime `.ort` files (the exports `moonshine-voice` and
//! `moonshine-cpp` ship): each layer's tensors are found through the node that consumes them,
//! dequantized to f32 and stored under Hugging Face `MoonshineForConditionalGeneration` names.
//!
//! Two export styles are read. `moonshine-voice`'s tiny quantizes matmuls dynamically
//! (`MatMulIntegerToFloat`, `DynamicQuantizeMatMul`: 8-bit `B [in, out]` with a per-tensor or
//! per-column scale and zero point) and fuses layer norms; `moonshine-cpp`'s base stores weights
//! as 8-bit only (`Cast → Mul(scale) → Add(zero point)` in the graph, then float `MatMul`), spells
//! layer norms out (`ReduceMean`, …, `Mul(γ)`), names the attention output `dense` and the
//! decoder MLP `up_proj` / `down_proj`, and ties the output projection to the token embedding
//! (`Transpose`). Either way weights are stored here dequantized, transposed to `[out, in]`.

use std::collections::HashMap;

use crate::ort::{transpose, DataType, GraphInfo, Initializer, Node, OrtModel};
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
    pub values: Vec<i16>,
    /// `i8` storage (else `u8`).
    pub signed: bool,
    /// Zero point.
    pub zero_point: i32,
    /// Scale.
    pub scale: f32,
    /// The export multiplies these weights in float (it dequantizes them in the graph), so
    /// nothing fixes how activations are quantized: per row is closest to float.
    pub float_product: bool,
}

/// A dense layer's `[out, in]` shape, weights and optional bias.
type Dense = (Vec<usize>, Vec<f32>, Option<Vec<f32>>);

/// Stored 8-bit matmuls by canonical layer name (`encoder.layers.0.self_attn.q_proj`).
pub type Quantized = HashMap<String, QuantizedMatmul>;

/// How many operators deep a constant is folded (a weight-only export needs 4: `Transpose` of
/// `Add` of `Mul` of `Cast`); deeper, or a cycle in a damaged file, is not a constant.
const FOLD_DEPTH: usize = 8;

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

    /// The value of `name`: an initializer, or a constant the graph (or an enclosing graph)
    /// computes from initializers with `Cast`, `Mul`, `Add` and 2-D `Transpose` (weight-only
    /// 8-bit exports dequantize that way, and tie weights by transposing).
    fn f32s(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        self.f32s_within(name, FOLD_DEPTH)
    }

    fn f32s_within(&self, name: &str, depth: usize) -> Result<(Vec<usize>, Vec<f32>)> {
        if let Some(t) = self.model.initializer(self.graph, name) {
            return Ok((t.dims.clone(), t.to_f32()?));
        }
        let (graph, n) = self
            .producer(name)
            .filter(|_| depth > 0)
            .ok_or_else(|| missing(&format!("initializer {name:?}")))?;
        let at = View {
            model: self.model,
            graph,
        };
        match n.op_type.as_str() {
            "Cast" => at.input_within(n, 0, depth - 1),
            "Mul" | "Add" => {
                let (a, b) = (
                    at.input_within(n, 0, depth - 1)?,
                    at.input_within(n, 1, depth - 1)?,
                );
                let mul = n.op_type == "Mul";
                let ((dims, x), (_, y)) = if b.1.len() == 1 { (a, b) } else { (b, a) };
                if y.len() != 1 && y.len() != x.len() {
                    return Err(Error::model_load(format!(
                        "Moonshine .ort: constant {name:?}: {} and {} values",
                        x.len(),
                        y.len()
                    )));
                }
                let out = x
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        let w = y[if y.len() == 1 { 0 } else { i }];
                        if mul {
                            v * w
                        } else {
                            v + w
                        }
                    })
                    .collect();
                Ok((dims, out))
            }
            "Transpose" => {
                let (dims, x) = at.input_within(n, 0, depth - 1)?;
                let &[r, c] = &dims[..] else {
                    return Err(missing(&format!("2-D transpose for {name:?}")));
                };
                Ok((vec![c, r], transpose(&x, r, c)))
            }
            _ => Err(missing(&format!("initializer {name:?}"))),
        }
    }

    /// The node that outputs `name`, in this graph or an enclosing one, with its graph.
    fn producer(&self, name: &str) -> Option<(usize, &'a Node)> {
        let mut g = Some(self.graph);
        while let Some(i) = g {
            let info = self.model.graphs.get(i)?;
            if let Some(n) = info
                .nodes
                .iter()
                .find(|n| n.outputs.iter().any(|o| o == name))
            {
                return Some((i, n));
            }
            g = info.parent;
        }
        None
    }

    /// True when `name` is a constant ([`View::f32s`] can read it).
    fn is_const(&self, name: &str) -> bool {
        self.is_const_within(name, FOLD_DEPTH)
    }

    fn is_const_within(&self, name: &str, depth: usize) -> bool {
        self.model.initializer(self.graph, name).is_some()
            || (depth > 0
                && self.producer(name).is_some_and(|(_, n)| {
                    matches!(n.op_type.as_str(), "Cast" | "Mul" | "Add" | "Transpose")
                        && n.inputs.iter().all(|i| self.is_const_within(i, depth - 1))
                }))
    }

    /// The first of `names` under `prefix` (`{prefix}/{name}`) that holds a matmul.
    fn matmul_prefix(&self, prefix: &str, names: &[&str]) -> Result<String> {
        names
            .iter()
            .map(|n| format!("{prefix}/{n}"))
            .find(|p| {
                self.node(
                    p,
                    &["MatMulIntegerToFloat", "DynamicQuantizeMatMul", "MatMul"],
                )
                .is_some()
            })
            .ok_or_else(|| missing(&format!("matmul node under {prefix}/{}", names.join("|"))))
    }

    fn input(&self, n: &Node, i: usize) -> Result<(Vec<usize>, Vec<f32>)> {
        self.input_within(n, i, FOLD_DEPTH)
    }

    fn input_within(&self, n: &Node, i: usize, depth: usize) -> Result<(Vec<usize>, Vec<f32>)> {
        let name = n
            .input(i)
            .ok_or_else(|| missing(&format!("input {i} of node {:?}", n.name)))?;
        self.f32s_within(name, depth)
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
            values: bytes_as_i16(t, signed),
            signed,
            zero_point: zp as i32,
            scale,
            float_product: false,
        }))
    }

    /// The stored 8-bit form of the matmul under `prefix`, when it has one.
    fn quantized(&self, prefix: &str) -> Result<Option<QuantizedMatmul>> {
        let Some(n) = self.node(prefix, &["MatMulIntegerToFloat", "DynamicQuantizeMatMul"]) else {
            // A float matmul of weights the graph dequantizes from 8 bits.
            return match self.node(prefix, &["MatMul"]).and_then(|n| n.input(1)) {
                Some(b) => self.dequantized_chain(b),
                None => Ok(None),
            };
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

    /// The stored 8-bit form of the constant `name` when the graph computes it as
    /// `Cast(q) · scale + offset` (optionally transposed, for a tied output projection) with one
    /// scale and an offset that is a whole number of steps: `w = (q − zp) · scale` with
    /// `zp = −offset / scale`, onnxruntime's asymmetric form. `None` for anything else.
    fn dequantized_chain(&self, name: &str) -> Result<Option<QuantizedMatmul>> {
        self.dequantized_chain_within(name, FOLD_DEPTH)
    }

    fn dequantized_chain_within(
        &self,
        name: &str,
        depth: usize,
    ) -> Result<Option<QuantizedMatmul>> {
        let Some((graph, add)) = self.producer(name).filter(|_| depth > 0) else {
            return Ok(None);
        };
        let at = View {
            model: self.model,
            graph,
        };
        if add.op_type == "Transpose" {
            let Some(mut q) = add
                .input(0)
                .map(|i| at.dequantized_chain_within(i, depth - 1))
                .transpose()?
                .flatten()
            else {
                return Ok(None);
            };
            (q.values, q.k, q.n) = (transpose(&q.values, q.k, q.n), q.n, q.k);
            return Ok(Some(q));
        }
        // A one-element initializer's value. The chain's scale and offset are stored as such;
        // asking `f32s` instead would fold the other operand, the whole weight matrix, first.
        let scalar = |i: &str| at.model.initializer(at.graph, i)?.scalar().ok();
        let operand = |n: &Node, op: &str| -> Option<(String, f32)> {
            if n.op_type != op || n.inputs.len() != 2 {
                return None;
            }
            let (c, x) = n
                .inputs
                .iter()
                .enumerate()
                .find_map(|(c, i)| Some((c, scalar(i)?)))?;
            Some((n.inputs[1 - c].clone(), x))
        };
        let Some((scaled, offset)) = operand(add, "Add") else {
            return Ok(None);
        };
        let Some((cast, scale)) = at.producer(&scaled).and_then(|(_, m)| operand(m, "Mul")) else {
            return Ok(None);
        };
        let Some(q) = at
            .producer(&cast)
            .filter(|(_, c)| c.op_type == "Cast")
            .and_then(|(_, c)| c.input(0))
        else {
            return Ok(None);
        };
        let zp = -offset / scale;
        if !(scale > 0.0 && (zp - zp.round()).abs() < 1e-3 && zp.abs() <= 255.0) {
            return Ok(None);
        }
        let t = at.init(q)?;
        let (&[k, n], signed) = (&t.dims[..], t.dtype == DataType::I8) else {
            return Ok(None);
        };
        if !matches!(t.dtype, DataType::I8 | DataType::U8) {
            return Ok(None);
        }
        Ok(Some(QuantizedMatmul {
            k,
            n,
            values: bytes_as_i16(t, signed),
            signed,
            zero_point: zp.round() as i32,
            scale,
            float_product: true,
        }))
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
        let bias = self.linear_bias(prefix)?;
        let (dims, w) = match n.op_type.as_str() {
            // A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias
            "MatMulIntegerToFloat" => {
                self.dequant(b, n.input(3).ok_or_else(|| missing("b_scale"))?, n.input(5))?
            }
            // A, B, b_scale, b_zero_point, bias
            "DynamicQuantizeMatMul" => {
                self.dequant(b, n.input(2).ok_or_else(|| missing("b_scale"))?, n.input(3))?
            }
            _ => self.f32s(b)?,
        };
        let [k, m] = dims[..] else {
            return Err(Error::model_load(format!(
                "Moonshine .ort: {prefix}: weight shape {dims:?} is not 2-D"
            )));
        };
        let bias = match bias {
            Some(name) => Some(self.f32s(name)?.1),
            None => None,
        };
        Ok((vec![m, k], transpose(&w, k, m), bias))
    }

    /// The name of the bias of the matmul under `prefix`, if it has one: an input of the
    /// quantized ops, a separate `Add` of a constant for a float matmul.
    fn linear_bias(&self, prefix: &str) -> Result<Option<&'a str>> {
        let n = self
            .node(
                prefix,
                &["MatMulIntegerToFloat", "DynamicQuantizeMatMul", "MatMul"],
            )
            .ok_or_else(|| missing(&format!("matmul node under {prefix}")))?;
        Ok(match n.op_type.as_str() {
            "MatMulIntegerToFloat" => n.input(6),
            "DynamicQuantizeMatMul" => n.input(4),
            _ => self.node(prefix, &["Add"]).and_then(|a| {
                a.inputs
                    .iter()
                    .find(|i| !i.is_empty() && self.is_const(i))
                    .map(String::as_str)
            }),
        })
    }

    /// Gamma and beta of the layer norm under `prefix`: a `LayerNormalization` node, or the
    /// spelled-out form whose last steps are `Mul(γ)` and, when present, `Add(β)`.
    fn layer_norm(&self, prefix: &str) -> Result<(Vec<f32>, Vec<f32>)> {
        if let Some(n) = self.node(prefix, &["LayerNormalization"]) {
            let w = self.input(n, 1)?.1;
            let b = match n.input(2) {
                Some(name) => self.f32s(name)?.1,
                None => vec![0.0; w.len()],
            };
            return Ok((w, b));
        }
        let (mul, gamma) = self
            .const_operand(prefix, "Mul", None)
            .ok_or_else(|| missing(&format!("layer norm under {prefix}")))?;
        let w = self.f32s(gamma)?.1;
        let b = match self.const_operand(prefix, "Add", mul.outputs.first().map(String::as_str)) {
            Some((_, beta)) => self.f32s(beta)?.1,
            None => vec![0.0; w.len()],
        };
        Ok((w, b))
    }

    /// The first `op` node under `prefix` with a constant operand that is not a scalar (and,
    /// with `after`, whose other operand is `after`), with that operand's name.
    fn const_operand(
        &self,
        prefix: &str,
        op: &str,
        after: Option<&str>,
    ) -> Option<(&'a Node, &'a str)> {
        let p = format!("{prefix}/");
        self.info().nodes.iter().find_map(|n| {
            if !n.name.starts_with(&p) || n.op_type != op || n.inputs.len() != 2 {
                return None;
            }
            let c = n
                .inputs
                .iter()
                .position(|i| self.is_const(i) && self.f32s(i).is_ok_and(|(_, v)| v.len() > 1))?;
            match after {
                Some(a) if n.inputs[1 - c] != a => None,
                _ => Some((n, n.inputs[c].as_str())),
            }
        })
    }
}

/// Stores the matmul under the first of `{prefix}/{names}` that exists as `name`.
fn put_linear(
    out: &mut Weights,
    name: &str,
    v: &View<'_>,
    prefix: &str,
    names: &[&str],
) -> Result<()> {
    let prefix = &v.matmul_prefix(prefix, names)?;
    if let Some(q) = v.quantized(prefix)? {
        out.quantized.insert(name.to_string(), q);
        if !out.keep_float {
            // Only the bias: the float weights would be built and dropped (base's are 245 MB).
            if let Some(b) = v.linear_bias(prefix)? {
                let b = v.f32s(b)?.1;
                out.tensors
                    .insert(format!("{name}.bias"), (vec![b.len()], b));
            }
            return Ok(());
        }
    }
    let out = &mut out.tensors;
    let (dims, w, b) = v.linear(prefix)?;
    if let Some(b) = b {
        out.insert(format!("{name}.bias"), (vec![b.len()], b));
    }
    out.insert(format!("{name}.weight"), (dims, w));
    Ok(())
}

/// The bytes of an 8-bit initializer as integers (`i8` when `signed`, else `u8`).
fn bytes_as_i16(t: &Initializer, signed: bool) -> Vec<i16> {
    t.data
        .iter()
        .map(|&b| {
            if signed {
                i16::from(b as i8)
            } else {
                i16::from(b)
            }
        })
        .collect()
}

/// Canonical f32 tensors plus the stored 8-bit form of quantized matmuls.
#[derive(Debug, Default)]
pub struct Weights {
    /// f32 tensors (quantized matmuls dequantized, unless `keep_float` is false).
    pub tensors: Tensors,
    /// The quantized matmuls as stored.
    pub quantized: Quantized,
    /// Whether matmuls with a stored 8-bit form also get f32 weights (float32 runs them).
    pub keep_float: bool,
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

/// Counts `prefix{i}/…` layers present as layer-norm nodes (fused or spelled out).
fn count_layers(v: &View<'_>, prefix: &str) -> usize {
    (0..)
        .take_while(|i| {
            v.node(
                &format!("{prefix}{i}/input_layernorm"),
                &["LayerNormalization", "ReduceMean"],
            )
            .is_some()
        })
        .count()
}

/// The rotary inverse frequencies: the constant an `Expand` (tiny) or `MatMul` (base) under
/// `prefix` starts from.
fn rotary(v: &View<'_>, prefix: &str) -> Result<Vec<f32>> {
    if let Some(n) = v.node(prefix, &["Expand"]) {
        return Ok(v.input(n, 0)?.1);
    }
    let (_, inv) = v
        .const_operand(prefix, "MatMul", None)
        .ok_or_else(|| missing(&format!("rotary frequencies under {prefix}")))?;
    Ok(v.f32s(inv)?.1)
}

const ATTENTION: [(&str, &[&str]); 4] = [
    ("q_proj", &["q_proj"]),
    ("k_proj", &["k_proj"]),
    ("v_proj", &["v_proj"]),
    ("o_proj", &["o_proj", "dense"]),
];

/// Reads the encoder file into canonical tensors (`encoder.*`, `conv*`, `groupnorm.*`).
pub fn encoder_tensors(model: &OrtModel, keep_float: bool) -> Result<Weights> {
    let v = View { model, graph: 0 };
    let mut out = Weights {
        keep_float,
        ..Weights::default()
    };
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
        for (proj, names) in ATTENTION {
            put_linear(
                &mut out,
                &format!("{c}.self_attn.{proj}"),
                &v,
                &format!("{p}/self_attn"),
                names,
            )?;
        }
        for fc in ["fc1", "fc2"] {
            put_linear(
                &mut out,
                &format!("{c}.mlp.{fc}"),
                &v,
                &format!("{p}/mlp"),
                &[fc],
            )?;
        }
    }
    // The final norm is either a plain (or spelled-out) layer norm or fused with the last
    // residual add (SkipLayerNormalization: input, skip, gamma, beta).
    let final_norm = match v.node("/layer_norm", &["LayerNormalization", "ReduceMean"]) {
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
pub fn decoder_tensors(model: &OrtModel, keep_float: bool) -> Result<Weights> {
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
    let mut out = Weights {
        keep_float,
        ..Weights::default()
    };
    let gather = v
        .node("/model/decoder/embed_tokens", &["Gather"])
        .ok_or_else(|| missing("token embedding"))?;
    let table = gather
        .input(0)
        .ok_or_else(|| missing("token embedding table"))?;
    let stored = v.model.initializer(v.graph, table).map(|t| t.dtype);
    let embed = if stored.is_none_or(|d| d == DataType::F32) {
        // A float table, or one the graph dequantizes itself (`Cast → Mul → Add`).
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
            for (proj, names) in ATTENTION {
                put_linear(
                    &mut out,
                    &format!("{c}.{attn}.{proj}"),
                    &v,
                    &format!("{p}/{attn}"),
                    names,
                )?;
            }
        }
        for (fc, names) in [("fc1", ["fc1", "up_proj"]), ("fc2", ["fc2", "down_proj"])] {
            put_linear(
                &mut out,
                &format!("{c}.mlp.{fc}"),
                &v,
                &format!("{p}/mlp"),
                &names,
            )?;
        }
    }
    put_norm(
        &mut out,
        "decoder.norm",
        v.layer_norm("/model/decoder/norm")?,
    );
    put_linear(&mut out, "proj_out", &v, "", &["proj_out"])?;
    Ok(out)
}

/// Attention scale of the first encoder layer's scores (1/√head_dim): the `alpha` of a fused
/// score matmul, or the product of the constant factors its queries and keys are multiplied by
/// (√scale each, in the spelled-out export).
pub fn score_scale(model: &OrtModel) -> Option<f32> {
    let v = View { model, graph: 0 };
    if let Some(a) = v
        .node("/layers.0/self_attn", &["FusedMatMul"])
        .and_then(|n| n.attr_float("alpha"))
    {
        return Some(a);
    }
    let scores = v.info().nodes.iter().find(|n| {
        n.name.starts_with("/layers.0/self_attn/")
            && n.op_type == "MatMul"
            && n.inputs.len() == 2
            && n.inputs.iter().all(|i| !v.is_const(i))
    })?;
    let factor = |name: &str| -> Option<f32> {
        let (_, n) = v.producer(name)?;
        if n.op_type != "Mul" {
            return None;
        }
        let c = n.inputs.iter().find(|i| v.is_const(i))?;
        match v.f32s(c).ok()?.1[..] {
            [x] => Some(x),
            _ => None,
        }
    };
    Some(factor(&scores.inputs[0])? * factor(&scores.inputs[1])?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ort::GraphInfo;

    fn node(op: &str, inputs: &[&str], output: &str) -> Node {
        Node {
            name: format!("/{output}/{op}"),
            domain: String::new(),
            op_type: op.into(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![output.into()],
            attrs: Default::default(),
        }
    }

    /// A damaged file whose "constants" feed themselves is an error, not endless recursion.
    #[test]
    fn cycles_of_constant_operators_are_not_constants() {
        let mut graph = GraphInfo::default();
        graph.nodes = vec![
            node("Add", &["w", "w"], "w"),
            node("Mul", &["b", "c"], "a"),
            node("Cast", &["a"], "b"),
            node("Transpose", &["b"], "c"),
            node("Transpose", &["t"], "t"),
        ];
        let model = OrtModel {
            graphs: vec![graph],
        };
        let v = View {
            model: &model,
            graph: 0,
        };
        for name in ["w", "a", "b", "c", "t"] {
            assert!(!v.is_const(name), "{name}");
            assert!(v.f32s(name).is_err(), "{name}");
            assert!(v.dequantized_chain(name).unwrap().is_none(), "{name}");
        }
    }
}
