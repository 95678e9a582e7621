//! Whisper log-mel front end (in progress).
