//! The seam between the server and an inference engine.
//!
//! The server never links a tensor library: the `dicta` binary implements [`Backend`] over
//! `dicta_engine` and hands it to [`crate::serve`].

use dicta_core::{Error, Stats, Transcript, Word};

/// What the caller asked the model to do (the engine's own type: one parser everywhere).
pub use dicta_core::Task;

/// Per-request decoding options, shared by every input of a request.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RequestOptions {
    /// Language code (e.g. `"en"`); `None` lets a multilingual model detect it.
    pub language: Option<String>,
    /// Text that conditions the decoder (Whisper's initial prompt; `initial_prompt` is the
    /// same field under faster-whisper's name).
    #[serde(alias = "initial_prompt")]
    pub prompt: Option<String>,
    /// One temperature in [0, 1] (OpenAI's meaning: 0 keeps the server's fallback schedule,
    /// above 0 decodes at that temperature alone), or faster-whisper's list of temperatures
    /// tried in order (`[0.0]`: no fallback); `None` uses the server's schedule.
    pub temperature: Option<Temperature>,
    /// Whether word timings are wanted.
    pub word_timestamps: bool,
    /// Each segment's text tokens with their log-probabilities (Whisper; OpenAI's
    /// `include[]=logprobs`).
    pub token_logprobs: bool,
    /// Transcribe or translate.
    pub task: Task,
    /// Transcribe only the speech the voice activity detector finds (faster-whisper's
    /// `vad_filter`); times stay those of the original audio.
    pub vad_filter: bool,
    /// With `vad_filter`: detection options (faster-whisper's `vad_parameters`); `None` uses
    /// the defaults.
    pub vad_parameters: Option<dicta_core::VadOptions>,
    /// Put a speaker on every segment and word.
    pub diarize: bool,
    /// With `diarize`: the exact number of speakers, when known.
    pub num_speakers: Option<usize>,
    /// With `diarize`: at least this many speakers.
    pub min_speakers: Option<usize>,
    /// With `diarize`: at most this many speakers.
    pub max_speakers: Option<usize>,
    /// Mix the channels (default) or transcribe each on its own (`"split"`; segments carry
    /// their `channel`, and with `diarize` the speaker is the channel).
    pub channels: dicta_core::ChannelMode,
    /// faster-whisper's decoding options; each `None` keeps the server's default (`dicta
    /// serve`'s flags of the same names). Checked by `pipeline::validate_options`.
    ///
    /// Beam size at temperature 0 (1 = greedy).
    pub beam_size: Option<usize>,
    /// Samples drawn at each temperature above 0 (the best is kept).
    pub best_of: Option<usize>,
    /// Beam search stops after `round(beam_size · patience)` finished hypotheses.
    pub patience: Option<f32>,
    /// Hypotheses are ranked by log-probability / length^this.
    pub length_penalty: Option<f32>,
    /// Fallback to the next temperature above this gzip compression ratio.
    pub compression_ratio_threshold: Option<f32>,
    /// Fallback to the next temperature below this average token log-probability.
    pub log_prob_threshold: Option<f32>,
    /// A window is silence above this no-speech probability (with a low log-probability).
    pub no_speech_threshold: Option<f32>,
    /// Feed the previous window's text as the next window's prompt.
    pub condition_on_previous_text: Option<bool>,
    /// The previous text leaves the prompt after a window decoded above this temperature.
    pub prompt_reset_on_temperature: Option<f32>,
    /// One segment per window, without timestamp tokens.
    pub without_timestamps: Option<bool>,
    /// Blank / end-of-text may not be a window's first token.
    pub suppress_blank: Option<bool>,
    /// Token ids never sampled; -1 stands for the model's non-speech symbols.
    pub suppress_tokens: Option<Vec<i64>>,
    /// Latest first timestamp of a window, in seconds.
    pub max_initial_timestamp: Option<f32>,
    /// At most this many tokens per window.
    pub max_new_tokens: Option<usize>,
    /// Words every window is biased towards (faster-whisper's `hotwords`).
    pub hotwords: Option<String>,
    /// Text the transcript starts with, forced at the start of the first window
    /// (faster-whisper's `prefix`); Whisper models only.
    pub prefix: Option<String>,
    /// Logits of tokens already sampled in the window are divided (multiplied, when negative)
    /// by this.
    pub repetition_penalty: Option<f32>,
    /// No n-gram of this size repeats within a window.
    pub no_repeat_ngram_size: Option<usize>,
    /// Transcribe only these stretches (faster-whisper's `clip_timestamps`: seconds
    /// `start, end, …` as a list or one comma-separated text); Whisper models only, not with
    /// `vad_filter`.
    pub clip_timestamps: Option<dicta_core::ClipTimestamps>,
    /// With `word_timestamps`: a segment whose words look made up, with silence longer than
    /// this (seconds) around it, is dropped (faster-whisper's `hallucination_silence_threshold`).
    pub hallucination_silence_threshold: Option<f64>,
    /// Language detection stops at the first window more probable than this (faster-whisper's
    /// `language_detection_threshold`).
    pub language_detection_threshold: Option<f32>,
    /// Windows language detection reads (faster-whisper's `language_detection_segments`).
    pub language_detection_segments: Option<usize>,
    /// Detect the language of every window and decode it in that language (faster-whisper's
    /// `multilingual`).
    pub multilingual: Option<bool>,
}

