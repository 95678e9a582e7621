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

/// Median seconds of `reps` calls of `f` after one warm-up call.
fn median_secs(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[reps / 2]
}

/// f32 gemm vs Dicta's int8 kernel at each byte level of this CPU (activations quantized per
/// row on the fly) on tiny.en's shapes.
#[test]
#[ignore = "timing report; run explicitly"]
fn linear_f32_vs_int8() {
    use dicta_models::kernels::int8::{matmul_i8_at, Level, PackedI8};
    // tiny.en shapes: fused qkv, out/cross, fc1, fc2, vocabulary projection.
    let shapes = [
        (384usize, 1152usize),
        (384, 384),
        (384, 1536),
        (1536, 384),
        (384, 51864),
    ];
    let levels: Vec<Level> = Level::available()
        .iter()
        .copied()
        .filter(|&l| l != Level::Scalar)
        .collect();
    eprintln!("int8 levels: {levels:?}");
    for m in [1usize, 8, 1500, 12000] {
        for &(k, n) in &shapes {
            if m >= 1500 && n == 51864 {
                continue;
            }
            let w = Tensor::randn(0f32, 0.05, (n, k), &Device::Cpu).unwrap();
            let x = Tensor::randn(0f32, 1.0, (m, k), &Device::Cpu).unwrap();
            let packed = PackedI8::quantize(&w.flatten_all().unwrap().to_vec1().unwrap(), n, k);
            let xv: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
            let reps = if m >= 1500 { 5 } else { 50 };
            let t32 = median_secs(reps, || {
                let y = if m <= 16 {
                    w.matmul(&x.t().unwrap()).unwrap().t().unwrap()
                } else {
                    x.matmul(&w.t().unwrap()).unwrap()
                };
                std::hint::black_box(y);
            });
            let gops = 2.0 * (m * n * k) as f64 * 1e-9;
            let mut line = format!(
                "m={m:5} {k:5}→{n:6}: f32 {:8.3} ms ({:5.0} GFLOP/s)",
                t32 * 1e3,
                gops / t32
            );
            let mut out = vec![0f32; m * n];
            for &level in &levels {
                let t8 = median_secs(reps, || {
                    matmul_i8_at(level, &xv, m, &packed, None, &mut out);
                    std::hint::black_box(&out);
                });
                line += &format!(
                    "  {level:?} {:8.3} ms ({:5.0} GOP/s, f32/int8 {:.2})",
                    t8 * 1e3,
                    gops / t8,
                    t32 / t8
                );
            }
            eprintln!("{line}");
        }
    }
}

/// Encoder + teacher-forced decode of `steps` tokens for 8 windows: fp32 vs int8, interleaved.
#[test]
#[ignore = "timing report; run explicitly"]
fn whisper_fp32_vs_int8() {
    use dicta_models::whisper::{ComputeType, LoadOptions, Whisper};
    let Some(dir) = model_dir() else { return };
    let load =
        |ct| Whisper::load_with(&dir, &Device::Cpu, &LoadOptions { compute_type: ct }).unwrap();
    let models = [load(ComputeType::Float32), load(ComputeType::Int8)];
    let mel3 = mel();
    let n = 8;
    let rows: Vec<Tensor> = (0..n).map(|i| mel3.i(i % 3..i % 3 + 1).unwrap()).collect();
    let mel = Tensor::cat(&rows, 0).unwrap();
    let steps = 100;
    let mut totals = [[0f64; 3]; 2];
    let reps = 3;
    for rep in 0..=reps {
        for (mi, m) in models.iter().enumerate() {
            let s = &m.config.special;
            let t = Instant::now();
            let enc = m.encode(&mel).unwrap();
            let t_enc = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let mut cache = m.new_cache(&enc).unwrap();
            m.decode_last(&prompt(&[s.sot, s.no_timestamps], n), &mut cache)
                .unwrap();
            for i in 0..steps {
                let tok =
                    Tensor::from_vec(vec![(300 + i) as u32; n], (n, 1), &Device::Cpu).unwrap();
                m.decode_last(&tok, &mut cache).unwrap();
            }
            let t_dec = t.elapsed().as_secs_f64();
            eprintln!(
                "rep {rep} {}: encode {:.0} ms, decode {steps} steps {:.0} ms ({:.2} ms/step)",
                m.compute_type(),
                t_enc * 1e3,
                t_dec * 1e3,
                t_dec * 1e3 / steps as f64
            );
            if rep > 0 {
                totals[mi][0] += t_enc;
                totals[mi][1] += t_dec;
                totals[mi][2] += t_enc + t_dec;
            }
        }
    }
    eprintln!(
        "fp32/int8 time ratios over {reps} reps: encode {:.2}, decode {:.2}, total {:.2}",
        totals[0][0] / totals[1][0],
        totals[0][1] / totals[1][1],
        totals[0][2] / totals[1][2]
    );
}

