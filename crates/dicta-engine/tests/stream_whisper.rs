//! Whisper streaming sessions (LocalAgreement-2) on Whisper tiny.en and real speech.
//!
//! The model: $DICTA_TEST_MODEL_DIR (a missing model there is a failure) or
//! /work/models/tiny.en-ct2; without either these tests skip with a note.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use dicta_engine::stream::{
    Event, EventKind, SessionOptions, StreamConfig, StreamEngine, WorkerConfig,
};
use dicta_engine::whisper::{DecodeOptions, LongFormMode, WhisperTranscriber};
use dicta_models::whisper::Whisper;

mod whisper_common;

use whisper_common::wer;

fn load_model() -> Option<Arc<Whisper>> {
    whisper_common::load_model().map(Arc::new)
}

fn speech(rel: &str) -> Vec<f32> {
    whisper_common::load_wav(rel)
}

const JFK: &str = "openai_whisper/jfk.16k.wav";
const JFK_TEXT: &str = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.";

fn engine(model: &Arc<Whisper>, max_batch: usize, max_wait_ms: u64, step: f32) -> StreamEngine {
    let cfg = StreamConfig {
        worker: WorkerConfig {
            max_batch,
            max_wait: Duration::from_millis(max_wait_ms),
        },
        step_seconds: Some(step),
        whisper_trim_seconds: 10.0,
        ..StreamConfig::default()
    };
    StreamEngine::whisper(Arc::clone(model), DecodeOptions::greedy(), cfg).unwrap()
}

fn stream(e: &StreamEngine, audio: &[f32], block: usize) -> Vec<Event> {
    let mut s = e.open_session(SessionOptions::default()).unwrap();
    let mut ev = Vec::new();
    for b in audio.chunks(block) {
        ev.extend(s.feed(b).unwrap());
    }
    ev.extend(s.end().unwrap());
    ev
}

