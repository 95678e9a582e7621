//! Window planning: cut a recording into overlapping model-sized windows.
//!
//! Every recording is cut into windows of `chunk_seconds` that overlap by (at least)
//! `overlap_seconds`. For CTC models each window also knows which of its output frames it
//! *retains*: each overlap is split at its midpoint, so every output frame of the recording
//! is retained by exactly one window and every retained frame has at least half an overlap
//! of context on each side (or sits at the edge of the recording itself).
//!
//! Frame grids: window starts are multiples of [`FrameGeometry::samples_per_frame`], so
//! output frame `f` of a window starting at sample `s` is recording frame
//! `s / samples_per_frame + f` — the same input samples produce the same frame, and the
//! stitched log-probs can be decoded as if the model had seen the whole recording.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use dicta_core::{Error, Result};

/// How recordings are cut into windows.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlanConfig {
    /// Window length in seconds (Whisper and most CTC models: 30).
    pub chunk_seconds: f32,
    /// Minimum overlap between consecutive windows in seconds (default 5). The planner may
    /// enlarge it by less than one output frame so window starts stay on the frame grid.
    pub overlap_seconds: f32,
    /// Sample rate of the audio the windows index into (Hz).
    pub sample_rate: u32,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            chunk_seconds: 30.0,
            overlap_seconds: 5.0,
            sample_rate: 16_000,
        }
    }
}

impl PlanConfig {
    /// Checks `chunk_seconds > 0`, `0 <= overlap_seconds < chunk_seconds / 2` and
    /// `sample_rate > 0`; the error names the offending value.
    pub fn validate(&self) -> Result<()> {
        if !self.chunk_seconds.is_finite() || self.chunk_seconds <= 0.0 {
            return Err(Error::invalid_input(format!(
                "chunk_seconds must be a positive number, got {}",
                self.chunk_seconds
            )));
        }
        // Half a chunk is the most that still leaves every sample in at most two windows.
        if !self.overlap_seconds.is_finite()
            || self.overlap_seconds < 0.0
            || self.overlap_seconds >= self.chunk_seconds / 2.0
        {
            return Err(Error::invalid_input(format!(
                "overlap_seconds must be in [0, chunk_seconds / 2 = {}), got {}",
                self.chunk_seconds / 2.0,
                self.overlap_seconds
            )));
        }
        if self.sample_rate == 0 {
            return Err(Error::invalid_input("sample_rate must be positive, got 0"));
        }
        Ok(())
    }

    /// Window length in samples.
    pub fn chunk_samples(&self) -> usize {
        seconds_to_samples(self.chunk_seconds, self.sample_rate)
    }

    /// Requested overlap in samples (before alignment to the frame grid).
    pub fn overlap_samples(&self) -> usize {
        seconds_to_samples(self.overlap_seconds, self.sample_rate)
    }
}

fn seconds_to_samples(seconds: f32, sample_rate: u32) -> usize {
    // f64 so that e.g. 30.0 s at 16 kHz is exactly 480 000 samples.
    (f64::from(seconds) * f64::from(sample_rate)).round() as usize
}

/// How many output frames a model produces for a given number of input samples.
#[derive(Clone)]
enum FrameCount {
    /// A strided conv stack: `floor((n - receptive_field) / stride) + 1`, 0 below one field.
    Conv { receptive_field: usize },
    /// A centred STFT (reflect-padded by half a window): `n / hop + 1`.
    Centered,
    /// Supplied by the model.
    Custom(Arc<dyn Fn(usize) -> usize + Send + Sync>),
}

/// The output frame grid of a model family: its stride in samples and its frame count.
///
/// The count must be *shift-consistent*: `frames(n + k * samples_per_frame) ==
/// frames(n) + k` for every length a window can have. Conv stacks and centred STFTs
/// (and any composition of them whose total stride is `samples_per_frame`) are.
#[derive(Clone)]
pub struct FrameGeometry {
    /// Input samples per output frame (the model's total stride; 320 for wav2vec2).
    pub samples_per_frame: usize,
    count: FrameCount,
}

