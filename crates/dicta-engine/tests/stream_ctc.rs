//! CTC streaming sessions on the tiny random-weight wav2vec2 fixture (layer-norm variant: its
//! attention masks make a batched row equal to the row alone) fed real speech.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use candle_core::Device;
use dicta_core::{ErrorKind, Result};
use dicta_decode::{greedy_decode, LogProbs, Vocabulary};
use dicta_engine::stream::{
    Chunk, ChunkLogProbs, Chunker, CtcChunkModel, CtcStreamDecoder, EndpointOptions, Event,
    EventKind, SessionOptions, StreamConfig, StreamEngine, StreamModel, WorkerConfig,
};
use dicta_models::ctc::{load_ctc_model, CtcModel};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dicta-models/tests/fixtures/wav2vec2/layer")
}

fn model() -> Arc<dyn CtcModel> {
    Arc::from(load_ctc_model(&fixture(), &Device::Cpu).expect("tiny wav2vec2 fixture"))
}

fn speech(name: &str) -> Vec<f32> {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data")).join(name);
    dicta_audio::decode::load_path(&p).expect("shared speech data")
}

fn jfk() -> Vec<f32> {
    speech("openai_whisper/jfk.16k.wav")
}

fn config(max_batch: usize, max_wait_ms: u64) -> StreamConfig {
    StreamConfig {
        worker: WorkerConfig {
            max_batch,
            max_wait: Duration::from_millis(max_wait_ms),
        },
        step_seconds: Some(0.32),
        left_context_seconds: 0.64,
        ..StreamConfig::default()
    }
}

fn engine(cfg: StreamConfig) -> StreamEngine {
    StreamEngine::ctc(model(), CtcStreamDecoder::Greedy, cfg).unwrap()
}

fn no_endpoint() -> SessionOptions {
    SessionOptions {
        endpoint: EndpointOptions::none(),
        ..Default::default()
    }
}

/// Feeds `audio` in `block`-sample blocks, then ends; returns all events.
fn stream(engine: &StreamEngine, opts: SessionOptions, audio: &[f32], block: usize) -> Vec<Event> {
    let mut s = engine.open_session(opts).unwrap();
    let mut events = Vec::new();
    for b in audio.chunks(block) {
        events.extend(s.feed(b).unwrap());
    }
    events.extend(s.end().unwrap());
    events
}

