//! Mutation fuzzing on stable Rust (libFuzzer and cargo-fuzz need nightly, which cannot be
//! fetched here): each harness is an ignored test that takes a seed corpus of real and broken
//! inputs, mutates them with [`arbitrary`]-driven havoc (bit flips, interesting integers at
//! header offsets, truncation, deletion, duplication, insertion, splicing of two seeds) and runs
//! the target on every mutant until a time budget is spent.
//!
//! A target fails the run when it panics, when one input takes longer than [`HANG_SECONDS`]
//! (the process is aborted by a watchdog, since a hung call cannot be interrupted) or when the
//! process's resident memory passes [`MAX_RSS_MIB`]. The offending input is written to
//! `$DICTA_FUZZ_OUT` (default: the system temp folder, `dicta-fuzz/<name>/`) and its path
//! printed, so that it can be added to the corpus once fixed. An abort that cannot be caught
//! (an allocation failure) leaves its input in `last-input` there.
//!
//! `DICTA_FUZZ_SECONDS` sets the budget per harness (default 10); `DICTA_FUZZ_SEED` the
//! random seed (default: from the clock, printed), so a failing run can be repeated.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arbitrary::Unstructured;
use rand::{Rng, RngCore, SeedableRng};

/// One input running longer than this is a hang.
pub const HANG_SECONDS: u64 = 30;
/// Resident memory (MiB) past which the run fails.
pub const MAX_RSS_MIB: u64 = 2048;
/// Largest mutant, in bytes (inputs grow by duplication and insertion).
const MAX_LEN: usize = 1 << 20;

/// What a run did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Report {
    /// Inputs tried (seeds included).
    pub runs: u64,
    /// Seconds spent.
    pub seconds: f64,
    /// Most resident memory seen, MiB.
    pub peak_rss_mib: u64,
}

