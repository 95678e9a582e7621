//! Text normalization and error rates (in progress).
