//! `dicta serve`: the HTTP server over one resident engine.
//!
//! The server crate never links candle; this module adapts [`Engine`] to its [`Backend`] seam.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use dicta_core::{Error, Stats, Transcript};
use dicta_engine::stream::{Event, EventKind, Session, SessionOptions, StreamConfig};
use dicta_engine::whisper::{DecodeOptions, InputOptions};
use dicta_engine::{AudioSource, Engine, EngineConfig, Input};
use dicta_server::{
    Backend, BackendInput, BackendOutput, RequestOptions, ServerConfig, StreamEvent,
    StreamEventKind, StreamOptions, StreamSession, Temperature,
};

use crate::{fetch, Globals};

/// `dicta serve …`
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Model folder or known name (fetched on first use). Repeatable: every model stays
    /// resident and requests pick one by name (`model`); the first is the default.
    #[arg(long, env = "DICTA_MODEL", default_value = fetch::DEFAULT_MODEL)]
    pub model: Vec<String>,
    /// Address to bind (loopback by default; use 0.0.0.0 to listen on all interfaces).
    #[arg(long, env = "DICTA_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0 picks a free one and prints it).
    #[arg(long, env = "DICTA_PORT", default_value_t = 8000)]
    pub port: u16,
    /// Also serve NVIDIA Riva's ASR gRPC API and gRPC health on this port (0 picks a free one
    /// and prints `grpc listening on HOST:PORT`).
    #[arg(long, env = "DICTA_GRPC_PORT")]
    pub grpc_port: Option<u16>,
    /// Require `Authorization: Bearer <key>` on every route but /health and /readyz.
    #[arg(long, env = "DICTA_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Serve /metrics without the API key (for a Prometheus scraper that has none).
    #[arg(long)]
    pub public_metrics: bool,
    /// How long a request waits for others to share a model batch (ms).
    #[arg(long, default_value_t = 20)]
    pub batch_wait_ms: u64,
    /// Requests waiting at most; more are answered 503.
    #[arg(long, default_value_t = 32)]
    pub max_queue: usize,
    /// Requests coalesced into one engine call at most.
    #[arg(long, default_value_t = 8)]
    pub max_group: usize,
    /// Requests with more audio than this (seconds) run in a second lane beside the short
    /// ones, taking turns on the model window by window; 0 keeps one lane.
    #[arg(long, default_value_t = 120.0)]
    pub long_request_s: f64,
    /// Largest request body (MiB); larger ones are answered 413.
    #[arg(long, default_value_t = 64)]
    pub max_body_mib: u64,
    /// Inputs per /transcribe request at most.
    #[arg(long, default_value_t = 16)]
    pub max_inputs: usize,
    /// Most audio per request, all inputs together (seconds); more is answered 413. Uploads are
    /// decoded as a stream: a header that declares more is refused before decoding.
    #[arg(long, default_value_t = 3600.0)]
    pub max_audio_seconds: f64,
    /// Most decoded audio held by all requests in progress together (MiB of 16 kHz samples);
    /// a request that would pass it is answered 503. Default: a quarter of the machine's memory.
    #[arg(long)]
    pub max_pending_audio_mib: Option<u64>,
    /// A request taking longer is answered 504 (seconds).
    #[arg(long, default_value_t = 600.0)]
    pub request_timeout_s: f64,
    /// WebSocket streams (GET /v1/stream) open at once at most; more are answered 503.
    #[arg(long, default_value_t = 16)]
    pub max_streams: usize,
    /// Audio seconds one WebSocket stream may send at most (over all its utterances).
    #[arg(long, default_value_t = 3600.0)]
    pub max_stream_seconds: f64,
    /// A WebSocket stream whose client sends nothing (no audio, text or ping) this long is
    /// closed (seconds).
    #[arg(long, default_value_t = 60.0)]
    pub stream_idle_timeout_s: f64,
    /// A new WebSocket stream is refused (503) while an open one is more than this many seconds
    /// behind real time; streams this far behind get `lag` events.
    #[arg(long, default_value_t = 3.0)]
    pub stream_admit_lag_s: f64,
    /// A WebSocket stream more than this many seconds behind is ended (newest first) with an
    /// `overloaded` error and close 1013, so that the others catch up.
    #[arg(long, default_value_t = 30.0)]
    pub stream_max_lag_s: f64,
    /// New audio per stream decode (seconds): Whisper re-decodes a stream's buffer (one 30 s
    /// window) this often, so longer steps serve more streams (default: 1 for Whisper, 0.5 for
    /// Moonshine, 0.64 for CTC).
    #[arg(long)]
    pub stream_step_seconds: Option<f32>,
    /// Whisper and Moonshine streams end utterances where the voice activity detector hears
    /// silence, unless a stream asks otherwise (`vad=false`); without it a stream endpoints
    /// only when it asks (`vad=true`). Needs the detector (not with --no-vad).
    #[arg(long)]
    pub stream_vad: bool,
    /// Longest wait for a request's headers, from the connection's start or the end of its
    /// previous response (seconds); slower or idle connections are closed.
    #[arg(long, default_value_t = 15.0)]
    pub header_timeout_s: f64,
    /// Longest wait for more bytes of a request body (seconds); longer answers 408.
    #[arg(long, default_value_t = 30.0)]
    pub body_timeout_s: f64,
    /// Slowest average body rate (KiB/s) accepted after --body-timeout-s; slower answers 408
    /// (0: no rate check).
    #[arg(long, default_value_t = 1.0)]
    pub min_body_rate_kib: f64,
    /// Most HTTP connections open at once; at the cap a new one closes the oldest idle one,
    /// or is refused when none is idle. The open-files limit is raised to fit.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Windows per model call.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Beam size (1 = greedy); a request's `beam_size` overrides it.
    #[arg(long, default_value_t = 5)]
    pub beam_size: usize,
    /// Whisper decoding defaults of every request (each overridden by the request's
    /// `parameters` of the same name).
    #[command(flatten)]
    pub decoding: crate::decoding_args::DecodingArgs,
    /// CPU threads for the model (default: all cores).
    #[arg(long, env = "DICTA_THREADS")]
    pub threads: Option<usize>,
    /// Numeric type: default (int8 on CPUs with VNNI or AVX2, float32 elsewhere), float32 (the
    /// reference), or int8 (needs a CPU with VNNI or AVX2).
    #[arg(long, env = "DICTA_COMPUTE_TYPE", default_value = "default", value_parser = crate::transcribe_cmd::parse_compute_type)]
    pub compute_type: dicta_models::whisper::ComputeType,
    /// Voice activity detector for requests with `vad_filter=true`: a known name (fetched on
    /// first use) or a `.onnx` file / folder. Without one (`--no-vad`, or when it cannot be
    /// fetched) such requests are answered 400.
    #[arg(long, env = "DICTA_VAD_MODEL", default_value = fetch::DEFAULT_VAD_MODEL)]
    pub vad_model: String,
    /// Serve without a voice activity detector.
    #[arg(long)]
    pub no_vad: bool,
    /// Speaker embedding model for requests with `diarize=true` (a known name such as
    /// `ecapa-voxceleb`, fetched on first use, or a folder); without it such requests get 400.
    #[arg(long, env = "DICTA_SPEAKER_MODEL")]
    pub speaker_model: Option<String>,
    /// Speculative decoding for the Whisper models (greedy requests: `--beam-size 1`, or a
    /// request's `beam_size` 1): a smaller Whisper model (name or folder) drafts tokens the main
    /// model checks in one pass; answers are unchanged, token for token.
    #[arg(long, env = "DICTA_ASSISTANT")]
    pub assistant: Option<String>,
    /// Tokens the assistant drafts per round.
    #[arg(long, default_value_t = dicta_engine::whisper::DEFAULT_DRAFT_TOKENS)]
    pub assistant_tokens: usize,
}

