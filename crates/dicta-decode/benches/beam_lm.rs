//! Beam + LM decode time per second of audio on the 50 parity cases, next to pyctcdecode's
//! time on the same cases (measured by `tests/fixtures/make_cases.py` into `timing.json`).
//!
//! Run: `cargo bench -p dicta-decode --bench beam_lm`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use dicta_decode::{
    BeamConfig, BeamDecoder, LmFusion, LmWeights, LogProbs, NgramLm, Unigrams, Vocabulary,
};
use serde_json::Value;

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"))
}

fn load_cases() -> (Value, Vocabulary, Vec<LogProbs>) {
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("cases.json")).unwrap())
            .unwrap();
    let labels: Vec<String> = serde_json::from_value(meta["labels"].clone()).unwrap();
    let vocab = Vocabulary::from_labels(&labels).unwrap();
    let bytes = std::fs::read(fixtures().join("cases_q.npy")).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let v = npy.shape()[1] as usize;
    let q: Vec<u8> = npy.into_vec().unwrap();
    let step = meta["quant_step"].as_f64().unwrap() as f32;
    let mats = meta["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let off = c["offset"].as_u64().unwrap() as usize;
            let t = c["frames"].as_u64().unwrap() as usize;
            let data = q[off * v..(off + t) * v]
                .iter()
                .map(|&x| -(f32::from(x) * step))
                .collect();
            LogProbs::new(data, t, v).unwrap()
        })
        .collect();
    (meta, vocab, mats)
}

fn bench(c: &mut Criterion) {
    let (meta, vocab, mats) = load_cases();
    let arpa = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/lm/en-us.arpa.gz"
    ));
    let t0 = Instant::now();
    let lm = Arc::new(NgramLm::from_arpa_path(&arpa).unwrap());
    eprintln!("ARPA load: {:.2} s", t0.elapsed().as_secs_f64());
    let weights = LmWeights {
        alpha: meta["alpha"].as_f64().unwrap(),
        beta: meta["beta"].as_f64().unwrap(),
        ..LmWeights::default()
    };
    let fusion = Arc::new(LmFusion::new(lm, weights, Unigrams::FromLm));
    let config = BeamConfig {
        beam_width: meta["beam_width"].as_u64().unwrap() as usize,
        ..BeamConfig::default()
    };
    let dec = BeamDecoder::new(vocab.clone(), Some(fusion), config.clone()).unwrap();
    let plain = BeamDecoder::new(vocab, None, config).unwrap();
    let frame_s = meta["frame_seconds"].as_f64().unwrap();
    let audio_s: f64 = mats.iter().map(|m| m.frames() as f64 * frame_s).sum();

    let mut group = c.benchmark_group("ctc_decode_50_cases");
    group.sample_size(10);
    group.bench_function("beam25_lm", |b| {
        b.iter(|| {
            for m in &mats {
                std::hint::black_box(dec.decode(m).unwrap());
            }
        })
    });
    group.bench_function("beam25_no_lm", |b| {
        b.iter(|| {
            for m in &mats {
                std::hint::black_box(plain.decode(m).unwrap());
            }
        })
    });
    group.finish();

    // Side-by-side summary: one more timed pass, against pyctcdecode's recorded time.
    let reps = 5;
    let t0 = Instant::now();
    for _ in 0..reps {
        for m in &mats {
            std::hint::black_box(dec.decode(m).unwrap());
        }
    }
    let ours = t0.elapsed().as_secs_f64() / reps as f64 / audio_s;
    let timing: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("timing.json")).unwrap())
            .unwrap();
    let theirs = timing["seconds_per_audio_second"].as_f64().unwrap();
    eprintln!(
        "beam+LM per second of audio: dicta {:.3} ms, pyctcdecode {:.3} ms (timing.json), ratio {:.1}x",
        ours * 1e3,
        theirs * 1e3,
        theirs / ours
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
