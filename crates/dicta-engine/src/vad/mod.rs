//! Voice activity detection: speech segments from a VAD model's per-window probabilities,
//! with faster-whisper's option names, defaults and rules (`faster_whisper/vad.py`), and the
//! speech-only transcription it enables (`vad_filter`).
//!
//! - [`speech_timestamps`]: probabilities → speech chunks in samples (hysteresis between
//!   `threshold` and `neg_threshold`, silence tolerance, splitting at `max_speech_duration_s`,
//!   padding), the same integer arithmetic as faster-whisper's `get_speech_timestamps`.
//! - [`SpeechMap`]: times in the concatenated speech → times in the original recording
//!   (faster-whisper's `SpeechTimestampsMap` and `restore_speech_timestamps`).
//! - [`Vad`]: a loaded detector; [`Vad::detect`] runs it on many inputs, decoding them in
//!   parallel, each input failing alone.
//! - [`OnlineVad`]: the detector over a live stream, window by window, for streams that end
//!   utterances on silence; [`TurnDetector`]: the speech starts and stops it decides.

mod filter;
mod online;
mod turns;

use std::path::Path;
use std::sync::Arc;

use dicta_core::{Result, Segment};
use dicta_models::vad::{silero::WINDOW, SileroVad};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

pub use dicta_core::VadOptions;

use crate::engine::Input;

pub(crate) use filter::SpeechFilter;
pub use online::{Activity, Endpoint, OnlineVad};
pub use turns::{Turn, TurnDetector};

/// Sample rate the detector runs at.
const RATE: f64 = dicta_audio::SAMPLE_RATE as f64;

/// One stretch of speech, in samples at 16 kHz (`start..end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpeechChunk {
    /// First sample.
    pub start: usize,
    /// One past the last sample.
    pub end: usize,
}

impl SpeechChunk {
    /// Start in seconds.
    pub fn start_seconds(&self) -> f64 {
        self.start as f64 / RATE
    }

    /// End in seconds.
    pub fn end_seconds(&self) -> f64 {
        self.end as f64 / RATE
    }
}

