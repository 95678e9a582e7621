//! Text renderings of transcripts shared by every front end (CLI files, server responses):
//! SubRip (`.srt`) and WebVTT (`.vtt`) subtitles, as OpenAI's API and faster-whisper users expect,
//! and the per-input JSON result of the CLI and the Python package.

use serde_json::{json, Value};

use crate::{Result, Segment, Transcript};

/// One input's result as the CLI's `--format json` writes it (and the Python package returns it):
/// `{"id","audio","text","language"[,"language_probability"],"duration","segments":[{"start","end","text"[,"words"]}],"error":null}`
/// (`language_probability` where a multilingual model detected the language),
/// or on failure `text`/`language`/`duration` null, no segments and
/// `"error":{"type","message"}`. `verbose` (`verbose_json`) keeps every segment field.
pub fn result_json(id: &str, audio: &str, r: &Result<Transcript>, verbose: bool) -> Value {
    match r {
        Ok(t) => {
            let segments: Vec<Value> = t
                .segments
                .iter()
                .map(|s| {
                    if verbose {
                        serde_json::to_value(s).unwrap_or(Value::Null)
                    } else {
                        let mut v = json!({"start": s.start, "end": s.end, "text": s.text});
                        if !s.words.is_empty() {
                            // Asked for with word timestamps.
                            v["words"] = json!(s.words);
                        }
                        if let Some(c) = s.channel {
                            // `--channels split`.
                            v["channel"] = json!(c);
                        }
                        if !s.token_logprobs.is_empty() {
                            // Asked for (`token_logprobs`).
                            v["token_logprobs"] = json!(s.token_logprobs);
                        }
                        v
                    }
                })
                .collect();
            let mut out = json!({
                "id": id, "audio": audio, "text": t.text, "language": t.language,
                "duration": t.duration, "segments": segments, "error": null,
            });
            // Only where a multilingual model detected the language.
            if let Some(p) = t.language_probability {
                out["language_probability"] = json!(p);
            }
            if let Some(all) = &t.all_language_probs {
                out["all_language_probs"] = json!(all);
            }
            // Only on inputs read in part, so that sound inputs keep their shape.
            if !t.warnings.is_empty() {
                out["warnings"] = json!(t.warnings);
            }
            out
        }
        Err(e) => json!({
            "id": id, "audio": audio, "text": null, "language": null,
            "duration": null, "segments": [],
            "error": {"type": e.kind.as_str(), "message": e.message},
        }),
    }
}

/// `HH:MM:SS,mmm` (SRT) or `HH:MM:SS.mmm` (VTT); negative times clamp to zero.
pub fn timestamp(seconds: f64, decimal_marker: char) -> String {
    let total_ms = (seconds.max(0.0) * 1000.0).round() as u64;
    let (h, rem) = (total_ms / 3_600_000, total_ms % 3_600_000);
    let (m, rem) = (rem / 60_000, rem % 60_000);
    let (s, ms) = (rem / 1000, rem % 1000);
    format!("{h:02}:{m:02}:{s:02}{decimal_marker}{ms:03}")
}

/// The label a segment's cue carries: its speaker (`SPEAKER_00`, with diarization), else its
/// channel (`CH0`, `CH1`, … with `--channels split`), else none.
pub fn label(s: &Segment) -> Option<String> {
    match (&s.speaker, s.channel) {
        (Some(who), _) => Some(who.clone()),
        (None, Some(c)) => Some(format!("CH{c}")),
        (None, None) => None,
    }
}

/// A segment's text, trimmed, after `[SPEAKER_00] ` when it has a speaker (or `[CH1] ` when it
/// has a channel and no speaker).
pub fn cue_text(s: &Segment) -> String {
    match label(s) {
        Some(who) => format!("[{who}] {}", s.text.trim()),
        None => s.text.trim().to_string(),
    }
}

/// Plain text: the transcript's text, or with speakers (or channels) one `[SPEAKER_00] …`
/// (`[CH0] …`) line per change of label.
pub fn to_text(text: &str, segments: &[Segment]) -> String {
    if segments.iter().all(|s| label(s).is_none()) {
        return format!("{}\n", text.trim());
    }
    let mut out = String::new();
    let mut last: Option<String> = None;
    for s in segments {
        let who = label(s);
        if who != last || last.is_none() {
            if !out.is_empty() {
                out.push('\n');
            }
            if let Some(w) = &who {
                out.push_str(&format!("[{w}]"));
            }
            last = who;
        }
        out.push(' ');
        out.push_str(s.text.trim());
    }
    out.push('\n');
    out
}

