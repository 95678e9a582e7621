//! Read-only accessors for the parts of onnxruntime's ORT format (`ort.fbs`, root
//! `InferenceSession`, file identifier `ORTM`) that weight loading needs.
//!
//! Written in the shape `flatc --rust` generates, for the fields we read only: each table's
//! verifier visits exactly the fields its accessors follow, so after
//! [`flatbuffers::root`] has verified the buffer every accessor stays inside it. Field slots
//! are `4 + 2 × (field index in ort.fbs)`.

use flatbuffers::{
    Follow, ForwardsUOffset, InvalidFlatbuffer, Table, VOffsetT, Vector, Verifiable, Verifier,
};

/// Declares a table type with its `Follow` impl.
macro_rules! table {
    ($name:ident) => {
        #[derive(Clone, Copy)]
        pub struct $name<'a> {
            tab: Table<'a>,
        }
        impl<'a> Follow<'a> for $name<'a> {
            type Inner = $name<'a>;
            unsafe fn follow(buf: &'a [u8], loc: usize) -> Self::Inner {
                // SAFETY: callers follow verified offsets only (see the module docs).
                Self {
                    tab: unsafe { Table::new(buf, loc) },
                }
            }
        }
    };
}

/// A vector of `W`-byte little-endian scalars read as raw bytes. ORT's writer does not always
/// align `int64` vectors to 8 bytes (tensor `dims`), which the flatbuffers verifier rejects for
/// `Vector<i64>`; this type checks the bounds only and decodes the values byte-wise.
#[derive(Clone, Copy)]
pub struct Scalars<'a, const W: usize>(&'a [u8]);

impl<'a, const W: usize> Scalars<'a, W> {
    /// The raw bytes (`W` per element).
    pub fn bytes(&self) -> &'a [u8] {
        self.0
    }
}

impl Scalars<'_, 8> {
    /// The elements as i64.
    pub fn to_i64(self) -> Vec<i64> {
        self.0
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect()
    }
}

impl Scalars<'_, 4> {
    /// The elements as f32.
    pub fn to_f32(self) -> Vec<f32> {
        self.0
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect()
    }
}

impl<'a, const W: usize> Follow<'a> for Scalars<'a, W> {
    type Inner = Scalars<'a, W>;
    unsafe fn follow(buf: &'a [u8], loc: usize) -> Self::Inner {
        // Bounds were checked by `run_verifier`; slicing re-checks them anyway.
        let len = u32::from_le_bytes(buf[loc..loc + 4].try_into().expect("4 bytes")) as usize;
        Scalars(&buf[loc + 4..loc + 4 + len * W])
    }
}

impl<const W: usize> Verifiable for Scalars<'_, W> {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), InvalidFlatbuffer> {
        let len = v.get_uoffset(pos)? as usize;
        v.range_in_buffer(pos.saturating_add(4), len.saturating_mul(W))
    }
}

const fn slot(field: u16) -> VOffsetT {
    4 + 2 * field
}

type Strings<'a> = Vector<'a, ForwardsUOffset<&'a str>>;
type Tables<'a, T> = Vector<'a, ForwardsUOffset<T>>;

table!(InferenceSession);
table!(Model);
table!(Graph);
table!(Node);
table!(Attribute);
table!(Tensor);

impl<'a> InferenceSession<'a> {
    const MODEL: VOffsetT = slot(1);
    /// The model.
    pub fn model(&self) -> Option<Model<'a>> {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<ForwardsUOffset<Model>>(Self::MODEL, None) }
    }
}

impl<'a> Model<'a> {
    const GRAPH: VOffsetT = slot(7);
    /// The main graph.
    pub fn graph(&self) -> Option<Graph<'a>> {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<ForwardsUOffset<Graph>>(Self::GRAPH, None) }
    }
}

impl<'a> Graph<'a> {
    const INITIALIZERS: VOffsetT = slot(0);
    const NODES: VOffsetT = slot(2);
    const INPUTS: VOffsetT = slot(5);
    const OUTPUTS: VOffsetT = slot(6);
    /// Constant tensors (weights).
    pub fn initializers(&self) -> Option<Tables<'a, Tensor<'a>>> {
        // SAFETY: verified by `run_verifier`.
        unsafe {
            self.tab
                .get::<ForwardsUOffset<Tables<Tensor>>>(Self::INITIALIZERS, None)
        }
    }
    /// Operators, in the stored (topological) order.
    pub fn nodes(&self) -> Option<Tables<'a, Node<'a>>> {
        // SAFETY: verified by `run_verifier`.
        unsafe {
            self.tab
                .get::<ForwardsUOffset<Tables<Node>>>(Self::NODES, None)
        }
    }
    /// Names of the graph inputs.
    pub fn inputs(&self) -> Option<Strings<'a>> {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<ForwardsUOffset<Strings>>(Self::INPUTS, None) }
    }
    /// Names of the graph outputs.
    pub fn outputs(&self) -> Option<Strings<'a>> {
        // SAFETY: verified by `run_verifier`.
        unsafe {
            self.tab
                .get::<ForwardsUOffset<Strings>>(Self::OUTPUTS, None)
        }
    }
}

