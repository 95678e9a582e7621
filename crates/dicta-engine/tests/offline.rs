//! Properties of the offline planner, scheduler and CTC stitcher, and the three together on
//! mixed-length workloads.

use dicta_engine::offline::{
    schedule, stitch, FrameGeometry, PlanConfig, Planner, ScheduleConfig, ScheduleStats, Window,
};
use proptest::prelude::*;

const SR: usize = 16_000;

/// Centred STFT (hop 160) then two stride-2 convs (kernel 3, padding 1): a conformer-style
/// CTC front end with 40 ms frames.
fn subsampled() -> FrameGeometry {
    FrameGeometry::custom(640, |n| {
        let mel = n / 160 + 1;
        let once = (mel - 1) / 2 + 1;
        (once - 1) / 2 + 1
    })
}

fn geometries() -> impl Strategy<Value = FrameGeometry> {
    prop_oneof![
        Just(FrameGeometry::wav2vec2()),
        Just(FrameGeometry::centered(160)),
        Just(subsampled()),
    ]
}

/// Checks every structural invariant of one recording's plan.
fn check_plan(p: &Planner, windows: &[Window], n: usize) -> Result<(), TestCaseError> {
    let g = p.geometry();
    let spf = g.samples_per_frame;
    let total = g.frames_for_samples(n);
    prop_assert!(!windows.is_empty());
    prop_assert_eq!(windows.len() == 1, n <= p.chunk_samples());
    let mut retained = vec![0u8; total];
    for (k, w) in windows.iter().enumerate() {
        prop_assert_eq!(w.index, k);
        prop_assert_eq!(w.start_sample % spf, 0);
        prop_assert_eq!(w.frame_offset, w.start_sample / spf);
        prop_assert!(w.len_samples <= p.chunk_samples());
        prop_assert_eq!(w.n_frames, g.frames_for_samples(w.len_samples));
        prop_assert!(w.retain.start <= w.retain.end && w.retain.end <= w.n_frames);
        for f in w.retained_recording_frames() {
            prop_assert!(f < total, "frame {} beyond the recording's {}", f, total);
            retained[f] += 1;
        }
        if k + 1 < windows.len() {
            // Full length, and the next window starts inside it: samples covered gaplessly.
            prop_assert_eq!(w.len_samples, p.chunk_samples());
            let next = &windows[k + 1];
            prop_assert!(next.start_sample < w.end_sample());
            // Both sides of the split keep half the shared frames as context.
            let shared = w.frame_offset + w.n_frames - next.frame_offset;
            prop_assert!(w.n_frames - w.retain.end >= shared / 2);
            prop_assert!(next.retain.start >= shared / 2);
        } else {
            prop_assert_eq!(w.end_sample(), n);
        }
    }
    prop_assert!(
        retained.iter().all(|&c| c == 1),
        "some frame not retained exactly once"
    );
    Ok(())
}

proptest! {
    #[test]
    fn every_frame_is_retained_exactly_once(
        geom in geometries(),
        chunk in 2.0f32..40.0,
        overlap_ratio in 0.0f32..0.49,
        n in 0usize..400 * SR,
    ) {
        let cfg = PlanConfig { chunk_seconds: chunk, overlap_seconds: chunk * overlap_ratio, sample_rate: 16_000 };
        // Small overlaps are refused for wav2vec2 (its 400-sample field spans boundaries).
        let Ok(p) = Planner::new(&cfg, geom) else { return Ok(()) };
        check_plan(&p, &p.plan(0, n), n)?;
    }

    #[test]
    fn default_plan_is_sound_for_any_length(geom in geometries(), n in 0usize..600 * SR) {
        let p = Planner::new(&PlanConfig::default(), geom).unwrap();
        check_plan(&p, &p.plan(0, n), n)?;
    }

    #[test]
    fn schedule_bounds_and_coverage(
        lens in prop::collection::vec(0usize..3000, 0..200),
        batch_size in 1usize..32,
        max_batch_frames in 1usize..60_000,
        max_padding_fraction in 0.0f32..0.5,
        fixed_input in any::<bool>(),
    ) {
        let cfg = ScheduleConfig { batch_size, max_batch_frames, max_padding_fraction, fixed_input };
        let batches = schedule(&lens, &cfg).unwrap();
        let mut seen: Vec<usize> = batches.iter().flat_map(|b| b.items.iter().copied()).collect();
        seen.sort_unstable();
        prop_assert_eq!(seen, (0..lens.len()).collect::<Vec<_>>());
        for (i, b) in batches.iter().enumerate() {
            prop_assert!(!b.items.is_empty() && b.items.len() <= batch_size);
            let max_len = b.items.iter().map(|&j| lens[j]).max().unwrap();
            prop_assert_eq!(b.max_len, max_len);
            prop_assert_eq!(b.padded_frames, b.items.len() * max_len);
            prop_assert_eq!(b.real_frames, b.items.iter().map(|&j| lens[j]).sum::<usize>());
            prop_assert!(b.items.windows(2).all(|w| lens[w[0]] >= lens[w[1]]));
            if b.items.len() > 1 {
                prop_assert!(b.padded_frames <= max_batch_frames);
                if !fixed_input {
                    prop_assert!(b.padding_fraction <= max_padding_fraction);
                }
            }
            // Greedy cut: the next batch's first item did not fit this batch.
            if let Some(next) = batches.get(i + 1) {
                let first = lens[next.items[0]];
                prop_assert!(first <= b.max_len);
                let n = b.items.len() + 1;
                let padded = n * b.max_len;
                let pad = (padded - b.real_frames - first) as f64 / padded as f64;
                prop_assert!(
                    n > batch_size
                        || padded > max_batch_frames
                        || (!fixed_input && pad > f64::from(max_padding_fraction))
                );
            }
        }
        let stats = ScheduleStats::of(&batches);
        prop_assert_eq!(stats.items, lens.len());
        prop_assert_eq!(stats.real_frames, lens.iter().sum::<usize>());
    }

    #[test]
    fn padding_bound_holds_on_mixed_workloads(
        seconds in prop::collection::vec(2.0f64..60.0, 1..80),
        geom in geometries(),
    ) {
        let (windows, lens) = plan_all(&seconds, &geom);
        let cfg = ScheduleConfig { max_batch_frames: usize::MAX, ..ScheduleConfig::default() };
        for b in schedule(&lens, &cfg).unwrap() {
            prop_assert!(b.padding_fraction <= 0.15, "{:?}", b);
        }
        prop_assert!(windows.len() >= seconds.len());
    }
}

