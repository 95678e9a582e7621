//! The WebSocket protocol (`GET /v1/stream`) against an in-process server on port 0 with the
//! echo backend and a real WebSocket client (tokio-tungstenite): settings, partial and final
//! events, `end`/`done`, bad frames, auth, the stream limits, disconnects and shutdown.

mod common;

use std::sync::Arc;

use common::{expected, pcm_i16, samples, EchoBackend, TestServer};
use dicta_server::{ServerConfig, StreamOptions, Task};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(server: &TestServer, query: &str, key: Option<&str>) -> tungstenite::Result<Ws> {
    let url = format!(
        "{}/v1/stream{query}",
        server.base.replace("http://", "ws://")
    );
    let mut req = url.into_client_request().unwrap();
    if let Some(key) = key {
        req.headers_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
    }
    tokio_tungstenite::connect_async(req)
        .await
        .map(|(ws, _)| ws)
}

/// Connects and reads the `ready` message.
async fn open(server: &TestServer, query: &str) -> (Ws, Value) {
    let mut ws = connect(server, query, None).await.expect("connect");
    let ready = next_json(&mut ws).await;
    assert_eq!(ready["type"], "ready", "{ready}");
    (ws, ready)
}

/// The next text message as JSON (panics on anything else).
async fn next_json(ws: &mut Ws) -> Value {
    loop {
        match ws.next().await.expect("socket open").expect("no error") {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected a text message, got {other:?}"),
        }
    }
}

/// Every message up to and including `done`.
async fn until_done(ws: &mut Ws) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let v = next_json(ws).await;
        let done = v["type"] == "done";
        out.push(v);
        if done {
            return out;
        }
    }
}

/// The close frame's code, reading past any messages before it.
async fn close_code(ws: &mut Ws) -> u16 {
    while let Some(msg) = ws.next().await {
        if let Message::Close(frame) = msg.expect("no error") {
            return frame.map_or(1005, |f| u16::from(f.code));
        }
    }
    panic!("the socket ended without a close frame")
}

async fn send_pcm(ws: &mut Ws, audio: &[i16], frame: usize) {
    for block in audio.chunks(frame) {
        ws.send(Message::binary(pcm_i16(block))).await.unwrap();
    }
}

fn end() -> Message {
    Message::text(json!({"type": "end"}).to_string())
}

