//! Admission → validation → schedule, in one place.
//!
//! Every transcription route parses its transport into a [`TranscribeRequest`] and calls
//! [`Pipeline::run`]; nothing else admits, validates or queues work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use dicta_core::{decoding, Cancel, Error, ErrorKind, Result, Stats, Transcript};
use tokio::sync::{oneshot, Semaphore};

use crate::audio::{decode_inputs_as, AudioBudget, AudioLimits, RawInput};
use crate::backend::{BackendInput, RequestOptions, StreamOptions, Task, Temperature};
use crate::config::ServerConfig;
use crate::metrics::Metrics;
use crate::worker::Job;

/// A transcription request, whatever route it came from.
#[derive(Debug)]
pub(crate) struct TranscribeRequest {
    /// The server's id for this request.
    pub request_id: String,
    /// Inputs in caller order.
    pub inputs: Vec<RawInput>,
    /// Options shared by every input.
    pub options: RequestOptions,
    /// The resident model asked for (`None`: the default one).
    pub model: Option<String>,
    /// Where each input's segments go as they become final (a client reading them as they
    /// come), or `None`.
    pub segments: Option<crate::backend::SegmentSink>,
}

/// The answer: results in input order plus timing and grouping.
#[derive(Debug)]
pub(crate) struct TranscribeOutcome {
    /// One result per input, in input order.
    pub results: Vec<Result<Transcript>>,
    /// Seconds from admission to answer.
    pub request_seconds: f64,
    /// Seconds spent waiting for the batcher.
    pub queue_seconds: f64,
    /// Requests that shared the backend call.
    pub group_requests: usize,
    /// Inputs in the backend call.
    pub group_inputs: usize,
    /// Statistics of the backend call.
    pub stats: Arc<Stats>,
    /// The model that answered.
    pub model: String,
}

/// One resident model's batcher queue.
pub(crate) struct ModelQueue {
    /// The name clients pick it by.
    pub name: String,
    /// Its batcher (capacity at least `cfg.max_queue`).
    pub queue: mpsc::SyncSender<Job>,
    /// Its second batcher, for requests of more than `cfg.long_request_seconds` of audio
    /// (`None`: one lane).
    pub long_queue: Option<mpsc::SyncSender<Job>>,
    /// Whether it translates.
    pub translation: bool,
    /// The language codes it takes (`None`: not checked here).
    pub languages: Option<Vec<String>>,
}

/// `"whisper-1"`, the model name OpenAI clients send by default: the default model.
pub(crate) const OPENAI_DEFAULT_MODEL: &str = "whisper-1";

/// Index of the model `name` picks among `names` (`None`, empty or `"whisper-1"`: the first).
/// Errors: `InvalidInput` naming the known models.
pub(crate) fn pick_model<'a>(
    names: impl Iterator<Item = &'a str>,
    name: Option<&str>,
) -> Result<usize> {
    let names: Vec<&str> = names.collect();
    let name = name.map(str::trim).unwrap_or_default();
    if name.is_empty() || name == OPENAI_DEFAULT_MODEL {
        return Ok(0);
    }
    names.iter().position(|n| *n == name).ok_or_else(|| {
        Error::invalid_input(format!(
            "unknown model {name:?}; this server has {} (\"{OPENAI_DEFAULT_MODEL}\" or no model picks the first)",
            names.join(", ")
        ))
    })
}

/// Admission, validation and the queue to the batcher.
pub(crate) struct Pipeline {
    cfg: Arc<ServerConfig>,
    /// One permit per request admitted and not yet taken by the batcher.
    admission: Arc<Semaphore>,
    models: Vec<ModelQueue>,
    metrics: Arc<Metrics>,
    /// Decoded audio held by admitted requests, server-wide.
    budget: Arc<AudioBudget>,
}

/// Sets its flag when dropped: the request's future is gone, with or without its answer.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Keeps the `decoding_requests` gauge up while alive (also when the request is dropped).
struct Decoding<'a>(&'a Metrics);

impl<'a> Decoding<'a> {
    fn start(m: &'a Metrics) -> Self {
        m.decoding.inc();
        Self(m)
    }
}

impl Drop for Decoding<'_> {
    fn drop(&mut self) {
        self.0.decoding.dec();
    }
}

impl Pipeline {
    /// A pipeline feeding one batcher queue per model (the first is the default).
    pub fn new(cfg: Arc<ServerConfig>, models: Vec<ModelQueue>, metrics: Arc<Metrics>) -> Self {
        let admission = Arc::new(Semaphore::new(cfg.max_queue));
        let budget = AudioBudget::new(cfg.max_pending_audio_mib << 20);
        Self {
            budget,
            cfg,
            admission,
            models,
            metrics,
        }
    }

