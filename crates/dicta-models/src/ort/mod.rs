//! ONNX graphs and their initializers, read for weight loading (never executed), from either
//! format users have: ONNX Runtime's ORT format (`.ort` flatbuffers) or plain ONNX (`.onnx`
//! protobuf, the `onnx` module).
//!
//! For `.ort` files, [`OrtModel::read`] verifies the whole buffer with the `flatbuffers` verifier, then copies
//! out what loaders need: every graph (the main one and `If`/`Loop` subgraphs) as a list of
//! [`Node`]s, and initializers by name. A loader finds a layer's weights through the node
//! that consumes them (initializer names of optimised exports are often anonymous, e.g.
//! `onnx::MatMul_2093_quantized`, while node names keep the module path,
//! `/layers.0/self_attn/q_proj/MatMul_quant`).

mod onnx;
mod schema;

use std::collections::HashMap;
use std::path::Path;

use dicta_core::{Error, Result};

/// Element types of initializers (ONNX `TensorProto.DataType` numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    /// 32-bit float.
    F32,
    /// Unsigned 8-bit.
    U8,
    /// Signed 8-bit.
    I8,
    /// 32-bit int.
    I32,
    /// 64-bit int.
    I64,
    /// Anything else (kept so that graphs load; reading its values errors).
    Other(i32),
}

impl DataType {
    fn from_code(code: i32) -> Self {
        match code {
            1 => Self::F32,
            2 => Self::U8,
            3 => Self::I8,
            6 => Self::I32,
            7 => Self::I64,
            c => Self::Other(c),
        }
    }

    fn size(self) -> Option<usize> {
        match self {
            Self::U8 | Self::I8 => Some(1),
            Self::F32 | Self::I32 => Some(4),
            Self::I64 => Some(8),
            Self::Other(_) => None,
        }
    }
}

/// `[rows, cols]` → `[cols, rows]` (row-major): ONNX stores matmul weights as `[in, out]`, the
/// layers here want `[out, in]`.
pub(crate) fn transpose<T: Copy + Default>(v: &[T], rows: usize, cols: usize) -> Vec<T> {
    let mut out = vec![T::default(); v.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = v[r * cols + c];
        }
    }
    out
}

/// A constant tensor stored in the model.
#[derive(Debug, Clone)]
pub struct Initializer {
    /// Element type.
    pub dtype: DataType,
    /// Shape (empty for a scalar).
    pub dims: Vec<usize>,
    /// Little-endian element bytes.
    pub data: Vec<u8>,
}

impl Initializer {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// True for a tensor with no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as f32: float tensors as stored, 8-bit and integer tensors converted
    /// (no scale applied).
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        let d = &self.data;
        Ok(match self.dtype {
            DataType::F32 => d
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            DataType::U8 => d.iter().map(|&b| f32::from(b)).collect(),
            DataType::I8 => d.iter().map(|&b| f32::from(b as i8)).collect(),
            DataType::I32 => d
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32)
                .collect(),
            DataType::I64 => d
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")) as f32)
                .collect(),
            DataType::Other(code) => {
                return Err(Error::model_load(format!(
                    "initializer of ONNX data type {code} cannot be read as numbers"
                )))
            }
        })
    }

    /// The single value of a scalar (or one-element) tensor, as f32.
    pub fn scalar(&self) -> Result<f32> {
        match self.to_f32()?.as_slice() {
            [v] => Ok(*v),
            v => Err(Error::model_load(format!(
                "expected a scalar, found {} values (shape {:?})",
                v.len(),
                self.dims
            ))),
        }
    }
}

/// One attribute value.
#[derive(Debug, Clone)]
pub enum AttrValue {
    /// A float.
    Float(f32),
    /// An int.
    Int(i64),
    /// A string.
    Str(String),
    /// Floats.
    Floats(Vec<f32>),
    /// Ints.
    Ints(Vec<i64>),
    /// A subgraph (index into [`OrtModel::graphs`]).
    Graph(usize),
    /// A kind loaders never need (tensors, sparse tensors, lists of graphs).
    Other,
}

