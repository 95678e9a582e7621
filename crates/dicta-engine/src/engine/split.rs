//! `channels: split`: each channel of a recording transcribed on its own.
//!
//! [`transcribe`] expands every input into one input per channel
//! ([`AudioSource::Channel`]: the file is decoded on a decode thread and only that channel is
//! resampled, to exactly the samples faster-whisper's `decode_audio(split_stereo=True)` gives),
//! runs ONE ordinary call over all of them, so the channels of all inputs share the
//! scheduler and its batches, and merges each input's channels back: segments in order of start
//! (channel order on ties), each with its `channel`; the text is theirs in that order. With
//! diarization the speaker of a segment and its words is its channel (`SPEAKER_00` for
//! channel 0, …): no clustering, and no speaker model needed. The VAD filter runs per channel.
//! An input whose channels cannot be counted or decoded fails alone. Progress events
//! ([`crate::progress`]) of an input come all at once, when its channels are merged.

use std::borrow::Cow;
use std::sync::Arc;

use dicta_core::{ChannelMode, Error, ErrorKind, Result, Transcript};
use rayon::prelude::*;

use super::pipeline::Audio;
use super::{AudioSource, Engine, EngineOutput, Input};
use crate::progress::ProgressEvent;
use crate::whisper::DecodeOptions;

/// How many channels `source` has (files: from their first decoded packet).
fn count_channels(source: &AudioSource, name: &str) -> Result<usize> {
    match source {
        AudioSource::Path(p) => dicta_audio::decode::probe_channels_path(p),
        AudioSource::Bytes(b) => dicta_audio::decode::probe_channels_bytes(b, name),
        AudioSource::Samples(_) => Ok(1),
        AudioSource::Channels(c) if c.is_empty() => Err(Error::new(
            ErrorKind::EmptyInput,
            format!("{name}: no channels"),
        )),
        AudioSource::Channels(c) => Ok(c.len()),
        AudioSource::Channel { .. } => Ok(1),
    }
}

/// Transcribes `inputs` with every channel apart (see the module docs); results in input order.
pub(super) fn transcribe(engine: &Engine, inputs: &[Input], opts: &DecodeOptions) -> EngineOutput {
    let counts: Vec<Result<usize>> = engine.in_pool(|| {
        inputs
            .par_iter()
            .map(|i| count_channels(&i.source, &i.audio))
            .collect()
    });
    let mut items = Vec::new();
    let mut slots: Vec<Result<std::ops::Range<usize>>> = Vec::with_capacity(inputs.len());
    for (input, n) in inputs.iter().zip(counts) {
        let n = match n {
            Ok(n) => n,
            Err(e) => {
                slots.push(Err(e));
                continue;
            }
        };
        let shared = Arc::new(input.source.clone());
        let first = items.len();
        for channel in 0..n {
            items.push(Input {
                id: input.id.clone(),
                audio: input.audio.clone(),
                source: AudioSource::Channel {
                    source: shared.clone(),
                    channel,
                },
            });
        }
        slots.push(Ok(first..items.len()));
    }
    let mut inner = opts.clone();
    inner.channels = ChannelMode::Mix;
    // Speakers come from the channels.
    let diarize = inner.diarize.take().is_some();
    // Progress reports of the inner call would name channels, not inputs: each input's
    // events are sent once its channels are merged (below).
    let progress = std::mem::take(&mut inner.progress);
    let out = engine.transcribe_with(&items, &inner);
    let mut per_item: Vec<Option<Result<Transcript>>> = out.results.into_iter().map(Some).collect();
    let results = slots
        .into_iter()
        .zip(inputs)
        .map(|(slot, input)| {
            let range = slot?;
            let channels: Vec<Result<Transcript>> = per_item[range]
                .iter_mut()
                .map(|r| {
                    r.take()
                        .unwrap_or_else(|| Err(Error::internal("channel not transcribed")))
                })
                .collect();
            let mut t = merge(channels, diarize)?;
            t.id = input.id.clone();
            t.audio = input.audio.clone();
            Ok(t)
        })
        .collect::<Vec<_>>();
    if progress.is_active() {
        for (input, r) in results.iter().enumerate() {
            if let Ok(t) = r {
                progress.emit(ProgressEvent::Started {
                    input,
                    duration: t.duration,
                });
                if let Some(language) = &t.language {
                    progress.emit(ProgressEvent::Language {
                        input,
                        language: language.clone(),
                        probability: t.language_probability,
                        all: t.all_language_probs.clone(),
                    });
                }
                progress.emit(ProgressEvent::Audio {
                    input,
                    seconds: t.duration,
                });
                progress.emit(ProgressEvent::Segments {
                    input,
                    segments: t.segments.clone(),
                });
            }
        }
    }
    let mut stats = out.stats;
    stats.inputs = inputs.len();
    EngineOutput { results, stats }
}

