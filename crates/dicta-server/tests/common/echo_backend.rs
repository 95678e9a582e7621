//! A small, honest backend for the server's HTTP tests: instead of recognising speech, it
//! describes the audio it received, so tests can check that each client got its own result
//! and that decoding was right.
//!
//! Text of each result: `"{task} {duration_ms}ms {checksum:016x}"`, where the checksum is
//! FNV-1a over the samples quantised to 16-bit integers (exact for 16-bit PCM input at 16 kHz).
//! An all-zero input fails with `InvalidInput` (to exercise per-input errors). Calls can be held
//! at a gate (to fill the queue, or to provoke timeouts) and are recorded.
//!
//! Streaming ([`EchoStream`]): each `feed` answers one `partial` whose text is the duration
//! received so far (`"{ms}ms"`); `end` answers one `final` with [`describe`] of every sample of
//! the utterance, so a test can check exactly what audio reached the backend. Feeding an
//! all-zero block fails with `InvalidInput` (the session lives on). `feed` waits at the same
//! gate as `transcribe`.

#![allow(dead_code)]

use std::sync::{Condvar, Mutex};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dicta_core::{Error, Result, Segment, Stats, Transcript, Word};
use dicta_server::{
    Backend, BackendInput, BackendOutput, StreamEvent, StreamEventKind, StreamOptions,
    StreamSession, Task,
};

