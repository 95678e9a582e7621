//! Moonshine streaming: the Whisper session logic (buffer re-decoding with LocalAgreement-2,
//! see [`super::whisper`]) over a Moonshine model. Moonshine's encoder cost follows the buffer's
//! length, so a step costs what the audio since the last cut costs, not a padded 30 s window;
//! the worker decodes every due session's buffer in one batched call.

use std::sync::Arc;

use dicta_core::{Result, Transcript};
use dicta_models::moonshine::MoonshineModel;

use super::whisper::BufferDecode;
use super::worker::StreamModel;
use crate::whisper::DecodeOptions;

/// Moonshine as a [`StreamModel`]: one call transcribes the buffers of many sessions, their
/// pieces sharing length-sorted decoder batches.
pub struct MoonshineChunkModel {
    model: Arc<MoonshineModel>,
    opts: DecodeOptions,
}

impl MoonshineChunkModel {
    /// Wraps a loaded model; `opts` apply to every decode (validated here).
    pub fn new(model: Arc<MoonshineModel>, opts: DecodeOptions) -> Result<Self> {
        opts.validate()?;
        Ok(Self { model, opts })
    }
}

impl StreamModel for MoonshineChunkModel {
    type Request = BufferDecode;
    type Output = Transcript;

    /// `requests`: audio buffers → one transcript each. Their drafts are not used: a
    /// Moonshine decoder step is cheap next to its encoder, and verifying drafts position by
    /// position measured slower than the steps it saved (session 12, docs/benchmarks.md).
    fn forward_chunks(&self, requests: &[BufferDecode]) -> Vec<Result<Transcript>> {
        let audios: Vec<&[f32]> = requests.iter().map(|r| r.audio.as_slice()).collect();
        crate::moonshine::transcribe(&self.model, &audios, &self.opts, requests.len().max(1))
            .transcripts
    }
}
