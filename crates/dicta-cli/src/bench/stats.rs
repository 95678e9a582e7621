//! Summary statistics of repeated measurements.

use serde::Serialize;

/// Percentile `p` (0–100) of `values` with linear interpolation between closest ranks — numpy's
/// default (`numpy.percentile(..., method="linear")`). `None` for an empty slice.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() || !p.is_finite() {
        return None;
    }
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (p.clamp(0.0, 100.0) / 100.0) * (v.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    Some(v[lo] + (v[hi] - v[lo]) * (rank - lo as f64))
}

/// Median (the mean of the two middle values for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    percentile(values, 50.0)
}

/// Median, extremes and relative spread of repeated measurements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Median.
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// (max − min) / median: 0.05 means the runs spread over 5 % of the median.
    pub spread: f64,
}

/// Summarises `values`; `None` when empty.
pub fn summarise(values: &[f64]) -> Option<Summary> {
    let median = median(values)?;
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let spread = if median != 0.0 {
        (max - min) / median
    } else {
        0.0
    };
    Some(Summary {
        median,
        min,
        max,
        spread,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_match_numpy_linear() {
        // numpy.percentile([1, 2, 3, 4, 10], [50, 99, 90]) == [3.0, 9.76, 7.6]
        let v = [10.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(percentile(&v, 50.0), Some(3.0));
        assert!((percentile(&v, 99.0).unwrap() - 9.76).abs() < 1e-12);
        assert!((percentile(&v, 90.0).unwrap() - 7.6).abs() < 1e-12);
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 100.0), Some(10.0));
        assert_eq!(percentile(&[5.0], 99.0), Some(5.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn median_of_even_count_is_mean_of_middle_pair() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
    }

    #[test]
    fn summary_spread() {
        let s = summarise(&[2.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(s.spread, 1.0);
        assert_eq!(summarise(&[]), None);
    }
}