/// Speech chunks of a recording of `len` samples from its per-window probabilities
/// (`probs[i]` covers samples `512·i .. 512·(i+1)`), faster-whisper's rules step for step.
pub fn speech_timestamps(probs: &[f32], len: usize, opts: &VadOptions) -> Vec<SpeechChunk> {
    let threshold = opts.threshold;
    let neg_threshold = opts.effective_neg_threshold();
    // Python floats in faster-whisper; kept as f64 so comparisons round identically.
    let min_speech = RATE * f64::from(opts.min_speech_duration_ms) / 1000.0;
    let pad = RATE * f64::from(opts.speech_pad_ms) / 1000.0;
    let max_speech = RATE * opts.max_speech_duration_s - WINDOW as f64 - 2.0 * pad;
    let min_silence = RATE * f64::from(opts.min_silence_duration_ms) / 1000.0;
    let min_silence_at_max_speech = RATE * 98.0 / 1000.0;

    let mut speeches: Vec<(i64, i64)> = Vec::new();
    // Start of the chunk in progress (`triggered` in faster-whisper).
    let mut current: Option<i64> = None;
    // 0 means unset, as in faster-whisper (no real value can be 0: they follow a speech window).
    let (mut temp_end, mut prev_end, mut next_start) = (0i64, 0i64, 0i64);
    for (i, &p) in probs.iter().enumerate() {
        let p = f64::from(p);
        let pos = (WINDOW * i) as i64;
        if p >= threshold && temp_end != 0 {
            temp_end = 0;
            if next_start < prev_end {
                next_start = pos;
            }
        }
        let Some(start) = current else {
            if p >= threshold {
                current = Some(pos);
            }
            continue;
        };
        if (pos - start) as f64 > max_speech {
            if prev_end != 0 {
                speeches.push((start, prev_end));
                // Already silent again since prev_end: no chunk in progress.
                current = (next_start >= prev_end).then_some(next_start);
                (prev_end, next_start, temp_end) = (0, 0, 0);
            } else {
                speeches.push((start, pos));
                current = None;
                (prev_end, next_start, temp_end) = (0, 0, 0);
                continue;
            }
        }
        if p < neg_threshold {
            let Some(start) = current else { continue };
            if temp_end == 0 {
                temp_end = pos;
            }
            if (pos - temp_end) as f64 > min_silence_at_max_speech {
                prev_end = temp_end;
            }
            if ((pos - temp_end) as f64) < min_silence {
                continue;
            }
            if (temp_end - start) as f64 > min_speech {
                speeches.push((start, temp_end));
            }
            current = None;
            (prev_end, next_start, temp_end) = (0, 0, 0);
        }
    }
    let len = len as i64;
    if let Some(start) = current {
        if (len - start) as f64 > min_speech {
            speeches.push((start, len));
        }
    }
    // Padding: gaps shorter than two pads are split in the middle.
    let n = speeches.len();
    for i in 0..n {
        if i == 0 {
            speeches[i].0 = (speeches[i].0 as f64 - pad).max(0.0) as i64;
        }
        if i + 1 < n {
            let silence = speeches[i + 1].0 - speeches[i].1;
            if (silence as f64) < 2.0 * pad {
                speeches[i].1 += silence.div_euclid(2);
                speeches[i + 1].0 = (speeches[i + 1].0 - silence.div_euclid(2)).max(0);
            } else {
                speeches[i].1 = (len as f64).min(speeches[i].1 as f64 + pad) as i64;
                speeches[i + 1].0 = (speeches[i + 1].0 as f64 - pad).max(0.0) as i64;
            }
        } else {
            speeches[i].1 = (len as f64).min(speeches[i].1 as f64 + pad) as i64;
        }
    }
    speeches
        .into_iter()
        .map(|(s, e)| SpeechChunk {
            start: s.max(0) as usize,
            end: e.max(0) as usize,
        })
        .collect()
}

/// Maps times in the concatenated speech chunks back to the original recording.
#[derive(Debug, Clone)]
pub struct SpeechMap {
    /// End of each chunk in the concatenated audio (samples).
    chunk_end: Vec<usize>,
    /// Seconds of removed audio before each chunk.
    silence_before: Vec<f64>,
}

impl SpeechMap {
    /// The map of `chunks` (in order, not overlapping).
    pub fn new(chunks: &[SpeechChunk]) -> Self {
        let (mut previous_end, mut silent) = (0usize, 0usize);
        let mut map = Self {
            chunk_end: Vec::with_capacity(chunks.len()),
            silence_before: Vec::with_capacity(chunks.len()),
        };
        for c in chunks {
            silent += c.start.saturating_sub(previous_end);
            previous_end = c.end;
            map.chunk_end.push(c.end - silent);
            map.silence_before.push(silent as f64 / RATE);
        }
        map
    }

    /// The chunk a time of the concatenated audio falls in; an end time exactly at a chunk's
    /// end stays in that chunk.
    pub fn chunk_index(&self, time: f64, is_end: bool) -> usize {
        let sample = (time * RATE) as usize;
        if is_end {
            if let Some(i) = self.chunk_end.iter().position(|&e| e == sample) {
                return i;
            }
        }
        self.chunk_end
            .partition_point(|&e| e <= sample)
            .min(self.chunk_end.len().saturating_sub(1))
    }

    /// The original time (rounded to 10 ms, as faster-whisper does) of `time` in chunk `index`.
    pub fn original_time(&self, time: f64, index: usize) -> f64 {
        let before = self.silence_before.get(index).copied().unwrap_or(0.0);
        ((before + time) * 100.0).round() / 100.0
    }