fn finals(events: &[Event]) -> String {
    events
        .iter()
        .filter(|e| e.kind == EventKind::Final)
        .map(|e| e.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn jfk_streams_to_the_reference_and_block_size_never_changes_it() {
    let Some(model) = load_model() else { return };
    let e = engine(&model, 4, 5, 1.0);
    let audio = speech(JFK);
    let small = stream(&e, &audio, 100);
    let text = finals(&small);
    let offline = WhisperTranscriber::new(&model)
        .unwrap()
        .transcribe(
            &[&audio],
            &DecodeOptions::greedy(),
            LongFormMode::Sequential,
            1,
        )
        .unwrap()
        .transcripts
        .remove(0)
        .unwrap()
        .text;
    eprintln!("streamed: {text}\noffline:  {offline}");
    assert!(wer(JFK_TEXT, &text) <= 0.15, "streamed {text:?}");
    assert!(
        wer(&offline, &text) <= 0.15,
        "streamed {text:?} vs offline {offline:?}"
    );
    // Words are confirmed before the end: several finals, partials in between, times increase.
    let f: Vec<&Event> = small
        .iter()
        .filter(|e| e.kind == EventKind::Final)
        .collect();
    assert!(f.len() >= 3, "finals {f:?}");
    assert!(small.iter().any(|e| e.kind == EventKind::Partial));
    assert!(f.windows(2).all(|w| w[0].end <= w[1].start + 0.5));
    let large = stream(&e, &audio, 100_000);
    assert_eq!(
        large, small,
        "100-sample and 100000-sample blocks must give the same events"
    );
}

#[test]
fn transcripts_are_the_same_alone_or_batched() {
    let Some(model) = load_model() else { return };
    let audios = [
        speech(JFK),
        speech("faster_whisper/stereo_diarization.ch0.16k.wav"),
    ];
    let solo = engine(&model, 1, 0, 1.0);
    let alone: Vec<String> = audios
        .iter()
        .map(|a| finals(&stream(&solo, a, 1600)))
        .collect();
    let shared = engine(&model, 2, 2000, 1.0);
    let barrier = Barrier::new(audios.len());
    let together: Vec<String> = std::thread::scope(|scope| {
        let hs: Vec<_> = audios
            .iter()
            .map(|a| {
                let (barrier, shared) = (&barrier, &shared);
                scope.spawn(move || {
                    let mut s = shared.open_session(SessionOptions::default()).unwrap();
                    barrier.wait();
                    let mut ev = Vec::new();
                    for b in a.chunks(1600) {
                        ev.extend(s.feed(b).unwrap());
                    }
                    ev.extend(s.end().unwrap());
                    finals(&ev)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let stats = shared.stats();
    assert!(stats.batch_sizes.contains(&2), "{:?}", stats.batch_sizes);
    assert_eq!(together, alone);
}

#[tokio::test(flavor = "current_thread")]
async fn async_equals_sync() {
    let Some(model) = load_model() else { return };
    let e = engine(&model, 4, 5, 1.0);
    let audio = speech("faster_whisper/stereo_diarization.ch0.16k.wav");
    let sync = stream(&e, &audio, 4000);
    let mut s = e.open_session(SessionOptions::default()).unwrap();
    let mut ev = Vec::new();
    for b in audio.chunks(4000) {
        ev.extend(s.feed_async(b.to_vec()).await.unwrap());
    }
    ev.extend(s.end_async().await.unwrap());
    assert_eq!(ev, sync);
}

#[test]
fn long_streams_keep_the_buffer_bounded() {
    let Some(model) = load_model() else { return };
    let e = engine(&model, 4, 5, 2.0);
    let g = e.whisper_geometry().unwrap();
    let jfk = speech(JFK);
    let audio: Vec<f32> = jfk.iter().chain(&jfk).chain(&jfk).copied().collect();
    let mut s = e.open_session(SessionOptions::default()).unwrap();
    let mut ev = Vec::new();
    let mut most = 0;
    for b in audio.chunks(16_000) {
        ev.extend(s.feed(b).unwrap());
        most = most.max(s.buffered_samples());
    }
    ev.extend(s.end().unwrap());
    let text = finals(&ev);
    eprintln!("33 s stream: {text}");
    assert!(most <= g.max_buffer, "buffer grew to {most} samples");
    assert!(
        most < audio.len() / 2,
        "the buffer must be trimmed (held {most})"
    );
    let reference = [JFK_TEXT; 3].join(" ");
    assert!(wer(&reference, &text) <= 0.25, "{text:?}");
    // Nothing is repeated or lost at the trims: every final starts after the previous one.
    let f: Vec<&Event> = ev.iter().filter(|e| e.kind == EventKind::Final).collect();
    assert!(f.windows(2).all(|w| w[0].end <= w[1].start + 0.5), "{f:?}");
}

#[test]
fn end_without_new_audio_decodes_nothing() {
    let Some(model) = load_model() else { return };
    let e = engine(&model, 4, 5, 1.0);
    let audio = speech(JFK);
    let mut s = e.open_session(SessionOptions::default()).unwrap();
    s.feed(&audio[..48_000]).unwrap();
    let calls = e.stats().calls;
    assert_eq!(calls, 3);
    let ev = s.end().unwrap();
    assert_eq!(
        e.stats().calls,
        calls,
        "3 whole steps fed: nothing new to decode at end()"
    );
    assert!(ev.iter().all(|e| e.kind == EventKind::Final));
    assert!(s.end().unwrap().is_empty());
    assert_eq!(e.stats().calls, calls);
}

/// Rough capacity numbers (not a test of speed: run with `--ignored --nocapture`): the audio time
/// of the first partial, and how many 1 s-step sessions one batched call per step sustains.
#[test]
#[ignore]
fn measure_latency_and_capacity() {
    use dicta_engine::stream::{BufferDecode, StreamModel, WhisperChunkModel};
    use std::time::Instant;
    let Some(model) = load_model() else { return };
    let e = engine(&model, 8, 5, 1.0);
    let audio = speech(JFK);
    let mut s = e.open_session(SessionOptions::default()).unwrap();
    let t0 = Instant::now();
    for (i, b) in audio.chunks(1600).enumerate() {
        let ev = s.feed(b).unwrap();
        if ev.iter().any(|e| e.kind == EventKind::Partial) {
            eprintln!(
                "first partial after {:.1} s of audio, {:.2} s wall since the first block",
                (i + 1) as f64 * 0.1,
                t0.elapsed().as_secs_f64()
            );
            break;
        }
    }
    let m = WhisperChunkModel::new(Arc::clone(&model), DecodeOptions::greedy()).unwrap();
    let buf = BufferDecode {
        audio: audio[..8 * 16_000].to_vec(),
        draft: Vec::new(),
        options: Default::default(),
    };
    for n in [1usize, 4, 8] {
        let reqs = vec![buf.clone(); n];
        let t = Instant::now();
        let out = m.forward_chunks(&reqs);
        assert!(out.iter().all(|r| r.is_ok()));
        let secs = t.elapsed().as_secs_f64();
        eprintln!(
            "batch {n}: {secs:.2} s per call of 8 s buffers → {:.1} sessions at a 1 s step",
            n as f64 / secs
        );
    }
}

/// A session's own prompt and hotwords ([`SessionOptions::decode`]) reach its decodes: each
/// buffer decodes as offline transcription with those options would, whether it shares a batch
/// with sessions holding other options or runs alone, and each option changes the text.
#[test]
fn session_options_decode_like_offline_alone_or_batched() {
    use dicta_engine::stream::{BufferDecode, StreamModel, WhisperChunkModel};
    use dicta_engine::whisper::{FinalWindow, InputOptions};
    let Some(model) = load_model() else { return };
    let audio = speech(JFK);
    let variants = [
        InputOptions::default(),
        InputOptions {
            initial_prompt: Some("HELLO. THIS IS ALL IN CAPITALS.".into()),
            ..Default::default()
        },
        InputOptions {
            hotwords: Some("Kennedy, Americans!".into()),
            ..Default::default()
        },
        InputOptions {
            language: Some("en".into()),
            initial_prompt: Some("um, uh, like, you know".into()),
            ..Default::default()
        },
    ];
    let m = WhisperChunkModel::new(Arc::clone(&model), DecodeOptions::greedy()).unwrap();
    let reqs: Vec<BufferDecode> = variants
        .iter()
        .map(|o| BufferDecode {
            audio: audio.clone(),
            draft: Vec::new(),
            options: Arc::new(o.clone()),
        })
        .collect();
    let text = |t: &dicta_core::Transcript| t.text.clone();
    let together: Vec<String> = m
        .forward_chunks(&reqs)
        .iter()
        .map(|r| text(r.as_ref().unwrap()))
        .collect();
    let transcriber = WhisperTranscriber::new(&model).unwrap();
    for (i, (o, req)) in variants.iter().zip(&reqs).enumerate() {
        let alone = m.forward_chunks(std::slice::from_ref(req));
        assert_eq!(text(alone[0].as_ref().unwrap()), together[i], "variant {i}");
        let opts = DecodeOptions {
            final_window: FinalWindow::Seek,
            ..o.apply(&DecodeOptions::greedy())
        };
        let offline = transcriber
            .transcribe(&[audio.as_slice()], &opts, LongFormMode::Sequential, 1)
            .unwrap();
        let offline = text(offline.transcripts[0].as_ref().unwrap());
        assert_eq!(offline, together[i], "variant {i} against offline");
    }
    for i in 0..together.len() {
        for j in i + 1..together.len() {
            assert_ne!(
                together[i], together[j],
                "variants {i} and {j} decode alike"
            );
        }
    }
}

/// A session's options change what it streams, and options the model cannot honour are
/// refused when the session opens.
#[test]
fn session_options_change_the_stream_and_are_checked() {
    use dicta_engine::whisper::InputOptions;
    let Some(model) = load_model() else { return };
    let e = engine(&model, 4, 5, 1.0);
    let audio = speech(JFK);
    let run = |decode: InputOptions| {
        let mut s = e
            .open_session(SessionOptions {
                decode,
                ..Default::default()
            })
            .unwrap();
        let mut ev = Vec::new();
        for b in audio.chunks(16_000) {
            ev.extend(s.feed(b).unwrap());
        }
        ev.extend(s.end().unwrap());
        finals(&ev)
    };
    let plain = run(InputOptions::default());
    let prompted = run(InputOptions {
        initial_prompt: Some("HELLO. THIS IS ALL IN CAPITALS.".into()),
        ..Default::default()
    });
    assert_eq!(plain, finals(&stream(&e, &audio, 16_000)));
    assert_ne!(plain, prompted, "the prompt changed nothing: {plain:?}");
    let bad = e.open_session(SessionOptions {
        decode: InputOptions {
            language: Some("de".into()),
            ..Default::default()
        },
        ..Default::default()
    });
    let Err(err) = bad else {
        panic!("an English-only model accepted German")
    };
    assert_eq!(err.kind, dicta_core::ErrorKind::InvalidInput, "{err}");
    assert!(err.message.contains("English-only"), "{err}");
    let translate = e.open_session(SessionOptions {
        decode: InputOptions {
            task: Some(dicta_engine::whisper::Task::Translate),
            ..Default::default()
        },
        ..Default::default()
    });
    let Err(err) = translate else {
        panic!("an English-only model accepted translation")
    };
    assert!(err.message.contains("translate"), "{err}");
    // The refusals leave no session counted open.
    assert_eq!(e.open_sessions(), 0);
}
