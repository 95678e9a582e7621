//! The log-mel feature matrix and its fixed-length windows.

/// Log-mel features laid out `[n_mels, n_frames]` row-major: `data[m * n_frames + t]` is mel bin
/// `m` of frame `t` (one frame per `hop_length` samples).
#[derive(Debug, Clone, PartialEq)]
pub struct MelSpectrogram {
    /// Number of mel bins (rows).
    pub n_mels: usize,
    /// Number of frames (columns).
    pub n_frames: usize,
    /// `n_mels * n_frames` values, row-major `[n_mels, n_frames]`.
    pub data: Vec<f32>,
}

impl MelSpectrogram {
    /// The `n_frames` values of mel bin `m`, or `None` when `m >= n_mels`.
    pub fn row(&self, m: usize) -> Option<&[f32]> {
        (m < self.n_mels).then(|| &self.data[m * self.n_frames..(m + 1) * self.n_frames])
    }

    /// Frames `[start, start + len)` of every bin as a `[n_mels, len]` row-major buffer, with
    /// zeros past `n_frames` (faster-whisper's `pad_or_trim` of a feature slice: the fill is
    /// 0.0 in the normalised log-mel domain, not the clamp floor).
    pub fn window(&self, start: usize, len: usize) -> Vec<f32> {
        let mut out = vec![0.0f32; self.n_mels * len];
        let begin = start.min(self.n_frames);
        let end = start.saturating_add(len).min(self.n_frames);
        let avail = end - begin;
        if avail > 0 {
            for (dst, src) in out
                .chunks_exact_mut(len)
                .zip(self.data.chunks_exact(self.n_frames))
            {
                dst[..avail].copy_from_slice(&src[begin..end]);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(n_mels: usize, n_frames: usize) -> MelSpectrogram {
        let data = (0..n_mels * n_frames).map(|i| i as f32 + 1.0).collect();
        MelSpectrogram {
            n_mels,
            n_frames,
            data,
        }
    }

    #[test]
    fn window_inside_copies_each_row_segment() {
        let s = ramp(3, 10);
        assert_eq!(
            s.window(2, 3),
            vec![3.0, 4.0, 5.0, 13.0, 14.0, 15.0, 23.0, 24.0, 25.0]
        );
    }

    #[test]
    fn window_past_the_end_is_zero_padded() {
        let s = ramp(2, 4);
        assert_eq!(s.window(3, 3), vec![4.0, 0.0, 0.0, 8.0, 0.0, 0.0]);
        assert_eq!(s.window(10, 2), vec![0.0; 4]);
        assert_eq!(s.window(usize::MAX, 1), vec![0.0; 2]);
        assert_eq!(s.window(0, 0), Vec::<f32>::new());
    }

    #[test]
    fn rows_are_bounds_checked() {
        let s = ramp(2, 4);
        assert_eq!(s.row(1), Some(&[5.0, 6.0, 7.0, 8.0][..]));
        assert_eq!(s.row(2), None);
    }
}