    /// Requests admitted and not yet taken by the batcher.
    pub fn queue_depth(&self) -> usize {
        self.cfg
            .max_queue
            .saturating_sub(self.admission.available_permits())
    }

    /// Bytes of decoded audio held by admitted requests now.
    pub fn pending_audio_bytes(&self) -> u64 {
        self.budget.used()
    }

    /// Admits, validates, decodes and queues `req`, then waits for the batcher's answer.
    /// Dropping the returned future (client gone, timeout) abandons the work.
    pub async fn run(&self, mut req: TranscribeRequest) -> Result<TranscribeOutcome> {
        let started = Instant::now();
        // Admission: a slot in the queue, held through decoding until the batcher takes it.
        let permit = self.admission.clone().try_acquire_owned().map_err(|_| {
            Error::new(
                ErrorKind::Overloaded,
                format!(
                    "max_queue is {}, and {} requests are already waiting; retry later",
                    self.cfg.max_queue,
                    self.queue_depth()
                ),
            )
        })?;
        // Validation. Whisper uses only a prompt's last tokens: keep the tail that holds them,
        // so a huge prompt costs nothing on the batch thread.
        if let Some(p) = req.options.prompt.as_mut() {
            let max = dicta_core::text::PROMPT_TAIL_BYTES;
            if p.len() > max {
                *p = dicta_core::text::prompt_tail(p, max).to_string();
            }
        }
        let m = pick_model(
            self.models.iter().map(|m| m.name.as_str()),
            req.model.as_deref(),
        )?;
        // Clips given as text are parsed once, here; the checks, the audio limit and the
        // backend then read the numbers.
        if let Some(c) = req.options.clip_timestamps.as_mut() {
            if let dicta_core::ClipTimestamps::Text(_) = c {
                *c = dicta_core::ClipTimestamps::List(c.seconds()?);
            }
        }
        self.validate(&req, self.models[m].translation)?;
        check_language(
            req.options.language.as_deref(),
            self.models[m].languages.as_deref(),
        )?;
        let limits = AudioLimits {
            max_audio_seconds: self.cfg.max_audio_seconds,
            max_decoded_bytes: self.cfg.max_decoded_bytes,
        };
        let decoding = Decoding::start(&self.metrics);
        let mut reservation = self.budget.reservation();
        let channels = req.options.channels;
        let (decoded, reservation) = tokio::task::spawn_blocking(move || {
            decode_inputs_as(req.inputs, limits, channels, &mut reservation)
                .map(|d| (d, reservation))
        })
        .await
        .map_err(|e| Error::internal(format!("audio decoding task failed: {e}")))??;
        // No await between here and the enqueue: once the gauge drops, the job is queued.
        drop(decoding);
        // Inputs that could not be read fail alone; the others go to the backend.
        let mut slots: Vec<std::result::Result<usize, Error>> = Vec::with_capacity(decoded.len());
        let mut good = Vec::with_capacity(decoded.len());
        // The note on each damaged file that could be read in part, by position in `good`.
        let mut warnings = Vec::with_capacity(decoded.len());
        for (id, loaded) in decoded {
            match loaded {
                Ok((l, channels)) => {
                    slots.push(Ok(good.len()));
                    good.push((id, l.samples, channels));
                    warnings.push(l.warning);
                }
                Err(e) => slots.push(Err(e)),
            }
        }
        if good.is_empty() {
            return Ok(TranscribeOutcome {
                results: slots.into_iter().filter_map(|s| s.err()).map(Err).collect(),
                request_seconds: started.elapsed().as_secs_f64(),
                queue_seconds: 0.0,
                group_requests: 0,
                group_inputs: 0,
                stats: Arc::new(Stats::default()),
                model: self.models[m].name.clone(),
            });
        }
        // Schedule. Dropping this future (client gone, timeout) sets `gone`, which cancels
        // what the backend has not done yet.
        let gone = Arc::new(AtomicBool::new(false));
        let _gone_on_drop = SetOnDrop(gone.clone());
        let cancel = Cancel::from_flag(gone);
        let inputs = good
            .into_iter()
            .map(|(id, samples, channels)| BackendInput {
                id,
                samples,
                channels,
                options: req.options.clone(),
                cancel: cancel.clone(),
                segments: req.segments.clone(),
            })
            .collect();
        let (tx, rx) = oneshot::channel();
        let job = Job {
            request_id: req.request_id,
            inputs,
            enqueued: Instant::now(),
            reply: tx,
            permit,
            reservation,
        };
        // A long request gets its own lane: it shares the model with the short ones behind it
        // instead of holding their batcher until it is done.
        let samples: usize = job.inputs.iter().map(|i| i.samples.len()).sum();
        let long =
            samples as f64 > self.cfg.long_request_seconds * f64::from(dicta_audio::SAMPLE_RATE);
        let queue = match (&self.models[m].long_queue, long) {
            (Some(q), true) => q,
            _ => &self.models[m].queue,
        };
        queue.try_send(job).map_err(|e| match e {
            // Unreachable while permits bound the queue; kept as an honest answer.
            mpsc::TrySendError::Full(_) => Error::new(
                ErrorKind::Overloaded,
                "the request queue is full; retry later",
            ),
            mpsc::TrySendError::Disconnected(_) => Error::new(
                ErrorKind::Overloaded,
                "the server is shutting down and takes no new work",
            ),
        })?;
        let reply = rx.await.map_err(|_| {
            Error::internal("the batcher stopped before answering (see the server log)")
        })?;
        let mut done = reply.results.into_iter();
        let results = slots
            .into_iter()
            .map(|slot| match slot {
                Ok(k) => done
                    .next()
                    .unwrap_or_else(|| Err(Error::internal("the backend returned too few results")))
                    .map(|mut t| {
                        t.warnings.extend(warnings[k].take());
                        t
                    }),
                Err(e) => Err(e),
            })
            .collect();
        Ok(TranscribeOutcome {
            results,
            request_seconds: started.elapsed().as_secs_f64(),
            queue_seconds: reply.queue_seconds,
            group_requests: reply.group_requests,
            group_inputs: reply.group_inputs,
            stats: reply.stats,
            model: self.models[m].name.clone(),
        })
    }

