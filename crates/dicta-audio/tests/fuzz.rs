//! Fuzz harnesses for audio decoding (see the `dicta-fuzz` crate): every container the server
//! accepts, through the bounded path it runs on uploads, and raw PCM. Ignored by default; run
//! `cargo test --release -p dicta-audio --test fuzz -- --ignored` (`DICTA_FUZZ_SECONDS` sets
//! the budget). Seeds: the real and broken files of tests/fixtures/audio, and
//! tests/fuzz_corpus/audio (inputs that once failed, kept once fixed).

use std::path::Path;

use dicta_audio::decode::{load_owned_bounded, load_raw_pcm, Bounds, PcmEncoding};

const AUDIO_EXT: [&str; 8] = ["wav", "flac", "mp3", "ogg", "m4a", "opus", "webm", "txt"];

fn audio_seeds() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    // The audio fixtures (not the reference arrays and scripts beside them), then the corpus.
    let mut paths: Vec<_> = std::fs::read_dir(root.join("fixtures/audio"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| AUDIO_EXT.contains(&e))
        })
        .collect();
    paths.sort();
    let mut seeds: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    seeds.extend(dicta_fuzz::seeds_from(root.join("fuzz_corpus/audio")));
    seeds
}

/// The name's extension is a format hint: vary it so that every probe order is tried.
const NAMES: [&str; 7] = [
    "in.wav", "in.flac", "in.mp3", "in.ogg", "in.m4a", "in.webm", "upload",
];

#[test]
#[ignore = "fuzzing: run with --ignored"]
fn fuzz_audio_decode() {
    let seeds = audio_seeds();
    assert!(seeds.len() >= 10, "the audio fixtures are missing");
    dicta_fuzz::fuzz("audio_decode", &seeds, |bytes| {
        let name = NAMES[bytes.len() % NAMES.len()];
        let mut total = 0usize;
        let mut count = |n: usize| {
            total += n;
            Ok(())
        };
        let bounds = Bounds {
            max_seconds: 600.0,
            limit: "fuzz (600 s)",
            on_samples: &mut count,
        };
        if let Ok(loaded) = load_owned_bounded(bytes.to_vec(), name, bounds) {
            let samples = loaded.samples;
            // A result is within its bounds and holds real numbers.
            assert!(
                samples.len() <= 601 * 16_000,
                "{} samples past the bound",
                samples.len()
            );
            assert!(samples.iter().all(|s| s.is_finite()), "non-finite sample");
        }
    });
}

#[test]
#[ignore = "fuzzing: run with --ignored"]
fn fuzz_raw_pcm() {
    let seeds: Vec<Vec<u8>> = audio_seeds().into_iter().take(8).collect();
    dicta_fuzz::fuzz("raw_pcm", &seeds, |bytes| {
        let Some((&head, body)) = bytes.split_first() else {
            return;
        };
        let enc = if head & 1 == 0 {
            PcmEncoding::I16Le
        } else {
            PcmEncoding::F32Le
        };
        let rate = [0u32, 8_000, 11_025, 16_000, 22_050, 44_100, 48_000, 192_000]
            [(head >> 1) as usize % 8];
        if let Ok(samples) = load_raw_pcm(body, enc, rate, "raw") {
            assert!(samples.iter().all(|s| s.is_finite()));
        }
    });
}

/// Found by `fuzz_audio_decode`: a WAV header claiming 4,076,879,488 Hz made the resampler
/// work for minutes on 1.8 KB; such rates are refused as damage now.
#[test]
fn a_gigahertz_sample_rate_is_refused_at_once() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_corpus/audio/wav-4ghz-rate.wav");
    for name in NAMES {
        let mut none = |_| Ok(());
        let bounds = Bounds {
            max_seconds: 600.0,
            limit: "fuzz",
            on_samples: &mut none,
        };
        let e = load_owned_bounded(std::fs::read(&path).unwrap(), name, bounds).unwrap_err();
        assert_eq!(e.kind, dicta_core::ErrorKind::CorruptInput, "{name}: {e}");
        assert!(e.message.contains("sample rate"), "{e}");
    }
    let e = load_raw_pcm(&[0u8; 64], PcmEncoding::I16Le, 1_000_000, "raw").unwrap_err();
    assert_eq!(e.kind, dicta_core::ErrorKind::InvalidInput);
}

/// Found by `fuzz_audio_decode`: a 5 KB M4A whose sample table announces billions of entries
/// made symphonia reserve 34 GB and abort the process (any upload could take the server
/// down); it is refused as damage before symphonia reads it now.
#[test]
fn an_mp4_sample_table_larger_than_its_box_is_refused() {
    // The second one is also cut inside its index (its moov box runs past the end); the third
    // starts with 2 KB of junk, after which symphonia's probe finds its `ftyp` anyway.
    for name in [
        "m4a-huge-table-count.m4a",
        "m4a-cut-index-huge-table.m4a",
        "m4a-after-junk-huge-table.bin",
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fuzz_corpus/audio")
            .join(name);
        let mut none = |_| Ok(());
        let bounds = Bounds {
            max_seconds: 600.0,
            limit: "fuzz",
            on_samples: &mut none,
        };
        let e = load_owned_bounded(std::fs::read(&path).unwrap(), "in.m4a", bounds).unwrap_err();
        assert_eq!(e.kind, dicta_core::ErrorKind::CorruptInput, "{name}: {e}");
        let why = &e.message;
        assert!(
            why.contains("entries") || why.contains("overruns"),
            "{name}: {e}"
        );
    }
}

/// Found by `fuzz_audio_decode`: an 8 KB WebM whose block lacing announces a 3.5 TB frame made
/// symphonia-format-mkv 0.5.5 allocate it and abort the process. The vendored, patched crate
/// (vendor/symphonia-format-mkv) checks laced sizes against their block: the audio before the
/// bad block is kept, with a note saying why decoding stopped.
#[test]
fn matroska_lacing_larger_than_its_block_is_damage() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_corpus/audio/mkv_lacing_alloc.webm");
    let mut none = |_| Ok(());
    let bounds = Bounds {
        max_seconds: 600.0,
        limit: "fuzz",
        on_samples: &mut none,
    };
    let loaded = load_owned_bounded(std::fs::read(&path).unwrap(), "in.webm", bounds).unwrap();
    assert!(!loaded.samples.is_empty());
    let note = loaded.warning.expect("the damage is reported");
    assert!(note.contains("laced frame sizes"), "{note}");
}