/// Adapts the engine to the server's backend seam.
struct EngineBackend {
    engine: Engine,
    name: String,
    /// Streams end utterances on silence unless they say otherwise (`--stream-vad`).
    stream_vad: bool,
}

impl EngineBackend {
    /// Whether a stream that does not say endpoints on silence: `--stream-vad`, for the
    /// families that can (CTC streams end utterances on their own trailing silence).
    fn vad_default(&self) -> bool {
        self.stream_vad && self.engine.family() != dicta_engine::ModelFamily::Ctc
    }

    fn options_for(&self, r: &RequestOptions) -> DecodeOptions {
        let mut o = self.engine.config().decode.clone();
        o.language = r.language.clone().or(o.language);
        o.initial_prompt = r.prompt.clone().or(o.initial_prompt);
        match &r.temperature {
            // OpenAI's temperature 0 means "decide for me": keep the fallback schedule.
            Some(Temperature::One(t)) if *t > 0.0 => o.temperatures = vec![*t],
            Some(Temperature::Schedule(ts)) => o.temperatures = ts.clone(),
            _ => {}
        }
        // faster-whisper's decoding options, where the request sets them: `plain` fields hold
        // the value itself, `optional` ones an `Option` of it.
        macro_rules! set {
            (plain: $($field:ident),*; optional: $($opt:ident),*) => {
                $(if let Some(v) = &r.$field {
                    o.$field = v.clone();
                })*
                $(if r.$opt.is_some() {
                    o.$opt = r.$opt.clone();
                })*
            };
        }
        set!(
            plain: beam_size,
            best_of,
            patience,
            length_penalty,
            condition_on_previous_text,
            prompt_reset_on_temperature,
            without_timestamps,
            suppress_blank,
            suppress_tokens,
            max_initial_timestamp,
            repetition_penalty,
            no_repeat_ngram_size,
            language_detection_threshold,
            language_detection_segments,
            multilingual;
            optional: compression_ratio_threshold,
            log_prob_threshold,
            no_speech_threshold,
            max_new_tokens,
            hotwords,
            prefix,
            hallucination_silence_threshold
        );
        if let Some(c) = &r.clip_timestamps {
            // Checked with the request (`validate_options`).
            o.clip_timestamps = c.seconds().unwrap_or_default();
        }
        o.word_timestamps = r.word_timestamps;
        o.token_logprobs = r.token_logprobs;
        o.vad = r
            .vad_filter
            .then(|| r.vad_parameters.clone().unwrap_or_default());
        o.diarize = r.diarize_options();
        o.channels = r.channels;
        o.task = r.task;
        o
    }
}