impl fmt::Debug for FrameGeometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.count {
            FrameCount::Conv { receptive_field } => {
                format!("conv(receptive_field={receptive_field})")
            }
            FrameCount::Centered => "centered".to_owned(),
            FrameCount::Custom(_) => "custom".to_owned(),
        };
        f.debug_struct("FrameGeometry")
            .field("samples_per_frame", &self.samples_per_frame)
            .field("count", &kind)
            .finish()
    }
}

impl FrameGeometry {
    /// A strided conv front end with total stride `samples_per_frame` and the given
    /// receptive field: `floor((n - receptive_field) / stride) + 1` frames (0 when `n` is
    /// shorter than the field). Exact for stacked convs without padding.
    pub fn conv(samples_per_frame: usize, receptive_field: usize) -> Self {
        Self {
            samples_per_frame,
            count: FrameCount::Conv { receptive_field },
        }
    }

    /// wav2vec2 / HuBERT / WavLM feature encoder: kernels (10,3,3,3,3,2,2), strides
    /// (5,2,2,2,2,2,2), i.e. stride 320 and receptive field 400 samples.
    pub fn wav2vec2() -> Self {
        Self::conv(320, 400)
    }

    /// A centred STFT with hop `samples_per_frame`: `n / hop + 1` frames.
    pub fn centered(samples_per_frame: usize) -> Self {
        Self {
            samples_per_frame,
            count: FrameCount::Centered,
        }
    }

    /// A model-supplied frame count (must be shift-consistent, see the type docs).
    pub fn custom(
        samples_per_frame: usize,
        frames_for_samples: impl Fn(usize) -> usize + Send + Sync + 'static,
    ) -> Self {
        Self {
            samples_per_frame,
            count: FrameCount::Custom(Arc::new(frames_for_samples)),
        }
    }

    /// Number of output frames the model yields for `n` input samples.
    pub fn frames_for_samples(&self, n: usize) -> usize {
        match &self.count {
            FrameCount::Conv { receptive_field } => {
                if n < *receptive_field || self.samples_per_frame == 0 {
                    0
                } else {
                    (n - receptive_field) / self.samples_per_frame + 1
                }
            }
            FrameCount::Centered => n.checked_div(self.samples_per_frame).map_or(0, |f| f + 1),
            FrameCount::Custom(f) => f(n),
        }
    }
}

/// One model input cut from a recording.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Window {
    /// Index of the recording (in input order) this window belongs to.
    pub recording: usize,
    /// Position of this window within its recording (0-based).
    pub index: usize,
    /// First sample of the window in the recording; a multiple of `samples_per_frame`.
    pub start_sample: usize,
    /// Samples of real audio in the window (the model input may be padded beyond it).
    pub len_samples: usize,
    /// Recording frame of the window's output frame 0 (`start_sample / samples_per_frame`).
    pub frame_offset: usize,
    /// Output frames the model yields for `len_samples` samples.
    pub n_frames: usize,
    /// Window-local output frames this window contributes to the recording (CTC).
    pub retain: Range<usize>,
}

impl Window {
    /// The retained frames in recording frame coordinates.
    pub fn retained_recording_frames(&self) -> Range<usize> {
        self.frame_offset + self.retain.start..self.frame_offset + self.retain.end
    }

    /// One past the last sample of the window in the recording.
    pub fn end_sample(&self) -> usize {
        self.start_sample + self.len_samples
    }
}

/// A validated plan configuration bound to a model's frame geometry.
#[derive(Debug, Clone)]
pub struct Planner {
    chunk: usize,
    step: usize,
    geom: FrameGeometry,
}

