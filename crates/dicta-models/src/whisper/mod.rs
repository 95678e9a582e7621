//! Whisper encoder-decoder (in progress).
