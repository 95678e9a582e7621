//! Batch scheduling: group windows from all inputs into model batches.
//!
//! Items are only lengths (in feature frames, or any unit the caller uses consistently for
//! `max_batch_frames`). Batches are formed longest-first over the items sorted by length, so
//! windows of similar length share a batch regardless of which recording they came from,
//! and one long recording's windows can fill batches on their own.

use dicta_core::{Error, Result};

/// Bounds on every batch.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScheduleConfig {
    /// Most items per batch.
    pub batch_size: usize,
    /// Most padded frames per batch: `items × longest item`. An item longer than this on its
    /// own still runs, alone, so that no input is refused here.
    pub max_batch_frames: usize,
    /// Most `(padded - real) / padded` per batch, in `[0, 1)`. Ignored when `fixed_input`.
    pub max_padding_fraction: f32,
    /// The model always consumes a fixed-size input (Whisper: 30 s of mel frames), so
    /// padding within a batch costs nothing extra and only the size bounds apply. Items are
    /// still sorted by length so that windows with similar content decode together.
    pub fixed_input: bool,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        Self {
            batch_size: 16,
            // Sixteen 30 s windows of 100 Hz mel frames.
            max_batch_frames: 16 * 3000,
            max_padding_fraction: 0.15,
            fixed_input: false,
        }
    }
}

impl ScheduleConfig {
    /// Checks `batch_size >= 1`, `max_batch_frames >= 1` and
    /// `0 <= max_padding_fraction < 1`; the error names the offending value.
    pub fn validate(&self) -> Result<()> {
        if self.batch_size == 0 {
            return Err(Error::invalid_input("batch_size must be at least 1, got 0"));
        }
        if self.max_batch_frames == 0 {
            return Err(Error::invalid_input(
                "max_batch_frames must be at least 1, got 0",
            ));
        }
        let p = self.max_padding_fraction;
        if !(0.0..1.0).contains(&p) {
            return Err(Error::invalid_input(format!(
                "max_padding_fraction must be in [0, 1), got {p}"
            )));
        }
        Ok(())
    }
}

/// One model call's worth of items.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Batch {
    /// Indices into the scheduled item list, longest first.
    pub items: Vec<usize>,
    /// Length of the longest item (what every item is padded to).
    pub max_len: usize,
    /// Sum of the items' lengths.
    pub real_frames: usize,
    /// `items.len() × max_len`.
    pub padded_frames: usize,
    /// `(padded_frames - real_frames) / padded_frames`; 0 for an all-empty batch.
    pub padding_fraction: f32,
}

impl Batch {
    fn new(items: Vec<usize>, lens: &[usize]) -> Self {
        let max_len = items.iter().map(|&i| lens[i]).max().unwrap_or(0);
        let real_frames = items.iter().map(|&i| lens[i]).sum();
        let padded_frames = items.len() * max_len;
        Self {
            padding_fraction: padding_fraction(padded_frames, real_frames),
            items,
            max_len,
            real_frames,
            padded_frames,
        }
    }
}

fn padding_fraction(padded: usize, real: usize) -> f32 {
    if padded == 0 {
        0.0
    } else {
        // f64 then one rounding: if the exact value is <= an f32 bound, so is the result.
        ((padded - real) as f64 / padded as f64) as f32
    }
}

/// Collects item lengths from any number of inputs and forms batches over all of them.
#[derive(Debug, Clone)]
pub struct Scheduler {
    cfg: ScheduleConfig,
    lens: Vec<usize>,
}

impl Scheduler {
    /// A scheduler with validated bounds.
    pub fn new(cfg: ScheduleConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            lens: Vec::new(),
        })
    }

    /// Adds an item of `len` frames and returns its index (what [`Batch::items`] refers to).
    pub fn push(&mut self, len: usize) -> usize {
        self.lens.push(len);
        self.lens.len() - 1
    }

    /// Number of items pushed.
    pub fn len(&self) -> usize {
        self.lens.len()
    }

    /// Whether no item was pushed.
    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// Batches over everything pushed so far (see [`schedule`]).
    pub fn batches(&self) -> Vec<Batch> {
        form_batches(&self.lens, &self.cfg)
    }
}

