//! CTC decoders and n-gram language models (in progress).