/// Plans every recording (lengths in seconds); returns all windows and their frame counts.
fn plan_all(seconds: &[f64], geom: &FrameGeometry) -> (Vec<Window>, Vec<usize>) {
    let p = Planner::new(&PlanConfig::default(), geom.clone()).unwrap();
    let windows: Vec<Window> = seconds
        .iter()
        .enumerate()
        .flat_map(|(r, s)| p.plan(r, (s * SR as f64) as usize))
        .collect();
    let lens = windows.iter().map(|w| w.n_frames).collect();
    (windows, lens)
}

/// Deterministic recording lengths spread over 2–60 s (a 64-bit LCG; no RNG dependency).
fn mixed_seconds(count: usize, seed: u64) -> Vec<f64> {
    let mut x = seed;
    (0..count)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            2.0 + 58.0 * ((x >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

/// The log-prob row a whole-recording model would give recording `r` at frame `t`.
fn frame(r: usize, t: usize) -> [f32; 2] {
    [r as f32, t as f32]
}

#[test]
fn mixed_workload_plan_schedule_stitch_end_to_end() {
    let geom = FrameGeometry::wav2vec2();
    let seconds = mixed_seconds(200, 7);
    let (windows, lens) = plan_all(&seconds, &geom);
    let cfg = ScheduleConfig {
        batch_size: 16,
        max_batch_frames: 16 * 1499,
        ..ScheduleConfig::default()
    };
    let batches = schedule(&lens, &cfg).unwrap();
    let stats = ScheduleStats::of(&batches);
    eprintln!(
        "{} recordings, {} windows, {} batches, mean batch {:.2}, padding {:.4} (max {:.4})",
        seconds.len(),
        windows.len(),
        stats.batches,
        stats.mean_batch_size,
        stats.padding_fraction,
        stats.max_padding_fraction
    );
    assert!(stats.max_padding_fraction <= 0.15);
    assert!(stats.batch_sizes.iter().all(|&b| b <= 16));
    // Batching is real: without cross-recording batching nearly every batch would hold one
    // or two windows.
    assert!(stats.mean_batch_size >= 8.0, "{stats:?}");

    // "Run" each batch as a model would: a padded [B, T_max, V] output, garbage past each
    // window's frames. Then route rows back to their windows and stitch per recording.
    let mut rows: Vec<Vec<f32>> = vec![Vec::new(); windows.len()];
    for b in &batches {
        for &i in &b.items {
            let w = &windows[i];
            rows[i] = (0..b.max_len)
                .flat_map(|f| {
                    if f < w.n_frames {
                        frame(w.recording, w.frame_offset + f)
                    } else {
                        [f32::NAN; 2]
                    }
                })
                .collect();
        }
    }
    let mut start = 0;
    for (r, s) in seconds.iter().enumerate() {
        let end = start
            + windows[start..]
                .iter()
                .take_while(|w| w.recording == r)
                .count();
        let refs: Vec<&[f32]> = rows[start..end].iter().map(Vec::as_slice).collect();
        let joined = stitch(&windows[start..end], &refs, 2).unwrap();
        let n = (s * SR as f64) as usize;
        let expected: Vec<f32> = (0..geom.frames_for_samples(n))
            .flat_map(|t| frame(r, t))
            .collect();
        assert_eq!(joined, expected, "recording {r} ({s:.2} s)");
        start = end;
    }
    assert_eq!(start, windows.len());
}

#[test]
fn whisper_fixed_input_batches_by_count_only() {
    // Whisper pads every window to 3000 mel frames; lengths are the real content.
    let geom = FrameGeometry::centered(160);
    let (windows, lens) = plan_all(&mixed_seconds(50, 3), &geom);
    let cfg = ScheduleConfig {
        batch_size: 8,
        max_batch_frames: usize::MAX,
        max_padding_fraction: 0.0,
        fixed_input: true,
    };
    let stats = ScheduleStats::of(&schedule(&lens, &cfg).unwrap());
    assert_eq!(stats.batches, windows.len().div_ceil(8));
    assert!(stats.batch_sizes[..stats.batches - 1]
        .iter()
        .all(|&b| b == 8));
}

#[test]
fn a_single_long_recording_fills_batches_on_its_own() {
    let geom = FrameGeometry::wav2vec2();
    let (windows, lens) = plan_all(&[600.0], &geom);
    // 600 s: windows start every 25 s; the last one is the 25 s tail from 575 s.
    assert_eq!(windows.len(), 24);
    assert_eq!(windows[23].len_samples, 25 * SR);
    let batches = schedule(&lens, &ScheduleConfig::default()).unwrap();
    let sizes: Vec<usize> = batches.iter().map(|b| b.items.len()).collect();
    // 23 full windows fill a batch of 16 and 7 more; the 25 s tail (1249 frames) joins
    // them at (1499 - 1249) / (8 × 1499) ≈ 2.1 % padding.
    assert_eq!(sizes, [16, 8]);
}