#[tokio::test]
async fn i16_frames_at_16k_reach_the_backend_exactly_with_partials_then_final_and_done() {
    let backend = Arc::new(EchoBackend::new());
    let server = TestServer::start(ServerConfig::default(), backend.clone()).await;
    let (mut ws, ready) = open(&server, "").await;
    assert_eq!(ready["encoding"], "i16_le");
    assert_eq!(ready["sample_rate"], 16_000);
    assert_eq!(ready["model"], "echo-test");

    let audio = samples(16_000, 3);
    // 10 frames of 100 ms: each feed answers one partial, in order.
    send_pcm(&mut ws, &audio, 1600).await;
    for i in 1..=10 {
        let v = next_json(&mut ws).await;
        assert_eq!(v["type"], "partial");
        assert_eq!(v["text"], format!("{}ms", i * 100));
    }
    ws.send(end()).await.unwrap();
    let tail = until_done(&mut ws).await;
    assert_eq!(tail.len(), 2, "{tail:?}");
    let fin = &tail[0];
    assert_eq!(fin["type"], "final");
    assert_eq!(fin["text"], expected(&audio, Task::Transcribe));
    assert_eq!(fin["start"], 0.0);
    assert_eq!(fin["end"], 1.0);
    assert_eq!(fin["words"][0]["end"], 1.0);

    // The socket stays open for a second utterance, which starts from scratch.
    let second = samples(8000, 4);
    send_pcm(&mut ws, &second, 8000).await;
    assert_eq!(next_json(&mut ws).await["text"], "500ms");
    ws.send(end()).await.unwrap();
    let tail = until_done(&mut ws).await;
    assert_eq!(tail[0]["text"], expected(&second, Task::Transcribe));
    // One backend session served both utterances.
    assert_eq!(backend.stream_options(), vec![StreamOptions::default()]);
    ws.close(None).await.unwrap();
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn config_sets_encoding_rate_and_language_and_audio_is_resampled() {
    let backend = Arc::new(EchoBackend::new());
    let server = TestServer::start(ServerConfig::default(), backend.clone()).await;
    let (mut ws, _) = open(&server, "").await;
    let config =
        json!({"type": "config", "encoding": "f32_le", "sample_rate": 48000, "language": "DE"});
    ws.send(Message::text(config.to_string())).await.unwrap();
    let ack = next_json(&mut ws).await;
    assert_eq!(
        ack,
        json!({"type": "config", "encoding": "f32_le", "sample_rate": 48000, "language": "de"})
    );

    // 0.75 s at 48 kHz in odd-sized frames.
    let audio: Vec<f32> = samples(36_000, 5)
        .iter()
        .map(|&s| f32::from(s) / 32768.0)
        .collect();
    for block in audio.chunks(4801) {
        let bytes: Vec<u8> = block.iter().flat_map(|s| s.to_le_bytes()).collect();
        ws.send(Message::binary(bytes)).await.unwrap();
    }
    ws.send(end()).await.unwrap();
    let msgs = until_done(&mut ws).await;
    let fin = &msgs[msgs.len() - 2];
    // What the backend got is exactly the one-shot 16 kHz resampling of the whole stream.
    let at_16k = dicta_audio::resample::resample_sinc(&audio, 48_000, 16_000).unwrap();
    assert_eq!(at_16k.len(), 12_000);
    assert_eq!(
        fin["text"],
        common::echo_backend::describe(&at_16k, Task::Transcribe)
    );
    assert_eq!(backend.stream_options()[0].language.as_deref(), Some("de"));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_language_the_backend_cannot_stream_in_is_refused_when_it_is_set() {
    let backend = Arc::new(EchoBackend::new());
    let server = TestServer::start(ServerConfig::default(), backend.clone()).await;
    // In the query string: 400 before the upgrade.
    match connect(&server, "?language=fr", None).await {
        Err(tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 400);
            let body: Value = serde_json::from_slice(resp.body().as_ref().unwrap()).unwrap();
            assert_eq!(body["error"]["type"], "invalid_input", "{body}");
            assert!(
                body["error"]["message"].as_str().unwrap().contains("fr"),
                "{body}"
            );
        }
        other => panic!("expected a 400, got {other:?}"),
    }
    // In a config message: an error event answers it at once, before any audio, and the
    // settings stay as they were.
    let (mut ws, _) = open(&server, "").await;
    let config = json!({"type": "config", "language": "fr"});
    ws.send(Message::text(config.to_string())).await.unwrap();
    let err = next_json(&mut ws).await;
    assert_eq!(err["type"], "error", "{err}");
    assert_eq!(err["error"]["type"], "invalid_input", "{err}");
    let config = json!({"type": "config", "language": "de"});
    ws.send(Message::text(config.to_string())).await.unwrap();
    assert_eq!(next_json(&mut ws).await["language"], "de");
    let audio = samples(16_000, 6);
    send_pcm(&mut ws, &audio, 1600).await;
    ws.send(end()).await.unwrap();
    let msgs = until_done(&mut ws).await;
    assert_eq!(
        msgs[msgs.len() - 2]["text"],
        expected(&audio, Task::Transcribe)
    );
    assert_eq!(backend.stream_options()[0].language.as_deref(), Some("de"));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn query_string_settings_apply_and_bad_ones_are_refused_before_the_upgrade() {
    let server = TestServer::start(ServerConfig::default(), Arc::new(EchoBackend::new())).await;
    let (_ws, ready) = open(&server, "?encoding=f32_le&sample_rate=8000").await;
    assert_eq!(ready["encoding"], "f32_le");
    assert_eq!(ready["sample_rate"], 8000);
    for bad in ["?encoding=mulaw", "?sample_rate=44101", "?rate=8000"] {
        match connect(&server, bad, None).await {
            Err(tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 400, "{bad}");
                let body: Value = serde_json::from_slice(resp.body().as_ref().unwrap()).unwrap();
                assert_eq!(body["error"]["type"], "invalid_input", "{bad}: {body}");
            }
            other => panic!("{bad}: expected a 400, got {other:?}"),
        }
    }
    // A plain GET (no upgrade) is told what the route is.
    let r = reqwest::get(server.url("/v1/stream")).await.unwrap();
    assert!(r.status().is_client_error());
    let (_, kind, message) = common::error_of(r).await;
    assert_eq!(kind, "upgrade_required");
    assert!(message.contains("WebSocket"), "{message}");
}

#[tokio::test]
async fn bad_frames_and_messages_are_answered_with_errors_and_the_session_goes_on() {
    let server = TestServer::start(ServerConfig::default(), Arc::new(EchoBackend::new())).await;
    let (mut ws, _) = open(&server, "").await;
    let good = samples(3200, 6);

    // Half a sample.
    ws.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    let e = next_json(&mut ws).await;
    assert_eq!(e["type"], "error");
    assert_eq!(e["error"]["type"], "corrupt_input", "{e}");
    // Not JSON, and an unknown message type.
    for text in ["hello", r#"{"type":"start"}"#] {
        ws.send(Message::text(text)).await.unwrap();
        let e = next_json(&mut ws).await;
        assert_eq!(e["error"]["type"], "invalid_input", "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("\"end\""));
    }
    send_pcm(&mut ws, &good, 3200).await;
    assert_eq!(next_json(&mut ws).await["type"], "partial");
    // Config in the middle of an utterance.
    let config = json!({"type": "config", "sample_rate": 8000});
    ws.send(Message::text(config.to_string())).await.unwrap();
    let e = next_json(&mut ws).await;
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("before the first audio"),
        "{e}"
    );
    // A block the backend refuses: its error, and the session keeps the audio it had.
    send_pcm(&mut ws, &[0; 1600], 1600).await;
    let e = next_json(&mut ws).await;
    assert_eq!(e["error"]["type"], "invalid_input", "{e}");
    ws.send(end()).await.unwrap();
    let msgs = until_done(&mut ws).await;
    assert_eq!(msgs[0]["type"], "final");
    assert_eq!(msgs[0]["text"], expected(&good, Task::Transcribe));
}