impl Planner {
    /// Validates `cfg` against `geom`.
    ///
    /// Besides [`PlanConfig::validate`], the chunk must hold at least one output frame and
    /// consecutive windows must share at least one output frame; otherwise a model with a
    /// receptive field wider than its stride would lose the frames that straddle a
    /// window boundary (wav2vec2 with zero overlap loses one frame per boundary).
    pub fn new(cfg: &PlanConfig, geom: FrameGeometry) -> Result<Self> {
        cfg.validate()?;
        let spf = geom.samples_per_frame;
        if spf == 0 {
            return Err(Error::invalid_input(
                "samples_per_frame must be positive, got 0",
            ));
        }
        let chunk = cfg.chunk_samples();
        // Round the hop *down* to the frame grid: the overlap only ever grows.
        let step = (chunk - cfg.overlap_samples().min(chunk)) / spf * spf;
        if step == 0 {
            return Err(Error::invalid_input(format!(
                "chunk_seconds = {} minus overlap_seconds = {} is shorter than one output frame \
                 ({spf} samples at {} Hz)",
                cfg.chunk_seconds, cfg.overlap_seconds, cfg.sample_rate
            )));
        }
        let chunk_frames = geom.frames_for_samples(chunk);
        // A cheap probe of shift-consistency: catches a stride that does not match the
        // frame count (e.g. a custom geometry declaring 320 for a 640-sample model).
        if geom.frames_for_samples(chunk + step) != chunk_frames + step / spf {
            return Err(Error::invalid_input(format!(
                "frame geometry {geom:?} is not shift-consistent: {chunk} samples give \
                 {chunk_frames} frames but {} samples give {} (expected {})",
                chunk + step,
                geom.frames_for_samples(chunk + step),
                chunk_frames + step / spf
            )));
        }
        if chunk_frames < step / spf {
            return Err(Error::invalid_input(format!(
                "overlap_seconds = {} is too small for this model: a {chunk}-sample window yields \
                 {chunk_frames} frames but windows advance by {} frames, leaving frames no window \
                 can compute; raise overlap_seconds",
                cfg.overlap_seconds,
                step / spf
            )));
        }
        Ok(Self { chunk, step, geom })
    }

    /// Window length in samples.
    pub fn chunk_samples(&self) -> usize {
        self.chunk
    }

    /// Distance between consecutive window starts in samples (a multiple of the frame stride).
    pub fn step_samples(&self) -> usize {
        self.step
    }

    /// The model's frame geometry.
    pub fn geometry(&self) -> &FrameGeometry {
        &self.geom
    }

    /// Cuts a recording of `n_samples` samples into windows, in time order.
    ///
    /// - `n_samples <= chunk` (a 30.0 s file included): one window retaining every frame,
    ///   the centred STFT's end frame included.
    /// - Longer: windows start every `step` samples; all are full-length except the last,
    ///   which ends at the recording's end and is *shorter* rather than shifted back to full
    ///   length. Shifting back would recompute up to `chunk - overlap` seconds that the
    ///   previous window already covers, while the shorter window still gives its first
    ///   retained frame half an overlap of left context (it always extends past the previous
    ///   window's end, so it is longer than the overlap) and the length-sorted scheduler
    ///   batches it with other short windows at little padding cost.
    pub fn plan(&self, recording: usize, n_samples: usize) -> Vec<Window> {
        let spf = self.geom.samples_per_frame;
        let total_frames = self.geom.frames_for_samples(n_samples);
        if n_samples <= self.chunk {
            return vec![Window {
                recording,
                index: 0,
                start_sample: 0,
                len_samples: n_samples,
                frame_offset: 0,
                n_frames: total_frames,
                retain: 0..total_frames,
            }];
        }
        let count = (n_samples - self.chunk).div_ceil(self.step) + 1;
        let mut windows: Vec<Window> = (0..count)
            .map(|index| {
                let start_sample = index * self.step;
                let len_samples = self.chunk.min(n_samples - start_sample);
                Window {
                    recording,
                    index,
                    start_sample,
                    len_samples,
                    frame_offset: start_sample / spf,
                    n_frames: self.geom.frames_for_samples(len_samples),
                    retain: 0..0,
                }
            })
            .collect();
        // Split frame between window k-1 and k, in recording frames: the midpoint of the
        // frames both compute. The previous split is carried in `split`.
        let mut split: usize = 0;
        for k in 0..count {
            let next_split = if k + 1 < count {
                let (cur, next) = (&windows[k], &windows[k + 1]);
                let shared_end =
                    (cur.frame_offset + cur.n_frames).min(next.frame_offset + next.n_frames);
                next.frame_offset + shared_end.saturating_sub(next.frame_offset) / 2
            } else {
                total_frames
            };
            let w = &mut windows[k];
            let start = split.saturating_sub(w.frame_offset).min(w.n_frames);
            let end = next_split
                .saturating_sub(w.frame_offset)
                .clamp(start, w.n_frames);
            w.retain = start..end;
            split = next_split;
        }
        windows
    }
}