impl<'a> Node<'a> {
    const NAME: VOffsetT = slot(0);
    const DOMAIN: VOffsetT = slot(2);
    const OP_TYPE: VOffsetT = slot(5);
    const INPUTS: VOffsetT = slot(8);
    const OUTPUTS: VOffsetT = slot(9);
    const ATTRIBUTES: VOffsetT = slot(10);
    /// Node name (the exporter's module path, e.g. `/layers.0/self_attn/q_proj/MatMul_quant`).
    pub fn name(&self) -> Option<&'a str> {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<ForwardsUOffset<&str>>(Self::NAME, None) }
    }
    /// Operator domain (`""` for ONNX, `com.microsoft` for contrib ops).
    pub fn domain(&self) -> Option<&'a str> {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<ForwardsUOffset<&str>>(Self::DOMAIN, None) }
    }
    /// Operator type.
    pub fn op_type(&self) -> Option<&'a str> {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<ForwardsUOffset<&str>>(Self::OP_TYPE, None) }
    }
    /// Input value names (`""` for an omitted optional input).
    pub fn inputs(&self) -> Option<Strings<'a>> {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<ForwardsUOffset<Strings>>(Self::INPUTS, None) }
    }
    /// Output value names.
    pub fn outputs(&self) -> Option<Strings<'a>> {
        // SAFETY: verified by `run_verifier`.
        unsafe {
            self.tab
                .get::<ForwardsUOffset<Strings>>(Self::OUTPUTS, None)
        }
    }
    /// Attributes.
    pub fn attributes(&self) -> Option<Tables<'a, Attribute<'a>>> {
        // SAFETY: verified by `run_verifier`.
        unsafe {
            self.tab
                .get::<ForwardsUOffset<Tables<Attribute>>>(Self::ATTRIBUTES, None)
        }
    }
}

impl<'a> Attribute<'a> {
    const NAME: VOffsetT = slot(0);
    const TYPE: VOffsetT = slot(2);
    const F: VOffsetT = slot(3);
    const I: VOffsetT = slot(4);
    const S: VOffsetT = slot(5);
    const G: VOffsetT = slot(7);
    const FLOATS: VOffsetT = slot(8);
    const INTS: VOffsetT = slot(9);
    /// Attribute name.
    pub fn name(&self) -> Option<&'a str> {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<ForwardsUOffset<&str>>(Self::NAME, None) }
    }
    /// `AttributeType` (1 float, 2 int, 3 string, 5 graph, 6 floats, 7 ints, …).
    pub fn kind(&self) -> i32 {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<i32>(Self::TYPE, Some(0)).unwrap_or(0) }
    }
    /// The float value.
    pub fn f(&self) -> f32 {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<f32>(Self::F, Some(0.0)).unwrap_or(0.0) }
    }
    /// The int value.
    pub fn i(&self) -> i64 {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<i64>(Self::I, Some(0)).unwrap_or(0) }
    }
    /// The string value (bytes).
    pub fn s(&self) -> Option<&'a str> {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<ForwardsUOffset<&str>>(Self::S, None) }
    }
    /// The subgraph value (`If` branches, loop bodies).
    pub fn g(&self) -> Option<Graph<'a>> {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<ForwardsUOffset<Graph>>(Self::G, None) }
    }
    /// The floats value.
    pub fn floats(&self) -> Option<Scalars<'a, 4>> {
        // SAFETY: verified by `run_verifier`.
        unsafe {
            self.tab
                .get::<ForwardsUOffset<Scalars<4>>>(Self::FLOATS, None)
        }
    }
    /// The ints value.
    pub fn ints(&self) -> Option<Scalars<'a, 8>> {
        // SAFETY: verified by `run_verifier`.
        unsafe {
            self.tab
                .get::<ForwardsUOffset<Scalars<8>>>(Self::INTS, None)
        }
    }
}