#[tokio::test]
async fn the_api_key_is_required_on_the_upgrade() {
    let cfg = ServerConfig {
        api_key: Some("sesame".into()),
        ..Default::default()
    };
    let server = TestServer::start(cfg, Arc::new(EchoBackend::new())).await;
    for key in [None, Some("wrong")] {
        match connect(&server, "", key).await {
            Err(tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 401);
                let body: Value = serde_json::from_slice(resp.body().as_ref().unwrap()).unwrap();
                assert_eq!(body["error"]["type"], "unauthorized");
            }
            other => panic!("expected 401, got {other:?}"),
        }
    }
    let mut ws = connect(&server, "", Some("sesame")).await.unwrap();
    assert_eq!(next_json(&mut ws).await["type"], "ready");
}

/// Browsers cannot set headers on a WebSocket: the key also rides as the subprotocol
/// `dicta.bearer.<key>` (the server then picks `dicta`) or as `?api_key=`; on no other route.
#[tokio::test]
async fn browsers_send_the_key_as_a_subprotocol_or_a_query_parameter() {
    let cfg = ServerConfig {
        api_key: Some("sesame".into()),
        ..Default::default()
    };
    let server = TestServer::start(cfg, Arc::new(EchoBackend::new())).await;
    let ws_url = |q: &str| format!("{}/v1/stream{q}", server.base.replace("http://", "ws://"));
    let with_protocols = |q: &str, protocols: &str| {
        let mut req = ws_url(q).into_client_request().unwrap();
        req.headers_mut()
            .insert("sec-websocket-protocol", protocols.parse().unwrap());
        req
    };
    let (mut ws, resp) =
        tokio_tungstenite::connect_async(with_protocols("", "dicta, dicta.bearer.sesame"))
            .await
            .expect("the subprotocol key is accepted");
    assert_eq!(resp.headers()["sec-websocket-protocol"], "dicta");
    assert_eq!(next_json(&mut ws).await["type"], "ready");
    match tokio_tungstenite::connect_async(with_protocols("", "dicta, dicta.bearer.wrong")).await {
        Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 401),
        other => panic!("expected 401, got {other:?}"),
    }
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url("?api_key=sesame&sample_rate=16000"))
        .await
        .expect("the query key is accepted");
    assert_eq!(next_json(&mut ws).await["type"], "ready");
    match tokio_tungstenite::connect_async(ws_url("?api_key=nope")).await {
        Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 401),
        other => panic!("expected 401, got {other:?}"),
    }
    // Only the stream takes it that way.
    let client = reqwest::Client::new();
    let r = client
        .get(server.url("/v1/models?api_key=sesame"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn a_full_server_refuses_the_upgrade_with_503_until_a_stream_closes() {
    let cfg = ServerConfig {
        max_streams: 1,
        ..Default::default()
    };
    let backend = Arc::new(EchoBackend::new());
    let server = TestServer::start(cfg, backend.clone()).await;
    let client = reqwest::Client::new();
    let (mut first, _) = open(&server, "").await;
    server.wait_metric(&client, "dicta_active_streams 1").await;
    match connect(&server, "", None).await {
        Err(tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 503);
            let body: Value = serde_json::from_slice(resp.body().as_ref().unwrap()).unwrap();
            assert_eq!(body["error"]["type"], "overloaded");
            assert!(body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("max_streams is 1"));
        }
        other => panic!("expected 503, got {other:?}"),
    }
    // A client that leaves (no `end`) frees its slot and drops its backend session.
    send_pcm(&mut first, &samples(1600, 1), 1600).await;
    assert_eq!(next_json(&mut first).await["type"], "partial");
    drop(first);
    server.wait_metric(&client, "dicta_active_streams 0").await;
    assert_eq!(backend.dropped_streams(), 1);
    let (_again, _) = open(&server, "").await;
    let metrics = client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("dicta_stream_audio_seconds_total 0.1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_idle_stream_is_closed_and_frees_its_slot_while_an_active_one_stays() {
    let cfg = ServerConfig {
        max_streams: 2,
        stream_idle_timeout_s: 0.6,
        ..Default::default()
    };
    let server = TestServer::start(cfg, Arc::new(EchoBackend::new())).await;
    let client = reqwest::Client::new();
    let (mut idle, _) = open(&server, "").await;
    let (mut busy, _) = open(&server, "").await;
    // The busy client sends a little audio every 0.2 s; the idle one has sent half an
    // utterance and then nothing.
    send_pcm(&mut idle, &samples(1600, 1), 1600).await;
    assert_eq!(next_json(&mut idle).await["type"], "partial");
    for _ in 0..8 {
        send_pcm(&mut busy, &samples(320, 2), 320).await;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let events = until_done(&mut idle).await;
    let error = events
        .iter()
        .find(|e| e["type"] == "error")
        .expect("an error event");
    assert_eq!(error["error"]["type"], "timeout", "{error}");
    assert!(
        events.iter().any(|e| e["type"] == "final"),
        "the utterance heard so far is finalised: {events:?}"
    );
    assert_eq!(close_code(&mut idle).await, 1008);
    server.wait_metric(&client, "dicta_active_streams 1").await;
    server
        .wait_metric(&client, "dicta_idle_streams_closed_total 1")
        .await;
    // The busy stream was never idle and still answers.
    busy.send(Message::text(r#"{"type":"end"}"#)).await.unwrap();
    let events = until_done(&mut busy).await;
    assert!(events.iter().all(|e| e["type"] != "error"), "{events:?}");
}

#[tokio::test]
async fn going_over_max_stream_seconds_ends_the_utterance_and_closes_with_1008() {
    let cfg = ServerConfig {
        max_stream_seconds: 1.0,
        ..Default::default()
    };
    let server = TestServer::start(cfg, Arc::new(EchoBackend::new())).await;
    let (mut ws, ready) = open(&server, "").await;
    assert_eq!(ready["max_stream_seconds"], 1.0);
    let audio = samples(16_000, 2);
    send_pcm(&mut ws, &audio, 8000).await;
    assert_eq!(next_json(&mut ws).await["text"], "500ms");
    assert_eq!(next_json(&mut ws).await["text"], "1000ms");
    // One more sample is over the limit: error, the final of what was accepted, done, close.
    send_pcm(&mut ws, &[5], 1).await;
    let e = next_json(&mut ws).await;
    assert_eq!(e["error"]["type"], "limit_exceeded");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_stream_seconds"));
    let msgs = until_done(&mut ws).await;
    assert_eq!(msgs[0]["text"], expected(&audio, Task::Transcribe));
    assert_eq!(close_code(&mut ws).await, 1008);
}

#[tokio::test]
async fn a_backend_without_streaming_answers_501() {
    let server =
        TestServer::start(ServerConfig::default(), Arc::new(EchoBackend::batch_only())).await;
    match connect(&server, "", None).await {
        Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 501),
        other => panic!("expected 501, got {other:?}"),
    }
}

#[tokio::test]
async fn shutdown_ends_open_streams_with_their_final_events_and_1001() {
    let server = TestServer::start(ServerConfig::default(), Arc::new(EchoBackend::new())).await;
    let (mut ws, _) = open(&server, "").await;
    let audio = samples(4800, 9);
    send_pcm(&mut ws, &audio, 4800).await;
    assert_eq!(next_json(&mut ws).await["type"], "partial");
    let stopped = tokio::spawn(server.shutdown());
    let msgs = until_done(&mut ws).await;
    assert_eq!(msgs[0]["text"], expected(&audio, Task::Transcribe));
    assert_eq!(close_code(&mut ws).await, 1001);
    drop(ws);
    stopped.await.unwrap().unwrap();
}

#[tokio::test]
async fn pings_are_answered_and_messages_queued_while_the_model_runs() {
    let backend = Arc::new(EchoBackend::new());
    let server = TestServer::start(ServerConfig::default(), backend.clone()).await;
    let (mut ws, _) = open(&server, "").await;
    let audio = samples(3200, 7);
    // The first feed is held in the backend; a client's keepalive ping must still be answered
    // (a client streaming faster than real time would otherwise time the server out).
    backend.close(false);
    send_pcm(&mut ws, &audio[..1600], 1600).await;
    ws.send(Message::Ping(b"alive?".to_vec().into()))
        .await
        .unwrap();
    send_pcm(&mut ws, &audio[1600..], 1600).await;
    ws.send(end()).await.unwrap();
    match ws.next().await.unwrap().unwrap() {
        Message::Pong(p) => assert_eq!(p.as_ref(), b"alive?"),
        other => panic!("expected the pong first, got {other:?}"),
    }
    backend.open();
    // The messages read meanwhile are handled in order.
    assert_eq!(next_json(&mut ws).await["text"], "100ms");
    assert_eq!(next_json(&mut ws).await["text"], "200ms");
    let msgs = until_done(&mut ws).await;
    assert_eq!(msgs[0]["text"], expected(&audio, Task::Transcribe));
}

/// A message over the 4 MiB limit closes the stream with 1009 ("message too big"), not a
/// silent drop.
#[tokio::test]
async fn an_over_size_message_is_answered_with_close_1009() {
    let server = TestServer::start(ServerConfig::default(), Arc::new(EchoBackend::new())).await;
    let (mut ws, _) = open(&server, "").await;
    ws.send(Message::binary(vec![0u8; (4 << 20) + 2]))
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws).await, 1009);
}

/// Sends `audio` in 100 ms frames at real time (a live microphone).
async fn send_real_time(ws: &mut Ws, audio: &[i16]) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    for block in audio.chunks(1600) {
        tick.tick().await;
        ws.send(Message::binary(pcm_i16(block))).await.unwrap();
    }
}

/// A stream whose audio waits on a stalled model falls behind real time: while it is behind, a
/// new stream is refused with 503 (capacity, not sockets), pings are still answered, and once
/// it is further behind than `stream_max_lag_s` it is ended with `overloaded`, the finals of
/// what was transcribed, `done` and close 1013 (so that the other streams catch up) — not left
/// to time out.
#[tokio::test]
async fn a_stream_behind_real_time_blocks_admission_and_is_ended_past_the_max_lag() {
    let cfg = ServerConfig {
        stream_admit_lag_s: 0.5,
        stream_max_lag_s: 1.5,
        ..Default::default()
    };
    let backend = Arc::new(EchoBackend::new());
    let server = TestServer::start(cfg, backend.clone()).await;
    // Another stream is open (the only stream is never shed: that would help nobody).
    let (_other, _) = open(&server, "").await;
    let (mut ws, _) = open(&server, "").await;
    let audio = samples(16_000 * 3, 11);
    // The first frame reaches the model before it stalls.
    send_pcm(&mut ws, &audio[..1600], 1600).await;
    assert_eq!(next_json(&mut ws).await["text"], "100ms");
    backend.close(false);
    send_real_time(&mut ws, &audio[1600..16_000 * 2]).await;
    ws.send(Message::Ping(b"still there?".to_vec().into()))
        .await
        .unwrap();
    match ws.next().await.unwrap().unwrap() {
        Message::Pong(p) => assert_eq!(p.as_ref(), b"still there?"),
        other => panic!("expected the pong, got {other:?}"),
    }
    match connect(&server, "", None).await {
        Err(tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 503);
            assert_eq!(resp.headers()["retry-after"], "1");
            let body: Value = serde_json::from_slice(resp.body().as_ref().unwrap()).unwrap();
            assert_eq!(body["error"]["type"], "overloaded");
            let why = body["error"]["message"].as_str().unwrap();
            assert!(why.contains("behind real time"), "{why}");
        }
        other => panic!("expected 503, got {other:?}"),
    }
    backend.open();
    // The frame held in the model comes back, then the stream is over 1.5 s behind.
    assert_eq!(next_json(&mut ws).await["text"], "200ms");
    let error = next_json(&mut ws).await;
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["error"]["type"], "overloaded", "{error}");
    let msgs = until_done(&mut ws).await;
    // The final covers exactly the audio that was transcribed before the stream was ended.
    assert_eq!(msgs[0]["type"], "final", "{msgs:?}");
    assert_eq!(msgs[0]["text"], expected(&audio[..3200], Task::Transcribe));
    assert_eq!(close_code(&mut ws).await, 1013);
    let client = reqwest::Client::new();
    server
        .wait_metric(&client, "dicta_streams_shed_total 1")
        .await;
    server
        .wait_metric(&client, "dicta_streams_refused_behind_total 1")
        .await;
    // Nothing is behind any more: streams are admitted again.
    let (_again, _) = open(&server, "").await;
}

