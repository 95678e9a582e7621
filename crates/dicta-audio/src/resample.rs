//! Band-limited resampling (in progress).
