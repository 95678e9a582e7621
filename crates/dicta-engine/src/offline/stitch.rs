//! CTC stitching: join the retained log-prob frames of a recording's windows.
//!
//! The joined matrix is decoded once for the whole recording, so a word that straddles a
//! window boundary is decoded from continuous frames instead of being glued from two
//! transcripts. Frame `t` of the result is recording frame `t`, so frame times are
//! `t × samples_per_frame / sample_rate` with no per-window offsets.

use dicta_core::{Error, Result};

use super::plan::Window;

/// Joins per-window CTC log-probs into one matrix for the recording.
///
/// - `windows`: all windows of one recording, in order (as [`super::Planner::plan`] returns).
/// - `rows[i]`: window `i`'s log-probs, row-major `[T_i, V]` with `T_i >= windows[i].retain.end`
///   (a row padded to the batch length is fine; frames past `retain.end` are ignored).
/// - returns row-major `[T_total, V]`, `T_total` = sum of the retained lengths
///   (= `frames_for_samples(recording length)` for a planned recording).
///
/// Errors (`InvalidInput`) when the counts differ, `vocab_size` is 0, a row is not a whole
/// number of `V`-wide frames or is too short, or the windows do not tile one recording's
/// frames contiguously from frame 0.
pub fn stitch(windows: &[Window], rows: &[&[f32]], vocab_size: usize) -> Result<Vec<f32>> {
    if vocab_size == 0 {
        return Err(Error::invalid_input("vocab_size must be positive, got 0"));
    }
    if windows.len() != rows.len() {
        return Err(Error::invalid_input(format!(
            "stitch needs one log-prob row per window: {} windows, {} rows",
            windows.len(),
            rows.len()
        )));
    }
    let total: usize = windows.iter().map(|w| w.retain.len()).sum();
    let mut out = Vec::with_capacity(total * vocab_size);
    let mut next_frame = 0;
    for (w, row) in windows.iter().zip(rows) {
        if w.recording != windows[0].recording {
            return Err(Error::invalid_input(format!(
                "stitch joins one recording, got windows of recordings {} and {}",
                windows[0].recording, w.recording
            )));
        }
        let frames = w.retained_recording_frames();
        if frames.start != next_frame {
            return Err(Error::invalid_input(format!(
                "window {} of recording {} retains recording frames {frames:?}, expected them to \
                 start at frame {next_frame}",
                w.index, w.recording
            )));
        }
        if row.len() % vocab_size != 0 || row.len() / vocab_size < w.retain.end {
            return Err(Error::invalid_input(format!(
                "window {} of recording {}: log-probs have {} values, need a [T, {vocab_size}] \
                 matrix with T >= {}",
                w.index,
                w.recording,
                row.len(),
                w.retain.end
            )));
        }
        out.extend_from_slice(&row[w.retain.start * vocab_size..w.retain.end * vocab_size]);
        next_frame = frames.end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offline::plan::{FrameGeometry, PlanConfig, Planner};

    const V: usize = 3;

    /// Log-probs of the *recording* at frame `t`: recognisable values per frame.
    fn frame(t: usize) -> [f32; V] {
        [t as f32, -(t as f32), 0.5]
    }

    /// What a model that sees the whole recording would give each window (the ideal case:
    /// identical frames on the shared grid), plus garbage padding rows.
    fn window_rows(windows: &[Window], pad: usize) -> Vec<Vec<f32>> {
        windows
            .iter()
            .map(|w| {
                let mut r: Vec<f32> = (0..w.n_frames)
                    .flat_map(|f| frame(w.frame_offset + f))
                    .collect();
                r.extend(std::iter::repeat_n(f32::NAN, pad * V));
                r
            })
            .collect()
    }

    #[test]
    fn stitched_frames_are_the_recording_frames() {
        let g = FrameGeometry::wav2vec2();
        let p = Planner::new(&PlanConfig::default(), g.clone()).unwrap();
        for n in [16_000, 480_000, 65 * 16_000, 123 * 16_000 + 17] {
            let w = p.plan(0, n);
            let rows = window_rows(&w, 5);
            let refs: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
            let joined = stitch(&w, &refs, V).unwrap();
            let expected: Vec<f32> = (0..g.frames_for_samples(n)).flat_map(frame).collect();
            assert_eq!(joined, expected, "n={n}");
        }
    }

    #[test]
    fn rejects_mismatched_inputs() {
        let p = Planner::new(&PlanConfig::default(), FrameGeometry::wav2vec2()).unwrap();
        let w = p.plan(0, 65 * 16_000);
        let rows = window_rows(&w, 0);
        let refs: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
        assert!(stitch(&w, &refs[..2], V).is_err());
        assert!(stitch(&w, &refs, 0).is_err());
        // Out of order windows leave a gap.
        let swapped = [w[1].clone(), w[0].clone(), w[2].clone()];
        let e = stitch(&swapped, &[refs[1], refs[0], refs[2]], V).unwrap_err();
        assert!(
            e.message.contains("expected them to start at frame 0"),
            "{e}"
        );
        // A row shorter than its retained range.
        let short = &rows[2][..(w[2].retain.end - 1) * V];
        let e = stitch(&w, &[refs[0], refs[1], short], V).unwrap_err();
        assert!(e.message.contains("T >= 749"), "{e}");
        // A ragged row.
        let ragged = &rows[2][..rows[2].len() - 1];
        assert!(stitch(&w, &[refs[0], refs[1], ragged], V).is_err());
        // Windows of two recordings.
        let mut other = w.clone();
        other[1].recording = 7;
        assert!(stitch(&other, &refs, V).is_err());
    }

    #[test]
    fn no_windows_is_an_empty_matrix() {
        assert!(stitch(&[], &[], V).unwrap().is_empty());
    }
}
