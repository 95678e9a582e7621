//! CTC acoustic models (in progress).