    fn validate(&self, req: &TranscribeRequest, translation: bool) -> Result<()> {
        let n = req.inputs.len();
        if n == 0 {
            return Err(Error::invalid_input("the request holds no inputs"));
        }
        if n > self.cfg.max_inputs {
            return Err(Error::limit(
                "max_inputs",
                format!("{} per request", self.cfg.max_inputs),
                format!("{n} inputs"),
            ));
        }
        validate_options(&req.options, translation)?;
        if let Some(c) = &req.options.clip_timestamps {
            // Every clip costs at least one 30 s window of encoder work, however short, so
            // clips count toward the request's audio limit at 30 s each.
            let clips = c.seconds()?.len().div_ceil(2) * n;
            let seconds = clips as f64 * 30.0;
            if seconds > self.cfg.max_audio_seconds {
                return Err(Error::limit(
                    "max_audio_seconds",
                    format!("{} s per request", self.cfg.max_audio_seconds),
                    format!("{clips} clips, which count as 30 s each"),
                ));
            }
        }
        Ok(())
    }
}

/// A `language` the model does not take: 400 listing the codes it does.
pub(crate) fn check_language(language: Option<&str>, known: Option<&[String]>) -> Result<()> {
    match (language, known) {
        (Some(l), Some(known)) if !known.iter().any(|k| k == l) => {
            Err(Error::invalid_input(if known == ["en"] {
                format!(
                    "this model is English-only: language must be \"en\" or left out, got {l:?}"
                )
            } else {
                format!(
                    "unknown language code {l:?}; this model knows: {}",
                    known.join(", ")
                )
            }))
        }
        _ => Ok(()),
    }
}

/// Most temperatures a request's schedule may list.
const MAX_TEMPERATURES: usize = 16;
/// Largest `beam_size` and `best_of` a request may ask for: each is a row of every decoder step
/// (and its cache) per window, so they bound a request's memory and time.
pub(crate) const MAX_BEAM: usize = 16;

