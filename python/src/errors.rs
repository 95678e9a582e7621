//! The library's typed errors as the package's exception classes (`dicta.errors`): one class per
//! [`ErrorKind`], all under `dicta.DictaError`, carrying the library's message unchanged.

use dicta_core::{Error, ErrorKind};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// The `dicta.errors` class of each kind.
pub(crate) fn class_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidInput => "InvalidInput",
        ErrorKind::EmptyInput => "EmptyInput",
        ErrorKind::UnsupportedFormat => "UnsupportedFormat",
        ErrorKind::CorruptInput => "CorruptInput",
        ErrorKind::LimitExceeded => "LimitExceeded",
        ErrorKind::ModelLoad => "ModelLoad",
        ErrorKind::Fetch => "FetchError",
        ErrorKind::Overloaded => "Overloaded",
        ErrorKind::Timeout => "Timeout",
        ErrorKind::Io => "IoError",
        ErrorKind::Internal => "InternalError",
    }
}

/// A Python exception of `e`'s class with `e`'s message (a `RuntimeError` if `dicta.errors`
/// cannot be imported, which only happens when `_dicta` is loaded outside its package).
pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let made = py
        .import("dicta.errors")
        .and_then(|m| m.getattr(class_name(e.kind)))
        .and_then(|cls| cls.call1((e.message.clone(),)));
    match made {
        Ok(instance) => PyErr::from_value(instance),
        Err(_) => PyRuntimeError::new_err(format!("{}: {}", e.kind, e.message)),
    }
}

/// `Result<T, dicta_core::Error>` → `PyResult<T>`.
pub(crate) trait IntoPy<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPy<T> for dicta_core::Result<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}