impl Backend for EngineBackend {
    fn transcribe(&self, inputs: Vec<BackendInput>) -> BackendOutput {
        // One engine call per distinct option set: inputs of a call share decoding options.
        let mut groups: Vec<(RequestOptions, Vec<usize>)> = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            match groups.iter_mut().find(|(o, _)| *o == input.options) {
                Some((_, idx)) => idx.push(i),
                None => groups.push((input.options.clone(), vec![i])),
            }
        }
        let mut results: Vec<Option<dicta_core::Result<Transcript>>> =
            inputs.iter().map(|_| None).collect();
        let mut inputs: Vec<Option<BackendInput>> = inputs.into_iter().map(Some).collect();
        let mut stats = Stats::default();
        for (opts, idx) in groups {
            let mut cancels = Vec::with_capacity(idx.len());
            let mut sinks = Vec::with_capacity(idx.len());
            let batch: Vec<Input> = idx
                .iter()
                .map(|&i| {
                    let input = inputs[i].take().expect("each input is in one group");
                    cancels.push(input.cancel);
                    sinks.push(input.segments);
                    let source = if input.channels > 1 {
                        // `channels=split`: the channels one after another.
                        let n = input.samples.len() / input.channels;
                        let planes: Vec<Vec<f32>> = input
                            .samples
                            .chunks(n.max(1))
                            .map(<[f32]>::to_vec)
                            .collect();
                        AudioSource::Channels(planes.into())
                    } else {
                        AudioSource::Samples(input.samples)
                    };
                    Input {
                        audio: input.id.clone(),
                        id: input.id,
                        source,
                    }
                })
                .collect();
            let mut decode = self.options_for(&opts);
            // The call stops at its next model call once every request in it has gone.
            decode.cancel = dicta_core::Cancel::all(cancels);
            // Segments go to the requests that read them as they come (`stream=true`).
            if sinks.iter().any(Option::is_some) {
                decode.progress = dicta_engine::Progress::new(move |e| {
                    if let dicta_engine::ProgressEvent::Segments { input, segments } = e {
                        if let Some(Some(sink)) = sinks.get(input) {
                            sink.send(&segments);
                        }
                    }
                });
            }
            let out = self.engine.transcribe_with(&batch, &decode);
            for (&i, r) in idx.iter().zip(out.results) {
                results[i] = Some(r);
            }
            stats.absorb(out.stats);
        }
        BackendOutput {
            results: results
                .into_iter()
                .map(|r| r.unwrap_or_else(|| Err(Error::internal("input was not transcribed"))))
                .collect(),
            stats,
        }
    }

    fn model_name(&self) -> String {
        self.name.clone()
    }

    fn warm_up(&self) -> dicta_core::Result<()> {
        // One real call through the whole path (features, encoder, decoder) so the first client
        // does not pay for lazy initialisation.
        let tone: Vec<f32> = (0..16_000).map(|i| 0.1 * (i as f32 * 0.05).sin()).collect();
        let out = self.engine.transcribe_with(
            &[Input::from_samples("warm-up", tone)],
            &DecodeOptions::greedy(),
        );
        out.results
            .into_iter()
            .next()
            .unwrap_or_else(|| Err(Error::internal("no warm-up result")))?;
        Ok(())
    }

    fn languages(&self) -> Option<Vec<String>> {
        // Moonshine and CTC models: `None`, checked by the engine, if at all.
        let c = &self.engine.whisper()?.config;
        match (c.is_multilingual, c.lang_ids.is_empty()) {
            (false, _) => Some(vec!["en".to_string()]),
            (true, false) => Some(c.lang_ids.iter().map(|(code, _)| code.clone()).collect()),
            // A multilingual folder that lists no language tokens: the engine says why.
            (true, true) => None,
        }
    }

    fn supports_translation(&self) -> bool {
        self.engine
            .whisper()
            .is_some_and(|w| w.config.is_multilingual)
    }

    fn supports_streaming(&self) -> bool {
        true
    }

    fn open_stream(&self, options: StreamOptions) -> dicta_core::Result<Box<dyn StreamSession>> {
        let session = self
            .engine
            .open_session(session_options(&options, self.vad_default()))?;
        Ok(Box::new(EngineStream(session)))
    }

    fn check_stream_options(&self, options: &StreamOptions) -> dicta_core::Result<()> {
        self.engine
            .check_session_options(&session_options(options, self.vad_default()))
    }

    fn open_turn_detector(
        &self,
        options: &dicta_core::VadOptions,
    ) -> dicta_core::Result<Box<dyn dicta_server::backend::TurnDetector>> {
        let vad = self.engine.vad().ok_or_else(|| {
            dicta_core::Error::invalid_input(
                "turn detection needs a voice activity detector, and none is loaded \
                 (--vad-model; not --no-vad)",
            )
        })?;
        Ok(Box::new(EngineTurns(dicta_engine::vad::TurnDetector::new(
            vad.clone(),
            options,
        )?)))
    }
}

