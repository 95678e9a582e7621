//! The Whisper path of the engine: hand decoded audio to [`WhisperTranscriber`], which cuts
//! windows, decodes them in batches and merges them by timestamps.

use std::time::Instant;

use dicta_core::{Error, Result, Stats, Transcript};
use dicta_models::whisper::Whisper;

use super::EngineConfig;
use crate::whisper::{DecodeOptions, WhisperTranscriber};

/// Transcribes the successfully decoded entries of `audio`; failed entries keep their error.
/// Fills the model time, windows, batch sizes and long-form mode of `stats`.
pub(super) fn run(
    whisper: &Whisper,
    audio: &[Result<Vec<f32>>],
    opts: &DecodeOptions,
    config: &EngineConfig,
    stats: &mut Stats,
) -> Vec<Result<Transcript>> {
    let ok: Vec<usize> = (0..audio.len()).filter(|&i| audio[i].is_ok()).collect();
    let samples: Vec<&[f32]> = ok
        .iter()
        .filter_map(|&i| audio[i].as_ref().ok().map(Vec::as_slice))
        .collect();
    let model_start = Instant::now();
    let decoded = WhisperTranscriber::new(whisper)
        .and_then(|t| t.transcribe(&samples, opts, config.long_form, config.batch_size));
    stats.model_seconds = model_start.elapsed().as_secs_f64();

    let mut results: Vec<Result<Transcript>> = audio
        .iter()
        .map(|a| match a {
            Err(e) => Err(e.clone()),
            Ok(_) => Err(Error::internal("not transcribed")),
        })
        .collect();
    match decoded {
        Ok(out) => {
            stats.windows = out.windows;
            stats.batch_sizes = out.batch_sizes;
            stats.long_form_mode = Some(out.long_form_mode.as_str().to_string());
            for (&i, r) in ok.iter().zip(out.transcripts) {
                results[i] = r;
            }
        }
        Err(e) => {
            for &i in &ok {
                results[i] = Err(e.clone());
            }
        }
    }
    results
}
