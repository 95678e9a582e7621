//! OpenAI response formats: `json`, `text`, `srt`, `vtt`, `verbose_json`, `diarized_json`.

use std::str::FromStr;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
// Subtitle layouts are shared with the CLI's output files.
use dicta_core::format::{to_srt as srt, to_vtt as vtt};
use dicta_core::{Error, Result, Segment, Transcript};
use serde_json::{json, Value};

use crate::backend::Task;
use crate::languages::language_name;

/// The `response_format` form field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ResponseFormat {
    /// `{"text": ...}`.
    #[default]
    Json,
    /// The text alone.
    Text,
    /// SubRip subtitles.
    Srt,
    /// WebVTT subtitles.
    Vtt,
    /// Task, language, duration, text, segments and (when asked) words.
    VerboseJson,
    /// OpenAI's diarized transcription (`gpt-4o-transcribe-diarize`'s format): text and
    /// segments labelled by speaker `A`, `B`, …; asks for diarization.
    DiarizedJson,
}

impl FromStr for ResponseFormat {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "json" => Self::Json,
            "text" => Self::Text,
            "srt" => Self::Srt,
            "vtt" => Self::Vtt,
            "verbose_json" => Self::VerboseJson,
            "diarized_json" => Self::DiarizedJson,
            other => {
                return Err(Error::invalid_input(format!(
                    "response_format must be one of json, text, srt, vtt, verbose_json, \
                     diarized_json; got {other:?}"
                )))
            }
        })
    }
}

/// Which timestamp granularities `verbose_json` includes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Granularity {
    /// Include `segments`.
    pub segment: bool,
    /// Include `words`.
    pub word: bool,
}

impl Default for Granularity {
    /// OpenAI's default: segments only.
    fn default() -> Self {
        Self {
            segment: true,
            word: false,
        }
    }
}

/// A segment's text as a streamed delta (OpenAI's `transcript.text.delta` and the realtime
/// transcription deltas): the first of an answer without its leading space, so that the
/// deltas put together are the answer's trimmed text.
pub(crate) fn delta_text(s: &Segment, first: bool) -> &str {
    if first {
        s.text.trim_start()
    } else {
        &s.text
    }
}

/// OpenAI's `logprobs` (`include[]=logprobs`): every text token of `segments` in order,
/// `{"token", "logprob", "bytes"}`.
pub(crate) fn logprobs(segments: &[Segment]) -> Value {
    json!(segments
        .iter()
        .flat_map(|s| &s.token_logprobs)
        .collect::<Vec<_>>())
}

/// Renders a transcript in the requested format (`logprobs`: with the `json` format's
/// `logprobs`, see [`logprobs`]).
pub(crate) fn render(
    format: ResponseFormat,
    t: &Transcript,
    task: Task,
    granularity: Granularity,
    logprobs: bool,
) -> Response {
    match format {
        ResponseFormat::Json => {
            let mut v = json!({ "text": t.text.trim() });
            if logprobs {
                v["logprobs"] = self::logprobs(&t.segments);
            }
            with_warnings(&mut v, t);
            Json(v).into_response()
        }
        ResponseFormat::Text => plain(
            dicta_core::format::to_text(&t.text, &t.segments),
            "text/plain; charset=utf-8",
        ),
        ResponseFormat::Srt => plain(srt(&segments_or_whole(t)), "text/plain; charset=utf-8"),
        ResponseFormat::Vtt => plain(vtt(&segments_or_whole(t)), "text/vtt; charset=utf-8"),
        ResponseFormat::VerboseJson => Json(verbose_json(t, task, granularity)).into_response(),
        ResponseFormat::DiarizedJson => Json(diarized_json(t)).into_response(),
    }
}

/// OpenAI's speaker labels for Dicta's (`SPEAKER_00`, …): `A`, `B`, … in the order speakers
/// first speak (`Z`, then `AA`); a segment without a speaker is `unknown`.
#[derive(Debug, Default)]
pub(crate) struct SpeakerLetters(Vec<String>);

impl SpeakerLetters {
    pub fn label(&mut self, speaker: Option<&str>) -> String {
        let Some(who) = speaker else {
            return "unknown".into();
        };
        let i = match self.0.iter().position(|s| s == who) {
            Some(i) => i,
            None => {
                self.0.push(who.to_string());
                self.0.len() - 1
            }
        };
        // Bijective base 26: 0 → A, 25 → Z, 26 → AA.
        let (mut n, mut out) = (i + 1, Vec::new());
        while n > 0 {
            n -= 1;
            out.push(b'A' + (n % 26) as u8);
            n /= 26;
        }
        out.reverse();
        String::from_utf8(out).unwrap_or_default()
    }
}