/// SubRip subtitles: numbered cues from 1, one per segment, text trimmed (with a
/// `[SPEAKER_00]` prefix when diarized).
pub fn to_srt(segments: &[Segment]) -> String {
    let mut out = String::new();
    for (i, s) in segments.iter().enumerate() {
        out.push_str(&format!(
            "{}\n{} --> {}\n{}\n\n",
            i + 1,
            timestamp(s.start, ','),
            timestamp(s.end, ','),
            cue_text(s)
        ));
    }
    out
}

/// WebVTT subtitles: `WEBVTT` header, one cue per segment.
pub fn to_vtt(segments: &[Segment]) -> String {
    let mut out = String::from("WEBVTT\n\n");
    for s in segments {
        out.push_str(&format!(
            "{} --> {}\n{}\n\n",
            timestamp(s.start, '.'),
            timestamp(s.end, '.'),
            cue_text(s)
        ));
    }
    out
}

#[cfg(test)]
mod speaker_tests {
    use super::*;

    #[test]
    fn speakers_prefix_cues_and_text_lines() {
        let mut a = Segment::new(0.0, 1.0, " Hello there.");
        a.speaker = Some("SPEAKER_00".into());
        let mut b = Segment::new(1.0, 2.0, " Hi.");
        b.speaker = Some("SPEAKER_01".into());
        let mut c = Segment::new(2.0, 3.0, " How are you?");
        c.speaker = Some("SPEAKER_01".into());
        let segs = [a, b, c];
        assert!(to_srt(&segs).contains("\n[SPEAKER_01] Hi.\n"));
        assert!(to_vtt(&segs).contains("\n[SPEAKER_00] Hello there.\n"));
        assert_eq!(
            to_text("ignored", &segs),
            "[SPEAKER_00] Hello there.\n[SPEAKER_01] Hi. How are you?\n"
        );
        assert_eq!(
            to_text(" plain ", &[Segment::new(0.0, 1.0, "x")]),
            "plain\n"
        );
    }
}

#[cfg(test)]
mod channel_tests {
    use super::*;

    #[test]
    fn channels_label_cues_and_lines_and_json_when_no_speaker() {
        let mut a = Segment::new(0.0, 1.0, " Hello.");
        a.channel = Some(0);
        let mut b = Segment::new(0.5, 2.0, " Hi there.");
        b.channel = Some(1);
        let mut c = Segment::new(2.0, 3.0, " Bye.");
        c.channel = Some(1);
        let segs = [a.clone(), b, c];
        assert!(to_srt(&segs).contains("\n[CH1] Hi there.\n"));
        assert!(to_vtt(&segs).contains("\n[CH0] Hello.\n"));
        assert_eq!(to_text("x", &segs), "[CH0] Hello.\n[CH1] Hi there. Bye.\n");
        // A speaker (diarization) takes the place of the channel label.
        let mut d = a.clone();
        d.speaker = Some("SPEAKER_00".into());
        assert_eq!(cue_text(&d), "[SPEAKER_00] Hello.");
        let mut t: crate::Transcript = serde_json::from_value(serde_json::json!({
            "id": "i", "audio": "a", "text": "Hello.", "language": null, "duration": 1.0,
            "segments": [],
        }))
        .unwrap();
        t.segments = vec![a];
        for verbose in [false, true] {
            let v = result_json("i", "a", &Ok(t.clone()), verbose);
            assert_eq!(v["segments"][0]["channel"], 0, "verbose {verbose}");
        }
        let mut plain = t;
        plain.segments[0].channel = None;
        let v = result_json("i", "a", &Ok(plain), false);
        assert!(v["segments"][0].get("channel").is_none());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_to_milliseconds_and_carry() {
        assert_eq!(timestamp(0.0, ','), "00:00:00,000");
        assert_eq!(timestamp(59.9996, ','), "00:01:00,000");
        assert_eq!(timestamp(3723.456, '.'), "01:02:03.456");
        assert_eq!(timestamp(-1.0, '.'), "00:00:00.000");
    }

    #[test]
    fn srt_and_vtt_layouts() {
        let segs = vec![
            Segment::new(0.0, 2.5, " Hello there."),
            Segment::new(2.5, 61.25, " General Kenobi."),
        ];
        assert_eq!(
            to_srt(&segs),
            "1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n2\n00:00:02,500 --> 00:01:01,250\nGeneral Kenobi.\n\n"
        );
        assert_eq!(
            to_vtt(&segs),
            "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello there.\n\n00:00:02.500 --> 00:01:01.250\nGeneral Kenobi.\n\n"
        );
    }
}