fn finals(events: &[Event]) -> String {
    events
        .iter()
        .filter(|e| e.kind == EventKind::Final)
        .map(|e| e.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The chunked model run in one pass: every chunk window of the whole recording (zero left
/// context before the start, zero padding after the end) as ONE batched call, each keeping the
/// frames of its new region, joined and greedy-decoded once. Written independently of the
/// session's chunker.
fn chunked_one_pass_logprobs(
    model: &dyn CtcModel,
    engine: &StreamEngine,
    audio: &[f32],
) -> LogProbs {
    let g = engine.chunk_geometry().unwrap();
    let mut padded = vec![0.0f32; g.left_context];
    padded.extend_from_slice(audio);
    padded.resize(padded.len() + g.chunk_size(), 0.0);
    let starts: Vec<usize> = (0..audio.len()).step_by(g.step).collect();
    let windows: Vec<&[f32]> = starts
        .iter()
        .map(|&s| &padded[s..s + g.chunk_size()])
        .collect();
    let out = model.forward(&windows).unwrap();
    let v = out.vocab_size;
    let first = g.left_context / g.samples_per_frame;
    let mut joined = Vec::new();
    for (i, &s) in starts.iter().enumerate() {
        let new = (audio.len() - s).min(g.step);
        let owned = new.div_ceil(g.samples_per_frame);
        joined.extend_from_slice(&out.row(i)[first * v..(first + owned) * v]);
    }
    let frames = joined.len() / v;
    LogProbs::new(joined, frames, v).unwrap()
}

fn chunked_one_pass(model: &dyn CtcModel, engine: &StreamEngine, audio: &[f32]) -> String {
    let vocab = Vocabulary::from_labels(&model.vocab().tokens).unwrap();
    let lp = chunked_one_pass_logprobs(model, engine, audio);
    greedy_decode(&lp, &vocab).unwrap().text
}

#[test]
fn streaming_equals_chunked_one_pass_for_whole_chunks() {
    let m = model();
    let e = StreamEngine::ctc(Arc::clone(&m), CtcStreamDecoder::Greedy, config(8, 5)).unwrap();
    let g = e.chunk_geometry().unwrap();
    let audio = jfk();
    let whole = &audio[..(audio.len() / g.step) * g.step];
    let reference = chunked_one_pass(m.as_ref(), &e, whole);
    assert!(!reference.is_empty(), "the fixture must say something");
    let events = stream(&e, no_endpoint(), whole, 100);
    assert_eq!(finals(&events), reference);
    // One final, at end(); partials before it.
    assert_eq!(
        events.iter().filter(|e| e.kind == EventKind::Final).count(),
        1
    );
    assert!(events.iter().any(|e| e.kind == EventKind::Partial));
}

#[test]
fn end_flushes_only_new_audio() {
    let m = model();
    let e = StreamEngine::ctc(Arc::clone(&m), CtcStreamDecoder::Greedy, config(8, 5)).unwrap();
    let g = e.chunk_geometry().unwrap();
    let audio = jfk();
    // Three chunks run while feeding; the lookahead samples are still unowned.
    let part = &audio[..3 * g.step + g.lookahead];
    let mut s = e.open_session(no_endpoint()).unwrap();
    s.feed(part).unwrap();
    assert_eq!(e.stats().calls, 3);
    let events = s.end().unwrap();
    assert_eq!(e.stats().calls, 4, "end() flushes the pending tail once");
    // The tail owns only the frames of its real samples: no phantom repeat of the last step.
    assert_eq!(finals(&events), chunked_one_pass(m.as_ref(), &e, part));
    // Nothing new: a second end() runs no model call and says nothing.
    assert!(s.end().unwrap().is_empty());
    assert_eq!(e.stats().calls, 4);
}

#[test]
fn only_the_overlap_stays_in_the_cache() {
    let e = engine(config(8, 5));
    let g = e.chunk_geometry().unwrap();
    let audio = jfk();
    let mut s = e.open_session(no_endpoint()).unwrap();
    assert_eq!(s.buffered_samples(), g.left_context);
    s.feed(&audio[..g.step + g.lookahead]).unwrap();
    assert_eq!(s.buffered_samples(), g.overlap());
    s.feed(&audio[g.step + g.lookahead..5 * g.step + g.lookahead])
        .unwrap();
    assert_eq!(s.buffered_samples(), g.overlap());
    s.feed(&audio[5 * g.step + g.lookahead..5 * g.step + g.lookahead + 7])
        .unwrap();
    assert_eq!(s.buffered_samples(), g.overlap() + 7);
}

#[test]
fn state_is_used_a_fresh_chunk_differs() {
    let m = model();
    let e = StreamEngine::ctc(Arc::clone(&m), CtcStreamDecoder::Greedy, config(8, 5)).unwrap();
    let g = e.chunk_geometry().unwrap();
    let audio = jfk();
    let from = 8 * g.step;
    // The same new audio as the second chunk of a stream and as the first of a fresh one.
    let mut ongoing = Chunker::new(g);
    let chunks = ongoing.push(&audio[from - g.step..from + g.step + g.lookahead]);
    let mut fresh = Chunker::new(g);
    let fresh_chunks = fresh.push(&audio[from..from + g.step + g.lookahead]);
    assert_eq!(
        chunks[1].samples[g.left_context..],
        fresh_chunks[0].samples[g.left_context..]
    );
    let cm = CtcChunkModel::new(m);
    let out = cm.forward_chunks(&[chunks[1].clone(), fresh_chunks[0].clone()]);
    let (a, b) = (out[0].as_ref().unwrap(), out[1].as_ref().unwrap());
    let first = g.first_owned_frame() * a.vocab_size;
    let n = g.step_frames() * a.vocab_size;
    let diff = a.data[first..first + n]
        .iter()
        .zip(&b.data[first..first + n])
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(
        diff > 1e-3,
        "left context must change the owned frames (max diff {diff})"
    );
}

#[test]
fn block_size_changes_latency_never_the_transcript() {
    let e = engine(config(8, 5));
    let audio = jfk();
    let opts = SessionOptions {
        endpoint: EndpointOptions {
            min_trailing_silence: Some(0.3),
            max_utterance: Some(4.0),
        },
        ..Default::default()
    };
    let small = stream(&e, opts.clone(), &audio, 100);
    let large = stream(&e, opts.clone(), &audio, 100_000);
    let one = stream(&e, opts, &audio, audio.len());
    let f = |ev: &[Event]| -> Vec<Event> {
        ev.iter()
            .filter(|e| e.kind == EventKind::Final)
            .cloned()
            .collect()
    };
    assert!(
        f(&small).len() >= 2,
        "max_utterance must cut the 11 s stream"
    );
    assert_eq!(f(&small), f(&large));
    assert_eq!(f(&small), f(&one));
}

#[test]
fn starting_over_resets_the_session() {
    let e = engine(config(8, 5));
    let audio = jfk();
    let mut s = e.open_session(no_endpoint()).unwrap();
    let run = |s: &mut dicta_engine::stream::Session| {
        let mut ev = s.feed(&audio[..50_000]).unwrap();
        ev.extend(s.end().unwrap());
        ev
    };
    let first = run(&mut s);
    assert_eq!(
        run(&mut s),
        first,
        "end() resets: the same audio gives the same events"
    );
    s.feed(&audio[50_000..90_000]).unwrap();
    s.reset();
    assert_eq!(run(&mut s), first, "reset() forgets audio fed before it");
}

/// Runs `audios` in concurrent sessions (one thread each, started together) and returns each
/// session's events.
fn concurrent(engine: &StreamEngine, audios: &[Vec<f32>], block: usize) -> Vec<Vec<Event>> {
    let barrier = Barrier::new(audios.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = audios
            .iter()
            .map(|a| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let mut s = engine.open_session(no_endpoint()).unwrap();
                    barrier.wait();
                    let mut ev = Vec::new();
                    for b in a.chunks(block) {
                        ev.extend(s.feed(b).unwrap());
                    }
                    ev.extend(s.end().unwrap());
                    ev
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn transcripts_are_the_same_alone_or_batched() {
    let audio = jfk();
    let audios: Vec<Vec<f32>> = [0usize, 16_000, 40_000, 64_000]
        .iter()
        .map(|&o| audio[o..o + 80_000].to_vec())
        .collect();
    let solo = engine(config(1, 0));
    let alone: Vec<Vec<Event>> = audios
        .iter()
        .map(|a| stream(&solo, no_endpoint(), a, 4000))
        .collect();
    assert!(solo.stats().batch_sizes.iter().all(|&b| b == 1));
    let shared = engine(config(4, 2000));
    let together = concurrent(&shared, &audios, 4000);
    let stats = shared.stats();
    assert!(
        stats.batch_sizes.iter().any(|&b| b > 1),
        "sessions must share calls: {:?}",
        stats.batch_sizes
    );
    for (a, t) in alone.iter().zip(&together) {
        assert_eq!(finals(a), finals(t));
    }
}

#[test]
fn b_sessions_feeding_together_take_one_call_extra_ones_wait() {
    let e = engine(config(3, 3000));
    let g = e.chunk_geometry().unwrap();
    let audio = jfk();
    // Five sessions each complete exactly one chunk at once.
    let audios: Vec<Vec<f32>> = (0..5)
        .map(|i| audio[i * g.step..i * g.step + g.step + g.lookahead].to_vec())
        .collect();
    let barrier = Barrier::new(audios.len());
    std::thread::scope(|scope| {
        for a in &audios {
            let (barrier, e) = (&barrier, &e);
            scope.spawn(move || {
                let mut s = e.open_session(no_endpoint()).unwrap();
                barrier.wait();
                s.feed(a).unwrap();
            });
        }
    });
    let stats = e.stats();
    assert_eq!(stats.rows, 5);
    assert_eq!(
        stats.batch_sizes[0], 3,
        "first call takes B sessions: {:?}",
        stats.batch_sizes
    );
    assert!(stats.batch_sizes.iter().all(|&b| b <= 3));
    assert_eq!(e.open_sessions(), 0, "dropped sessions free their slots");
}

/// The real chunk model, failing (or panicking) any call that holds a chunk with a marker
/// sample.
struct Flaky {
    inner: CtcChunkModel,
    calls: AtomicUsize,
}

const FAIL: f32 = 0.123_456;
const PANIC: f32 = -0.654_321;

impl StreamModel for Flaky {
    type Request = Chunk;
    type Output = ChunkLogProbs;

    fn forward_chunks(&self, requests: &[Chunk]) -> Vec<Result<ChunkLogProbs>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let has = |x: f32| requests.iter().any(|r| r.samples.contains(&x));
        if has(PANIC) {
            panic!("injected panic");
        }
        if has(FAIL) {
            let e = dicta_core::Error::internal("injected failure");
            return requests.iter().map(|_| Err(e.clone())).collect();
        }
        self.inner.forward_chunks(requests)
    }
}

#[test]
fn a_failing_call_reaches_every_waiting_session_and_the_worker_survives() {
    let m = model();
    let probe = engine(config(3, 5));
    let g = probe.chunk_geometry().unwrap();
    let vocab = Vocabulary::from_labels(&m.vocab().tokens).unwrap();
    let flaky = Arc::new(Flaky {
        inner: CtcChunkModel::new(Arc::clone(&m)),
        calls: AtomicUsize::new(0),
    });
    let e = StreamEngine::ctc_with_model(
        flaky.clone(),
        g,
        vocab,
        CtcStreamDecoder::Greedy,
        config(3, 3000),
    )
    .unwrap();
    let audio = jfk();
    let n = g.step + g.lookahead;
    for marker in [FAIL, PANIC] {
        let barrier = Barrier::new(3);
        let mut sessions: Vec<_> = (0..3)
            .map(|_| e.open_session(no_endpoint()).unwrap())
            .collect();
        let errors: Vec<ErrorKind> = std::thread::scope(|scope| {
            let hs: Vec<_> = sessions
                .iter_mut()
                .enumerate()
                .map(|(i, s)| {
                    let barrier = &barrier;
                    let mut block = audio[i * n..(i + 1) * n].to_vec();
                    if i == 1 {
                        block[10] = marker;
                    }
                    scope.spawn(move || {
                        barrier.wait();
                        s.feed(&block).unwrap_err().kind
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(errors, vec![ErrorKind::Internal; 3], "marker {marker}");
        drop(sessions);
    }
    assert_eq!(flaky.calls.load(Ordering::SeqCst), 2, "one call per round");
    // The worker lives on and serves new sessions exactly as a healthy engine does.
    let clean = &audio[..80_000];
    assert_eq!(
        finals(&stream(&e, no_endpoint(), clean, 4000)),
        finals(&stream(&probe, no_endpoint(), clean, 4000))
    );
}

#[tokio::test(flavor = "current_thread")]
async fn async_equals_sync() {
    let e = engine(config(8, 5));
    let audio = jfk();
    let sync = stream(&e, no_endpoint(), &audio, 3200);
    let mut s = e.open_session(no_endpoint()).unwrap();
    let mut events = Vec::new();
    for b in audio.chunks(3200) {
        events.extend(s.feed_async(b.to_vec()).await.unwrap());
    }
    events.extend(s.end_async().await.unwrap());
    assert_eq!(events, sync);
}

#[test]
fn sessions_share_one_model_and_free_slots_on_drop() {
    let m = model();
    let cfg = StreamConfig {
        max_sessions: 100,
        ..config(8, 5)
    };
    let e = StreamEngine::ctc(Arc::clone(&m), CtcStreamDecoder::Greedy, cfg).unwrap();
    let before = Arc::strong_count(&m);
    let mut sessions: Vec<_> = (0..100)
        .map(|_| e.open_session(no_endpoint()).unwrap())
        .collect();
    assert_eq!(
        Arc::strong_count(&m),
        before,
        "sessions never copy or reload the model"
    );
    assert_eq!(e.open_sessions(), 100);
    let err = e.open_session(no_endpoint()).err().unwrap();
    assert_eq!(err.kind, ErrorKind::Overloaded);
    sessions.pop();
    assert!(e.open_session(no_endpoint()).is_ok());
}

#[test]
fn bad_input_is_refused() {
    let e = engine(config(8, 5));
    let mut s = e.open_session(no_endpoint()).unwrap();
    assert_eq!(
        s.feed(&[0.0, f32::NAN]).unwrap_err().kind,
        ErrorKind::InvalidInput
    );
    let bad = SessionOptions {
        endpoint: EndpointOptions {
            min_trailing_silence: Some(-1.0),
            max_utterance: None,
        },
        ..Default::default()
    };
    assert_eq!(
        e.open_session(bad).err().unwrap().kind,
        ErrorKind::InvalidInput
    );
    // CTC has no prompt: a session asking for one is refused, not silently ignored.
    let prompted = SessionOptions {
        decode: dicta_engine::whisper::InputOptions {
            hotwords: Some("Americans".into()),
            ..Default::default()
        },
        ..no_endpoint()
    };
    let err = e.open_session(prompted).err().unwrap();
    assert_eq!(err.kind, ErrorKind::InvalidInput, "{err}");
    assert!(err.message.contains("CTC"), "{err}");
}

#[test]
fn events_serialise_as_the_server_sends_them() {
    let e = engine(config(8, 5));
    let events = stream(&e, no_endpoint(), &jfk()[..40_000], 40_000);
    let last = events.last().unwrap();
    let json: serde_json::Value = serde_json::to_value(last).unwrap();
    assert_eq!(json["type"], "final");
    assert_eq!(json["text"], last.text.as_str());
    assert!(json["start"].is_f64() && json["end"].is_f64());
    assert_eq!(json["words"].as_array().unwrap().len(), last.words.len());
}

#[test]
fn beam_with_lm_streams_like_one_pass() {
    use dicta_decode::{BeamConfig, BeamDecoder, LmFusion, LmWeights, NgramLm, Unigrams};
    let m = model();
    let lm_path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../dicta-decode/tests/fixtures/sub.arpa.gz");
    let lm = Arc::new(NgramLm::from_path(&lm_path).unwrap());
    let fusion = Arc::new(LmFusion::new(lm, LmWeights::default(), Unigrams::FromLm));
    let vocab = Vocabulary::from_labels(&m.vocab().tokens).unwrap();
    let beam = Arc::new(BeamDecoder::new(vocab, Some(fusion), BeamConfig::default()).unwrap());
    let e = StreamEngine::ctc(
        Arc::clone(&m),
        CtcStreamDecoder::Beam(Arc::clone(&beam)),
        config(8, 5),
    )
    .unwrap();
    let g = e.chunk_geometry().unwrap();
    let audio = jfk();
    let whole = &audio[..(audio.len() / g.step) * g.step];
    let reference = beam
        .decode(&chunked_one_pass_logprobs(m.as_ref(), &e, whole))
        .unwrap();
    assert!(!reference.text.is_empty());
    assert_eq!(
        finals(&stream(&e, no_endpoint(), whole, 1000)),
        reference.text
    );
}
