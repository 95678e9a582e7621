//! Timing report (not a test of speed: nothing is asserted on time). Run with
//! `RAYON_NUM_THREADS=2 cargo test --release -p dicta-models --test whisper_bench -- --ignored --nocapture`.

mod whisper_support;

use candle_core::{Device, IndexOp, Tensor};
use std::time::Instant;
use whisper_support::*;

#[test]
#[ignore = "timing report; run explicitly"]
fn whisper_timings() {
    let Some(m) = model() else { return };
    let mel3 = mel();
    let s = &m.config.special;
    for n in [1usize, 8] {
        let rows: Vec<Tensor> = (0..n).map(|i| mel3.i(i % 3..i % 3 + 1).unwrap()).collect();
        let mel = Tensor::cat(&rows, 0).unwrap();
        m.encode(&mel.i(0..1).unwrap()).unwrap(); // warm-up
        let t = Instant::now();
        let enc = m.encode(&mel).unwrap();
        let t_enc = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut cache = m.new_cache(&enc).unwrap();
        let t_cross = t.elapsed().as_secs_f64();
        m.decode_last(&prompt(&[s.sot, s.no_timestamps], n), &mut cache)
            .unwrap();
        let steps = 50;
        let t = Instant::now();
        for i in 0..steps {
            let tok = Tensor::from_vec(vec![(300 + i) as u32; n], (n, 1), &Device::Cpu).unwrap();
            m.decode_last(&tok, &mut cache).unwrap();
        }
        let t_tok = t.elapsed().as_secs_f64() / steps as f64;
        eprintln!(
            "batch {n}: encode {:.1} ms ({:.1} ms/window), cross K/V {:.1} ms, decode step {:.2} ms ({:.3} ms/row)",
            t_enc * 1e3,
            t_enc * 1e3 / n as f64,
            t_cross * 1e3,
            t_tok * 1e3,
            t_tok * 1e3 / n as f64
        );
    }
}

#[test]
#[ignore = "timing report; run explicitly"]
fn projection_layouts() {
    let w = Tensor::randn(0f32, 1.0, (51864, 384), &Device::Cpu).unwrap();
    let wt = w.t().unwrap().contiguous().unwrap();
    for n in [1usize, 8] {
        let x = Tensor::randn(0f32, 1.0, (n, 384), &Device::Cpu).unwrap();
        for (name, f) in [
            (
                "x·wᵀ (transposed view)",
                Box::new(|| x.matmul(&w.t().unwrap()).unwrap()) as Box<dyn Fn() -> Tensor>,
            ),
            ("x·w (pre-transposed)", Box::new(|| x.matmul(&wt).unwrap())),
            (
                "(w·xᵀ)ᵀ",
                Box::new(|| {
                    w.matmul(&x.t().unwrap())
                        .unwrap()
                        .t()
                        .unwrap()
                        .contiguous()
                        .unwrap()
                }),
            ),
        ] {
            f();
            let t = Instant::now();
            for _ in 0..20 {
                f();
            }
            eprintln!(
                "n={n} {name}: {:.2} ms",
                t.elapsed().as_secs_f64() * 1e3 / 20.0
            );
        }
    }
}