/// Decode steps only (8 rows, or `DICTA_BENCH_ROWS`; one encoded window repeated), for profiling
/// with `perf`, in a pool of `DICTA_BENCH_THREADS` workers (2) as the engine runs its calls:
/// from the test's own thread, rayon's global pool would leave that thread waiting beside its
/// workers, and scheduler work from their spinning was a quarter of a 3-row step's samples.
#[test]
#[ignore = "timing report; run explicitly"]
fn decode_steps_profile() {
    let threads: usize = std::env::var("DICTA_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool")
        .install(decode_steps_in_pool);
}

fn decode_steps_in_pool() {
    use dicta_models::whisper::{ComputeType, LoadOptions, Whisper};
    let Some(dir) = model_dir() else { return };
    // DICTA_BENCH_CT=int8|float32 runs one compute type (for `perf record`).
    let only = std::env::var("DICTA_BENCH_CT").ok();
    for ct in [ComputeType::Int8, ComputeType::Float32] {
        if only.as_deref().is_some_and(|o| o != ct.to_string()) {
            continue;
        }
        let m = Whisper::load_with(&dir, &Device::Cpu, &LoadOptions { compute_type: ct }).unwrap();
        let s = &m.config.special;
        // Rows per step: 8 (batched clips) by default; DICTA_BENCH_ROWS=1 is sequential long-form.
        let n: usize = std::env::var("DICTA_BENCH_ROWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(8);
        // DICTA_BENCH_BEAMS=B: the rows are B per window (a beam search), `n / B` windows.
        let beams: usize = std::env::var("DICTA_BENCH_BEAMS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
            .clamp(1, n);
        let enc1 = m.encode(&mel().i(0..1).unwrap()).unwrap();
        let enc = Tensor::cat(&vec![enc1; n / beams], 0).unwrap();
        let t = Instant::now();
        let mut cache = m.new_cache(&enc).unwrap();
        if beams > 1 {
            let rows: Vec<u32> = (0..n as u32).map(|r| r / beams as u32).collect();
            cache.select_rows(&rows).unwrap();
        }
        let t_cross = t.elapsed().as_secs_f64();
        // DICTA_BENCH_PROMPT=P feeds P previous-text tokens first, as conditioning on the
        // previous window does (up to 224).
        let p: usize = std::env::var("DICTA_BENCH_PROMPT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut first: Vec<u32> = (0..p).map(|i| 400 + i as u32).collect();
        first.extend([s.sot, s.no_timestamps]);
        let tp = Instant::now();
        m.decode_last(&prompt(&first, n), &mut cache).unwrap();
        eprintln!(
            "{ct}: prompt of {} tokens {:.1} ms",
            first.len(),
            tp.elapsed().as_secs_f64() * 1e3
        );
        // DICTA_BENCH_STEPS=S decoder steps after the prompt (150); with 0, the prompt is fed
        // 20 times more (for `perf record`).
        let steps: usize = std::env::var("DICTA_BENCH_STEPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(150);
        if steps == 0 {
            // DICTA_BENCH_REPEAT: times the prompt is fed again (20).
            let repeat: usize = std::env::var("DICTA_BENCH_REPEAT")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(20);
            let tp = Instant::now();
            for _ in 0..repeat {
                cache.truncate(0).unwrap();
                m.decode_last(&prompt(&first, n), &mut cache).unwrap();
            }
            eprintln!(
                "{ct}: prompt again: {:.1} ms",
                tp.elapsed().as_secs_f64() * 1e3 / repeat as f64
            );
        }
        // DICTA_BENCH_ROUNDS=R runs the steps R times, back to the prompt each time (1; more
        // for `perf record` of steps alone, past the 448-token context).
        let rounds: usize = std::env::var("DICTA_BENCH_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let t = Instant::now();
        for _ in 0..rounds {
            cache.truncate(first.len()).unwrap();
            for i in 0..steps {
                let tok =
                    Tensor::from_vec(vec![(300 + i) as u32; n], (n, 1), &Device::Cpu).unwrap();
                m.decode_last(&tok, &mut cache).unwrap();
            }
        }
        eprintln!(
            "{ct}: cross K/V {:.0} ms, {:.2} ms/step ({n} rows)",
            t_cross * 1e3,
            t.elapsed().as_secs_f64() * 1e3 / (steps * rounds).max(1) as f64
        );
    }
}

/// Cross-attention layouts for one decoder step (8 rows, tiny.en: 6 heads × 64, 1500 frames).
#[test]
#[ignore = "timing report; run explicitly"]
fn cross_attention_layouts() {
    let (w, h, t, dh) = (8usize, 6usize, 1500usize, 64usize);
    let dev = Device::Cpu;
    let k = Tensor::randn(0f32, 1.0, (w, h, t, dh), &dev).unwrap();
    let v = Tensor::randn(0f32, 1.0, (w, h, t, dh), &dev).unwrap();
    let kt = k.transpose(2, 3).unwrap().contiguous().unwrap();
    let vt = v.transpose(2, 3).unwrap().contiguous().unwrap();
    let q = Tensor::randn(0f32, 1.0, (w, h, 1, dh), &dev).unwrap();
    let sm = candle_nn::ops::softmax_last_dim;
    let r = 30;
    let a = median_secs(r, || {
        let p = sm(&q.matmul(&k.t().unwrap()).unwrap()).unwrap();
        std::hint::black_box(p.matmul(&v).unwrap());
    });
    let b = median_secs(r, || {
        let s = k
            .matmul(&q.t().unwrap())
            .unwrap()
            .reshape((w, h, 1, t))
            .unwrap();
        let p = sm(&s).unwrap();
        std::hint::black_box(p.matmul(&v).unwrap());
    });
    let c = median_secs(r, || {
        let p = sm(&q.matmul(&kt).unwrap()).unwrap();
        std::hint::black_box(p.matmul(&v).unwrap());
    });
    let d = median_secs(r, || {
        let s = k
            .matmul(&q.t().unwrap())
            .unwrap()
            .reshape((w, h, 1, t))
            .unwrap();
        let p = sm(&s).unwrap();
        std::hint::black_box(vt.matmul(&p.t().unwrap()).unwrap());
    });
    let qk = median_secs(r, || {
        std::hint::black_box(q.matmul(&k.t().unwrap()).unwrap());
    });
    let kq = median_secs(r, || {
        std::hint::black_box(k.matmul(&q.t().unwrap()).unwrap());
    });
    let s = q.matmul(&k.t().unwrap()).unwrap();
    let smx = median_secs(r, || {
        std::hint::black_box(sm(&s).unwrap());
    });
    let p = sm(&s).unwrap();
    let pv = median_secs(r, || {
        std::hint::black_box(p.matmul(&v).unwrap());
    });
    let vp = median_secs(r, || {
        std::hint::black_box(vt.matmul(&p.t().unwrap()).unwrap());
    });
    let (k16, v16) = (
        k.to_dtype(candle_core::DType::F16).unwrap(),
        v.to_dtype(candle_core::DType::F16).unwrap(),
    );
    let f16 = median_secs(r, || {
        let q16 = q.to_dtype(candle_core::DType::F16).unwrap();
        let s = q16
            .matmul(&k16.t().unwrap())
            .unwrap()
            .to_dtype(candle_core::DType::F32)
            .unwrap();
        let p = sm(&s).unwrap().to_dtype(candle_core::DType::F16).unwrap();
        std::hint::black_box(
            p.matmul(&v16)
                .unwrap()
                .to_dtype(candle_core::DType::F32)
                .unwrap(),
        );
    });
    eprintln!("f16 K/V: {:.2} ms", f16 * 1e3);
    let kb16 = dicta_models::kernels::block_keys_f16(&k).unwrap();
    let ours16 = median_secs(r, || {
        std::hint::black_box(
            dicta_models::kernels::attend_cross_f16(&q, &kb16, &v16, false).unwrap(),
        );
    });
    let ours32 = median_secs(r, || {
        std::hint::black_box(dicta_models::kernels::attend_few_queries(&q, &k, &v, false).unwrap());
    });
    eprintln!(
        "attend_cross_f16 per layer {:.2} ms, attend_few_queries (f32 K/V) {:.2} ms",
        ours16 * 1e3,
        ours32 * 1e3
    );
    eprintln!(
        "per layer: q·kᵀ+p·v {:.2} ms | k·qᵀ+p·v {:.2} ms | q·kt+p·v {:.2} ms | k·qᵀ+vt·pᵀ {:.2} ms",
        a * 1e3,
        b * 1e3,
        c * 1e3,
        d * 1e3
    );
    eprintln!(
        "parts: q·kᵀ {:.2} k·qᵀ {:.2} softmax {:.2} p·v {:.2} vt·pᵀ {:.2} ms",
        qk * 1e3,
        kq * 1e3,
        smx * 1e3,
        pv * 1e3,
        vp * 1e3
    );
}

/// Encoder only (one window, 5 times), for profiling with `perf`.
#[test]
#[ignore = "timing report; run explicitly"]
fn encoder_profile() {
    let Some(m) = model() else { return };
    let mel = mel().i(0..1).unwrap();
    let t = median_secs(5, || {
        std::hint::black_box(m.encode(&mel).unwrap());
    });
    eprintln!("encode one window: {:.0} ms", t * 1e3);
}

/// Encoder only, fp32 vs int8 interleaved (one window, 6 rounds).
#[test]
#[ignore = "timing report; run explicitly"]
fn encoder_fp32_vs_int8() {
    use dicta_models::whisper::{ComputeType, LoadOptions, Whisper};
    let Some(dir) = model_dir() else { return };
    let load =
        |ct| Whisper::load_with(&dir, &Device::Cpu, &LoadOptions { compute_type: ct }).unwrap();
    let models = [load(ComputeType::Float32), load(ComputeType::Int8)];
    let mel = mel().i(0..1).unwrap();
    let mut tot = [0f64; 2];
    // DICTA_BENCH_CT=int8|float32 runs one compute type (for `perf record`), 20 rounds.
    let only = std::env::var("DICTA_BENCH_CT").ok();
    let rounds = if only.is_some() { 21 } else { 6 };
    for round in 0..rounds {
        for (i, m) in models.iter().enumerate() {
            if only
                .as_deref()
                .is_some_and(|o| o != m.compute_type().to_string())
            {
                continue;
            }
            let t = Instant::now();
            std::hint::black_box(m.encode(&mel).unwrap());
            if round > 0 {
                tot[i] += t.elapsed().as_secs_f64();
            }
        }
    }
    eprintln!(
        "encode one window: fp32 {:.0} ms, int8 {:.0} ms, ratio fp32/int8 {:.2}",
        tot[0] * 1e3 / (rounds - 1) as f64,
        tot[1] * 1e3 / (rounds - 1) as f64,
        tot[0] / tot[1]
    );
}

/// The encoder's self-attention for one 30 s window (tiny.en: 6 heads × 1500 frames × 64) at
/// every byte level, and the f32 kernel.
#[test]
#[ignore = "timing report; run explicitly"]
fn self_attention_levels() {
    use dicta_models::kernels::attention::{self_attention_at, HeadsView, Level as F32Level};
    use dicta_models::kernels::int8::{attention::self_attention_i8_at, Level};
    let dims @ (n, h, t, dh) = (1usize, 6usize, 1500usize, 64usize);
    let len = n * h * t * dh;
    let mk = |s: f32| -> Vec<f32> { (0..len).map(|i| ((i as f32) * 0.61 + s).sin()).collect() };
    let (q, k, v) = (mk(0.1), mk(0.2), mk(0.3));
    let view = |d: &'static [f32]| HeadsView {
        data: d,
        offset: 0,
        seq: h * t * dh,
        head: t * dh,
        row: dh,
    };
    let (q, k, v): (&'static [f32], &'static [f32], &'static [f32]) =
        (q.leak(), k.leak(), v.leak());
    let mut out = vec![0f32; len];
    let t32 = median_secs(5, || {
        self_attention_at(F32Level::best(), view(q), view(k), view(v), dims, &mut out)
    });
    let mut line = format!("f32 {:.1} ms", t32 * 1e3);
    for &level in Level::available() {
        if level == Level::Scalar {
            continue;
        }
        let tl = median_secs(5, || {
            self_attention_i8_at(level, view(q), view(k), view(v), dims, &mut out)
        });
        line += &format!("  {level:?} {:.1} ms", tl * 1e3);
    }
    eprintln!("self-attention one window: {line}");
}

/// Building the cross-attention keys and values of 1 and 3 windows, int8 (f16 cache) and
/// float32: medians of `DICTA_BENCH_REPS` (9).
#[test]
#[ignore = "timing report; run explicitly"]
fn cross_kv_build() {
    use dicta_models::whisper::{ComputeType, LoadOptions, Whisper};
    let Some(dir) = model_dir() else { return };
    let mel3 = mel();
    let reps = std::env::var("DICTA_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9);
    for ct in [ComputeType::Int8, ComputeType::Float32] {
        if std::env::var("DICTA_BENCH_CT").is_ok_and(|o| o != ct.to_string()) {
            continue;
        }
        let m = Whisper::load_with(&dir, &Device::Cpu, &LoadOptions { compute_type: ct }).unwrap();
        for n in [1usize, 3] {
            let enc = m.encode(&mel3.i(0..n).unwrap()).unwrap();
            let t = median_secs(reps, || {
                std::hint::black_box(m.new_cache(&enc).unwrap());
            });
            eprintln!("{ct}: cross K/V of {n} window(s): {:.2} ms", t * 1e3);
        }
    }
}
