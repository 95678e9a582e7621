//! The Moonshine path of the engine: decoded audio goes to [`crate::moonshine::transcribe`] in
//! groups of consecutive inputs holding at least `lookahead_windows` pieces' worth of audio,
//! while the decode threads decode the next group. Pieces of all recordings in a group share
//! the length-sorted batches; a recording's transcript does not depend on its neighbours.

use std::time::Instant;

use dicta_core::{Error, Result, Stats, Transcript};
use dicta_models::moonshine::MoonshineModel;

use super::observe::Observer;
use super::pipeline::Prefetch;
use super::EngineConfig;
use crate::moonshine::MAX_PIECE_SECONDS;
use crate::whisper::DecodeOptions;

/// Samples of the longest piece, the unit of the look-ahead budget.
pub(super) const PIECE_SAMPLES: usize =
    MAX_PIECE_SECONDS as usize * dicta_audio::SAMPLE_RATE as usize;

/// Transcribes every input `audio` yields, group by group; inputs that failed to decode keep
/// their error. Fills audio seconds, model time, pieces (as windows) and batch sizes. Progress
/// goes to `observer` batch by batch, segments when a group is done.
pub(super) fn run(
    model: &MoonshineModel,
    audio: &mut Prefetch<'_>,
    opts: &DecodeOptions,
    config: &EngineConfig,
    acoustic: &super::Turns,
    observer: &Observer,
    stats: &mut Stats,
) -> Vec<Result<Transcript>> {
    let mut results: Vec<Option<Result<Transcript>>> = (0..audio.len()).map(|_| None).collect();
    let target = config.lookahead_windows();
    loop {
        let group = audio.next_group(target, PIECE_SAMPLES, &mut results, stats);
        if group.is_empty() {
            break;
        }
        let samples: Vec<&[f32]> = group.iter().map(|(_, s)| s.as_ref()).collect();
        let observed = observer.options_for(opts, group.iter().map(|(i, _)| *i).collect());
        let opts = observed.as_ref();
        let model_start = Instant::now();
        let out = {
            let _turn = acoustic.take();
            crate::moonshine::transcribe(model, &samples, opts, config.batch_size)
        };
        stats.model_seconds += model_start.elapsed().as_secs_f64();
        stats.windows += out.pieces;
        stats.batch_sizes.extend(out.batch_sizes);
        for ((i, _), r) in group.iter().zip(out.transcripts) {
            if let Ok(t) = &r {
                observer.finished(*i, t);
            }
            results[*i] = Some(r);
        }
        audio.release(samples.iter().map(|s| s.len()).sum());
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(Error::internal("recording was not transcribed"))))
        .collect()
}
