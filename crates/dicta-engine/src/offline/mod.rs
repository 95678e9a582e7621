//! Offline planning and scheduling (in progress).