    /// Moves a segment (and its words) to original times: words by the chunk of their middle,
    /// the segment then spanning its words; without words, start and end separately.
    pub fn restore(&self, seg: &mut Segment) {
        if self.chunk_end.is_empty() {
            return;
        }
        if seg.words.is_empty() {
            seg.start = self.original_time(seg.start, self.chunk_index(seg.start, false));
            seg.end = self.original_time(seg.end, self.chunk_index(seg.end, true));
            return;
        }
        for w in &mut seg.words {
            let i = self.chunk_index((w.start + w.end) / 2.0, false);
            w.start = self.original_time(w.start, i);
            w.end = self.original_time(w.end, i);
        }
        seg.start = seg.words[0].start;
        seg.end = seg.words[seg.words.len() - 1].end;
    }
}

/// The samples of `chunks` joined in order.
pub fn collect_chunks(audio: &[f32], chunks: &[SpeechChunk]) -> Vec<f32> {
    let mut out = Vec::with_capacity(chunks.iter().map(|c| c.end - c.start).sum());
    for c in chunks {
        out.extend_from_slice(&audio[c.start.min(audio.len())..c.end.min(audio.len())]);
    }
    out
}

/// Speech found in one input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VadResult {
    /// Caller's id.
    pub id: String,
    /// Where the audio came from.
    pub audio: String,
    /// Duration of the audio in seconds.
    pub duration: f64,
    /// Speech chunks in order.
    pub segments: Vec<SpeechChunk>,
}

/// A loaded voice activity detector (shareable, cheap to clone; each call keeps its own state).
#[derive(Clone)]
pub struct Vad {
    model: Arc<SileroVad>,
}

impl Vad {
    /// Loads Silero VAD from an `.onnx` file, or from a folder holding `silero_vad_v6.onnx`.
    pub fn load(path: &Path) -> Result<Self> {
        let file = if path.is_dir() {
            path.join(dicta_models::vad::SILERO_FILE)
        } else {
            path.to_path_buf()
        };
        Ok(Self {
            model: Arc::new(SileroVad::load(&file)?),
        })
    }

    /// Speech probability of every 512-sample window of a 16 kHz recording.
    pub fn probabilities(&self, audio: &[f32]) -> Result<Vec<f32>> {
        self.model.speech_probs(audio)
    }

    /// Speech chunks of one decoded 16 kHz recording.
    pub fn speech(&self, audio: &[f32], opts: &VadOptions) -> Result<Vec<SpeechChunk>> {
        let probs = self.probabilities(audio)?;
        Ok(speech_timestamps(&probs, audio.len(), opts))
    }

