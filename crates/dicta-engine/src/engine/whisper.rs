//! The Whisper path of the engine: hand decoded audio to [`WhisperTranscriber`], which cuts
//! windows, decodes them in batches and merges them by timestamps.
//!
//! Inputs go to the transcriber in *groups* of consecutive inputs holding at least
//! `lookahead_windows` 30 s windows, while the decode threads decode the next group: the
//! transcriber takes whole recordings, so this is how decoding overlaps the model. A
//! recording's transcript does not depend on which other recordings share its batches
//! (batched == alone, pinned by the tests), so grouping changes no result; it costs at most one
//! part-filled batch per group.

use std::time::Instant;

use dicta_core::{Error, Result, Stats, Transcript};
use dicta_models::whisper::Whisper;

use super::observe::Observer;
use super::pipeline::Prefetch;
use super::EngineConfig;
use crate::whisper::{DecodeOptions, WhisperTranscriber};

/// Samples of one Whisper window (30 s at 16 kHz).
pub(super) const WINDOW_SAMPLES: usize = 30 * dicta_audio::SAMPLE_RATE as usize;

/// Transcribes every input `audio` yields, group by group; inputs that failed to decode keep
/// their error. Fills the audio seconds, model time, windows, batch sizes and long-form mode of
/// `stats`. Model work holds `acoustic` one batch of windows at a time. Progress goes to
/// `observer` as the transcriber reports it, and each recording's end when its group is done.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    whisper: &Whisper,
    assistant: Option<&Whisper>,
    audio: &mut Prefetch<'_>,
    opts: &DecodeOptions,
    config: &EngineConfig,
    acoustic: &super::Turns,
    observer: &Observer,
    stats: &mut Stats,
) -> Vec<Result<Transcript>> {
    let mut results: Vec<Option<Result<Transcript>>> = (0..audio.len()).map(|_| None).collect();
    let transcriber = WhisperTranscriber::new(whisper).and_then(|t| match assistant {
        Some(a) => t.with_assistant(a, config.assistant_tokens),
        None => Ok(t),
    });
    let target = config.lookahead_windows();
    loop {
        let group = audio.next_group(target, WINDOW_SAMPLES, &mut results, stats);
        if group.is_empty() {
            break;
        }
        let samples: Vec<&[f32]> = group.iter().map(|(_, s)| s.as_ref()).collect();
        let observed = observer.options_for(opts, group.iter().map(|(i, _)| *i).collect());
        let opts = observed.as_ref();
        let model_start = Instant::now();
        // The lock is taken per batch of model work inside, so concurrent calls (the server's
        // request lanes) take turns window by window.
        let decoded = transcriber.as_ref().map_err(Error::clone).and_then(|t| {
            t.transcribe_gated(
                &samples,
                opts,
                config.long_form,
                config.batch_size,
                Some(acoustic),
            )
        });
        let elapsed = model_start.elapsed().as_secs_f64();
        match decoded {
            Ok(out) => {
                // Log-mel is reported apart from the model's own time.
                stats.features_seconds += out.features_seconds;
                stats.model_seconds += (elapsed - out.features_seconds).max(0.0);
                stats.frames += out.frames;
                stats.padded_frames += out.padded_frames;
                stats.windows += out.windows;
                stats.batch_sizes.extend(out.batch_sizes);
                stats.long_form_mode = Some(out.long_form_mode.as_str().to_string());
                for ((i, _), r) in group.iter().zip(out.transcripts) {
                    if let Ok(t) = &r {
                        observer.finished(*i, t);
                    }
                    results[*i] = Some(r);
                }
            }
            Err(e) => {
                stats.model_seconds += elapsed;
                for (i, _) in &group {
                    results[*i] = Some(Err(e.clone()));
                }
            }
        }
        audio.release(samples.iter().map(|s| s.len()).sum());
    }
    if let Some((drafted, accepted)) = transcriber.as_ref().ok().and_then(|t| t.assistant_counts())
    {
        stats.add_assistant(drafted, accepted);
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(Error::internal("recording was not transcribed"))))
        .collect()
}