/// A request's `temperature`: one value or a schedule (see [`RequestOptions::temperature`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum Temperature {
    /// One temperature (OpenAI's field).
    One(f32),
    /// Temperatures tried in order until a result passes the fallback thresholds.
    Schedule(Vec<f32>),
}

impl RequestOptions {
    /// These options with `fields` (`/transcribe` parameter names → JSON values) set over
    /// them, read as a `/transcribe` body's `parameters` are (an unknown name or a value of the
    /// wrong type is an `InvalidInput` starting with `what`). A field named by its alias
    /// (`initial_prompt`) replaces the option under its own name (`prompt`).
    pub fn overlaid(
        &self,
        fields: serde_json::Map<String, serde_json::Value>,
        what: &str,
    ) -> dicta_core::Result<Self> {
        let serde_json::Value::Object(mut all) =
            serde_json::to_value(self).map_err(|e| Error::internal(e.to_string()))?
        else {
            return Err(Error::internal("request options are not a JSON object"));
        };
        all.retain(|_, v| !v.is_null());
        for (alias, name) in [("initial_prompt", "prompt")] {
            if fields.contains_key(alias) {
                all.remove(name);
            }
        }
        all.extend(fields);
        serde_json::from_value(serde_json::Value::Object(all))
            .map_err(|e| Error::invalid_input(format!("{what}: {e}")))
    }

    /// The diarization this request asks for (`diarize` with its speaker counts), if any.
    pub fn diarize_options(&self) -> Option<dicta_core::DiarizeOptions> {
        self.diarize.then(|| dicta_core::DiarizeOptions {
            num_speakers: self.num_speakers,
            min_speakers: self.min_speakers,
            max_speakers: self.max_speakers,
            ..Default::default()
        })
    }
}

/// Receives one input's segments as they become final, in time order (their concatenation is
/// the transcript's `segments`), for a client that reads results as they come (the OpenAI
/// route's `stream=true`). Called on the backend's thread while its work waits: keep it short.
/// Compares equal to every other sink: it is not part of what a request means.
#[derive(Clone)]
pub struct SegmentSink(std::sync::Arc<SegmentFn>);

/// What a [`SegmentSink`] calls.
type SegmentFn = dyn Fn(&[dicta_core::Segment]) + Send + Sync;

impl SegmentSink {
    /// A sink calling `f` with each batch of final segments.
    pub fn new(f: impl Fn(&[dicta_core::Segment]) + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(f))
    }

    /// Hands over segments that are now final.
    pub fn send(&self, segments: &[dicta_core::Segment]) {
        (self.0)(segments)
    }
}

impl std::fmt::Debug for SegmentSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SegmentSink")
    }
}

impl PartialEq for SegmentSink {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// One recording handed to the backend.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendInput {
    /// The caller's id for this input. Not unique across a group: several requests may reuse
    /// the same id; the server matches results to requests by position, never by id.
    pub id: String,
    /// Mono samples at 16 kHz (already decoded and resampled by the server); with
    /// `options.channels` split, the `channels` channels one after another, each
    /// `samples.len() / channels` long.
    pub samples: Vec<f32>,
    /// How many channels `samples` holds (1 unless the request splits channels).
    pub channels: usize,
    /// The options of the request this input belongs to.
    pub options: RequestOptions,
    /// Set once the request's client has gone (disconnected, or its `request_timeout_s`
    /// passed): a backend should stop work nobody waits for at its next batch boundary.
    pub cancel: dicta_core::Cancel,
    /// Where the input's segments go as they become final, when its client reads them as
    /// they come; a backend that cannot tell may leave it unused (the route then sends every
    /// segment with the result).
    pub segments: Option<SegmentSink>,
}