    /// Speech chunks of every input, in input order; inputs are decoded and detected in
    /// parallel and a broken input fails alone.
    pub fn detect(&self, inputs: &[Input], opts: &VadOptions) -> Vec<Result<VadResult>> {
        if let Err(e) = opts.validate() {
            return inputs.iter().map(|_| Err(e.clone())).collect();
        }
        inputs
            .par_iter()
            .map(|input| {
                let audio = crate::engine::load_audio(input)?;
                Ok(VadResult {
                    id: input.id.clone(),
                    audio: input.audio.clone(),
                    duration: audio.len() as f64 / RATE,
                    segments: self.speech(&audio, opts)?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` windows of probability `p` for each `(p, n)`, in order.
    pub(super) fn probs(pattern: &[(f32, usize)]) -> Vec<f32> {
        pattern
            .iter()
            .flat_map(|&(p, n)| std::iter::repeat_n(p, n))
            .collect()
    }

    #[test]
    fn silence_gives_nothing_and_speech_everywhere_one_chunk() {
        let o = VadOptions::default();
        assert!(speech_timestamps(&probs(&[(0.01, 100)]), 51_200, &o).is_empty());
        let all = speech_timestamps(&probs(&[(0.99, 100)]), 51_000, &o);
        assert_eq!(
            all,
            vec![SpeechChunk {
                start: 0,
                end: 51_000
            }]
        );
    }

    #[test]
    fn short_gaps_are_bridged_and_long_ones_split_with_padding() {
        let o = VadOptions {
            min_silence_duration_ms: 500,
            speech_pad_ms: 100,
            ..VadOptions::default()
        };
        // 1 s speech, 0.32 s silence (bridged), 1 s speech, 2 s silence, 1 s speech.
        let p = probs(&[
            (0.9, 31),
            (0.1, 10),
            (0.9, 31),
            (0.1, 62),
            (0.9, 31),
            (0.1, 10),
        ]);
        let len = p.len() * 512;
        let c = speech_timestamps(&p, len, &o);
        assert_eq!(c.len(), 2, "{c:?}");
        // First chunk starts at 0 (pad clamps), second ends at its speech end + 1600.
        assert_eq!(c[0].start, 0);
        let second_speech_start = (31 + 10 + 31 + 62) * 512;
        assert_eq!(c[1].start, second_speech_start - 1600);
        // The trailing 0.32 s of silence is shorter than min_silence: speech runs to the end.
        assert_eq!(c[1].end, len);
        // As faster-whisper's get_speech_timestamps gives for these probabilities.
        assert_eq!((c[0].end, c[1].start), (38_464, 67_008));
    }

    #[test]
    fn values_between_thresholds_continue_speech() {
        let o = VadOptions {
            min_silence_duration_ms: 100,
            speech_pad_ms: 0,
            ..VadOptions::default()
        };
        // 0.4 is below threshold but above neg_threshold (0.35): speech goes on through it.
        let p = probs(&[(0.9, 10), (0.4, 20), (0.9, 10), (0.0, 20)]);
        let c = speech_timestamps(&p, p.len() * 512, &o);
        assert_eq!(
            c,
            vec![SpeechChunk {
                start: 0,
                end: 40 * 512
            }]
        );
        // A start needs the threshold itself.
        let c = speech_timestamps(&probs(&[(0.4, 30)]), 30 * 512, &o);
        assert!(c.is_empty());
    }

    #[test]
    fn long_speech_is_split_below_the_maximum() {
        let o = VadOptions {
            max_speech_duration_s: 2.0,
            speech_pad_ms: 0,
            ..VadOptions::default()
        };
        let p = probs(&[(0.9, 300)]);
        let c = speech_timestamps(&p, 300 * 512, &o);
        assert!(c.len() >= 4, "{c:?}");
        // faster-whisper's cuts for these probabilities: one window apart, each under 2 s.
        assert_eq!(
            c[0],
            SpeechChunk {
                start: 0,
                end: 31_744
            }
        );
        assert_eq!(c[1].start, 32_256);
        for w in c.windows(2) {
            assert!(w[0].end <= w[1].start);
        }
        assert!(c.iter().all(|x| x.end - x.start <= 32_000), "{c:?}");
    }

    #[test]
    fn map_round_trips_times() {
        let chunks = [
            SpeechChunk {
                start: 16_000,
                end: 48_000,
            },
            SpeechChunk {
                start: 80_000,
                end: 96_000,
            },
        ];
        let m = SpeechMap::new(&chunks);
        // 0.5 s into the speech is 1.5 s of the original; 2.5 s (second chunk) is 5.5 s.
        assert_eq!(m.original_time(0.5, m.chunk_index(0.5, false)), 1.5);
        assert_eq!(m.original_time(2.5, m.chunk_index(2.5, false)), 5.5);
        // The end of chunk 0 stays in chunk 0 as an end time, moves to chunk 1 as a start.
        assert_eq!(m.chunk_index(2.0, true), 0);
        assert_eq!(m.chunk_index(2.0, false), 1);
        let mut seg = Segment::new(1.9, 2.0, "x");
        m.restore(&mut seg);
        assert_eq!((seg.start, seg.end), (2.9, 3.0));
        let audio: Vec<f32> = (0..100_000).map(|i| i as f32).collect();
        let joined = collect_chunks(&audio, &chunks);
        assert_eq!(joined.len(), 48_000);
        assert_eq!(joined[32_000], 80_000.0);
    }
}