/// Runs `target` on every seed, then on mutants of them until the budget is spent. Panics
/// (failing the test) at the first input that panics or passes the memory bound, after saving
/// it; aborts the process on a hang.
pub fn fuzz(name: &str, seeds: &[Vec<u8>], target: impl Fn(&[u8])) -> Report {
    assert!(!seeds.is_empty(), "{name}: no seeds");
    let budget = Duration::from_secs_f64(env_f64("DICTA_FUZZ_SECONDS").unwrap_or(10.0));
    let seed = env_f64("DICTA_FUZZ_SEED").map_or_else(
        || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        },
        |s| s as u64,
    );
    eprintln!(
        "{name}: {} seeds, {:.0} s, DICTA_FUZZ_SEED={seed}",
        seeds.len(),
        budget.as_secs_f64()
    );
    let _ = std::fs::create_dir_all(out_dir(name));
    let last = out_dir(name).join("last-input");
    eprintln!(
        "{name}: should the process abort, its input is {}",
        last.display()
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let watchdog = Watchdog::start(name);
    let started = Instant::now();
    let mut report = Report {
        runs: 0,
        seconds: 0.0,
        peak_rss_mib: rss_mib(),
    };
    let mut entropy = vec![0u8; 256];
    let mut i = 0usize;
    while i < seeds.len() || started.elapsed() < budget {
        let input = if i < seeds.len() {
            seeds[i].clone()
        } else {
            rng.fill_bytes(&mut entropy);
            let first = &seeds[rng.random_range(0..seeds.len())];
            let other = &seeds[rng.random_range(0..seeds.len())];
            mutate(first, other, &mut Unstructured::new(&entropy))
        };
        i += 1;
        // An allocation failure aborts the process (it cannot be caught): the input is on
        // disk before each run, so it is not lost then.
        let _ = std::fs::write(&last, &input);
        watchdog.arm(&input);
        let outcome = catch_unwind(AssertUnwindSafe(|| target(&input)));
        watchdog.disarm();
        report.runs += 1;
        if let Err(panic) = outcome {
            let path = save(name, "crash", &input);
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!(
                "{name}: the target panicked ({msg}); input saved to {}",
                path.display()
            );
        }
        if report.runs.is_multiple_of(64) || i <= seeds.len() {
            let rss = rss_mib();
            report.peak_rss_mib = report.peak_rss_mib.max(rss);
            if rss > MAX_RSS_MIB {
                let path = save(name, "memory", &input);
                panic!(
                    "{name}: resident memory reached {rss} MiB (bound {MAX_RSS_MIB}); last input saved to {}",
                    path.display()
                );
            }
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "{name}: {} inputs in {:.0} s, no crash, no hang, peak RSS {} MiB",
        report.runs, report.seconds, report.peak_rss_mib
    );
    report
}

/// Integers that trip size and offset arithmetic.
const INTERESTING: [u32; 12] = [
    0,
    1,
    2,
    7,
    8,
    0x7F,
    0x80,
    0xFF,
    0x7FFF,
    0xFFFF,
    0x7FFF_FFFF,
    0xFFFF_FFFF,
];

/// Decimal numbers that trip parsers of text formats.
const DECIMALS: [&str; 8] = [
    "0",
    "1",
    "-1",
    "4294967296",
    "99999999999",
    "18446744073709551615",
    "1e309",
    "nan",
];

/// One to eight havoc steps on `input` (with `other` for splicing), chosen by `u`.
pub fn mutate(input: &[u8], other: &[u8], u: &mut Unstructured<'_>) -> Vec<u8> {
    let mut out = input.to_vec();
    let steps = u.int_in_range(1..=8u8).unwrap_or(1);
    for _ in 0..steps {
        let len = out.len();
        let at = |u: &mut Unstructured<'_>| u.choose_index(len.max(1)).unwrap_or(0);
        match u.int_in_range(0..=9u8).unwrap_or(0) {
            0 if len > 0 => {
                let i = at(u);
                out[i] ^= 1 << u.int_in_range(0..=7u8).unwrap_or(0);
            }
            1 if len > 0 => {
                let i = at(u);
                out[i] = u.arbitrary().unwrap_or(0);
            }
            // An interesting integer, either endianness, 1/2/4 bytes wide: header fields.
            2 if len >= 4 => {
                let i = u.choose_index(len - 3).unwrap_or(0);
                let v = *u.choose(&INTERESTING).unwrap_or(&0);
                let bytes = if u.arbitrary().unwrap_or(false) {
                    v.to_le_bytes()
                } else {
                    v.to_be_bytes()
                };
                let width = *u.choose(&[1usize, 2, 4]).unwrap_or(&4);
                out[i..i + width].copy_from_slice(&bytes[..width]);
            }
            3 => {
                let keep = u.int_in_range(0..=len).unwrap_or(len);
                out.truncate(keep);
            }
            4 if len > 1 => {
                let i = at(u);
                let n = u.int_in_range(1..=(len - i).min(4096)).unwrap_or(1);
                out.drain(i..i + n);
            }
            5 if len > 1 && len < MAX_LEN => {
                let i = at(u);
                let n = u.int_in_range(1..=(len - i).min(4096)).unwrap_or(1);
                let chunk = out[i..i + n].to_vec();
                let j = at(u);
                out.splice(j..j, chunk);
            }
            6 if len < MAX_LEN => {
                let j = u.int_in_range(0..=len).unwrap_or(len);
                let n = u.int_in_range(1..=64usize).unwrap_or(1);
                let fill: Vec<u8> = (0..n).map(|_| u.arbitrary().unwrap_or(0)).collect();
                out.splice(j..j, fill);
            }
            // Splice: this input's head, the other's tail.
            7 if !other.is_empty() => {
                let cut = u.int_in_range(0..=len).unwrap_or(len);
                let from = u.choose_index(other.len()).unwrap_or(0);
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
                out.truncate(MAX_LEN);
            }
            // A decimal number in text (counts and sizes of text formats) replaced by an
            // extreme one.
            8 if len > 0 => {
                let i = at(u);
                if let Some(start) = (i..len).find(|&k| out[k].is_ascii_digit()) {
                    let end = (start..len)
                        .find(|&k| !out[k].is_ascii_digit())
                        .unwrap_or(len);
                    let v = *u.choose(&DECIMALS).unwrap_or(&"0");
                    out.splice(start..end, v.bytes());
                }
            }
            _ => {
                // A byte copied elsewhere (moves tags and magic numbers around).
                if len > 1 {
                    let (i, j) = (at(u), at(u));
                    out[j] = out[i];
                }
            }
        }
    }
    out
}

/// Reads every file of `dir` (sorted) as a seed.
pub fn seeds_from(dir: impl Into<PathBuf>) -> Vec<Vec<u8>> {
    let dir = dir.into();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

fn env_f64(name: &str) -> Option<f64> {
    std::env::var(name).ok()?.parse().ok()
}

fn out_dir(name: &str) -> PathBuf {
    std::env::var_os("DICTA_FUZZ_OUT")
        .map_or_else(|| std::env::temp_dir().join("dicta-fuzz"), PathBuf::from)
        .join(name)
}

/// Writes `input` as `<kind>-<hash>` under the harness's output folder.
fn save(name: &str, kind: &str, input: &[u8]) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    input.hash(&mut h);
    let dir = out_dir(name);
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{kind}-{:016x}", h.finish()));
    let _ = std::fs::write(&path, input);
    path
}

/// Resident memory of this process in MiB (0 where /proc is missing).
fn rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024)
}

