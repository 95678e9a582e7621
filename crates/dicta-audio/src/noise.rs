//! Deterministic faint noise: a quiet line (not digital silence) for benchmarks and tests that
//! put pauses between real recordings.

/// `n` samples uniform in ±0.001 (about −60 dBFS), the same for the same `seed` on every
/// machine (a 32-bit linear congruential generator).
pub fn faint_noise(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((x >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 2e-3
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_not_silent_and_repeatable() {
        let a = faint_noise(16_000, 3);
        assert_eq!(a, faint_noise(16_000, 3));
        assert_ne!(a, faint_noise(16_000, 4));
        let peak = a.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(peak <= 1e-3 && peak > 9e-4, "{peak}");
        let rms = (a.iter().map(|x| x * x).sum::<f32>() / a.len() as f32).sqrt();
        assert!((rms - 1e-3 / 3f32.sqrt()).abs() < 5e-5, "{rms}");
    }
}
