//! Keyword options from Python, read into the engine's option structs. Names are the CLI's
//! flags with underscores (and faster-whisper's where the CLI has none: `vad_parameters`,
//! `temperature` as a float or a list); an unknown name or a value of the wrong type is an
//! `InvalidInput` naming the option, never ignored.

use dicta_core::{Error, Result, VadOptions};
use dicta_engine::stream::SessionOptions;
use dicta_engine::whisper::{DecodeOptions, FinalWindow, Task};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The options `Engine.transcribe` takes.
pub(crate) const DECODE_OPTIONS: &[&str] = &[
    "beam_size",
    "best_of",
    "patience",
    "length_penalty",
    "temperature",
    "compression_ratio_threshold",
    "log_prob_threshold",
    "no_speech_threshold",
    "condition_on_previous_text",
    "prompt_reset_on_temperature",
    "initial_prompt",
    "prompt_every_window",
    "hotwords",
    "prefix",
    "repetition_penalty",
    "no_repeat_ngram_size",
    "without_timestamps",
    "suppress_blank",
    "suppress_tokens",
    "max_initial_timestamp",
    "language",
    "task",
    "max_new_tokens",
    "clip_timestamps",
    "hallucination_silence_threshold",
    "language_detection_threshold",
    "language_detection_segments",
    "multilingual",
    "seed",
    "word_timestamps",
    "token_logprobs",
    "prepend_punctuations",
    "append_punctuations",
    "vad_filter",
    "vad_parameters",
    "diarize",
    "num_speakers",
    "min_speakers",
    "max_speakers",
    "speaker_threshold",
    "channels",
    "final_window",
];

/// The keys of `vad_parameters` (faster-whisper's `VadOptions`).
const VAD_PARAMETERS: &[&str] = &[
    "threshold",
    "neg_threshold",
    "min_speech_duration_ms",
    "max_speech_duration_s",
    "min_silence_duration_ms",
    "speech_pad_ms",
];

/// The options `Engine.open_session` takes.
pub(crate) const SESSION_OPTIONS: &[&str] = &[
    "min_trailing_silence",
    "max_utterance",
    "language",
    "task",
    "initial_prompt",
    "hotwords",
    "vad",
    "vad_parameters",
];

/// `"transcribe"` or `"translate"`.
fn task(key: &str, v: &Bound<'_, PyAny>) -> Result<Task> {
    let t: String = get(key, v, "\"transcribe\" or \"translate\"")?;
    Task::parse(&t)
}

/// `v` as a `T`, or an `InvalidInput` naming `key`, what was expected and what was given.
fn get<'py, T: FromPyObjectOwned<'py>>(key: &str, v: &Bound<'py, PyAny>, what: &str) -> Result<T> {
    v.extract::<T>().map_err(|_| {
        let given = v
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into());
        Error::invalid_input(format!("{key} must be {what}, got {given}"))
    })
}

/// An unknown `what` ("option", "vad_parameters key") naming the known ones.
fn unknown(what: &str, key: &str, known: &[&str]) -> Error {
    Error::invalid_input(format!(
        "unknown {what} {key:?}; known: {}",
        known.join(", ")
    ))
}

