//! Reading one graph of a Moonshine `.ort` export: nodes found by name prefix, constants
//! folded through the operators a weight-only export spells out (`Cast`, `Mul`, `Add`, 2-D
//! `Transpose`), quantized matmuls read as stored or dequantized, layer norms in either form
//! ([`super::weights`] names what it finds).

use super::weights::QuantizedMatmul;
use crate::ort::{transpose, DataType, GraphInfo, Initializer, Node, OrtModel};
use dicta_core::{Error, Result};

/// A dense layer's `[out, in]` shape, weights and optional bias.
pub(super) type Dense = (Vec<usize>, Vec<f32>, Option<Vec<f32>>);

/// How many operators deep a constant is folded (a weight-only export needs 4: `Transpose` of
/// `Add` of `Mul` of `Cast`); deeper, or a cycle in a damaged file, is not a constant.
const FOLD_DEPTH: usize = 8;

pub(super) fn missing(what: &str) -> Error {
    Error::model_load(format!("Moonshine .ort: {what} not found"))
}

/// One graph of a model, with lookups by node-name prefix.
pub(super) struct View<'a> {
    pub(super) model: &'a OrtModel,
    pub(super) graph: usize,
}

impl<'a> View<'a> {
    pub(super) fn info(&self) -> &'a GraphInfo {
        &self.model.graphs[self.graph]
    }

    /// The first node whose name is under `prefix/` and whose op type is one of `ops`.
    pub(super) fn node(&self, prefix: &str, ops: &[&str]) -> Option<&'a Node> {
        let p = format!("{prefix}/");
        self.info()
            .nodes
            .iter()
            .find(|n| n.name.starts_with(&p) && ops.contains(&n.op_type.as_str()))
    }

    pub(super) fn init(&self, name: &str) -> Result<&'a Initializer> {
        self.model
            .initializer(self.graph, name)
            .ok_or_else(|| missing(&format!("initializer {name:?}")))
    }

    /// The value of `name`: an initializer, or a constant the graph (or an enclosing graph)
    /// computes from initializers with `Cast`, `Mul`, `Add` and 2-D `Transpose` (weight-only
    /// 8-bit exports dequantize that way, and tie weights by transposing).
    pub(super) fn f32s(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        self.f32s_within(name, FOLD_DEPTH)
    }

    pub(super) fn f32s_within(&self, name: &str, depth: usize) -> Result<(Vec<usize>, Vec<f32>)> {
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
    pub(super) fn producer(&self, name: &str) -> Option<(usize, &'a Node)> {
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
    pub(super) fn is_const(&self, name: &str) -> bool {
        self.is_const_within(name, FOLD_DEPTH)
    }

    pub(super) fn is_const_within(&self, name: &str, depth: usize) -> bool {
        self.model.initializer(self.graph, name).is_some()
            || (depth > 0
                && self.producer(name).is_some_and(|(_, n)| {
                    matches!(n.op_type.as_str(), "Cast" | "Mul" | "Add" | "Transpose")
                        && n.inputs.iter().all(|i| self.is_const_within(i, depth - 1))
                }))
    }

    /// The first of `names` under `prefix` (`{prefix}/{name}`) that holds a matmul.
    pub(super) fn matmul_prefix(&self, prefix: &str, names: &[&str]) -> Result<String> {
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

    pub(super) fn input(&self, n: &Node, i: usize) -> Result<(Vec<usize>, Vec<f32>)> {
        self.input_within(n, i, FOLD_DEPTH)
    }

    pub(super) fn input_within(
        &self,
        n: &Node,
        i: usize,
        depth: usize,
    ) -> Result<(Vec<usize>, Vec<f32>)> {
        let name = n
            .input(i)
            .ok_or_else(|| missing(&format!("input {i} of node {:?}", n.name)))?;
        self.f32s_within(name, depth)
    }

    /// Dequantizes 8-bit `q` with `scale` and `zero_point` (scalars, or one per column of the
    /// last axis).
    pub(super) fn dequant(
        &self,
        q: &str,
        scale: &str,
        zp: Option<&str>,
    ) -> Result<(Vec<usize>, Vec<f32>)> {
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
    pub(super) fn stored(
        &self,
        b: &str,
        scale: &str,
        zp: Option<&str>,
    ) -> Result<Option<QuantizedMatmul>> {
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
    pub(super) fn quantized(&self, prefix: &str) -> Result<Option<QuantizedMatmul>> {
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
    pub(super) fn dequantized_chain(&self, name: &str) -> Result<Option<QuantizedMatmul>> {
        self.dequantized_chain_within(name, FOLD_DEPTH)
    }

    pub(super) fn dequantized_chain_within(
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
    pub(super) fn linear(&self, prefix: &str) -> Result<Dense> {
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
    pub(super) fn linear_bias(&self, prefix: &str) -> Result<Option<&'a str>> {
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
    pub(super) fn layer_norm(&self, prefix: &str) -> Result<(Vec<f32>, Vec<f32>)> {
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
    pub(super) fn const_operand(
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
