//! The Dicta server (HTTP batch, OpenAI-compatible API, WebSocket streaming). Not built yet.