/// The engine's turn detector behind the server's seam.
struct EngineTurns(dicta_engine::vad::TurnDetector);

impl dicta_server::backend::TurnDetector for EngineTurns {
    fn push(
        &mut self,
        samples: &[f32],
    ) -> dicta_core::Result<Vec<dicta_server::backend::TurnEvent>> {
        use dicta_engine::vad::Turn;
        use dicta_server::backend::TurnEvent;
        Ok(self
            .0
            .push(samples)?
            .into_iter()
            .map(|t| match t {
                Turn::Started { start } => TurnEvent::Started { start },
                Turn::Stopped {
                    start,
                    speech_end,
                    at,
                } => TurnEvent::Stopped {
                    start,
                    speech_end,
                    at,
                },
            })
            .collect())
    }
}

/// The engine's session options for a stream's: its own language, task, prompt and hotwords,
/// and VAD endpointing where it asks for it (or by the server's default, `vad_default`).
fn session_options(options: &StreamOptions, vad_default: bool) -> SessionOptions {
    SessionOptions {
        vad: options.vad.unwrap_or(vad_default).then(|| {
            options
                .vad_parameters
                .clone()
                .unwrap_or_else(dicta_core::VadOptions::endpointing)
        }),
        decode: InputOptions {
            language: options.language.clone(),
            task: options.task,
            initial_prompt: options.prompt.clone(),
            hotwords: options.hotwords.clone(),
        },
        ..Default::default()
    }
}