/// One segment of `diarized_json` (also the `transcript.text.segment` stream event).
pub(crate) fn diarized_segment(index: usize, s: &Segment, speaker: String) -> Value {
    json!({
        "type": "transcript.text.segment",
        "id": format!("seg_{index}"),
        "start": s.start,
        "end": s.end,
        "text": s.text.trim(),
        "speaker": speaker,
    })
}

/// OpenAI's `diarized_json`: task, duration, text, the segments with their speakers, and the
/// duration as usage.
pub(crate) fn diarized_json(t: &Transcript) -> Value {
    let mut letters = SpeakerLetters::default();
    let segments: Vec<Value> = segments_or_whole(t)
        .iter()
        .enumerate()
        .map(|(i, s)| diarized_segment(i, s, letters.label(s.speaker.as_deref())))
        .collect();
    let mut v = json!({
        "task": "transcribe",
        "duration": t.duration,
        "text": t.text.trim(),
        "segments": segments,
        "usage": {"type": "duration", "seconds": t.duration},
    });
    with_warnings(&mut v, t);
    v
}

fn plain(body: String, content_type: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The transcript's segments, or one segment spanning the whole audio when the backend gave
/// none but there is text (so subtitles are never silently empty).
fn segments_or_whole(t: &Transcript) -> Vec<Segment> {
    if t.segments.is_empty() && !t.text.trim().is_empty() {
        vec![Segment::new(0.0, t.duration, t.text.clone())]
    } else {
        t.segments.clone()
    }
}

/// Adds `warnings` (an input read only in part) to a JSON answer; sound inputs keep
/// OpenAI's exact shape.
fn with_warnings(v: &mut Value, t: &Transcript) {
    if !t.warnings.is_empty() {
        v["warnings"] = json!(t.warnings);
    }
}

/// OpenAI's `verbose_json`. `seek` is the start of the segment's 30 s window in 10 ms frames
/// (Whisper's; for models without windows, the segment's own start). Fields a CTC model lacks
/// are reported as 0.
/// `language` is the spoken language's name, or for a translation (as OpenAI's
/// `TranslationVerbose`) the output's, always `english`, with the spoken one in
/// `source_language`; `language_probability` (faster-whisper's) is added where a multilingual
/// model detected the spoken language.
pub(crate) fn verbose_json(t: &Transcript, task: Task, g: Granularity) -> Value {
    let spoken = t
        .language
        .as_deref()
        .map(language_name)
        .unwrap_or("unknown");
    let mut v = json!({
        "task": task.as_str(),
        "language": if task == Task::Translate { "english" } else { spoken },
        "duration": t.duration,
        "text": t.text.trim(),
    });
    if task == Task::Translate {
        v["source_language"] = json!(spoken);
    }
    if let Some(p) = t.language_probability {
        v["language_probability"] = json!(p);
    }
    with_warnings(&mut v, t);
    if g.segment {
        let segments: Vec<Value> = segments_or_whole(t)
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut seg = json!({
                    "id": i,
                    "seek": s.seek.map_or((s.start * 100.0).round() as i64, i64::from),
                    "start": s.start,
                    "end": s.end,
                    "text": s.text,
                    "tokens": s.tokens,
                    "temperature": s.temperature.unwrap_or(0.0),
                    "avg_logprob": s.avg_logprob.unwrap_or(0.0),
                    "compression_ratio": s.compression_ratio.unwrap_or(0.0),
                    "no_speech_prob": s.no_speech_prob.unwrap_or(0.0),
                });
                if let Some(who) = &s.speaker {
                    seg["speaker"] = json!(who);
                }
                if let Some(c) = s.channel {
                    seg["channel"] = json!(c);
                }
                seg
            })
            .collect();
        v["segments"] = Value::Array(segments);
    }
    if g.word {
        let words: Vec<Value> = t
            .segments
            .iter()
            .flat_map(|s| &s.words)
            .map(|w| {
                let mut v = json!({ "word": w.word.trim(), "start": w.start, "end": w.end });
                if let Some(who) = &w.speaker {
                    v["speaker"] = json!(who);
                }
                v
            })
            .collect();
        v["words"] = Value::Array(words);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use dicta_core::Word;

    fn transcript() -> Transcript {
        let mut s1 = Segment::new(0.0, 2.5, " Hello there.");
        s1.words = vec![
            Word {
                speaker: None,
                word: " Hello".into(),
                start: 0.0,
                end: 0.9,
                probability: Some(0.9),
            },
            Word {
                speaker: None,
                word: " there.".into(),
                start: 1.0,
                end: 2.5,
                probability: None,
            },
        ];
        s1.avg_logprob = Some(-0.25);
        s1.tokens = vec![50364, 2425];
        let s2 = Segment::new(3661.0015, 3662.5, " Bye.");
        Transcript {
            id: "a".into(),
            audio: "a.wav".into(),
            text: " Hello there. Bye.".into(),
            language: Some("en".into()),
            language_probability: None,
            all_language_probs: None,
            duration: 3663.0,
            segments: vec![s1, s2],
            warnings: Vec::new(),
        }
    }

    #[test]
    fn srt_and_vtt_follow_their_specs() {
        let t = transcript();
        assert_eq!(
            srt(&t.segments),
            "1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n\
             2\n01:01:01,002 --> 01:01:02,500\nBye.\n\n"
        );
        assert_eq!(
            vtt(&t.segments),
            "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello there.\n\n\
             01:01:01.002 --> 01:01:02.500\nBye.\n\n"
        );
    }

    #[test]
    fn speakers_are_lettered_in_order_of_first_appearance() {
        let mut l = SpeakerLetters::default();
        assert_eq!(l.label(Some("SPEAKER_03")), "A");
        assert_eq!(l.label(Some("SPEAKER_00")), "B");
        assert_eq!(l.label(Some("SPEAKER_03")), "A");
        assert_eq!(l.label(None), "unknown");
        for i in 2..26 {
            l.label(Some(&format!("S{i}")));
        }
        assert_eq!(l.label(Some("S25")), "Z");
        assert_eq!(l.label(Some("S26")), "AA");
        assert_eq!(l.label(Some("S27")), "AB");
    }

    #[test]
    fn verbose_json_has_openai_fields_and_words_on_request() {
        let t = transcript();
        let v = verbose_json(&t, Task::Transcribe, Granularity::default());
        assert_eq!(v["task"], "transcribe");
        assert_eq!(v["language"], "english");
        assert!(v.get("source_language").is_none() && v.get("language_probability").is_none());
        assert_eq!(v["text"], "Hello there. Bye.");
        assert_eq!(v["segments"][0]["avg_logprob"], -0.25);
        assert_eq!(v["segments"][0]["tokens"], json!([50364, 2425]));
        assert_eq!(v["segments"][1]["id"], 1);
        assert_eq!(v["segments"][1]["seek"], 366100);
        assert!(v.get("words").is_none());
        // A Whisper segment reports its window's start.
        let mut w = t.clone();
        w.segments[1].seek = Some(364000);
        let v = verbose_json(&w, Task::Transcribe, Granularity::default());
        assert_eq!(v["segments"][1]["seek"], 364000);
        let g = Granularity {
            segment: false,
            word: true,
        };
        let mut t = t;
        t.language = Some("sv".into());
        t.language_probability = Some(0.75);
        let v = verbose_json(&t, Task::Translate, g);
        assert_eq!(v["task"], "translate");
        assert_eq!(v["language"], "english");
        assert_eq!(v["source_language"], "swedish");
        assert_eq!(v["language_probability"], 0.75);
        assert!(v.get("segments").is_none());
        assert_eq!(
            v["words"][1],
            json!({"word": "there.", "start": 1.0, "end": 2.5})
        );
    }

    #[test]
    fn subtitles_of_a_segmentless_transcript_span_the_audio() {
        let mut t = transcript();
        t.segments.clear();
        t.duration = 4.0;
        assert_eq!(
            srt(&segments_or_whole(&t)),
            "1\n00:00:00,000 --> 00:00:04,000\nHello there. Bye.\n\n"
        );
    }

    #[test]
    fn unknown_format_names_the_value() {
        assert_eq!(
            "verbose_json".parse::<ResponseFormat>().unwrap(),
            ResponseFormat::VerboseJson
        );
        assert!("xml"
            .parse::<ResponseFormat>()
            .unwrap_err()
            .message
            .contains("\"xml\""));
    }
}