/// One transcript from the transcripts of a recording's channels (in channel order): see the
/// module docs. The first channel's error fails the whole input.
pub(crate) fn merge(channels: Vec<Result<Transcript>>, diarize: bool) -> Result<Transcript> {
    let channels: Vec<Transcript> = channels.into_iter().collect::<Result<_>>()?;
    let mut merged = channels
        .first()
        .cloned()
        .ok_or_else(|| Error::internal("a recording without channels"))?;
    merged.segments.clear();
    merged.warnings.clear();
    for (c, t) in channels.into_iter().enumerate() {
        merged.duration = merged.duration.max(t.duration);
        if merged.language.is_none() {
            merged.language = t.language.clone();
        }
        for w in t.warnings {
            if !merged.warnings.contains(&w) {
                merged.warnings.push(w);
            }
        }
        for mut s in t.segments {
            s.channel = Some(c as u32);
            if diarize {
                let who = format!("SPEAKER_{c:02}");
                for w in &mut s.words {
                    w.speaker = Some(who.clone());
                }
                s.speaker = Some(who);
            }
            merged.segments.push(s);
        }
    }
    // Stable: channel order on equal starts.
    merged.segments.sort_by(|a, b| a.start.total_cmp(&b.start));
    merged.text = merged
        .segments
        .iter()
        .map(|s| s.text.trim())
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    Ok(merged)
}

/// Loads an input whose source is [`AudioSource::Channels`] (mixed: the mean of the channels)
/// or [`AudioSource::Channel`] (that channel alone), with the note on a damaged file.
pub(super) fn load(input: &Input) -> Result<(Audio<'_>, Option<String>)> {
    let name = &input.audio;
    match &input.source {
        AudioSource::Channels(c) => {
            for s in c.iter() {
                check(s, name)?;
            }
            match &c[..] {
                [] => Err(Error::new(
                    ErrorKind::EmptyInput,
                    format!("{name}: no channels"),
                )),
                [one] => Ok((Cow::Borrowed(one.as_slice()), None)),
                [first, rest @ ..] => {
                    let mut mix = first.clone();
                    for other in rest {
                        for (m, v) in mix.iter_mut().zip(other) {
                            *m += v;
                        }
                    }
                    let scale = 1.0 / c.len() as f32;
                    mix.iter_mut().for_each(|m| *m *= scale);
                    Ok((Cow::Owned(mix), None))
                }
            }
        }
        AudioSource::Channel { source, channel } => {
            let c = *channel;
            let owned = |l: dicta_audio::decode::Loaded| (Cow::Owned(l.samples), l.warning);
            match source.as_ref() {
                AudioSource::Path(p) => dicta_audio::decode::load_channel_path(p, c).map(owned),
                AudioSource::Bytes(b) => {
                    dicta_audio::decode::load_channel_owned(b.clone(), name, c).map(owned)
                }
                AudioSource::Samples(s) if c == 0 => {
                    check(s, name)?;
                    Ok((Cow::Borrowed(s.as_slice()), None))
                }
                AudioSource::Channels(all) if c < all.len() => {
                    check(&all[c], name)?;
                    Ok((Cow::Borrowed(all[c].as_slice()), None))
                }
                AudioSource::Channel { .. } => Err(Error::invalid_input(format!(
                    "{name}: a channel of a channel is not a source"
                ))),
                _ => Err(Error::invalid_input(format!("{name}: has no channel {c}"))),
            }
        }
        _ => Err(Error::internal("split::load called on a mono source")),
    }
}

fn check(s: &[f32], name: &str) -> Result<()> {
    if s.is_empty() {
        return Err(Error::new(
            ErrorKind::EmptyInput,
            format!("{name}: no samples"),
        ));
    }
    if let Some(bad) = s.iter().position(|x| !x.is_finite()) {
        return Err(Error::new(
            ErrorKind::CorruptInput,
            format!("{name}: sample {bad} is not finite"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dicta_core::{Segment, Word};

    fn transcript(segs: &[(f64, &str)]) -> Transcript {
        let mut t: Transcript = serde_json::from_value(serde_json::json!({
            "id": "0", "audio": "", "text": "", "language": "en", "duration": 10.0, "segments": [],
        }))
        .unwrap();
        for &(start, text) in segs {
            let mut s = Segment::new(start, start + 1.0, text);
            s.words.push(Word {
                word: text.trim().to_string(),
                start,
                end: start + 1.0,
                probability: None,
                speaker: None,
            });
            t.segments.push(s);
        }
        t
    }

    #[test]
    fn merge_orders_by_start_labels_channels_and_speakers() {
        let a = transcript(&[(0.0, " Hello."), (4.0, " Bye.")]);
        let b = transcript(&[(2.0, " Hi."), (4.0, " Later.")]);
        let m = merge(vec![Ok(a.clone()), Ok(b.clone())], false).unwrap();
        let got: Vec<(f64, &str, Option<u32>)> = m
            .segments
            .iter()
            .map(|s| (s.start, s.text.as_str(), s.channel))
            .collect();
        assert_eq!(
            got,
            [
                (0.0, " Hello.", Some(0)),
                (2.0, " Hi.", Some(1)),
                (4.0, " Bye.", Some(0)),
                (4.0, " Later.", Some(1))
            ]
        );
        assert_eq!(m.text, "Hello. Hi. Bye. Later.");
        assert!(m.segments.iter().all(|s| s.speaker.is_none()));
        let d = merge(vec![Ok(a.clone()), Ok(b)], true).unwrap();
        assert_eq!(d.segments[1].speaker.as_deref(), Some("SPEAKER_01"));
        assert_eq!(
            d.segments[1].words[0].speaker.as_deref(),
            Some("SPEAKER_01")
        );
        assert_eq!(
            d.segments[0].words[0].speaker.as_deref(),
            Some("SPEAKER_00")
        );
        let e = merge(vec![Ok(a), Err(Error::invalid_input("bad"))], false).unwrap_err();
        assert_eq!(e.message, "bad");
    }
}
