//! Plain ONNX files (`.onnx`, protobuf `ModelProto`), read into the same [`OrtModel`] shape as
//! `.ort` files so that loaders find weights the same way whichever format a user has.
//!
//! The messages below are the subset of `onnx.proto` (field numbers as published by the ONNX
//! project) that weight loading needs, declared with `prost`'s derive so no `protoc` is needed
//! at build time. Fields a loader never reads (docs, metadata, types of value infos, sparse
//! initializers) are skipped by the decoder as unknown fields.

use std::collections::HashMap;

use prost::Message;

use super::{AttrValue, DataType, Initializer, Node, OrtModel};

#[derive(Clone, PartialEq, Message)]
struct ModelProto {
    #[prost(int64, tag = "1")]
    ir_version: i64,
    #[prost(message, optional, tag = "7")]
    graph: Option<GraphProto>,
}

#[derive(Clone, PartialEq, Message)]
struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    node: Vec<NodeProto>,
    #[prost(message, repeated, tag = "5")]
    initializer: Vec<TensorProto>,
    #[prost(message, repeated, tag = "11")]
    input: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    output: Vec<ValueInfoProto>,
}

#[derive(Clone, PartialEq, Message)]
struct ValueInfoProto {
    #[prost(string, tag = "1")]
    name: String,
}

#[derive(Clone, PartialEq, Message)]
struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    output: Vec<String>,
    #[prost(string, tag = "3")]
    name: String,
    #[prost(string, tag = "4")]
    op_type: String,
    #[prost(message, repeated, tag = "5")]
    attribute: Vec<AttributeProto>,
    #[prost(string, tag = "7")]
    domain: String,
}

#[derive(Clone, PartialEq, Message)]
struct AttributeProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(float, tag = "2")]
    f: f32,
    #[prost(int64, tag = "3")]
    i: i64,
    #[prost(bytes = "vec", tag = "4")]
    s: Vec<u8>,
    #[prost(message, optional, tag = "5")]
    t: Option<TensorProto>,
    #[prost(message, optional, tag = "6")]
    g: Option<GraphProto>,
    #[prost(float, repeated, tag = "7")]
    floats: Vec<f32>,
    #[prost(int64, repeated, tag = "8")]
    ints: Vec<i64>,
    /// `AttributeType`: 1 float, 2 int, 3 string, 4 tensor, 5 graph, 6 floats, 7 ints.
    #[prost(int32, tag = "20")]
    r#type: i32,
}

#[derive(Clone, PartialEq, Message)]
struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    data_type: i32,
    #[prost(float, repeated, tag = "4")]
    float_data: Vec<f32>,
    /// Also holds int8/uint8/int16/bool values, one per entry.
    #[prost(int32, repeated, tag = "5")]
    int32_data: Vec<i32>,
    #[prost(int64, repeated, tag = "7")]
    int64_data: Vec<i64>,
    #[prost(string, tag = "8")]
    name: String,
    #[prost(bytes = "vec", tag = "9")]
    raw_data: Vec<u8>,
    /// 1 = EXTERNAL (weights in a side file, which this reader does not follow).
    #[prost(int32, tag = "14")]
    data_location: i32,
}

impl OrtModel {
    /// Parses a plain ONNX (`ModelProto`) file's bytes.
    pub fn parse_onnx(bytes: &[u8]) -> std::result::Result<Self, String> {
        let proto =
            ModelProto::decode(bytes).map_err(|e| format!("not a readable ONNX model: {e}"))?;
        let graph = proto.graph.ok_or("ONNX file without a graph")?;
        let mut model = Self { graphs: Vec::new() };
        model.add_onnx_graph(graph, None)?;
        Ok(model)
    }