/// Aborts the process when one input runs past [`HANG_SECONDS`], after saving it.
struct Watchdog {
    /// Start of the running input in ms since `epoch`, or `u64::MAX` when idle.
    since: Arc<AtomicU64>,
    input: Arc<Mutex<Vec<u8>>>,
    epoch: Instant,
}

impl Watchdog {
    fn start(name: &str) -> Self {
        let since = Arc::new(AtomicU64::new(u64::MAX));
        let input = Arc::new(Mutex::new(Vec::new()));
        let epoch = Instant::now();
        let (s, inp, n) = (since.clone(), input.clone(), name.to_string());
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            let t = s.load(Ordering::Acquire);
            if t != u64::MAX && epoch.elapsed().as_millis() as u64 > t + HANG_SECONDS * 1000 {
                let bytes = inp.lock().map(|b| b.clone()).unwrap_or_default();
                let path = save(&n, "hang", &bytes);
                eprintln!(
                    "{n}: one input ran over {HANG_SECONDS} s; saved to {}; aborting",
                    path.display()
                );
                std::process::abort();
            }
            // Ends with the test process.
        });
        Self {
            since,
            input,
            epoch,
        }
    }

    fn arm(&self, input: &[u8]) {
        if let Ok(mut b) = self.input.lock() {
            b.clear();
            b.extend_from_slice(input);
        }
        self.since
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Release);
    }

    fn disarm(&self) {
        self.since.store(u64::MAX, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutants_differ_and_stay_bounded() {
        let seed = b"RIFF\x24\x00\x00\x00WAVEfmt ".to_vec();
        let mut changed = 0;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..200 {
            let mut e = vec![0u8; 256];
            rng.fill_bytes(&mut e);
            let m = mutate(&seed, b"OggS", &mut Unstructured::new(&e));
            assert!(m.len() <= MAX_LEN);
            changed += usize::from(m != seed);
        }
        assert!(changed > 150, "only {changed} of 200 mutants differ");
    }

    #[test]
    #[should_panic(expected = "the target panicked")]
    fn a_panicking_target_fails_the_run_and_saves_the_input() {
        std::env::set_var(
            "DICTA_FUZZ_OUT",
            std::env::temp_dir().join("dicta-fuzz-selftest"),
        );
        fuzz("selftest", &[b"boom".to_vec()], |b| {
            assert!(!b.starts_with(b"boom"), "found it");
        });
    }
}