/// A stream that falls behind but stays under `stream_max_lag_s` is told so with `lag` events
/// and keeps every frame; a client sending faster than real time is not behind.
#[tokio::test]
async fn a_lagging_stream_gets_lag_events_and_loses_nothing() {
    let cfg = ServerConfig {
        stream_admit_lag_s: 0.3,
        stream_max_lag_s: 60.0,
        ..Default::default()
    };
    let backend = Arc::new(EchoBackend::new());
    let server = TestServer::start(cfg, backend.clone()).await;
    let audio = samples(16_000 * 2, 12);

    // Ten seconds of audio at once, faster than real time, transcribed at once: no lag.
    let (mut fast, _) = open(&server, "").await;
    send_pcm(&mut fast, &samples(16_000 * 10, 13), 1600).await;
    fast.send(end()).await.unwrap();
    let msgs = until_done(&mut fast).await;
    assert!(msgs.iter().all(|m| m["type"] != "lag"), "{msgs:?}");

    let (mut ws, _) = open(&server, "").await;
    backend.close(false);
    send_real_time(&mut ws, &audio).await;
    backend.open();
    ws.send(end()).await.unwrap();
    let msgs = until_done(&mut ws).await;
    let lags: Vec<&Value> = msgs.iter().filter(|m| m["type"] == "lag").collect();
    assert!(!lags.is_empty(), "{msgs:?}");
    let seconds = lags[0]["seconds"].as_f64().unwrap();
    assert!(seconds > 0.3 && seconds < 5.0, "{}", lags[0]);
    assert_eq!(lags[0]["max_lag_seconds"], 60.0);
    let last = msgs.iter().rfind(|m| m["type"] == "final").unwrap();
    assert_eq!(last["text"], expected(&audio, Task::Transcribe));
}

/// A client that closes the socket gets the server's close frame back (a clean close
/// handshake; without it standard clients report 1006, an abnormal closure).
#[tokio::test]
async fn a_client_close_is_answered_with_a_close_frame() {
    let server = TestServer::start(ServerConfig::default(), Arc::new(EchoBackend::new())).await;
    let (mut ws, _) = open(&server, "").await;
    send_pcm(&mut ws, &samples(1600, 3), 1600).await;
    assert_eq!(next_json(&mut ws).await["type"], "partial");
    ws.send(Message::Close(None)).await.unwrap();
    let reply = tokio::time::timeout(std::time::Duration::from_secs(5), ws.next())
        .await
        .expect("an answer in time");
    assert!(matches!(reply, Some(Ok(Message::Close(_)))), "{reply:?}");
}
