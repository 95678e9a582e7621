//! Activation functions named in Hugging Face configs.

use candle_core::Tensor;
use dicta_core::{Error, Result};

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

    /// Applies the activation elementwise.
    pub fn apply(self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Act::Gelu => x.gelu_erf(),
            Act::GeluTanh => x.gelu(),
            Act::Relu => x.relu(),
            Act::Silu => x.silu(),
        }
    }
}