/// The answer to one [`Backend::transcribe`] call.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendOutput {
    /// One result per input, in input order. A failed input does not fail its neighbours.
    pub results: Vec<dicta_core::Result<Transcript>>,
    /// Statistics of the whole call (shared by every request in the group).
    pub stats: Stats,
}

/// What the server needs from an engine.
pub trait Backend: Send + Sync + 'static {
    /// Transcribes a group of inputs in ONE engine call; results in input order.
    ///
    /// Called from the server's dedicated batcher thread, never from the async runtime, so it
    /// may block for as long as the model needs. A panic is caught and reported as an internal
    /// error to every request of the group; the batcher lives on.
    fn transcribe(&self, inputs: Vec<BackendInput>) -> BackendOutput;

    /// The name clients pick this model by (OpenAI's `model` field, `/transcribe`'s `model`,
    /// the stream's `model`), listed by `GET /v1/models`.
    fn model_name(&self) -> String;

    /// Runs the model once so that the first real request does not pay for lazy
    /// initialisation. `/readyz` answers 200 only after this succeeded; a failure stops the
    /// server with the error.
    fn warm_up(&self) -> dicta_core::Result<()>;

    /// Whether [`Task::Translate`] is supported (multilingual Whisper models). When false,
    /// `/v1/audio/translations` and `task: "translate"` answer 400 without calling the backend.
    fn supports_translation(&self) -> bool {
        false
    }

    /// The language codes the model takes (`["en"]` for English-only models, the 99 codes of a
    /// multilingual Whisper), or `None` when it does not say. With a list, a request naming
    /// another language gets 400 listing them, without calling the backend.
    fn languages(&self) -> Option<Vec<String>> {
        None
    }

    /// Whether [`Backend::open_stream`] works. When false, `GET /v1/stream` answers 501 before
    /// upgrading, without calling the backend.
    fn supports_streaming(&self) -> bool {
        false
    }

    /// Opens a live recognition session (one per WebSocket).
    ///
    /// The session's calls block while the model runs; the server calls them on tokio's
    /// blocking pool, one at a time per session, never on the runtime. Dropping the session
    /// ends it (the client left). Errors: `Overloaded` when the engine has no room for another
    /// session, `InvalidInput` for options it cannot honour.
    fn open_stream(&self, options: StreamOptions) -> dicta_core::Result<Box<dyn StreamSession>> {
        let _ = options;
        Err(Error::invalid_input(format!(
            "model {} does not support streaming",
            self.model_name()
        )))
    }

    /// Opens a detector of speech starts and stops over a live stream (the realtime route's
    /// turn detection), with `options`' threshold and silence; `InvalidInput` when the backend
    /// has no voice activity detector. Its calls run on the blocking pool, as a session's.
    fn open_turn_detector(
        &self,
        options: &dicta_core::VadOptions,
    ) -> dicta_core::Result<Box<dyn TurnDetector>> {
        let _ = options;
        Err(Error::invalid_input(
            "turn detection needs a voice activity detector, and none is loaded (dicta serve: \
             --vad-model)",
        ))
    }

    /// Checks stream options without opening a session, so that options the backend cannot
    /// honour (e.g. a language its streams cannot decode in) are refused when they are set —
    /// at the WebSocket upgrade or on the `config` message — not later, on the first audio.
    /// [`Backend::open_stream`] must refuse the same options.
    fn check_stream_options(&self, options: &StreamOptions) -> dicta_core::Result<()> {
        let _ = options;
        Ok(())
    }
}

/// Per-session options of a live stream (from the WebSocket's query string or `config` message).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamOptions {
    /// Language code (e.g. `"en"`); `None` keeps the backend's default.
    pub language: Option<String>,
    /// The resident model the stream uses (`None`: the default; the server picks the backend
    /// by it before calling [`Backend::open_stream`]).
    pub model: Option<String>,
    /// Transcribe or translate (`None`: the server's task, transcription).
    pub task: Option<Task>,
    /// Text the stream's decodes take as previous context (Whisper's `initial_prompt`).
    pub prompt: Option<String>,
    /// Words the stream's decodes are biased towards (Whisper's `hotwords`).
    pub hotwords: Option<String>,
    /// Whether the stream ends utterances where the voice activity detector hears silence
    /// (`None`: the server's default, `dicta serve --stream-vad`).
    pub vad: Option<bool>,
    /// The detector's options when it does (`None`: [`dicta_core::VadOptions::endpointing`]).
    pub vad_parameters: Option<dicta_core::VadOptions>,
}