/// A live session of the engine behind the server's stream seam.
struct EngineStream(Session);

fn stream_events(events: Vec<Event>) -> Vec<StreamEvent> {
    events
        .into_iter()
        .map(|e| StreamEvent {
            kind: match e.kind {
                EventKind::Partial => StreamEventKind::Partial,
                EventKind::Final => StreamEventKind::Final,
            },
            text: e.text,
            start: e.start,
            end: e.end,
            words: e.words,
        })
        .collect()
}

impl StreamSession for EngineStream {
    fn feed(&mut self, samples: &[f32]) -> dicta_core::Result<Vec<StreamEvent>> {
        self.0.feed(samples).map(stream_events)
    }

    fn end(&mut self) -> dicta_core::Result<Vec<StreamEvent>> {
        self.0.end().map(stream_events)
    }
}

/// Runs `dicta serve` until SIGINT/SIGTERM; returns the exit code.
pub fn run(args: &ServeArgs, g: &Globals) -> Result<u8> {
    let vad_model = if args.no_vad {
        None
    } else {
        match fetch::resolve_model(&args.vad_model, &g.home, &g.python, true) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("dicta serve: no voice activity detector ({e:#}); vad_filter requests will be refused");
                None
            }
        }
    };
    if args.stream_vad && vad_model.is_none() {
        anyhow::bail!("--stream-vad needs a voice activity detector (drop --no-vad)");
    }
    let speaker_model = match (&args.speaker_model, &vad_model) {
        (None, _) => None,
        (Some(_), None) => {
            anyhow::bail!("--speaker-model needs a voice activity detector (drop --no-vad)")
        }
        (Some(name), Some(_)) => Some(fetch::resolve_model(name, &g.home, &g.python, true)?),
    };
    let assistant = match &args.assistant {
        Some(name) => Some(fetch::resolve_model(name, &g.home, &g.python, true)?),
        None => None,
    };
    let mut backends: Vec<Arc<dyn Backend>> = Vec::with_capacity(args.model.len());
    for name in &args.model {
        let model_dir: PathBuf = fetch::resolve_model(name, &g.home, &g.python, true)?;
        let mut decode = DecodeOptions {
            beam_size: args.beam_size,
            ..DecodeOptions::default()
        };
        args.decoding.apply(&mut decode);
        decode.validate()?;
        let config = EngineConfig {
            batch_size: args.batch_size,
            decode,
            compute_type: args.compute_type,
            vad_model: vad_model.clone(),
            speaker_model: speaker_model.clone(),
            assistant_model: assistant.clone(),
            assistant_compute_type: args.compute_type,
            assistant_tokens: args.assistant_tokens,
            stream: StreamConfig {
                step_seconds: args.stream_step_seconds,
                ..StreamConfig::default()
            },
            ..EngineConfig::default()
        };
        let engine = Engine::load(&model_dir, config)
            .with_context(|| format!("cannot load the model in {}", model_dir.display()))?;
        backends.push(Arc::new(EngineBackend {
            engine,
            name: name.clone(),
            stream_vad: args.stream_vad,
        }));
    }
    let server = ServerConfig {
        host: args.host.clone(),
        port: args.port,
        grpc_port: args.grpc_port,
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        public_metrics: args.public_metrics,
        batch_wait_ms: args.batch_wait_ms,
        max_queue: args.max_queue,
        max_group: args.max_group,
        long_request_seconds: args.long_request_s,
        max_body_mib: args.max_body_mib,
        max_inputs: args.max_inputs,
        max_audio_seconds: args.max_audio_seconds,
        max_pending_audio_mib: args
            .max_pending_audio_mib
            .unwrap_or_else(default_pending_audio_mib),
        request_timeout_s: args.request_timeout_s,
        max_streams: args.max_streams,
        max_stream_seconds: args.max_stream_seconds,
        stream_idle_timeout_s: args.stream_idle_timeout_s,
        stream_admit_lag_s: args.stream_admit_lag_s,
        stream_max_lag_s: args.stream_max_lag_s,
        header_timeout_s: args.header_timeout_s,
        body_timeout_s: args.body_timeout_s,
        min_body_rate_kib: args.min_body_rate_kib,
        max_connections: args.max_connections,
        ..ServerConfig::default()
    };
    raise_open_files(server.max_connections + server.max_streams + 256);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let bound = dicta_server::bind(server).await?;
        // Printed (not logged) so scripts and tests can read the port chosen for --port 0.
        println!("listening on http://{}", bound.local_addr());
        if let Some(addr) = bound.grpc_addr() {
            println!("grpc listening on {addr}");
        }
        bound
            .run_models(backends, dicta_server::shutdown_signal())
            .await
    })?;
    eprintln!("dicta serve: stopped");
    Ok(0)
}

