//! Whisper decoding policy (in progress).