/// Groups items of the given lengths into batches.
///
/// Items are sorted by length, longest first (ties by index, so the result is
/// deterministic), then cut greedily: a batch takes the next item while it stays within
/// `batch_size`, `max_batch_frames` and (unless `fixed_input`) `max_padding_fraction`.
/// Because the first item of a batch is its longest, an item that breaks the padding bound
/// would be followed only by shorter ones that break it worse, so the cut is final.
/// Every item appears in exactly one batch; the longest batches come first, so a batch
/// that does not fit in memory fails before any work is spent.
pub fn schedule(lens: &[usize], cfg: &ScheduleConfig) -> Result<Vec<Batch>> {
    cfg.validate()?;
    Ok(form_batches(lens, cfg))
}

fn form_batches(lens: &[usize], cfg: &ScheduleConfig) -> Vec<Batch> {
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by(|&a, &b| lens[b].cmp(&lens[a]).then(a.cmp(&b)));
    let max_pad = f64::from(cfg.max_padding_fraction);

    let mut batches = Vec::new();
    let mut current: Vec<usize> = Vec::with_capacity(cfg.batch_size);
    let mut longest = 0;
    let mut real = 0usize;
    for idx in order {
        let len = lens[idx];
        if !current.is_empty() {
            let n = current.len() + 1;
            let padded = n * longest;
            let fits = n <= cfg.batch_size
                && padded <= cfg.max_batch_frames
                && (cfg.fixed_input || (padded - real - len) as f64 <= max_pad * padded as f64);
            if !fits {
                batches.push(Batch::new(std::mem::take(&mut current), lens));
            }
        }
        if current.is_empty() {
            longest = len;
            real = 0;
        }
        current.push(idx);
        real += len;
    }
    if !current.is_empty() {
        batches.push(Batch::new(current, lens));
    }
    batches
}

/// Summary of a schedule: effective batch sizes and padding.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ScheduleStats {
    /// Number of batches.
    pub batches: usize,
    /// Number of items over all batches.
    pub items: usize,
    /// Items per batch, in batch order.
    pub batch_sizes: Vec<usize>,
    /// Padding fraction per batch, in batch order.
    pub padding_fractions: Vec<f32>,
    /// Mean items per batch (0 with no batches).
    pub mean_batch_size: f32,
    /// Real frames over all batches.
    pub real_frames: usize,
    /// Padded frames over all batches.
    pub padded_frames: usize,
    /// Padding over the whole schedule: `(padded - real) / padded`.
    pub padding_fraction: f32,
    /// Largest per-batch padding fraction.
    pub max_padding_fraction: f32,
}

