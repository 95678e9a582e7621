//! Per-recording (or per-lane) state of the Whisper seek loop, and its moves between the clips
//! of `DecodeOptions::clip_timestamps`.

use dicta_audio::mel::MelSpectrogram;
use dicta_core::Segment;

use super::final_window::FinalRest;

/// Per-recording (or per-lane) state of the seek loop.
pub(super) struct SeqState {
    /// Index of the recording among the call's inputs.
    pub(super) input: usize,
    /// The recording's log-mel (shared by the lanes of a recording).
    pub(super) mel: std::sync::Arc<MelSpectrogram>,
    /// End of the lane or current clip (mel frames); the seek loop stops there.
    pub(super) content_frames: usize,
    /// Start of the next window (mel frames).
    pub(super) seek: usize,
    /// Text tokens decoded so far (after the initial prompt's), for the previous-text prompt.
    pub(super) all_tokens: Vec<u32>,
    /// How many of `all_tokens` are the initial prompt's (its first ones).
    pub(super) prompt_len: usize,
    /// The previous-text prompt takes `all_tokens` from here on.
    pub(super) prompt_reset_since: usize,
    /// `<|startoftranscript|>`, language and task tokens of the recording.
    pub(super) sot_seq: Vec<u32>,
    /// `DecodeOptions::hotwords`, tokenized (empty without).
    pub(super) hotwords: std::sync::Arc<[u32]>,
    /// `DecodeOptions::prefix`, tokenized (empty without): forced on the window at seek 0.
    pub(super) prefix: std::sync::Arc<[u32]>,
    /// Segments decoded so far.
    pub(super) segments: Vec<Segment>,
    /// Length of the recording (s), reported as finished when the seek loop ends.
    pub(super) duration: f64,
    /// End of the last speech (s), for the word-timestamp pause heuristics.
    pub(super) last_speech: f64,
    /// Words are split at unicode boundaries (languages without spaces).
    pub(super) split_on_unicode: bool,
    /// One lane of a recording in the batched mode: its segments and progress are reported
    /// once every lane of the recording is done.
    pub(super) span: bool,
    /// Tokens its greedy search likely produces ([`WhisperTranscriber::transcribe_with_drafts`]).
    pub(super) draft: Option<std::sync::Arc<[u32]>>,
    /// The sound of the window being decoded when it is the last and finished in place.
    pub(super) final_rest: Option<std::sync::Arc<FinalRest>>,
    /// Clips of `DecodeOptions::clip_timestamps` after the current one (whose end is
    /// `content_frames`), as (start, end) mel frames.
    pub(super) clips: std::collections::VecDeque<(usize, usize)>,
    /// The recording's content frames (`content_frames` is the current clip's end).
    pub(super) recording_frames: usize,
    /// With `DecodeOptions::multilingual`: the SOT sequence of the window being decoded, in
    /// its own detected language (word alignment uses it).
    pub(super) window_sot: Option<Vec<u32>>,
}

impl SeqState {
    /// faster-whisper's move between clips: once the seek reaches the current clip's end, the
    /// next clip starts at its own start (even one before the seek), and clips that hold no
    /// frames from there are passed over.
    pub(super) fn next_clip(&mut self) {
        while self.seek >= self.content_frames {
            let Some((start, end)) = self.clips.pop_front() else {
                return;
            };
            self.seek = start;
            self.content_frames = end.min(self.recording_frames);
        }
    }

    /// Whether the seek loop is done: past the last clip's end.
    pub(super) fn finished(&self) -> bool {
        self.seek >= self.content_frames && self.clips.is_empty()
    }
}
