//! Window and slaney mel filterbank, built once per [`super::LogMel`].

/// One triangular mel filter restricted to the FFT bins where it is nonzero, so applying the
/// bank costs about two multiply-adds per bin instead of `n_mels` per bin.
#[derive(Debug, Clone)]
pub(crate) struct SparseFilter {
    /// First FFT bin with a nonzero weight.
    pub start: usize,
    /// Weights of bins `start..start + weights.len()`.
    pub weights: Vec<f64>,
}

/// Periodic Hann window of length `n` (`torch.hann_window(n)`, `np.hanning(n + 1)[:-1]`).
pub(crate) fn hann_periodic(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos())
        .collect()
}

/// `np.linspace(start, stop, num)` bit for bit: `start + i * step`, last point exactly `stop`.
fn linspace(start: f64, stop: f64, num: usize) -> Vec<f64> {
    if num == 1 {
        return vec![start];
    }
    let step = (stop - start) / (num - 1) as f64;
    let mut v: Vec<f64> = (0..num).map(|i| i as f64 * step + start).collect();
    v[num - 1] = stop;
    v
}

// Slaney's mel scale (librosa `htk=False`): linear below 1 kHz, logarithmic above.
const MIN_LOG_HZ: f64 = 1000.0;
const MIN_LOG_MEL: f64 = 15.0;

fn hz_to_mel(hz: f64) -> f64 {
    if hz >= MIN_LOG_HZ {
        MIN_LOG_MEL + (hz / MIN_LOG_HZ).ln() * (27.0 / 6.4f64.ln())
    } else {
        3.0 * hz / 200.0
    }
}

fn mel_to_hz(mel: f64) -> f64 {
    if mel >= MIN_LOG_MEL {
        MIN_LOG_HZ * ((6.4f64.ln() / 27.0) * (mel - MIN_LOG_MEL)).exp()
    } else {
        200.0 * mel / 3.0
    }
}

/// Slaney-normalised triangular mel filters from 0 Hz to Nyquist, as
/// `librosa.filters.mel(sr, n_fft, n_mels, htk=False, norm="slaney")` and
/// `transformers.audio_utils.mel_filter_bank(..., norm="slaney", mel_scale="slaney")` build them.
pub(crate) fn slaney_mel_filters(
    sample_rate: u32,
    n_fft: usize,
    n_mels: usize,
) -> Vec<SparseFilter> {
    let n_bins = n_fft / 2 + 1;
    // transformers uses `sampling_rate // 2` (an integer) as the top FFT frequency.
    let fft_freqs = linspace(0.0, f64::from(sample_rate / 2), n_bins);
    let mels = linspace(
        hz_to_mel(0.0),
        hz_to_mel(f64::from(sample_rate) / 2.0),
        n_mels + 2,
    );
    let freqs: Vec<f64> = mels.into_iter().map(mel_to_hz).collect();

    (0..n_mels)
        .map(|m| {
            let (lo, mid, hi) = (freqs[m], freqs[m + 1], freqs[m + 2]);
            let enorm = 2.0 / (hi - lo);
            let weights: Vec<f64> = fft_freqs
                .iter()
                .map(|&f| {
                    let down = -(lo - f) / (mid - lo);
                    let up = (hi - f) / (hi - mid);
                    down.min(up).max(0.0) * enorm
                })
                .collect();
            let start = weights.iter().position(|&w| w > 0.0).unwrap_or(0);
            let end = weights
                .iter()
                .rposition(|&w| w > 0.0)
                .map_or(start, |e| e + 1);
            SparseFilter {
                start,
                weights: weights[start..end].to_vec(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mel_scale_round_trips_and_is_continuous_at_1khz() {
        for hz in [0.0, 123.4, 999.9, 1000.0, 4321.0, 8000.0] {
            assert!((mel_to_hz(hz_to_mel(hz)) - hz).abs() < 1e-9, "{hz}");
        }
        assert!((hz_to_mel(1000.0) - 15.0).abs() < 1e-12);
        // librosa's value for 8 kHz (faster-whisper hard-codes it as max_mel).
        assert!((hz_to_mel(8000.0) - 45.245640471924965).abs() < 1e-12);
    }

    #[test]
    fn filters_are_sparse_triangles_with_slaney_area() {
        let filters = slaney_mel_filters(16_000, 400, 80);
        assert_eq!(filters.len(), 80);
        for f in &filters {
            assert!(!f.weights.is_empty() && f.weights.len() <= 201);
            assert!(f.start + f.weights.len() <= 201);
            assert!(f.weights.iter().all(|&w| w > 0.0));
        }
        // Filter starts never go backwards along the frequency axis.
        assert!(filters.windows(2).all(|p| p[0].start <= p[1].start));
        // Slaney norm: each triangle has unit area in Hz; filters spanning many 40 Hz bins
        // sample it well enough for the Riemann sum to show it.
        for f in filters.iter().filter(|f| f.weights.len() >= 10) {
            let area = f.weights.iter().sum::<f64>() * 40.0;
            assert!((area - 1.0).abs() < 0.05, "area {area}");
        }
    }

    #[test]
    fn periodic_hann_is_symmetric_about_the_centre() {
        let w = hann_periodic(400);
        assert_eq!(w[0], 0.0);
        assert!((w[200] - 1.0).abs() < 1e-15);
        for i in 1..200 {
            assert!((w[i] - w[400 - i]).abs() < 1e-15);
        }
    }
}