/// Checks faster-whisper's decoding options of a request (ranges, and the bounds that keep one
/// request from taking the server's memory); the message names the option and its value.
fn validate_decoding(o: &RequestOptions) -> Result<()> {
    // The rules the engine applies too (dicta_core::decoding), refused here before any work.
    decoding::language_detection(
        o.language_detection_segments,
        o.language_detection_threshold,
    )?;
    decoding::hallucination_silence(
        o.hallucination_silence_threshold,
        o.word_timestamps,
        "word_timestamps=true, or timestamp_granularities[]=word on the OpenAI route",
    )?;
    decoding::clips_without_vad(o.clip_timestamps.is_some(), o.vad_filter)?;
    decoding::repetition_penalty(o.repetition_penalty)?;
    decoding::suppress_tokens(o.suppress_tokens.as_deref().unwrap_or_default())?;
    if let Some(c) = &o.clip_timestamps {
        // In time order and apart: overlapping clips would decode the same audio again and
        // again, past what the audio limit allows.
        let s = c.seconds()?;
        for (i, pair) in s.windows(2).enumerate() {
            if pair[1] < pair[0] {
                return Err(Error::invalid_input(format!(
                    "clip_timestamps must be in time order (each clip after the one before), \
                     got {} after {} (value {})",
                    pair[1],
                    pair[0],
                    i + 1
                )));
            }
        }
    }
    for (name, v) in [("beam_size", o.beam_size), ("best_of", o.best_of)] {
        if let Some(v) = v {
            if !(1..=MAX_BEAM).contains(&v) {
                return Err(Error::invalid_input(format!(
                    "{name} must be in 1..={MAX_BEAM}, got {v}"
                )));
            }
        }
    }
    if let Some(p) = o.patience {
        if !(p > 0.0 && p <= MAX_BEAM as f32) {
            return Err(Error::invalid_input(format!(
                "patience must be in (0, {MAX_BEAM}], got {p}"
            )));
        }
    }
    for (name, v) in [
        ("length_penalty", o.length_penalty),
        ("compression_ratio_threshold", o.compression_ratio_threshold),
        ("log_prob_threshold", o.log_prob_threshold),
        ("no_speech_threshold", o.no_speech_threshold),
        ("prompt_reset_on_temperature", o.prompt_reset_on_temperature),
    ] {
        if let Some(v) = v {
            if !v.is_finite() {
                return Err(Error::invalid_input(format!(
                    "{name} must be a finite number, got {v}"
                )));
            }
        }
    }
    if let Some(n) = o.no_repeat_ngram_size {
        if n > 448 {
            return Err(Error::invalid_input(format!(
                "no_repeat_ngram_size must be in 0..=448, got {n}"
            )));
        }
    }
    if let Some(t) = o.max_initial_timestamp {
        if !(0.0..=30.0).contains(&t) {
            return Err(Error::invalid_input(format!(
                "max_initial_timestamp must be between 0 and 30 seconds, got {t}"
            )));
        }
    }
    if let Some(n) = o.max_new_tokens {
        if !(1..=448).contains(&n) {
            return Err(Error::invalid_input(format!(
                "max_new_tokens must be in 1..=448, got {n}"
            )));
        }
    }
    Ok(())
}

/// Checks a stream's own options (`/v1/stream`, `StreamingRecognize`) as a request's are
/// checked: the language code, the prompt's and hotwords' limits. What the model cannot honour
/// is the backend's to refuse ([`crate::Backend::check_stream_options`]).
pub(crate) fn validate_stream_options(o: &StreamOptions) -> Result<()> {
    validate_options(
        &RequestOptions {
            language: o.language.clone(),
            prompt: o.prompt.clone(),
            hotwords: o.hotwords.clone(),
            ..RequestOptions::default()
        },
        false,
    )
}