/// Whether an event's text may still change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamEventKind {
    /// The current best guess of text not final yet; the next partial or final replaces it.
    Partial,
    /// Text that will not change.
    Final,
}

/// A recognition event of a live stream. Serialises exactly like `dicta_engine::stream::Event`:
/// `{"type":"partial"|"final","text":…,"start":…,"end":…,"words":[{"word","start","end"}…]}`,
/// times in seconds from the start of the utterance (since the last `end`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StreamEvent {
    /// Partial or final.
    #[serde(rename = "type")]
    pub kind: StreamEventKind,
    /// The text (words joined by single spaces).
    pub text: String,
    /// Start of the first word (seconds).
    pub start: f64,
    /// End of the last word (seconds).
    pub end: f64,
    /// The words with times.
    pub words: Vec<Word>,
}

/// A change of a live stream's voice activity (positions in 16 kHz samples since the detector
/// opened).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEvent {
    /// Speech began at `start`.
    Started {
        /// First sample of its speech.
        start: u64,
    },
    /// The speech that began at `start` ended at `speech_end`; the silence after it decided
    /// so at `at`.
    Stopped {
        /// First sample of its speech.
        start: u64,
        /// Where the speech ended.
        speech_end: u64,
        /// Where the end was decided.
        at: u64,
    },
}

/// Speech starts and stops of one live stream ([`Backend::open_turn_detector`]).
pub trait TurnDetector: Send + 'static {
    /// Runs on the stream's next 16 kHz samples (any count); returns the turns they decided,
    /// in order. Blocks while the detector runs.
    fn push(&mut self, samples: &[f32]) -> dicta_core::Result<Vec<TurnEvent>>;
}

/// One live recognition session: 16 kHz mono samples in, events out.
pub trait StreamSession: Send + 'static {
    /// Feeds a block of 16 kHz mono samples (any length, possibly empty) and returns the new
    /// events (partials and finals). Blocks while the model runs. An error loses this block's
    /// result but leaves the session usable.
    fn feed(&mut self, samples: &[f32]) -> dicta_core::Result<Vec<StreamEvent>>;

    /// Ends the utterance: flushes the audio not yet decoded, returns the final events and
    /// resets the session, which can then be fed the next utterance (times restart at 0).
    fn end(&mut self) -> dicta_core::Result<Vec<StreamEvent>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every option set survives [`RequestOptions::overlaid`] with no fields, whatever it holds
    /// (an infinite VAD duration is `null` in JSON), and fields override by name or alias.
    #[test]
    fn options_round_trip_through_an_overlay() {
        let full = RequestOptions {
            language: Some("de".into()),
            prompt: Some("Hallo".into()),
            temperature: Some(Temperature::One(0.0)),
            word_timestamps: true,
            task: Task::Translate,
            vad_filter: true,
            vad_parameters: Some(dicta_core::VadOptions::default()),
            diarize: true,
            num_speakers: Some(2),
            beam_size: Some(3),
            suppress_tokens: Some(vec![-1, 5]),
            clip_timestamps: Some(dicta_core::ClipTimestamps::Text("1,2".into())),
            ..RequestOptions::default()
        };
        assert_eq!(full.overlaid(Default::default(), "t").unwrap(), full);
        let schedule = RequestOptions {
            temperature: Some(Temperature::Schedule(vec![0.0])),
            ..RequestOptions::default()
        };
        assert_eq!(
            schedule.overlaid(Default::default(), "t").unwrap(),
            schedule
        );
        let fields = serde_json::json!({"initial_prompt": "Servus", "beam_size": 1});
        let serde_json::Value::Object(fields) = fields else {
            unreachable!()
        };
        let o = full.overlaid(fields, "t").unwrap();
        assert_eq!(o.prompt.as_deref(), Some("Servus"));
        assert_eq!(o.beam_size, Some(1));
        let e = full
            .overlaid(
                [("beam_sise".to_string(), serde_json::json!(1))]
                    .into_iter()
                    .collect(),
                "what",
            )
            .unwrap_err();
        assert!(
            e.message.starts_with("what: unknown field `beam_sise`"),
            "{}",
            e.message
        );
    }
}