    fn add_onnx_graph(
        &mut self,
        g: GraphProto,
        parent: Option<usize>,
    ) -> std::result::Result<usize, String> {
        let index = self.push_graph(parent);
        let mut initializers = HashMap::new();
        for t in g.initializer {
            let (name, init) = tensor(t)?;
            initializers.insert(name, init);
        }
        let mut nodes = Vec::with_capacity(g.node.len());
        for n in g.node {
            let mut attrs = HashMap::new();
            for a in n.attribute {
                let value = match a.r#type {
                    1 => AttrValue::Float(a.f),
                    2 => AttrValue::Int(a.i),
                    3 => AttrValue::Str(String::from_utf8_lossy(&a.s).into_owned()),
                    5 => match a.g {
                        Some(sub) => AttrValue::Graph(self.add_onnx_graph(sub, Some(index))?),
                        None => AttrValue::Other,
                    },
                    6 => AttrValue::Floats(a.floats),
                    7 => AttrValue::Ints(a.ints),
                    _ => AttrValue::Other,
                };
                attrs.insert(a.name, value);
            }
            nodes.push(Node {
                name: n.name,
                domain: n.domain,
                op_type: n.op_type,
                inputs: n.input,
                outputs: n.output,
                attrs,
            });
        }
        let info = &mut self.graphs[index];
        info.nodes = nodes;
        info.inputs = g.input.into_iter().map(|v| v.name).collect();
        info.outputs = g.output.into_iter().map(|v| v.name).collect();
        info.initializers = initializers;
        Ok(index)
    }
}

/// One stored tensor as an [`Initializer`] (little-endian bytes whatever field held it).
fn tensor(t: TensorProto) -> std::result::Result<(String, Initializer), String> {
    let name = t.name;
    if t.data_location == 1 {
        return Err(format!(
            "initializer {name:?} keeps its data in an external file; \
             save the model with its weights inside (onnx.save(..., save_as_external_data=False))"
        ));
    }
    let dtype = DataType::from_code(t.data_type);
    let dims = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("initializer {name:?}: dimension {d}")))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let n = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("initializer {name:?}: shape {dims:?} overflows"))?;
    let data = if !t.raw_data.is_empty() {
        t.raw_data
    } else {
        match dtype {
            DataType::F32 => t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            DataType::I32 => t.int32_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            DataType::U8 | DataType::I8 => t.int32_data.iter().map(|&v| v as u8).collect(),
            DataType::I64 => t.int64_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            DataType::Other(_) => Vec::new(),
        }
    };
    if let Some(size) = dtype.size() {
        if n.checked_mul(size) != Some(data.len()) {
            return Err(format!(
                "initializer {name:?}: shape {dims:?} needs {n} elements but {} bytes are stored",
                data.len()
            ));
        }
    }
    Ok((name, Initializer { dtype, dims, data }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_bytes(t: TensorProto, node: NodeProto) -> Vec<u8> {
        ModelProto {
            ir_version: 8,
            graph: Some(GraphProto {
                node: vec![node],
                initializer: vec![t],
                input: vec![ValueInfoProto { name: "x".into() }],
                output: vec![ValueInfoProto { name: "y".into() }],
            }),
        }
        .encode_to_vec()
    }

    #[test]
    fn round_trips_initializers_from_every_field() {
        let node = NodeProto {
            input: vec!["x".into(), "w".into()],
            output: vec!["y".into()],
            name: "conv".into(),
            op_type: "Conv".into(),
            attribute: vec![AttributeProto {
                name: "strides".into(),
                ints: vec![2],
                r#type: 7,
                ..Default::default()
            }],
            domain: String::new(),
        };
        for raw in [false, true] {
            let values = [1.5f32, -2.0, 0.25, 8.0, 3.0, -0.5];
            let t = TensorProto {
                dims: vec![2, 3],
                data_type: 1,
                float_data: if raw { Vec::new() } else { values.to_vec() },
                raw_data: if raw {
                    values.iter().flat_map(|v| v.to_le_bytes()).collect()
                } else {
                    Vec::new()
                },
                name: "w".into(),
                ..Default::default()
            };
            let m = OrtModel::parse_onnx(&model_bytes(t, node.clone())).unwrap();
            let w = m.initializer(0, "w").unwrap();
            assert_eq!(w.dims, vec![2, 3]);
            assert_eq!(w.to_f32().unwrap(), values);
            let n = m.node(0, "conv").unwrap();
            assert_eq!(n.attr_ints("strides"), Some(&[2i64][..]));
            assert_eq!(n.input(1), Some("w"));
            assert_eq!(m.graphs[0].inputs, vec!["x"]);
        }
    }

    #[test]
    fn rejects_short_data_and_garbage() {
        let t = TensorProto {
            dims: vec![4],
            data_type: 1,
            float_data: vec![1.0],
            name: "w".into(),
            ..Default::default()
        };
        let e = OrtModel::parse_onnx(&model_bytes(t, NodeProto::default())).unwrap_err();
        assert!(e.contains("needs 4 elements"), "{e}");
        let e = OrtModel::parse_onnx(&[0xff; 16]).unwrap_err();
        assert!(e.contains("ONNX"), "{e}");
    }
}