/// Validates `cfg` against `geom` and plans one recording (see [`Planner::plan`]).
pub fn plan_recording(
    recording: usize,
    n_samples: usize,
    cfg: &PlanConfig,
    geom: &FrameGeometry,
) -> Result<Vec<Window>> {
    Ok(Planner::new(cfg, geom.clone())?.plan(recording, n_samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SR: usize = 16_000;

    fn planner(geom: FrameGeometry) -> Planner {
        Planner::new(&PlanConfig::default(), geom).unwrap()
    }

    /// Checks the retained ranges tile `0..frames(n)` exactly, in order, inside each window.
    fn assert_tiles(windows: &[Window], geom: &FrameGeometry, n: usize) {
        let mut cursor = 0;
        for w in windows {
            assert!(w.retain.end <= w.n_frames, "{w:?}");
            assert_eq!(w.retained_recording_frames().start, cursor, "{w:?}");
            cursor = w.retained_recording_frames().end;
        }
        assert_eq!(cursor, geom.frames_for_samples(n));
    }

    #[test]
    fn wav2vec2_frame_count_matches_the_conv_stack() {
        // Layer by layer, as transformers' _get_feat_extract_output_lengths computes it.
        let layers = [(10, 5), (3, 2), (3, 2), (3, 2), (3, 2), (2, 2), (2, 2)];
        let g = FrameGeometry::wav2vec2();
        for n in (400..20_000).step_by(7).chain([480_000, 1_040_000]) {
            let stacked = layers.iter().fold(n, |len, &(k, s)| (len - k) / s + 1);
            assert_eq!(g.frames_for_samples(n), stacked, "n={n}");
        }
        assert_eq!(g.frames_for_samples(399), 0);
    }

    #[test]
    fn thirty_seconds_exactly_is_one_window_keeping_the_end_frame() {
        let g = FrameGeometry::centered(160);
        let w = planner(g.clone()).plan(3, 30 * SR);
        assert_eq!(w.len(), 1);
        assert_eq!(
            (w[0].recording, w[0].start_sample, w[0].len_samples),
            (3, 0, 480_000)
        );
        // Centred STFT: 480000 / 160 + 1 frames, the last one centred on the final sample.
        assert_eq!(w[0].retain, 0..3001);
    }

    #[test]
    fn one_sample_more_than_a_chunk_is_two_windows() {
        let g = FrameGeometry::centered(160);
        let w = planner(g.clone()).plan(0, 30 * SR + 1);
        assert_eq!(w.len(), 2);
        assert_eq!(w[1].start_sample, 25 * SR);
        assert_tiles(&w, &g, 30 * SR + 1);
    }

    #[test]
    fn short_recordings_are_one_window() {
        for n in [0, 1, 399, 400, SR, 29 * SR] {
            let g = FrameGeometry::wav2vec2();
            let w = planner(g.clone()).plan(0, n);
            assert_eq!(w.len(), 1);
            assert_eq!(w[0].len_samples, n);
            assert_tiles(&w, &g, n);
        }
    }

    #[test]
    fn sixty_five_seconds_wav2vec2() {
        let g = FrameGeometry::wav2vec2();
        let w = planner(g.clone()).plan(0, 65 * SR);
        let starts: Vec<_> = w.iter().map(|w| (w.start_sample, w.len_samples)).collect();
        // 0-30 s, 25-55 s, and a 15 s tail (50-65 s) rather than a shifted 35-65 s window.
        assert_eq!(
            starts,
            [(0, 480_000), (400_000, 480_000), (800_000, 240_000)]
        );
        // 1499 frames per full window, 1250 per step: 249 shared frames, split 124 / 125.
        let retains: Vec<_> = w.iter().map(|w| w.retain.clone()).collect();
        assert_eq!(retains, [0..1374, 124..1374, 124..749]);
        assert_tiles(&w, &g, 65 * SR);
        assert_eq!(g.frames_for_samples(65 * SR), 3249);
    }

    #[test]
    fn unaligned_overlap_grows_to_the_frame_grid() {
        let cfg = PlanConfig {
            chunk_seconds: 10.0,
            overlap_seconds: 1.001,
            sample_rate: 16_000,
        };
        let g = FrameGeometry::wav2vec2();
        let p = Planner::new(&cfg, g.clone()).unwrap();
        assert_eq!(p.step_samples() % 320, 0);
        assert!(p.chunk_samples() - p.step_samples() >= cfg.overlap_samples());
        let n = 47 * SR + 123;
        let w = p.plan(0, n);
        assert!(w.iter().all(|w| w.start_sample % 320 == 0));
        assert_tiles(&w, &g, n);
    }

    #[test]
    fn retained_frames_have_half_an_overlap_of_context() {
        let g = FrameGeometry::wav2vec2();
        let w = planner(g).plan(0, 200 * SR + 777);
        // 249 shared frames: at least 124 frames of context beyond every interior split.
        for pair in w.windows(2) {
            assert!(pair[0].n_frames - pair[0].retain.end >= 124);
            assert!(pair[1].retain.start >= 124);
        }
    }

    #[test]
    fn config_errors_name_the_value() {
        let bad = |chunk, overlap| PlanConfig {
            chunk_seconds: chunk,
            overlap_seconds: overlap,
            sample_rate: 16_000,
        };
        let e = bad(0.0, 0.0).validate().unwrap_err();
        assert!(
            e.message.contains("chunk_seconds") && e.message.contains('0'),
            "{e}"
        );
        let e = bad(30.0, 15.0).validate().unwrap_err();
        assert!(
            e.message.contains("overlap_seconds") && e.message.contains("15"),
            "{e}"
        );
        assert!(bad(f32::NAN, 1.0).validate().is_err());
        assert!(bad(30.0, -1.0).validate().is_err());
        let e = PlanConfig {
            sample_rate: 0,
            ..PlanConfig::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.message.contains("sample_rate"), "{e}");
    }

    #[test]
    fn zero_overlap_is_refused_when_the_receptive_field_spans_a_boundary() {
        let cfg = PlanConfig {
            overlap_seconds: 0.0,
            ..PlanConfig::default()
        };
        let e = Planner::new(&cfg, FrameGeometry::wav2vec2()).unwrap_err();
        assert!(e.message.contains("overlap_seconds = 0"), "{e}");
        // A centred STFT computes the boundary frame in both windows, so 0 is fine there.
        let p = Planner::new(&cfg, FrameGeometry::centered(160)).unwrap();
        let n = 61 * SR;
        assert_tiles(&p.plan(0, n), &FrameGeometry::centered(160), n);
    }

    #[test]
    fn a_custom_subsampled_geometry_tiles() {
        // Centred STFT (hop 160) followed by two stride-2 convs (k=3, p=1): stride 640.
        let g = FrameGeometry::custom(640, |n| {
            let mel = n / 160 + 1;
            let once = (mel + 2 - 3) / 2 + 1;
            (once + 2 - 3) / 2 + 1
        });
        let p = planner(g.clone());
        for n in [SR, 30 * SR, 30 * SR + 1, 65 * SR + 5, 301 * SR + 999] {
            assert_tiles(&p.plan(0, n), &g, n);
        }
    }

    #[test]
    fn a_stride_that_does_not_match_the_frame_count_is_refused() {
        // Declares 320 samples per frame but counts 640-sample frames.
        let g = FrameGeometry::custom(320, |n| n / 640 + 1);
        let e = Planner::new(&PlanConfig::default(), g).unwrap_err();
        assert!(e.message.contains("not shift-consistent"), "{e}");
    }
}