/// FNV-1a over samples quantised to i16 (as `i32`, little-endian).
pub fn checksum(quantised: impl IntoIterator<Item = i32>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for q in quantised {
        for b in q.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The text the backend answers for `samples` (16 kHz) under `task`.
pub fn describe(samples: &[f32], task: Task) -> String {
    let ms = samples.len() as u64 * 1000 / 16_000;
    let sum = checksum(samples.iter().map(|&s| (s * 32768.0).round() as i32));
    format!("{} {ms}ms {sum:016x}", task.as_str())
}

/// What the test expects for 16-bit samples at 16 kHz.
pub fn expected(samples: &[i16], task: Task) -> String {
    let ms = samples.len() as u64 * 1000 / 16_000;
    format!(
        "{} {ms}ms {:016x}",
        task.as_str(),
        checksum(samples.iter().map(|&s| i32::from(s)))
    )
}

/// One recorded backend call: the input ids and sample counts, in order.
pub type Call = Vec<(String, usize)>;

/// A gate that holds calls while closed.
#[derive(Default)]
struct Gate {
    closed: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut closed = self.closed.lock().unwrap();
        while *closed {
            closed = self.opened.wait(closed).unwrap();
        }
    }
    fn set(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }
}

/// The test backend.
#[derive(Default)]
pub struct EchoBackend {
    gate: Arc<Gate>,
    warm_gate: Gate,
    fail_warm_up: bool,
    translation: bool,
    calls: Mutex<Vec<Call>>,
    entered: Mutex<Option<tokio::sync::mpsc::UnboundedSender<usize>>>,
    no_streaming: bool,
    /// Options of every stream session opened, in order.
    streams: Mutex<Vec<StreamOptions>>,
    /// Stream sessions dropped so far.
    dropped: Arc<AtomicUsize>,
}

impl EchoBackend {
    pub fn new() -> Self {
        Self::default()
    }

    /// A backend that can translate.
    pub fn multilingual() -> Self {
        Self {
            translation: true,
            ..Self::default()
        }
    }

    /// A backend that cannot stream.
    pub fn batch_only() -> Self {
        Self {
            no_streaming: true,
            ..Self::default()
        }
    }

    /// Options of every stream session opened so far.
    pub fn stream_options(&self) -> Vec<StreamOptions> {
        self.streams.lock().unwrap().clone()
    }

    /// Stream sessions dropped so far.
    pub fn dropped_streams(&self) -> usize {
        self.dropped.load(Ordering::SeqCst)
    }

    /// A backend whose warm-up fails.
    pub fn broken() -> Self {
        Self {
            fail_warm_up: true,
            ..Self::default()
        }
    }

    /// Holds every call (and warm-up, when `warm_up` is true) until [`Self::open`].
    pub fn close(&self, warm_up: bool) {
        self.gate.set(true);
        if warm_up {
            self.warm_gate.set(true);
        }
    }

    /// Lets held and future calls through.
    pub fn open(&self) {
        self.gate.set(false);
        self.warm_gate.set(false);
    }

    /// Reports each call's number as it enters (before the gate).
    pub fn notify_entries(&self) -> tokio::sync::mpsc::UnboundedReceiver<usize> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        *self.entered.lock().unwrap() = Some(tx);
        rx
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

impl Backend for EchoBackend {
    fn transcribe(&self, inputs: Vec<BackendInput>) -> BackendOutput {
        let number = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(
                inputs
                    .iter()
                    .map(|i| (i.id.clone(), i.samples.len()))
                    .collect(),
            );
            calls.len()
        };
        if let Some(tx) = self.entered.lock().unwrap().as_ref() {
            let _ = tx.send(number);
        }
        self.gate.wait();
        let audio_seconds: f64 = inputs.iter().map(|i| i.samples.len() as f64 / 16e3).sum();
        let results = inputs.iter().map(transcribe_one).collect();
        BackendOutput {
            results,
            stats: Stats {
                inputs: inputs.len(),
                audio_seconds,
                batch_sizes: vec![inputs.len()],
                ..Stats::default()
            },
        }
    }

    fn model_name(&self) -> String {
        "echo-test".to_string()
    }

    fn warm_up(&self) -> Result<()> {
        self.warm_gate.wait();
        if self.fail_warm_up {
            return Err(Error::model_load("echo-test: warm-up refused on purpose"));
        }
        Ok(())
    }

    fn supports_translation(&self) -> bool {
        self.translation
    }

    fn supports_streaming(&self) -> bool {
        !self.no_streaming
    }

    /// Streams decode in any language but French, so that a refusal can be provoked.
    fn check_stream_options(&self, options: &StreamOptions) -> Result<()> {
        if options.language.as_deref() == Some("fr") {
            return Err(Error::invalid_input(
                "language \"fr\" cannot be chosen per stream on echo-test",
            ));
        }
        Ok(())
    }

    fn open_stream(&self, options: StreamOptions) -> Result<Box<dyn StreamSession>> {
        self.check_stream_options(&options)?;
        self.streams.lock().unwrap().push(options);
        Ok(Box::new(EchoStream {
            gate: self.gate.clone(),
            samples: Vec::new(),
            dropped: self.dropped.clone(),
        }))
    }
}

/// The streaming session of [`EchoBackend`].
pub struct EchoStream {
    gate: Arc<Gate>,
    samples: Vec<f32>,
    dropped: Arc<AtomicUsize>,
}

impl Drop for EchoStream {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

impl EchoStream {
    fn event(&self, kind: StreamEventKind, text: String) -> StreamEvent {
        let end = self.samples.len() as f64 / 16e3;
        StreamEvent {
            kind,
            words: vec![Word {
                speaker: None,
                word: text.clone(),
                start: 0.0,
                end,
                probability: None,
            }],
            text,
            start: 0.0,
            end,
        }
    }
}

impl StreamSession for EchoStream {
    fn feed(&mut self, samples: &[f32]) -> Result<Vec<StreamEvent>> {
        self.gate.wait();
        if !samples.is_empty() && samples.iter().all(|&s| s == 0.0) {
            return Err(Error::invalid_input(
                "the test backend refuses a block of pure silence",
            ));
        }
        self.samples.extend_from_slice(samples);
        let ms = self.samples.len() as u64 * 1000 / 16_000;
        Ok(vec![self.event(StreamEventKind::Partial, format!("{ms}ms"))])
    }

    fn end(&mut self) -> Result<Vec<StreamEvent>> {
        let text = describe(&self.samples, Task::Transcribe);
        let event = self.event(StreamEventKind::Final, text);
        self.samples.clear();
        Ok(vec![event])
    }
}

fn transcribe_one(input: &BackendInput) -> Result<Transcript> {
    if input.samples.iter().all(|&s| s == 0.0) {
        return Err(Error::invalid_input(format!(
            "{}: the test backend refuses pure silence",
            input.id
        )));
    }
    let duration = input.samples.len() as f64 / 16e3;
    let text = describe(&input.samples, input.options.task);
    let mut segment = Segment::new(0.0, duration, text.clone());
    if input.options.word_timestamps {
        let mut t = 0.0;
        let n = text.split(' ').count() as f64;
        segment.words = text
            .split(' ')
            .map(|w| {
                let start = t;
                t += duration / n;
                Word {
                    speaker: None,
                    word: format!(" {w}"),
                    start,
                    end: t,
                    probability: Some(1.0),
                }
            })
            .collect();
    }
    Ok(Transcript {
        id: input.id.clone(),
        audio: input.id.clone(),
        text,
        language: Some(
            input
                .options
                .language
                .clone()
                .unwrap_or_else(|| "en".into()),
        ),
        language_probability: None,
        all_language_probs: None,
        duration,
        segments: vec![segment],
        warnings: Vec::new(),
    })
}
