//! Decoding of audio files and raw PCM (in progress).
