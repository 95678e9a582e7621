//! Admission, limits and lifecycle against an in-process server on port 0 with the echo
//! test backend: each status code is provoked, and the server must still serve a normal
//! request afterwards. Waits poll observable state (metrics, backend entries), never clocks.

mod common;

use std::sync::Arc;

use common::{batch_body, error_of, expected, samples, wav, EchoBackend, TestServer};
use dicta_server::{ServerConfig, Task};
use serde_json::Value;

/// Sends one normal request and checks its answer.
async fn assert_serves(server: &TestServer, client: &reqwest::Client, key: Option<&str>) {
    let audio = samples(3_200, 9);
    let mut req = client
        .post(server.url("/transcribe"))
        .json(&batch_body(&[("ok", &audio)]));
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["results"][0]["text"], expected(&audio, Task::Transcribe));
}

fn transcribe(
    client: &reqwest::Client,
    server: &TestServer,
    id: &str,
    audio: &[i16],
) -> tokio::task::JoinHandle<reqwest::Response> {
    let req = client
        .post(server.url("/transcribe"))
        .json(&batch_body(&[(id, audio)]));
    tokio::spawn(async move { req.send().await.unwrap() })
}

#[tokio::test]
async fn undecodable_audio_is_400_naming_the_input() {
    let server = TestServer::start(ServerConfig::default(), Arc::new(EchoBackend::new())).await;
    let client = reqwest::Client::new();
    let whole = wav(&samples(16_000, 1), 16_000);
    // Cut inside its header: nothing can be read.
    let header_cut = whole[..30].to_vec();
    for (name, bytes) in [
        ("junk.bin", b"this is not audio".to_vec()),
        ("cut.wav", header_cut),
        ("empty.wav", Vec::new()),
    ] {
        let form = reqwest::multipart::Form::new()
            .part(
                "file",
                reqwest::multipart::Part::bytes(bytes).file_name(name),
            )
            .text("model", "whisper-1");
        let r = client
            .post(server.url("/v1/audio/transcriptions"))
            .multipart(form)
            .send()
            .await
            .unwrap();
        let (status, kind, message) = error_of(r).await;
        assert_eq!(status, 400, "{name}: {kind}: {message}");
        assert!(message.contains(name), "{message}");
        assert_serves(&server, &client, None).await;
    }
    // Cut inside its audio: the part before the cut is transcribed, with a warning.
    let form = reqwest::multipart::Form::new()
        .part(
            "file",
            reqwest::multipart::Part::bytes(whole[..1000].to_vec()).file_name("part.wav"),
        )
        .text("model", "whisper-1")
        .text("response_format", "verbose_json");
    let r = client
        .post(server.url("/v1/audio/transcriptions"))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    let warning = body["warnings"][0].as_str().unwrap_or_default();
    assert!(warning.starts_with("truncated"), "{body}");
    // 1000 bytes of a 16-bit WAV: its 478 whole samples after the 44-byte header.
    assert_eq!(body["duration"], 478.0 / 16_000.0, "{body}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn api_key_is_required_on_every_route_but_the_probes() {
    for public_metrics in [false, true] {
        let cfg = ServerConfig {
            api_key: Some("sekret".into()),
            public_metrics,
            ..Default::default()
        };
        let server = TestServer::start(cfg, Arc::new(EchoBackend::new())).await;
        let client = reqwest::Client::new();
        // Orchestrator probes carry no key.
        let mut open = vec!["/health", "/readyz"];
        let mut closed = vec!["/v1/models"];
        if public_metrics {
            open.push("/metrics");
        } else {
            closed.push("/metrics");
        }
        for path in closed {
            let r = client.get(server.url(path)).send().await.unwrap();
            assert_eq!(
                r.headers()["www-authenticate"],
                "Bearer realm=\"dicta\"",
                "{path}"
            );
            let (status, kind, _) = error_of(r).await;
            assert_eq!((status, kind.as_str()), (401, "unauthorized"), "{path}");
        }
        let r = client
            .post(server.url("/transcribe"))
            .bearer_auth("wrong")
            .json(&batch_body(&[("a", &samples(1_600, 1))]))
            .send()
            .await
            .unwrap();
        let (status, _, message) = error_of(r).await;
        assert_eq!(status, 401);
        assert!(!message.contains("wrong"), "the key given is never echoed");
        assert_serves(&server, &client, Some("sekret")).await;
        // Warmed up now (it served): every probe answers 200 without the key.
        for path in open {
            let status = client.get(server.url(path)).send().await.unwrap().status();
            assert_eq!(status, 200, "{path}");
        }
        // The scheme is case-insensitive (RFC 9110).
        for scheme in ["bearer", "BEARER", "Bearer"] {
            let status = client
                .get(server.url("/v1/models"))
                .header("authorization", format!("{scheme} sekret"))
                .send()
                .await
                .unwrap()
                .status();
            assert_eq!(status, 200, "{scheme}");
        }
        server.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn limits_answer_413_naming_limit_and_value() {
    let cfg = ServerConfig {
        max_body_mib: 1,
        max_inputs: 2,
        max_audio_seconds: 2.0,
        ..Default::default()
    };
    let server = TestServer::start(cfg, Arc::new(EchoBackend::new())).await;
    let client = reqwest::Client::new();

    let r = client
        .post(server.url("/v1/transcriptions/raw?encoding=i16_le"))
        .body(vec![1u8; 2 << 20])
        .send()
        .await
        .unwrap();
    let (status, kind, message) = error_of(r).await;
    assert_eq!((status, kind.as_str()), (413, "limit_exceeded"));
    assert!(
        message.contains("max_body_mib is 1 MiB") && message.contains("2097152-byte"),
        "{message}"
    );
    assert_serves(&server, &client, None).await;

    // A chunked body declares no length: the limit applies while reading.
    let status_line = {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let addr = server.base.trim_start_matches("http://").to_string();
        let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = "POST /v1/transcriptions/raw?encoding=i16_le HTTP/1.1\r\nhost: x\r\n\
                    transfer-encoding: chunked\r\nconnection: close\r\n\r\n";
        socket.write_all(head.as_bytes()).await.unwrap();
        let chunk = [
            format!("{:x}\r\n", 64 << 10).into_bytes(),
            vec![0u8; 64 << 10],
            b"\r\n".to_vec(),
        ]
        .concat();
        // 24 chunks of 64 KiB = 1.5 MiB; the server may answer (and stop reading) before the end.
        for _ in 0..24 {
            if socket.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = socket.write_all(b"0\r\n\r\n").await;
        let mut answer = Vec::new();
        let _ = socket.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).to_string()
    };
    assert!(status_line.starts_with("HTTP/1.1 413"), "{status_line}");
    assert!(
        status_line.contains("max_body_mib is 1 MiB"),
        "{status_line}"
    );
    assert_serves(&server, &client, None).await;

    let s = samples(1_600, 2);
    let r = client
        .post(server.url("/transcribe"))
        .json(&batch_body(&[("a", &s), ("b", &s), ("c", &s)]))
        .send()
        .await
        .unwrap();
    let (status, _, message) = error_of(r).await;
    assert_eq!(status, 413);
    assert!(
        message.contains("max_inputs is 2") && message.contains("3 inputs"),
        "{message}"
    );
    assert_serves(&server, &client, None).await;

    let long = samples(16_000 * 3 / 2, 3);
    let r = client
        .post(server.url("/transcribe"))
        .json(&batch_body(&[("first", &long), ("second", &long)]))
        .send()
        .await
        .unwrap();
    let (status, _, message) = error_of(r).await;
    assert_eq!(status, 413);
    assert!(
        message.contains("max_audio_seconds")
            && message.contains("1.5 s of it taken by earlier inputs")
            && message.contains("second is longer than the 0.5 s allowed"),
        "{message}"
    );
    assert_serves(&server, &client, None).await;
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn full_queue_is_503_and_queued_work_still_completes() {
    let cfg = ServerConfig {
        max_queue: 1,
        ..Default::default()
    };
    let backend = Arc::new(EchoBackend::new());
    let mut entered = backend.notify_entries();
    backend.close(false);
    let server = TestServer::start(cfg, backend.clone()).await;
    let client = reqwest::Client::new();
    server.wait_ready(&client).await;

    let running = samples(1_600, 1);
    let queued = samples(3_200, 2);
    let first = transcribe(&client, &server, "running", &running);
    entered.recv().await.unwrap();
    let second = transcribe(&client, &server, "queued", &queued);
    server.wait_metric(&client, "dicta_queue_depth 1").await;

    let r = client
        .post(server.url("/transcribe"))
        .json(&batch_body(&[("refused", &samples(1_600, 3))]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["retry-after"], "1");
    let (status, kind, message) = error_of(r).await;
    assert_eq!((status, kind.as_str()), (503, "overloaded"));
    assert!(message.contains("max_queue is 1"), "{message}");

    backend.open();
    for (handle, audio) in [(first, &running), (second, &queued)] {
        let v: Value = handle.await.unwrap().json().await.unwrap();
        assert_eq!(v["results"][0]["text"], expected(audio, Task::Transcribe));
    }
    assert_serves(&server, &client, None).await;
    server
        .wait_metric(
            &client,
            r#"dicta_http_requests_total{route="/transcribe",status="503"} 1"#,
        )
        .await;
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn slow_requests_time_out_with_504() {
    let cfg = ServerConfig {
        request_timeout_s: 0.3,
        ..Default::default()
    };
    let backend = Arc::new(EchoBackend::new());
    backend.close(false);
    let server = TestServer::start(cfg, backend.clone()).await;
    let client = reqwest::Client::new();
    let r = client
        .post(server.url("/transcribe"))
        .json(&batch_body(&[("stuck", &samples(1_600, 1))]))
        .send()
        .await
        .unwrap();
    let (status, kind, message) = error_of(r).await;
    assert_eq!((status, kind.as_str()), (504, "timeout"));
    assert!(message.contains("request_timeout_s is 0.3"), "{message}");
    backend.open();
    assert_serves(&server, &client, None).await;
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn concurrent_clients_share_backend_calls_and_get_their_own_results() {
    let backend = Arc::new(EchoBackend::new());
    let mut entered = backend.notify_entries();
    backend.close(false);
    let server = TestServer::start(ServerConfig::default(), backend.clone()).await;
    let client = reqwest::Client::new();
    server.wait_ready(&client).await;

    // Hold the batcher on one call so the 8 clients below are all queued when it frees.
    let blocker = transcribe(&client, &server, "blocker", &samples(800, 0));
    entered.recv().await.unwrap();
    let audios: Vec<Vec<i16>> = (1..=8).map(|i| samples(1_600 * i, i as u32)).collect();
    // Every client uses the same input id: results must still go to the right request.
    let clients: Vec<_> = audios
        .iter()
        .map(|a| transcribe(&client, &server, "same-id", a))
        .collect();
    server.wait_metric(&client, "dicta_queue_depth 8").await;
    backend.open();

    let mut request_ids = std::collections::HashSet::new();
    for (handle, audio) in clients.into_iter().zip(&audios) {
        let v: Value = handle.await.unwrap().json().await.unwrap();
        assert_eq!(v["results"][0]["text"], expected(audio, Task::Transcribe));
        assert_eq!(v["results"][0]["id"], "same-id");
        assert_eq!(v["group_requests"], 8);
        assert_eq!(v["group_inputs"], 8);
        assert!(request_ids.insert(v["request_id"].as_str().unwrap().to_string()));
    }
    assert_eq!(blocker.await.unwrap().status(), 200);
    let calls = backend.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].len(), 8);
    server
        .wait_metric(&client, "dicta_batch_requests_sum 9.0")
        .await;
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_client_that_disconnects_has_its_work_dropped() {
    let backend = Arc::new(EchoBackend::new());
    let mut entered = backend.notify_entries();
    backend.close(false);
    let server = TestServer::start(ServerConfig::default(), backend.clone()).await;
    let client = reqwest::Client::new();
    server.wait_ready(&client).await;

    let blocker = transcribe(&client, &server, "blocker", &samples(800, 0));
    entered.recv().await.unwrap();
    // The leaver speaks HTTP by hand so that its disconnect is certain: it closes the socket.
    let leaver = {
        use tokio::io::AsyncWriteExt as _;
        let body = batch_body(&[("leaver", &samples(1_600, 1))]).to_string();
        let addr = server.base.trim_start_matches("http://").to_string();
        let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST /transcribe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        socket.write_all(head.as_bytes()).await.unwrap();
        socket.write_all(body.as_bytes()).await.unwrap();
        socket
    };
    // Admitted and done decoding: the request sits in the batcher's queue.
    server.wait_metric(&client, "dicta_queue_depth 1").await;
    server
        .wait_metric(&client, "dicta_decoding_requests 0")
        .await;
    drop(leaver);
    server
        .wait_metric(&client, "dicta_client_disconnects_total 1")
        .await;
    backend.open();

    assert_eq!(blocker.await.unwrap().status(), 200);
    assert_serves(&server, &client, None).await;
    server
        .wait_metric(&client, "dicta_abandoned_requests_total 1")
        .await;
    let ids: Vec<String> = backend
        .calls()
        .into_iter()
        .flatten()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, ["blocker", "ok"]);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_stops_accepting_and_finishes_in_flight_requests() {
    let backend = Arc::new(EchoBackend::new());
    let mut entered = backend.notify_entries();
    backend.close(false);
    let server = TestServer::start(ServerConfig::default(), backend.clone()).await;
    let client = reqwest::Client::new();
    server.wait_ready(&client).await;

    let audio = samples(4_800, 4);
    let in_flight = transcribe(&client, &server, "in-flight", &audio);
    entered.recv().await.unwrap();
    let addr = server.base.trim_start_matches("http://").to_string();
    let stopping = tokio::spawn(server.shutdown());
    // Wait until the listener is closed: new connections are refused.
    while tokio::net::TcpStream::connect(&addr).await.is_ok() {
        tokio::task::yield_now().await;
    }
    backend.open();
    let r = in_flight.await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["results"][0]["text"], expected(&audio, Task::Transcribe));
    stopping.await.unwrap().unwrap();
}