impl ScheduleStats {
    /// Summarizes `batches`.
    pub fn of(batches: &[Batch]) -> Self {
        let batch_sizes: Vec<usize> = batches.iter().map(|b| b.items.len()).collect();
        let items: usize = batch_sizes.iter().sum();
        let real_frames = batches.iter().map(|b| b.real_frames).sum();
        let padded_frames = batches.iter().map(|b| b.padded_frames).sum();
        let padding_fractions: Vec<f32> = batches.iter().map(|b| b.padding_fraction).collect();
        Self {
            batches: batches.len(),
            items,
            mean_batch_size: if batches.is_empty() {
                0.0
            } else {
                items as f32 / batches.len() as f32
            },
            real_frames,
            padded_frames,
            padding_fraction: padding_fraction(padded_frames, real_frames),
            max_padding_fraction: padding_fractions.iter().copied().fold(0.0, f32::max),
            batch_sizes,
            padding_fractions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(batch_size: usize, max_batch_frames: usize, pad: f32) -> ScheduleConfig {
        ScheduleConfig {
            batch_size,
            max_batch_frames,
            max_padding_fraction: pad,
            fixed_input: false,
        }
    }

    fn items(batches: &[Batch]) -> Vec<Vec<usize>> {
        batches.iter().map(|b| b.items.clone()).collect()
    }

    #[test]
    fn sorts_by_length_across_inputs() {
        let lens = [10, 100, 11, 99, 12, 98];
        let b = schedule(&lens, &cfg(8, 10_000, 0.15)).unwrap();
        assert_eq!(items(&b), [vec![1, 3, 5], vec![4, 2, 0]]);
        assert_eq!(b[0].padded_frames, 300);
        assert_eq!(b[0].real_frames, 297);
        assert!((b[0].padding_fraction - 0.01).abs() < 1e-6);
    }

    #[test]
    fn batch_size_bounds() {
        let b = schedule(&[5; 10], &cfg(4, 10_000, 0.0)).unwrap();
        assert_eq!(items(&b), [vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
    }

    #[test]
    fn max_batch_frames_bounds_padded_frames() {
        // 3 × 100 = 300 > 250: only two fit.
        let b = schedule(&[100, 100, 100], &cfg(8, 250, 0.15)).unwrap();
        assert_eq!(items(&b), [vec![0, 1], vec![2]]);
    }

    #[test]
    fn padding_bound_is_inclusive_and_cuts() {
        // [100, 70]: 30/200 = 0.15 exactly → allowed; adding 55 → 75/300 = 0.25 → cut.
        let b = schedule(&[100, 70, 55], &cfg(8, 10_000, 0.15)).unwrap();
        assert_eq!(items(&b), [vec![0, 1], vec![2]]);
        assert_eq!(b[0].padding_fraction, 0.15);
    }

    #[test]
    fn oversized_item_runs_alone() {
        let b = schedule(&[500, 10, 10], &cfg(8, 100, 0.5)).unwrap();
        assert_eq!(items(&b), [vec![0], vec![1, 2]]);
    }

    #[test]
    fn fixed_input_ignores_padding_but_not_sizes() {
        let c = ScheduleConfig {
            fixed_input: true,
            ..cfg(3, 10_000, 0.0)
        };
        let b = schedule(&[3000, 200, 1500, 10, 2999], &c).unwrap();
        assert_eq!(items(&b), [vec![0, 4, 2], vec![1, 3]]);
    }

    #[test]
    fn empty_and_zero_length_items() {
        assert!(schedule(&[], &ScheduleConfig::default())
            .unwrap()
            .is_empty());
        let b = schedule(&[0, 0], &ScheduleConfig::default()).unwrap();
        assert_eq!(items(&b), [vec![0, 1]]);
        assert_eq!(b[0].padding_fraction, 0.0);
    }

    #[test]
    fn scheduler_struct_matches_the_function() {
        let lens = [7, 3, 9, 9, 1, 4];
        let mut s = Scheduler::new(ScheduleConfig::default()).unwrap();
        for (i, &l) in lens.iter().enumerate() {
            assert_eq!(s.push(l), i);
        }
        assert_eq!(
            s.batches(),
            schedule(&lens, &ScheduleConfig::default()).unwrap()
        );
    }

    #[test]
    fn invalid_configs_name_the_value() {
        let e = schedule(&[1], &cfg(0, 10, 0.1)).unwrap_err();
        assert!(e.message.contains("batch_size"), "{e}");
        let e = schedule(&[1], &cfg(1, 0, 0.1)).unwrap_err();
        assert!(e.message.contains("max_batch_frames"), "{e}");
        for p in [1.0, -0.1, f32::NAN] {
            let e = schedule(&[1], &cfg(1, 10, p)).unwrap_err();
            assert!(e.message.contains("max_padding_fraction"), "{e}");
        }
    }

    #[test]
    fn stats_summarize_batches() {
        let b = schedule(&[100, 70, 55, 55], &cfg(8, 10_000, 0.15)).unwrap();
        let s = ScheduleStats::of(&b);
        assert_eq!(s.batch_sizes, [2, 2]);
        assert_eq!(s.items, 4);
        assert_eq!(s.mean_batch_size, 2.0);
        assert_eq!((s.real_frames, s.padded_frames), (280, 310));
        assert_eq!(s.max_padding_fraction, 0.15);
        assert_eq!(s.padding_fractions, [0.15, 0.0]);
        assert!((s.padding_fraction - 30.0 / 310.0).abs() < 1e-6);
    }
}