/// One operator of a graph.
#[derive(Debug, Clone)]
pub struct Node {
    /// Node name.
    pub name: String,
    /// Operator domain (`""`: ONNX).
    pub domain: String,
    /// Operator type.
    pub op_type: String,
    /// Input value names (`""` where an optional input is omitted).
    pub inputs: Vec<String>,
    /// Output value names.
    pub outputs: Vec<String>,
    /// Attributes by name.
    pub attrs: HashMap<String, AttrValue>,
}

impl Node {
    /// Input `i`, when present and not omitted.
    pub fn input(&self, i: usize) -> Option<&str> {
        self.inputs
            .get(i)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    /// An int attribute.
    pub fn attr_int(&self, name: &str) -> Option<i64> {
        match self.attrs.get(name) {
            Some(AttrValue::Int(v)) => Some(*v),
            _ => None,
        }
    }

    /// A float attribute.
    pub fn attr_float(&self, name: &str) -> Option<f32> {
        match self.attrs.get(name) {
            Some(AttrValue::Float(v)) => Some(*v),
            _ => None,
        }
    }

    /// An ints attribute.
    pub fn attr_ints(&self, name: &str) -> Option<&[i64]> {
        match self.attrs.get(name) {
            Some(AttrValue::Ints(v)) => Some(v),
            _ => None,
        }
    }
}

/// One graph: its nodes, inputs and outputs, and its enclosing graph.
#[derive(Debug, Clone, Default)]
pub struct GraphInfo {
    /// Nodes in stored order.
    pub nodes: Vec<Node>,
    /// Graph input names.
    pub inputs: Vec<String>,
    /// Graph output names.
    pub outputs: Vec<String>,
    /// Index of the enclosing graph (`None` for the main graph).
    pub parent: Option<usize>,
    initializers: HashMap<String, Initializer>,
}

/// A whole `.ort` file: graph 0 is the main graph; subgraphs follow.
#[derive(Debug, Clone)]
pub struct OrtModel {
    /// Every graph; `graphs[0]` is the main one.
    pub graphs: Vec<GraphInfo>,
}

impl OrtModel {
    /// Reads and verifies a model file: ORT format when it carries the `ORTM` identifier,
    /// plain ONNX protobuf otherwise. Errors (`ModelLoad`) name the file and what is wrong
    /// with it.
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path)
            .map_err(|e| Error::model_load(format!("{}: {e}", path.display())))?;
        let parsed = if bytes.len() >= 8 && &bytes[4..8] == b"ORTM" {
            Self::parse(&bytes)
        } else {
            Self::parse_onnx(&bytes)
        };
        parsed.map_err(|e| Error::model_load(format!("{}: {e}", path.display())))
    }

    /// Parses ORT-format bytes.
    pub fn parse(bytes: &[u8]) -> std::result::Result<Self, String> {
        if bytes.len() < 8 || &bytes[4..8] != b"ORTM" {
            return Err("not an ONNX Runtime (.ort) model: file identifier ORTM missing".into());
        }
        let opts = flatbuffers::VerifierOptions {
            max_apparent_size: usize::MAX >> 1,
            ..Default::default()
        };
        let session = flatbuffers::root_with_opts::<schema::InferenceSession>(&opts, bytes)
            .map_err(|e| format!("corrupt ORT flatbuffer: {e}"))?;
        let graph = session
            .model()
            .and_then(|m| m.graph())
            .ok_or("ORT file without a model graph")?;
        let mut model = Self { graphs: Vec::new() };
        model.add_graph(graph, None)?;
        Ok(model)
    }

    /// Appends an empty graph (filled in by the reader) and returns its index.
    fn push_graph(&mut self, parent: Option<usize>) -> usize {
        self.graphs.push(GraphInfo {
            parent,
            ..GraphInfo::default()
        });
        self.graphs.len() - 1
    }

    fn add_graph(
        &mut self,
        g: schema::Graph<'_>,
        parent: Option<usize>,
    ) -> std::result::Result<usize, String> {
        let index = self.push_graph(parent);
        let strings = |v: Option<flatbuffers::Vector<'_, flatbuffers::ForwardsUOffset<&str>>>| {
            v.map(|v| v.iter().map(String::from).collect::<Vec<_>>())
                .unwrap_or_default()
        };
        let mut initializers = HashMap::new();
        for t in g.initializers().into_iter().flatten() {
            let name = t.name().unwrap_or_default().to_string();
            let dtype = DataType::from_code(t.data_type());
            let dims = t
                .dims()
                .map(|d| {
                    d.to_i64()
                        .into_iter()
                        .map(|x| usize::try_from(x).unwrap_or(0))
                        .collect()
                })
                .unwrap_or_else(Vec::new);
            let data = t.raw_data().unwrap_or_default().to_vec();
            let n: usize = dims.iter().product();
            if let Some(size) = dtype.size() {
                if n.checked_mul(size) != Some(data.len()) {
                    return Err(format!(
                        "initializer {name:?}: shape {dims:?} needs {n} elements but {} bytes are stored",
                        data.len()
                    ));
                }
            }
            initializers.insert(name, Initializer { dtype, dims, data });
        }
        let mut nodes = Vec::new();
        for n in g.nodes().into_iter().flatten() {
            let mut attrs = HashMap::new();
            for a in n.attributes().into_iter().flatten() {
                let value = match a.kind() {
                    1 => AttrValue::Float(a.f()),
                    2 => AttrValue::Int(a.i()),
                    3 => AttrValue::Str(a.s().unwrap_or_default().to_string()),
                    5 => match a.g() {
                        Some(sub) => AttrValue::Graph(self.add_graph(sub, Some(index))?),
                        None => AttrValue::Other,
                    },
                    6 => AttrValue::Floats(a.floats().map(|v| v.to_f32()).unwrap_or_default()),
                    7 => AttrValue::Ints(a.ints().map(|v| v.to_i64()).unwrap_or_default()),
                    _ => AttrValue::Other,
                };
                attrs.insert(a.name().unwrap_or_default().to_string(), value);
            }
            nodes.push(Node {
                name: n.name().unwrap_or_default().to_string(),
                domain: n.domain().unwrap_or_default().to_string(),
                op_type: n.op_type().unwrap_or_default().to_string(),
                inputs: strings(n.inputs()),
                outputs: strings(n.outputs()),
                attrs,
            });
        }
        let info = &mut self.graphs[index];
        info.nodes = nodes;
        info.inputs = strings(g.inputs());
        info.outputs = strings(g.outputs());
        info.initializers = initializers;
        Ok(index)
    }

    /// The initializer `name` as seen from graph `graph` (its own, then its enclosing graphs').
    pub fn initializer(&self, graph: usize, name: &str) -> Option<&Initializer> {
        let mut g = Some(graph);
        while let Some(i) = g {
            let info = self.graphs.get(i)?;
            if let Some(t) = info.initializers.get(name) {
                return Some(t);
            }
            g = info.parent;
        }
        None
    }

    /// Number of initializers of graph `graph` itself.
    pub fn initializer_count(&self, graph: usize) -> usize {
        self.graphs.get(graph).map_or(0, |g| g.initializers.len())
    }

    /// The first node of graph `graph` named `name`.
    pub fn node(&self, graph: usize, name: &str) -> Option<&Node> {
        self.graphs
            .get(graph)?
            .nodes
            .iter()
            .find(|n| n.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_other_files() {
        assert!(OrtModel::parse(b"").unwrap_err().contains("ORTM"));
        assert!(OrtModel::parse(b"\x10\0\0\0ONNXabcdefgh")
            .unwrap_err()
            .contains("ORTM"));
    }

    #[test]
    fn rejects_corrupt_offsets() {
        // Identifier right, root offset pointing past the end.
        let mut b = vec![0xff, 0xff, 0xff, 0x7f];
        b.extend_from_slice(b"ORTM");
        b.extend_from_slice(&[0; 8]);
        let e = OrtModel::parse(&b).unwrap_err();
        assert!(e.contains("corrupt"), "{e}");
    }
}
