//! Shared helpers: start a server on port 0 in-process, make audio, read metrics.

#![allow(dead_code)]

pub mod echo_backend;

use std::sync::Arc;

use dicta_server::{Backend, ServerConfig};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[allow(unused_imports)]
pub use echo_backend::{expected, EchoBackend};

/// A running test server.
pub struct TestServer {
    pub base: String,
    stop: Option<oneshot::Sender<()>>,
    handle: JoinHandle<dicta_core::Result<()>>,
}

impl TestServer {
    /// Starts `backend` behind `cfg` (port forced to 0).
    pub async fn start(cfg: ServerConfig, backend: Arc<dyn Backend>) -> Self {
        let bound = dicta_server::bind(ServerConfig { port: 0, ..cfg })
            .await
            .expect("bind");
        let base = format!("http://{}", bound.local_addr());
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(bound.run(backend, async move {
            let _ = stopped.await;
        }));
        Self {
            base,
            stop: Some(stop),
            handle,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Asks for a graceful shutdown and returns what `run` returned.
    pub async fn shutdown(mut self) -> dicta_core::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.handle).await.expect("server task")
    }

    /// What `run` returned, for a server that stops by itself (failed warm-up).
    pub async fn finished(self) -> dicta_core::Result<()> {
        self.handle.await.expect("server task")
    }

    /// Polls `/metrics` until `line` appears (a wait for a state, bounded by the test
    /// harness, not a timing assertion).
    pub async fn wait_metric(&self, client: &reqwest::Client, line: &str) {
        for round in 0.. {
            let text = client
                .get(self.url("/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            if text.lines().any(|l| l == line) {
                return;
            }
            if round == 400 {
                eprintln!("still waiting for {line:?} in:\n{text}");
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Waits until `/readyz` answers 200.
    pub async fn wait_ready(&self, client: &reqwest::Client) {
        while client
            .get(self.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status()
            != 200
        {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

/// Deterministic non-silent 16-bit samples (a chirp plus a seed-dependent offset pattern).
pub fn samples(n: usize, seed: u32) -> Vec<i16> {
    (0..n)
        .map(|i| {
            let t = i as f64 / 16_000.0;
            let f = 200.0 + 50.0 * f64::from(seed);
            ((t * f * std::f64::consts::TAU).sin() * 8000.0) as i16 + (i as i16 % 7) * seed as i16
        })
        .collect()
}

/// A mono 16-bit WAV file.
pub fn wav(samples: &[i16], rate: u32) -> Vec<u8> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut cursor = std::io::Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut cursor, spec).unwrap();
    for &s in samples {
        w.write_sample(s).unwrap();
    }
    w.finalize().unwrap();
    cursor.into_inner()
}

/// Little-endian i16 bytes.
pub fn pcm_i16(samples: &[i16]) -> Vec<u8> {
    samples.iter().flat_map(|s| s.to_le_bytes()).collect()
}

/// A JSON `/transcribe` request with one base64 WAV per `(id, samples)`.
pub fn batch_body(inputs: &[(&str, &[i16])]) -> serde_json::Value {
    use base64::Engine as _;
    let inputs: Vec<_> = inputs
        .iter()
        .map(|(id, s)| {
            serde_json::json!({
                "id": id,
                "audio_base64": base64::engine::general_purpose::STANDARD.encode(wav(s, 16_000)),
            })
        })
        .collect();
    serde_json::json!({ "inputs": inputs })
}

/// The `error` object of a JSON error body, checking the shape.
pub async fn error_of(resp: reqwest::Response) -> (u16, String, String) {
    let status = resp.status().as_u16();
    let v: serde_json::Value = resp.json().await.expect("JSON error body");
    let kind = v["error"]["type"].as_str().expect("error.type").to_string();
    let message = v["error"]["message"]
        .as_str()
        .expect("error.message")
        .to_string();
    (status, kind, message)
}