impl<'a> Tensor<'a> {
    const NAME: VOffsetT = slot(0);
    const DIMS: VOffsetT = slot(2);
    const DATA_TYPE: VOffsetT = slot(3);
    const RAW_DATA: VOffsetT = slot(4);
    /// Tensor name.
    pub fn name(&self) -> Option<&'a str> {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<ForwardsUOffset<&str>>(Self::NAME, None) }
    }
    /// Shape.
    pub fn dims(&self) -> Option<Scalars<'a, 8>> {
        // SAFETY: verified by `run_verifier`.
        unsafe {
            self.tab
                .get::<ForwardsUOffset<Scalars<8>>>(Self::DIMS, None)
        }
    }
    /// `TensorDataType` (1 float, 2 uint8, 3 int8, 6 int32, 7 int64, 9 bool, 10 float16, …).
    pub fn data_type(&self) -> i32 {
        // SAFETY: verified by `run_verifier`.
        unsafe { self.tab.get::<i32>(Self::DATA_TYPE, Some(0)).unwrap_or(0) }
    }
    /// Little-endian element bytes.
    pub fn raw_data(&self) -> Option<&'a [u8]> {
        // SAFETY: verified by `run_verifier`.
        unsafe {
            self.tab
                .get::<ForwardsUOffset<Scalars<1>>>(Self::RAW_DATA, None)
        }
        .map(|v| v.bytes())
    }
}

impl Verifiable for InferenceSession<'_> {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), InvalidFlatbuffer> {
        v.visit_table(pos)?
            .visit_field::<ForwardsUOffset<Model>>("model", Self::MODEL, false)?
            .finish();
        Ok(())
    }
}

impl Verifiable for Model<'_> {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), InvalidFlatbuffer> {
        v.visit_table(pos)?
            .visit_field::<ForwardsUOffset<Graph>>("graph", Self::GRAPH, false)?
            .finish();
        Ok(())
    }
}

impl Verifiable for Graph<'_> {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), InvalidFlatbuffer> {
        v.visit_table(pos)?
            .visit_field::<ForwardsUOffset<Tables<Tensor>>>(
                "initializers",
                Self::INITIALIZERS,
                false,
            )?
            .visit_field::<ForwardsUOffset<Tables<Node>>>("nodes", Self::NODES, false)?
            .visit_field::<ForwardsUOffset<Strings>>("inputs", Self::INPUTS, false)?
            .visit_field::<ForwardsUOffset<Strings>>("outputs", Self::OUTPUTS, false)?
            .finish();
        Ok(())
    }
}

impl Verifiable for Node<'_> {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), InvalidFlatbuffer> {
        v.visit_table(pos)?
            .visit_field::<ForwardsUOffset<&str>>("name", Self::NAME, false)?
            .visit_field::<ForwardsUOffset<&str>>("domain", Self::DOMAIN, false)?
            .visit_field::<ForwardsUOffset<&str>>("op_type", Self::OP_TYPE, false)?
            .visit_field::<ForwardsUOffset<Strings>>("inputs", Self::INPUTS, false)?
            .visit_field::<ForwardsUOffset<Strings>>("outputs", Self::OUTPUTS, false)?
            .visit_field::<ForwardsUOffset<Tables<Attribute>>>(
                "attributes",
                Self::ATTRIBUTES,
                false,
            )?
            .finish();
        Ok(())
    }
}

impl Verifiable for Attribute<'_> {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), InvalidFlatbuffer> {
        v.visit_table(pos)?
            .visit_field::<ForwardsUOffset<&str>>("name", Self::NAME, false)?
            .visit_field::<i32>("type", Self::TYPE, false)?
            .visit_field::<f32>("f", Self::F, false)?
            .visit_field::<i64>("i", Self::I, false)?
            .visit_field::<ForwardsUOffset<&str>>("s", Self::S, false)?
            .visit_field::<ForwardsUOffset<Graph>>("g", Self::G, false)?
            .visit_field::<ForwardsUOffset<Scalars<4>>>("floats", Self::FLOATS, false)?
            .visit_field::<ForwardsUOffset<Scalars<8>>>("ints", Self::INTS, false)?
            .finish();
        Ok(())
    }
}

impl Verifiable for Tensor<'_> {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), InvalidFlatbuffer> {
        v.visit_table(pos)?
            .visit_field::<ForwardsUOffset<&str>>("name", Self::NAME, false)?
            .visit_field::<ForwardsUOffset<Scalars<8>>>("dims", Self::DIMS, false)?
            .visit_field::<i32>("data_type", Self::DATA_TYPE, false)?
            .visit_field::<ForwardsUOffset<Scalars<1>>>("raw_data", Self::RAW_DATA, false)?
            .finish();
        Ok(())
    }
}
