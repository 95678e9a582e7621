//! Temperature fallback decisions (faster-whisper's `generate_with_fallback`).

use std::io::Write;

use flate2::write::ZlibEncoder;
use flate2::Compression;

use super::options::DecodeOptions;

/// `len(text) / len(zlib.compress(text))` over the UTF-8 bytes, as faster-whisper computes it
/// (high values mean repetitive text; empty text gives 0, as in Python).
pub fn compression_ratio(text: &str) -> f32 {
    let bytes = text.as_bytes();
    let mut enc = ZlibEncoder::new(
        Vec::with_capacity(bytes.len() / 2 + 16),
        Compression::new(6),
    );
    // Writing to a Vec cannot fail.
    let compressed = enc
        .write_all(bytes)
        .and_then(|_| enc.finish())
        .map(|v| v.len())
        .unwrap_or(bytes.len().max(1));
    bytes.len() as f32 / compressed.max(1) as f32
}

/// The outcome of decoding one window at one temperature.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// Temperature used.
    pub temperature: f32,
    /// Tokens of the best hypothesis (no EOT).
    pub tokens: Vec<u32>,
    /// faster-whisper's average log-probability (`sum / (len + 1)`).
    pub avg_logprob: f32,
    /// Compression ratio of the stripped text.
    pub compression_ratio: f32,
    /// Probability of the no-speech token at the start-of-transcript position.
    pub no_speech_prob: f32,
}

/// Whether `attempt` needs decoding again at the next temperature.
pub fn needs_fallback(attempt: &Attempt, opts: &DecodeOptions) -> bool {
    let mut needs = false;
    if let Some(t) = opts.compression_ratio_threshold {
        if attempt.compression_ratio > t {
            needs = true;
        }
    }
    let low_logprob = opts
        .log_prob_threshold
        .is_some_and(|t| attempt.avg_logprob < t);
    if low_logprob {
        needs = true;
    }
    // Probably silence: keep the result, the caller skips the window.
    if opts
        .no_speech_threshold
        .is_some_and(|t| attempt.no_speech_prob > t)
        && low_logprob
    {
        needs = false;
    }
    needs
}

/// Picks the result once every temperature failed: the attempt with the highest average
/// log-probability among those under the compression threshold (or among all, if none is),
/// reported with the last temperature tried (faster-whisper does this so the prompt reset
/// rule sees the final temperature).
pub fn select_after_all_failed(attempts: &[Attempt], opts: &DecodeOptions) -> Attempt {
    let below: Vec<&Attempt> = match opts.compression_ratio_threshold {
        Some(t) => attempts
            .iter()
            .filter(|a| a.compression_ratio <= t)
            .collect(),
        None => attempts.iter().collect(),
    };
    let pool: Vec<&Attempt> = if below.is_empty() {
        attempts.iter().collect()
    } else {
        below
    };
    // Python's max keeps the first of equal maxima.
    let mut best = pool[0];
    for a in &pool[1..] {
        if a.avg_logprob > best.avg_logprob {
            best = a;
        }
    }
    let mut out = best.clone();
    out.temperature = attempts.last().map_or(out.temperature, |a| a.temperature);
    out
}

/// Whether the window is skipped as silence after fallback settled.
pub fn is_silence(attempt: &Attempt, opts: &DecodeOptions) -> bool {
    let Some(t) = opts.no_speech_threshold else {
        return false;
    };
    let mut skip = attempt.no_speech_prob > t;
    if opts
        .log_prob_threshold
        .is_some_and(|lp| attempt.avg_logprob > lp)
    {
        skip = false;
    }
    skip
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(t: f32, lp: f32, cr: f32, ns: f32) -> Attempt {
        Attempt {
            temperature: t,
            tokens: vec![],
            avg_logprob: lp,
            compression_ratio: cr,
            no_speech_prob: ns,
        }
    }

    #[test]
    fn compression_ratio_matches_python_zlib() {
        // Values from python3: len(s)/len(zlib.compress(s)) (zlib 1.2.13, level -1 = 6).
        let cases = [
            ("And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.", 107.0 / 79.0),
            ("", 0.0),
        ];
        for (text, want) in cases {
            assert!(
                (compression_ratio(text) - want).abs() < 1e-6,
                "{text:?}: {}",
                compression_ratio(text)
            );
        }
        let rep = "the the the the the the the the the the the the the the the the the the";
        assert!(compression_ratio(rep) > 2.4);
    }

    #[test]
    fn fallback_rules() {
        let o = DecodeOptions::default();
        assert!(!needs_fallback(&attempt(0.0, -0.3, 1.5, 0.01), &o));
        assert!(needs_fallback(&attempt(0.0, -0.3, 2.5, 0.01), &o));
        assert!(needs_fallback(&attempt(0.0, -1.3, 1.5, 0.01), &o));
        // Low log-prob but likely silence: no fallback, and the window is skipped.
        let silent = attempt(0.0, -1.3, 1.5, 0.9);
        assert!(!needs_fallback(&silent, &o));
        assert!(is_silence(&silent, &o));
        // High no-speech prob but confident text: kept.
        assert!(!is_silence(&attempt(0.0, -0.2, 1.5, 0.9), &o));
        let off = DecodeOptions {
            compression_ratio_threshold: None,
            log_prob_threshold: None,
            no_speech_threshold: None,
            ..Default::default()
        };
        assert!(!needs_fallback(&attempt(0.0, -9.0, 9.0, 0.99), &off));
        assert!(!is_silence(&attempt(0.0, -9.0, 9.0, 0.99), &off));
    }

    #[test]
    fn selection_prefers_below_threshold_then_best_logprob() {
        let o = DecodeOptions::default();
        let atts = [
            attempt(0.0, -0.5, 3.0, 0.0),
            attempt(0.2, -1.5, 1.2, 0.0),
            attempt(0.4, -1.2, 1.3, 0.0),
            attempt(1.0, -2.0, 1.0, 0.0),
        ];
        let s = select_after_all_failed(&atts, &o);
        assert_eq!(s.avg_logprob, -1.2);
        assert_eq!(s.temperature, 1.0);
        let all_rep = [attempt(0.0, -0.5, 3.0, 0.0), attempt(0.2, -0.4, 3.5, 0.0)];
        assert_eq!(select_after_all_failed(&all_rep, &o).avg_logprob, -0.4);
    }
}
