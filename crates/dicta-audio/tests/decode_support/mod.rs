//! Helpers shared by the decode and resample tests: fixture paths, .npy loading, SNR.
#![allow(dead_code)]

use std::path::PathBuf;

/// Folder of the committed audio fixtures (see make_fixtures.py there).
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/audio")).join(name)
}

/// The shared real-speech data set (cloned next to the repository in CI).
pub fn shared_data() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data"))
}

/// Reads a 1-D float32 .npy fixture.
pub fn npy(name: &str) -> Vec<f32> {
    let bytes = std::fs::read(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    npyz::NpyFile::new(&bytes[..])
        .unwrap()
        .into_vec::<f32>()
        .unwrap()
}

/// Reads a 1-D int16 .npy fixture as samples in [-1, 1) (`v / 32768`, as s16 decodes).
pub fn npy_i16(name: &str) -> Vec<f32> {
    let bytes = std::fs::read(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    npyz::NpyFile::new(&bytes[..])
        .unwrap()
        .into_vec::<i16>()
        .unwrap()
        .into_iter()
        .map(|v| f32::from(v) / 32_768.0)
        .collect()
}

/// Signal-to-noise ratio in dB of `test` against `reference` over the same span.
pub fn snr_db(reference: &[f32], test: &[f32]) -> f64 {
    assert_eq!(reference.len(), test.len());
    let (mut sig, mut err) = (0f64, 0f64);
    for (&r, &t) in reference.iter().zip(test) {
        sig += (r as f64).powi(2);
        err += (r as f64 - t as f64).powi(2);
    }
    10.0 * (sig / err.max(1e-300)).log10()
}

/// Small deterministic PRNG (xorshift64*) so the corruption tests are reproducible.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}