/// A quarter of the machine's memory (`MemTotal` in /proc/meminfo), at least 256 MiB; 2 GiB
/// where that cannot be read.
fn default_pending_audio_mib() -> u64 {
    crate::mem_total_kib().map_or(2048, |k| (k / 1024 / 4).max(256))
}

/// Raises the soft open-files limit towards `wanted` (at most the hard limit), so that
/// `--max-connections` rather than `EMFILE` bounds the connections; warns when it cannot.
fn raise_open_files(wanted: usize) {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: plain libc calls on a valid, initialised struct.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return;
        }
        let wanted = wanted as libc::rlim_t;
        if lim.rlim_cur < wanted {
            let raised = libc::rlimit {
                rlim_cur: wanted.min(lim.rlim_max),
                rlim_max: lim.rlim_max,
            };
            // SAFETY: as above.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                lim.rlim_cur = raised.rlim_cur;
            }
        }
        if lim.rlim_cur < wanted {
            tracing::warn!(
                open_files = lim.rlim_cur,
                wanted,
                "the open-files limit is below max_connections + max_streams + 256; \
                 lower --max-connections or raise `ulimit -n`"
            );
        }
    }
    #[cfg(not(unix))]
    let _ = wanted;
}

#[cfg(test)]
mod tests {
    use super::*;
    use dicta_core::Word;

    /// The server promises clients the engine's event JSON, field for field.
    #[test]
    fn stream_events_serialise_like_engine_events() {
        for kind in [EventKind::Partial, EventKind::Final] {
            let event = Event {
                kind,
                text: "hello world".into(),
                start: 0.5,
                end: 1.25,
                words: vec![
                    Word {
                        speaker: None,
                        word: "hello".into(),
                        start: 0.5,
                        end: 0.9,
                        probability: Some(0.75),
                    },
                    Word {
                        speaker: None,
                        word: "world".into(),
                        start: 0.9,
                        end: 1.25,
                        probability: None,
                    },
                ],
            };
            let engine = serde_json::to_value(&event).unwrap();
            let server = serde_json::to_value(&stream_events(vec![event])[0]).unwrap();
            assert_eq!(engine, server);
        }
    }
}