/// `base` with the keyword options of one `transcribe` call applied, validated.
///
/// `vad_filter` / `diarize` switch the VAD and diarization on or off; `vad_parameters` and the
/// speaker-count options tune them (and imply neither).
pub(crate) fn decode_options(
    base: &DecodeOptions,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> Result<DecodeOptions> {
    let mut o = base.clone();
    let mut vad_on = o.vad.is_some();
    let mut vad = o.vad.clone().unwrap_or_default();
    let mut diarize_on = o.diarize.is_some();
    let mut dia = o.diarize.clone().unwrap_or_default();
    let Some(kwargs) = kwargs else {
        return Ok(o);
    };
    for (k, v) in kwargs.iter() {
        let key: String = get("option name", &k, "a str")?;
        let v = &v;
        let key = key.as_str();
        match key {
            "beam_size" => o.beam_size = get(key, v, "an int >= 1")?,
            "best_of" => o.best_of = get(key, v, "an int >= 1")?,
            "patience" => o.patience = get(key, v, "a float")?,
            "length_penalty" => o.length_penalty = get(key, v, "a float")?,
            "repetition_penalty" => o.repetition_penalty = get(key, v, "a float > 0")?,
            "no_repeat_ngram_size" => o.no_repeat_ngram_size = get(key, v, "an int >= 0")?,
            "temperature" => {
                o.temperatures = match v.extract::<f32>() {
                    Ok(t) => vec![t],
                    Err(_) => get(key, v, "a float or a list of floats")?,
                }
            }
            "compression_ratio_threshold" => {
                o.compression_ratio_threshold = get(key, v, "a float or None")?
            }
            "log_prob_threshold" => o.log_prob_threshold = get(key, v, "a float or None")?,
            "no_speech_threshold" => o.no_speech_threshold = get(key, v, "a float or None")?,
            "condition_on_previous_text" => o.condition_on_previous_text = get(key, v, "a bool")?,
            "prompt_reset_on_temperature" => {
                o.prompt_reset_on_temperature = get(key, v, "a float")?
            }
            "initial_prompt" => {
                // Text, or token ids taken as they are (faster-whisper's `Iterable[int]`).
                (o.initial_prompt, o.initial_prompt_tokens) = match v.extract::<Option<String>>() {
                    Ok(text) => (text, None),
                    Err(_) => (
                        None,
                        Some(get(
                            key,
                            v,
                            "a str, a list of token ids (ints >= 0) or None",
                        )?),
                    ),
                }
            }
            "prompt_every_window" => o.prompt_every_window = get(key, v, "a bool")?,
            "hotwords" => o.hotwords = get(key, v, "a str or None")?,
            "prefix" => o.prefix = get(key, v, "a str or None")?,
            "multilingual" => o.multilingual = get(key, v, "a bool")?,
            "language_detection_threshold" => {
                o.language_detection_threshold = get(key, v, "a float")?
            }
            "language_detection_segments" => {
                o.language_detection_segments = get(key, v, "an int >= 1")?
            }
            "hallucination_silence_threshold" => {
                o.hallucination_silence_threshold = get(key, v, "a float (seconds) or None")?
            }
            "clip_timestamps" => {
                // faster-whisper's forms: "0,10.5,20" or [0, 10.5, 20].
                let c = match v.extract::<String>() {
                    Ok(t) => dicta_core::ClipTimestamps::Text(t),
                    Err(_) => dicta_core::ClipTimestamps::List(get(
                        key,
                        v,
                        "a str of comma-separated seconds or a list of floats",
                    )?),
                };
                o.clip_timestamps = c.seconds()?;
            }
            "without_timestamps" => o.without_timestamps = get(key, v, "a bool")?,
            "suppress_blank" => o.suppress_blank = get(key, v, "a bool")?,
            "suppress_tokens" => o.suppress_tokens = get(key, v, "a list of ints")?,
            "max_initial_timestamp" => o.max_initial_timestamp = get(key, v, "a float")?,
            "language" => o.language = get(key, v, "a language code (str) or None")?,
            "task" => o.task = task(key, v)?,
            "max_new_tokens" => o.max_new_tokens = get(key, v, "an int or None")?,
            "final_window" => {
                let m: String = get(key, v, "\"auto\", \"finish\" or \"seek\"")?;
                o.final_window = FinalWindow::parse(&m).ok_or_else(|| {
                    Error::invalid_input(format!(
                        "final_window must be \"auto\", \"finish\" or \"seek\", got {m:?}"
                    ))
                })?
            }
            "seed" => o.seed = get(key, v, "an int >= 0")?,
            "word_timestamps" => o.word_timestamps = get(key, v, "a bool")?,
            "token_logprobs" => o.token_logprobs = get(key, v, "a bool")?,
            "prepend_punctuations" => o.prepend_punctuations = get(key, v, "a str")?,
            "append_punctuations" => o.append_punctuations = get(key, v, "a str")?,
            "vad_filter" => vad_on = get(key, v, "a bool")?,
            "vad_parameters" => {
                if !v.is_none() {
                    vad = vad_parameters(vad, v)?;
                }
            }
            "diarize" => diarize_on = get(key, v, "a bool")?,
            "channels" => {
                let c: String = get(key, v, "\"mix\" or \"split\"")?;
                o.channels = dicta_core::ChannelMode::parse(&c)?;
            }
            "num_speakers" => dia.num_speakers = get(key, v, "an int or None")?,
            "min_speakers" => dia.min_speakers = get(key, v, "an int or None")?,
            "max_speakers" => dia.max_speakers = get(key, v, "an int or None")?,
            "speaker_threshold" => dia.threshold = get(key, v, "a float")?,
            other => return Err(unknown("option", other, DECODE_OPTIONS)),
        }
    }
    o.vad = vad_on.then_some(vad);
    o.diarize = diarize_on.then_some(dia);
    o.validate()?;
    Ok(o)
}

/// faster-whisper's `vad_parameters`: a dict (or an object with those attributes, such as
/// faster-whisper's own `VadOptions`).
fn vad_parameters(mut vad: VadOptions, v: &Bound<'_, PyAny>) -> Result<VadOptions> {
    let items: Vec<(String, Bound<'_, PyAny>)> = match v.cast::<PyDict>() {
        Ok(d) => d
            .iter()
            .map(|(k, v)| Ok((get("vad_parameters key", &k, "a str")?, v)))
            .collect::<Result<_>>()?,
        Err(_) => VAD_PARAMETERS
            .iter()
            .filter_map(|k| v.getattr(*k).ok().map(|a| (k.to_string(), a)))
            .collect(),
    };
    for (key, v) in &items {
        let key = key.as_str();
        let name = format!("vad_parameters[{key:?}]");
        match key {
            "threshold" => vad.threshold = get(&name, v, "a float")?,
            "neg_threshold" => vad.neg_threshold = get(&name, v, "a float or None")?,
            "min_speech_duration_ms" => vad.min_speech_duration_ms = get(&name, v, "an int")?,
            "max_speech_duration_s" => vad.max_speech_duration_s = get(&name, v, "a float")?,
            "min_silence_duration_ms" => vad.min_silence_duration_ms = get(&name, v, "an int")?,
            "speech_pad_ms" => vad.speech_pad_ms = get(&name, v, "an int")?,
            other => return Err(unknown("vad_parameters key", other, VAD_PARAMETERS)),
        }
    }
    Ok(vad)
}

/// The endpointing of one streaming session: CTC models by `min_trailing_silence` /
/// `max_utterance` in seconds (`None` for never); Whisper and Moonshine by agreement, and with
/// `vad=True` where the engine's voice activity detector hears silence (`vad_parameters`:
/// faster-whisper's names over the endpointing defaults, 600 ms of silence, 300 ms of pad).
pub(crate) fn session_options(kwargs: Option<&Bound<'_, PyDict>>) -> Result<SessionOptions> {
    let mut o = SessionOptions::default();
    let (mut vad_on, mut vad) = (false, VadOptions::endpointing());
    if let Some(kwargs) = kwargs {
        for (k, v) in kwargs.iter() {
            let key: String = get("option name", &k, "a str")?;
            let e = &mut o.endpoint;
            match key.as_str() {
                "min_trailing_silence" => {
                    e.min_trailing_silence = get(&key, &v, "seconds (float) or None")?
                }
                "max_utterance" => e.max_utterance = get(&key, &v, "seconds (float) or None")?,
                "language" => o.decode.language = get(&key, &v, "a str or None")?,
                "task" => o.decode.task = Some(task(&key, &v)?),
                "initial_prompt" => o.decode.initial_prompt = get(&key, &v, "a str or None")?,
                "hotwords" => o.decode.hotwords = get(&key, &v, "a str or None")?,
                "vad" => vad_on = get(&key, &v, "a bool")?,
                "vad_parameters" => {
                    if !v.is_none() {
                        vad = vad_parameters(vad, &v)?;
                    }
                }
                other => return Err(unknown("session option", other, SESSION_OPTIONS)),
            }
        }
    }
    o.endpoint.validate()?;
    vad.validate()?;
    o.vad = vad_on.then_some(vad);
    Ok(o)
}
