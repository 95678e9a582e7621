//! HTTP API behaviour against an in-process server on port 0 with the echo test backend:
//! response shapes, decoding, result routing, readiness and auth-free health.

mod common;

use std::sync::Arc;

use common::{batch_body, error_of, expected, pcm_i16, samples, wav, EchoBackend, TestServer};
use dicta_server::{ServerConfig, Task};
use reqwest::multipart::{Form, Part};
use serde_json::Value;

fn form(file: Vec<u8>, fields: &[(&str, &str)]) -> Form {
    let mut f = Form::new()
        .part("file", Part::bytes(file).file_name("clip.wav"))
        .text("model", "whisper-1");
    for (k, v) in fields {
        f = f.text(k.to_string(), v.to_string());
    }
    f
}

#[tokio::test]
async fn openai_route_answers_every_response_format() {
    let server = TestServer::start(ServerConfig::default(), Arc::new(EchoBackend::new())).await;
    let client = reqwest::Client::new();
    let audio = samples(24_000, 1);
    let want = expected(&audio, Task::Transcribe);
    let url = server.url("/v1/audio/transcriptions");

    let r = client
        .post(&url)
        .multipart(form(wav(&audio, 16_000), &[]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().contains_key("x-request-id"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v, serde_json::json!({ "text": want }));

    let fmt = |f: &'static str| form(wav(&audio, 16_000), &[("response_format", f)]);
    let text = client
        .post(&url)
        .multipart(fmt("text"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text, format!("{want}\n"));
    let srt = client
        .post(&url)
        .multipart(fmt("srt"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(srt, format!("1\n00:00:00,000 --> 00:00:01,500\n{want}\n\n"));
    let vtt = client
        .post(&url)
        .multipart(fmt("vtt"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        vtt,
        format!("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\n{want}\n\n")
    );

    let verbose = form(
        wav(&audio, 16_000),
        &[
            ("response_format", "verbose_json"),
            ("timestamp_granularities[]", "word"),
            ("timestamp_granularities[]", "segment"),
            ("language", "de"),
        ],
    );
    let v: Value = client
        .post(&url)
        .multipart(verbose)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["task"], "transcribe");
    assert_eq!(v["language"], "german");
    assert_eq!(v["duration"], 1.5);
    assert_eq!(v["text"], want);
    assert_eq!(v["segments"][0]["text"], want);
    assert_eq!(v["segments"][0]["end"], 1.5);
    let words: Vec<&str> = v["words"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["word"].as_str().unwrap())
        .collect();
    assert_eq!(words.join(" "), want);

    let bad = client
        .post(&url)
        .multipart(fmt("xml"))
        .send()
        .await
        .unwrap();
    let (status, kind, message) = error_of(bad).await;
    assert_eq!((status, kind.as_str()), (400, "invalid_input"));
    assert!(message.contains("\"xml\""));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn resampled_and_raw_inputs_arrive_at_16k() {
    let server = TestServer::start(ServerConfig::default(), Arc::new(EchoBackend::new())).await;
    let client = reqwest::Client::new();
    // 0.75 s at 8 kHz becomes 12000 samples at 16 kHz.
    let r = client
        .post(server.url("/v1/audio/transcriptions"))
        .multipart(form(wav(&samples(6_000, 2), 8_000), &[]))
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert!(
        v["text"].as_str().unwrap().starts_with("transcribe 750ms "),
        "{v}"
    );

    let audio = samples(8_000, 3);
    let r = client
        .post(server.url("/v1/transcriptions/raw?encoding=i16_le&sample_rate=16000&id=mic"))
        .body(pcm_i16(&audio))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["results"][0]["id"], "mic");
    assert_eq!(v["results"][0]["text"], expected(&audio, Task::Transcribe));
    assert_eq!(v["model"], "echo-test");

    let floats: Vec<u8> = audio
        .iter()
        .flat_map(|&s| (f32::from(s) / 32768.0).to_le_bytes())
        .collect();
    let v: Value = client
        .post(server.url("/v1/transcriptions/raw?encoding=f32_le"))
        .body(floats)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["results"][0]["text"], expected(&audio, Task::Transcribe));

    // An odd number of bytes is not whole i16 samples.
    let r = client
        .post(server.url("/v1/transcriptions/raw?encoding=i16_le"))
        .body(vec![1u8, 2, 3])
        .send()
        .await
        .unwrap();
    let (status, kind, _) = error_of(r).await;
    assert_eq!((status, kind.as_str()), (400, "corrupt_input"));
    let r = client
        .post(server.url("/v1/transcriptions/raw?encoding=u8"))
        .body(vec![1u8, 2])
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(r).await.0, 400);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn batch_results_keep_input_order_with_per_input_errors() {
    let server = TestServer::start(ServerConfig::default(), Arc::new(EchoBackend::new())).await;
    let client = reqwest::Client::new();
    let a = samples(16_000, 4);
    let b = samples(4_000, 5);
    let silence = vec![0i16; 1_600];
    let mut body = batch_body(&[("a", &a), ("dup", &b), ("quiet", &silence), ("dup", &a)]);
    body["parameters"] = serde_json::json!({ "language": "fr", "word_timestamps": true });
    let v: Value = client
        .post(server.url("/transcribe"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    assert_eq!(results[0]["text"], expected(&a, Task::Transcribe));
    assert_eq!(results[1]["text"], expected(&b, Task::Transcribe));
    assert_eq!(results[1]["id"], "dup");
    assert_eq!(results[2]["id"], "quiet");
    assert_eq!(results[2]["error"]["type"], "invalid_input");
    assert_eq!(results[3]["text"], expected(&a, Task::Transcribe));
    assert_eq!(results[0]["language"], "fr");
    assert!(!results[0]["segments"][0]["words"]
        .as_array()
        .unwrap()
        .is_empty());
    assert_eq!(v["group_inputs"], 4);
    assert_eq!(v["group"]["inputs"], 4);
    assert!(v["queue_seconds"].as_f64().unwrap() >= 0.0);
    assert!(v["request_seconds"].as_f64().unwrap() >= v["queue_seconds"].as_f64().unwrap());
    assert_eq!(v["request_id"].as_str().unwrap().len(), 36);

    // Undecodable inputs fail alone, as in the CLI: garbage, bad base64 and an empty file
    // each get their error in place; the good inputs around them are still transcribed.
    let mut body = batch_body(&[("good", &a), ("good2", &b)]);
    let inputs = body["inputs"].as_array_mut().unwrap();
    inputs.insert(
        1,
        serde_json::json!({"id": "junk", "audio_base64": "bm90IGF1ZGlv"}),
    );
    inputs.insert(2, serde_json::json!({"id": "b64", "audio_base64": "!!!"}));
    inputs.push(serde_json::json!({"id": "empty", "audio_base64": ""}));
    let r = client
        .post(server.url("/transcribe"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let results = v["results"].as_array().unwrap();
    let ids: Vec<&str> = results.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["good", "junk", "b64", "good2", "empty"]);
    assert_eq!(results[0]["text"], expected(&a, Task::Transcribe));
    assert_eq!(results[3]["text"], expected(&b, Task::Transcribe));
    assert_eq!(results[1]["error"]["type"], "unsupported_format", "{v}");
    assert_eq!(results[2]["error"]["type"], "invalid_input", "{v}");
    assert_eq!(results[4]["error"]["type"], "empty_input", "{v}");
    assert_eq!(
        v["group_inputs"], 2,
        "only the readable inputs reach the backend"
    );

    // Malformed JSON and unknown parameters are refused with 400.
    let r = client
        .post(server.url("/transcribe"))
        .header("content-type", "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(r).await.0, 400);
    let r = client
        .post(server.url("/transcribe"))
        .json(&serde_json::json!({"inputs": [], "parameters": {"beams": 3}}))
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(r).await.0, 400);
    let r = client
        .post(server.url("/transcribe"))
        .json(&serde_json::json!({"inputs": []}))
        .send()
        .await
        .unwrap();
    let (status, _, message) = error_of(r).await;
    assert_eq!(status, 400);
    assert!(message.contains("no inputs"));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn translation_needs_a_multilingual_backend() {
    let audio = samples(3_200, 6);
    let client = reqwest::Client::new();
    let mono = TestServer::start(ServerConfig::default(), Arc::new(EchoBackend::new())).await;
    let r = client
        .post(mono.url("/v1/audio/translations"))
        .multipart(form(wav(&audio, 16_000), &[]))
        .send()
        .await
        .unwrap();
    let (status, _, message) = error_of(r).await;
    assert_eq!(status, 400);
    assert!(message.contains("cannot translate"));
    mono.shutdown().await.unwrap();

    let multi = TestServer::start(
        ServerConfig::default(),
        Arc::new(EchoBackend::multilingual()),
    )
    .await;
    let v: Value = client
        .post(multi.url("/v1/audio/translations"))
        .multipart(form(
            wav(&audio, 16_000),
            &[("response_format", "verbose_json")],
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["task"], "translate");
    assert_eq!(v["text"], expected(&audio, Task::Translate));
    multi.shutdown().await.unwrap();
}

#[tokio::test]
async fn readiness_follows_warm_up_and_unknown_routes_answer_json() {
    let backend = Arc::new(EchoBackend::new());
    backend.close(true);
    let server = TestServer::start(ServerConfig::default(), backend.clone()).await;
    let client = reqwest::Client::new();
    assert_eq!(
        client
            .get(server.url("/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let (status, kind, _) = error_of(client.get(server.url("/readyz")).send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (503, "not_ready"));
    backend.open();
    server.wait_ready(&client).await;
    let v: Value = client
        .get(server.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["data"][0]["id"], "echo-test");

    let (status, kind, _) = error_of(client.get(server.url("/nope")).send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (404, "not_found"));
    let (status, kind, _) =
        error_of(client.get(server.url("/transcribe")).send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (405, "method_not_allowed"));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn failed_warm_up_stops_the_server_with_its_error() {
    let server = TestServer::start(ServerConfig::default(), Arc::new(EchoBackend::broken())).await;
    let e = server.finished().await.unwrap_err();
    assert_eq!(e.kind, dicta_core::ErrorKind::ModelLoad);
    assert!(e.message.contains("warm-up refused on purpose"));
}
