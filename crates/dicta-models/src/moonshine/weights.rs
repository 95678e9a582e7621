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

use super::graph::{missing, View};
use crate::ort::{DataType, OrtModel};
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

/// Stored 8-bit matmuls by canonical layer name (`encoder.layers.0.self_attn.q_proj`).
pub type Quantized = HashMap<String, QuantizedMatmul>;

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