/// Checks request options that do not need the model.
pub(crate) fn validate_options(o: &RequestOptions, translation: bool) -> Result<()> {
    let temperatures: &[f32] = match &o.temperature {
        Some(Temperature::One(t)) => std::slice::from_ref(t),
        Some(Temperature::Schedule(ts)) => {
            if ts.is_empty() || ts.len() > MAX_TEMPERATURES {
                return Err(Error::invalid_input(format!(
                    "temperature must be a number or a list of 1 to {MAX_TEMPERATURES} numbers, \
                     got {} numbers",
                    ts.len()
                )));
            }
            ts
        }
        None => &[],
    };
    if let Some(t) = temperatures.iter().find(|t| !(0.0..=1.0).contains(*t)) {
        return Err(Error::invalid_input(format!(
            "temperature must be between 0 and 1, got {t}"
        )));
    }
    validate_decoding(o)?;
    if let Some(lang) = &o.language {
        let ok = (2..=8).contains(&lang.len()) && lang.bytes().all(|b| b.is_ascii_alphabetic());
        if !ok {
            return Err(Error::invalid_input(format!(
                "language must be a language code such as \"en\", got {lang:?}"
            )));
        }
    }
    if let Some(v) = &o.vad_parameters {
        if !o.vad_filter {
            return Err(Error::invalid_input(
                "vad_parameters given without vad_filter=true",
            ));
        }
        v.validate()?;
    }
    if !o.diarize
        && (o.num_speakers.is_some() || o.min_speakers.is_some() || o.max_speakers.is_some())
    {
        return Err(Error::invalid_input(
            "num_speakers / min_speakers / max_speakers given without diarize=true",
        ));
    }
    for (name, v) in [
        ("num_speakers", o.num_speakers),
        ("min_speakers", o.min_speakers),
        ("max_speakers", o.max_speakers),
    ] {
        if let Some(v) = v {
            if !(1..=64).contains(&v) {
                return Err(Error::invalid_input(format!(
                    "{name} must be in 1..=64, got {v}"
                )));
            }
        }
    }
    if let Some(d) = o.diarize_options() {
        d.validate()?;
    }
    if o.task == Task::Translate && !translation {
        return Err(Error::invalid_input(
            "this model cannot translate (translation needs a multilingual Whisper model)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked_with_values_named() {
        let ok = RequestOptions::default();
        validate_options(&ok, false).unwrap();
        let hot = RequestOptions {
            temperature: Some(Temperature::One(1.5)),
            ..Default::default()
        };
        assert!(validate_options(&hot, true)
            .unwrap_err()
            .message
            .contains("1.5"));
        let lang = RequestOptions {
            language: Some("en; drop".into()),
            ..Default::default()
        };
        assert_eq!(
            validate_options(&lang, true).unwrap_err().kind,
            ErrorKind::InvalidInput
        );
        let tr = RequestOptions {
            task: Task::Translate,
            ..Default::default()
        };
        assert!(validate_options(&tr, false).is_err());
        validate_options(&tr, true).unwrap();
    }

    #[test]
    fn decoding_options_are_bounded_and_named() {
        let bad = [
            (
                RequestOptions {
                    beam_size: Some(0),
                    ..Default::default()
                },
                "beam_size",
            ),
            (
                RequestOptions {
                    beam_size: Some(MAX_BEAM + 1),
                    ..Default::default()
                },
                "beam_size",
            ),
            (
                RequestOptions {
                    best_of: Some(10_000),
                    ..Default::default()
                },
                "best_of",
            ),
            (
                RequestOptions {
                    patience: Some(f32::NAN),
                    ..Default::default()
                },
                "patience",
            ),
            (
                RequestOptions {
                    length_penalty: Some(f32::INFINITY),
                    ..Default::default()
                },
                "length_penalty",
            ),
            (
                RequestOptions {
                    temperature: Some(Temperature::Schedule(vec![0.2; MAX_TEMPERATURES + 1])),
                    ..Default::default()
                },
                "temperature",
            ),
            (
                RequestOptions {
                    max_new_tokens: Some(0),
                    ..Default::default()
                },
                "max_new_tokens",
            ),
            (
                RequestOptions {
                    repetition_penalty: Some(0.0),
                    ..Default::default()
                },
                "repetition_penalty",
            ),
            (
                RequestOptions {
                    no_repeat_ngram_size: Some(1000),
                    ..Default::default()
                },
                "no_repeat_ngram_size",
            ),
            (
                RequestOptions {
                    suppress_tokens: Some(vec![-2]),
                    ..Default::default()
                },
                "suppress_tokens",
            ),
        ];
        for (o, name) in bad {
            let e = validate_options(&o, false).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidInput);
            assert!(e.message.contains(name), "{name}: {}", e.message);
        }
        let ok = RequestOptions {
            beam_size: Some(MAX_BEAM),
            best_of: Some(1),
            temperature: Some(Temperature::Schedule(vec![0.0, 1.0])),
            max_new_tokens: Some(448),
            suppress_tokens: Some(vec![-1, 0, 51_863]),
            ..Default::default()
        };
        validate_options(&ok, false).unwrap();
    }

    #[test]
    fn languages_the_model_does_not_take_are_refused_listing_those_it_does() {
        let multi: Vec<String> = ["en", "de", "sv"].map(String::from).to_vec();
        check_language(Some("sv"), Some(&multi)).unwrap();
        check_language(None, Some(&multi)).unwrap();
        check_language(Some("xx"), None).unwrap();
        let e = check_language(Some("xx"), Some(&multi)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidInput);
        assert!(e.message.contains("\"xx\"") && e.message.contains("en, de, sv"));
        let e = check_language(Some("fr"), Some(&["en".to_string()])).unwrap_err();
        assert!(e.message.contains("English-only"), "{}", e.message);
    }
}
