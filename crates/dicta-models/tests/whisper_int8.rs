//! int8 compute type: close to float32 on real speech (encoder states, logits, top-1 tokens when
//! teacher-forced on the float32 transcripts), and batch-invariant like float32.

mod whisper_support;

use candle_core::{Device, IndexOp, Tensor};
use dicta_models::whisper::{ComputeType, LoadOptions, Whisper};
use std::sync::OnceLock;
use whisper_support::*;

/// The CT2 model loaded with `compute_type = int8`, once per test binary.
fn int8_model() -> Option<&'static Whisper> {
    static M: OnceLock<Option<Whisper>> = OnceLock::new();
    M.get_or_init(|| {
        model_dir().map(|d| {
            let opts = LoadOptions {
                compute_type: ComputeType::Int8,
            };
            Whisper::load_with(&d, &Device::Cpu, &opts).expect("load CT2 tiny.en as int8")
        })
    })
    .as_ref()
}

/// Largest |x| of a tensor.
fn max_abs(t: &Tensor) -> f32 {
    t.abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |a, (i, &v)| if v > a.1 { (i, v) } else { a },
        )
        .0
}

#[test]
fn compute_type_names_round_trip() {
    for ct in [ComputeType::Auto, ComputeType::Float32, ComputeType::Int8] {
        assert_eq!(ct.as_str().parse::<ComputeType>().unwrap(), ct);
    }
    assert_eq!(ComputeType::default(), ComputeType::Auto);
    assert_eq!("auto".parse::<ComputeType>().unwrap(), ComputeType::Auto);
    let e = "int4".parse::<ComputeType>().unwrap_err();
    assert_eq!(e.kind, dicta_core::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("int4"), "{e}");
}

#[test]
fn int8_close_to_fp32_on_real_speech() {
    let (Some(m32), Some(m8)) = (model(), int8_model()) else {
        return;
    };
    if m8.compute_type() != ComputeType::Int8 {
        eprintln!(
            "SKIPPED: this CPU has no vector int8 kernels (VNNI or AVX2), so int8 loads as float32"
        );
        return;
    }
    let mel = mel();
    let e32 = m32.encode(&mel).unwrap();
    let e8 = m8.encode(&mel).unwrap();
    // The encoder runs int8 too: its states differ by int8 noise (a relative RMS of a few
    // percent; single elements near Whisper's outlier channels differ more), which the
    // teacher-forced agreement below turns into what matters, the predicted tokens.
    let rms = |t: &Tensor| {
        t.sqr()
            .unwrap()
            .mean_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            .sqrt()
    };
    let enc_rel = rms(&(&e32 - &e8).unwrap()) / rms(&e32);
    let enc_max = max_abs_diff(&e32, &e8) / max_abs(&e32);
    eprintln!(
        "encoder: rms(int8 - fp32) / rms(fp32) = {enc_rel:.2e}, max-element ratio {enc_max:.2e}"
    );
    assert!(enc_rel <= 0.1, "encoder relative RMS error {enc_rel}");
    assert!(
        enc_rel > 0.0,
        "int8 encoder equals float32: nothing was quantized"
    );

    // Teacher-force every utterance on its float32 (CTranslate2) transcript, with and without
    // timestamps, and compare the next-token prediction at every position after the prompt.
    let reference = reference();
    let eot = m32.config.special.eot;
    let (mut agree, mut total) = (0usize, 0usize);
    let (mut rel_sum, mut rel_max) = (0f64, 0f32);
    for (k, item) in reference["items"].as_array().unwrap().iter().enumerate() {
        for mode in ["no_timestamps", "timestamps"] {
            let p = ids(&item[mode]["prompt"]);
            let mut seq = p.clone();
            seq.extend(ids(&item[mode]["tokens"]));
            seq.push(eot);
            let input = Tensor::new(seq.as_slice(), &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let run = |m: &Whisper, enc: &Tensor| {
                let mut cache = m.new_cache(&enc.i(k..k + 1).unwrap()).unwrap();
                m.decode(&input, &mut cache).unwrap().squeeze(0).unwrap()
            };
            let (l32, l8) = (run(m32, &e32), run(m8, &e8));
            let (v32, v8): (Vec<Vec<f32>>, Vec<Vec<f32>>) =
                (l32.to_vec2().unwrap(), l8.to_vec2().unwrap());
            for pos in p.len() - 1..seq.len() - 1 {
                let a = &v32[pos];
                let b = &v8[pos];
                total += 1;
                agree += usize::from(argmax(a) == argmax(b));
                let scale = a.iter().fold(0f32, |s, x| s.max(x.abs()));
                let diff = a.iter().zip(b).fold(0f32, |s, (x, y)| s.max((x - y).abs()));
                rel_sum += f64::from(diff / scale);
                rel_max = rel_max.max(diff / scale);
            }
        }
    }
    let rate = agree as f64 / total as f64;
    let rel_mean = rel_sum / total as f64;
    eprintln!(
        "teacher-forced: top-1 agreement {agree}/{total} ({:.1}%), logits max|Δ|/max|fp32| per step: mean {rel_mean:.2e}, max {rel_max:.2e}",
        rate * 100.0
    );
    assert!(rate >= 0.95, "top-1 agreement {rate}");
    // With the encoder in int8 too the logits move by ~5% of their range on average (0.02 with
    // an f32 encoder); a broken kernel moves them by O(1).
    assert!(rel_mean <= 0.1, "mean relative logit error {rel_mean}");
    assert!(
        rel_mean > 0.0,
        "int8 logits equal float32: nothing was quantized"
    );
}

/// Rows are independent in int8 too: each activation row is quantized on its own, so a row decodes
/// the same alone or in a batch (up to float32 summation order, as for float32).
#[test]
fn int8_batched_rows_equal_rows_alone() {
    let Some(m) = int8_model() else { return };
    const TOL: f32 = 1e-4;
    let mel = mel();
    let s = &m.config.special;
    let (p, next) = (vec![s.sot, s.no_timestamps], [843u32, 523, 616]);
    let enc = m.encode(&mel).unwrap();
    let mut cache = m.new_cache(&enc).unwrap();
    let mut batched = vec![m.decode(&prompt(&p, 3), &mut cache).unwrap()];
    for &t in &next {
        batched.push(m.decode_last(&prompt(&[t], 3), &mut cache).unwrap());
    }
    for k in 0..3 {
        let e1 = m.encode(&mel.i(k..k + 1).unwrap()).unwrap();
        let d = max_abs_diff(&e1, &enc.i(k..k + 1).unwrap());
        assert!(d <= TOL, "row {k}: encoder differs alone vs batched by {d}");
        let mut c1 = m.new_cache(&e1).unwrap();
        let mut alone = vec![m.decode(&prompt(&p, 1), &mut c1).unwrap()];
        for &t in &next {
            alone.push(m.decode_last(&prompt(&[t], 1), &mut c1).unwrap());
        }
        for (step, (a, b)) in alone.iter().zip(&batched).enumerate() {
            let d = max_abs_diff(a, &b.i(k..k + 1).unwrap());
            assert!(
                d <= TOL,
                "row {k} step {step}: int8 logits differ alone vs batched by {d}"
            );
        }
    }
}

/// Prompts of different lengths in one batch, left-padded to the longest: every row's logits
/// (after its prompt, then at each step, also after rows are dropped and reordered) are the
/// bits it gets decoded alone on the same encoder row. The float32 decoder refuses padding.
#[test]
fn left_padded_rows_equal_rows_alone() {
    let Some(m) = int8_model() else { return };
    assert!(m.supports_left_padding());
    let s = &m.config.special;
    let enc = m.encode(&mel().i(0..1).unwrap()).unwrap();
    // Previous-text prompts of 0, 5 and 17 tokens, then SOT.
    let prompts: Vec<Vec<u32>> = [0usize, 5, 17]
        .iter()
        .map(|&n| {
            let mut p: Vec<u32> = (0..n).map(|i| 300 + 7 * i as u32).collect();
            if n > 0 {
                p.insert(0, s.sot_prev);
            }
            p.push(s.sot);
            p
        })
        .collect();
    let next = [843u32, 523, 616, 290];
    let longest = prompts.iter().map(Vec::len).max().unwrap();
    let pads: Vec<usize> = prompts.iter().map(|p| longest - p.len()).collect();
    let flat: Vec<u32> = prompts
        .iter()
        .zip(&pads)
        .flat_map(|(p, &k)| std::iter::repeat_n(p[0], k).chain(p.iter().copied()))
        .collect();
    let rows = prompts.len();
    let enc_b = Tensor::cat(&vec![enc.clone(); rows], 0).unwrap();
    let mut cache = m.new_cache(&enc_b).unwrap();
    cache.set_left_padding(&pads).unwrap();
    let first = Tensor::from_vec(flat, (rows, longest), &Device::Cpu).unwrap();
    let mut batched = vec![m.decode_last(&first, &mut cache).unwrap()];
    for &t in &next[..2] {
        batched.push(m.decode_last(&prompt(&[t], rows), &mut cache).unwrap());
    }
    // Drop row 0 and swap the others (as beam search and finished rows do).
    cache.select_rows(&[2, 1]).unwrap();
    let mut after = Vec::new();
    for &t in &next[2..] {
        after.push(m.decode_last(&prompt(&[t], 2), &mut cache).unwrap());
    }
    for (r, p) in prompts.iter().enumerate() {
        let mut c1 = m.new_cache(&enc).unwrap();
        let mut alone = vec![m.decode_last(&prompt(p, 1), &mut c1).unwrap()];
        for &t in &next {
            alone.push(m.decode_last(&prompt(&[t], 1), &mut c1).unwrap());
        }
        for (step, a) in alone.iter().enumerate() {
            let b = match (step, r) {
                (0..=2, _) => batched[step].i(r..r + 1).unwrap(),
                (_, 0) => continue,
                (_, _) => after[step - 3].i(2 - r..3 - r).unwrap(),
            };
            assert_eq!(
                max_abs_diff(a, &b),
                0.0,
                "row {r} (prompt {}, padded by {}) step {step}",
                p.len(),
                pads[r]
            );
        }
    }
    // The float32 decoder keeps candle's attention: padding is refused, not ignored.
    if let Some(dir) = model_dir() {
        let f32m = Whisper::load(&dir, &Device::Cpu).unwrap();
        assert!(!f32m.supports_left_padding());
        let mut c = f32m.new_cache(&enc_b).unwrap();
        c.set_left_padding(&pads).unwrap();
        let first = prompt(&prompts[2], rows);
        assert!(f32m.decode_last(&first, &mut c).is_err());
    }
    // Padding is set once, per row, before anything is decoded.
    let mut c = m.new_cache(&enc_b).unwrap();
    assert!(c.set_left_padding(&pads[..2]).is_err());
    m.decode_last(&prompt(&prompts[0], rows), &mut c).unwrap();
    assert!(c.set_left_padding(&pads).is_err());
}

/// `decode_last` runs the last layer on the last position only (int8): its logits are the bits
/// of the whole call's last position, and the cache it leaves gives the next steps the same
/// bits too.
#[test]
fn last_position_only_equals_the_whole_calls_last_position() {
    let Some(m) = int8_model() else { return };
    let s = &m.config.special;
    let enc = m.encode(&mel().i(0..2).unwrap()).unwrap();
    for len in [1usize, 6, 40] {
        let mut p: Vec<u32> = (0..len - 1).map(|i| 300 + 11 * i as u32).collect();
        p.push(s.sot);
        let (mut ca, mut cb) = (m.new_cache(&enc).unwrap(), m.new_cache(&enc).unwrap());
        let all = m.decode(&prompt(&p, 2), &mut ca).unwrap();
        let want = all.i((.., len - 1)).unwrap();
        let got = m.decode_last(&prompt(&p, 2), &mut cb).unwrap();
        assert_eq!(max_abs_diff(&got, &want), 0.0, "prompt of {len}");
        for &t in &[843u32, 523] {
            let a = m.decode_last(&prompt(&[t], 2), &mut ca).unwrap();
            let b = m.decode_last(&prompt(&[t], 2), &mut cb).unwrap();
            assert_eq!(max_abs_diff(&a, &b), 0.0, "prompt of {len}, step {t}");
        }
    }
}

/// Greedy transcripts of 24 English utterances from shared/data, float32 vs int8: how many are
/// identical, and the WER of each against the references (Whisper's English normalizer). A report
/// (slow on CPU), but it fails if int8 loses more than one WER point.
#[test]
#[ignore = "accuracy report over shared/data; run explicitly"]
fn int8_transcripts_vs_fp32_on_shared_data() {
    let (Some(m32), Some(m8)) = (model(), int8_model()) else {
        return;
    };
    let data = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data"));
    let Ok(manifest) = std::fs::read_to_string(data.join("manifest.jsonl")) else {
        eprintln!("SKIPPED: no shared/data");
        return;
    };
    let items: Vec<serde_json::Value> = manifest
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| {
            v["language"] == "en"
                && v["category"] == "short_utterance"
                && v["text"].as_str().is_some_and(|t| !t.is_empty())
        })
        .take(24)
        .collect();
    let mel_fe = dicta_audio::mel::LogMel::new(dicta_audio::mel::MelConfig::whisper(80)).unwrap();
    let mels: Vec<Tensor> = items
        .iter()
        .map(|v| {
            let rel = v["audio_16k_wav"].as_str().or(v["audio"].as_str()).unwrap();
            let samples = dicta_audio::decode::load_path(&data.join(rel)).unwrap();
            let spec = mel_fe.compute(&samples, 480_000);
            Tensor::from_vec(spec.window(0, 3000), (1, 80, 3000), &Device::Cpu).unwrap()
        })
        .collect();
    let s = &m32.config.special;
    let p = [s.sot, s.no_timestamps];
    let norm = dicta_eval::EnglishTextNormalizer::new();
    let (mut pairs32, mut pairs8, mut same) = (Vec::new(), Vec::new(), 0);
    for (chunk, its) in mels.chunks(8).zip(items.chunks(8)) {
        let mel = Tensor::cat(chunk, 0).unwrap();
        let t32 = greedy(m32, &mel, &p, 224);
        let t8 = greedy(m8, &mel, &p, 224);
        for ((a, b), it) in t32.iter().zip(&t8).zip(its) {
            let (ta, tb) = (
                m32.tokenizer.decode(a).unwrap(),
                m8.tokenizer.decode(b).unwrap(),
            );
            same += usize::from(a == b);
            if a != b {
                eprintln!("{}:\n  fp32: {ta}\n  int8: {tb}", it["id"]);
            }
            let r = norm.normalize(it["text"].as_str().unwrap());
            pairs32.push((r.clone(), norm.normalize(&ta)));
            pairs8.push((r, norm.normalize(&tb)));
        }
    }
    let (w32, w8) = (
        dicta_eval::corpus_wer(&pairs32),
        dicta_eval::corpus_wer(&pairs8),
    );
    eprintln!(
        "{} utterances: {same} identical transcripts; WER fp32 {:.2}%, int8 {:.2}%",
        items.len(),
        w32 * 100.0,
        w8 * 100.0
    );
    assert!(w8 <= w32 + 0.01, "int8 WER {w8} vs fp32 {w32}");
}

/// The int8 cross-attention kernel adds almost nothing to the error of storing the keys and
/// values in int8, on real encoder states (their outlier channels included): against f32
/// attention, its error is within 2% of exact f64 attention over the stored int8 values, and
/// the two differ by under 5% of it. (Session 36 held an integer-dot-product kernel to this:
/// 7.012e-3 against 6.999e-3.)
#[test]
fn int8_cross_attention_error_is_the_storage_rounding_on_real_states() {
    let Some(m) = model() else { return };
    let enc = m.encode(&mel().i(0..1).unwrap()).unwrap(); // [1, 1500, 384]
    let (t, h, d) = (1500usize, 6usize, 64usize);
    // Keys: the states in heads [1, H, T, D]; values: the states 100 positions on.
    let heads = |x: &Tensor| x.reshape((1, t, h, d)).unwrap().transpose(1, 2).unwrap();
    let k = heads(&enc).contiguous().unwrap();
    let rolled = Tensor::cat(
        &[enc.i((.., 100..)).unwrap(), enc.i((.., ..100)).unwrap()],
        1,
    )
    .unwrap();
    let v = heads(&rolled).contiguous().unwrap();
    // Queries: keys at a few positions, scaled as the decoder scales (D^-1/2 over both sides),
    // times 1 and 3 for flatter and sharper attention.
    let at = [0usize, 37, 400, 777, 1200, 1499];
    let mut qs = Vec::new();
    for &scale in &[1.0f64, 3.0] {
        for &p in &at {
            qs.push((k.i((.., .., p..p + 1, ..)).unwrap() * (scale / 8.0)).unwrap());
        }
    }
    let q = Tensor::cat(&qs, 2).unwrap().contiguous().unwrap(); // [1, H, M, D]
    let mq = q.dim(2).unwrap();
    let (exact, _) =
        dicta_models::kernels::attend_cross_rows(&q, &k, &v, None, &[0], false).unwrap();
    let (k8, v8, s8) = dicta_models::kernels::quantize_kv_i8(&k, &v).unwrap();
    let (int8, _) =
        dicta_models::kernels::attend_cross_rows(&q, &k8, &v8, Some(&s8), &[0], false).unwrap();
    // f64 attention over the int8 values as stored: each channel rounded to 127 steps of its
    // largest magnitude over the keys, half to even (as `quantize_kv_i8`).
    let flat = |x: &Tensor| x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let (kf, vf, qf) = (flat(&k), flat(&v), flat(&q));
    let dequant = |x: &[f32]| -> Vec<f64> {
        let mut out = vec![0f64; x.len()];
        for hh in 0..h {
            for c in 0..d {
                let at = |j: usize| (hh * t + j) * d + c;
                let max = (0..t).fold(0f32, |m, j| m.max(x[at(j)].abs()));
                for j in 0..t {
                    let n = if max > 0.0 {
                        (x[at(j)] * (127.0 / max))
                            .clamp(-127.0, 127.0)
                            .round_ties_even()
                    } else {
                        0.0
                    };
                    out[at(j)] = n as f64 * (max / 127.0) as f64;
                }
            }
        }
        out
    };
    let (kd, vd) = (dequant(&kf), dequant(&vf));
    let mut stored = vec![0f64; h * mq * d];
    for hh in 0..h {
        for i in 0..mq {
            let qi = &qf[(hh * mq + i) * d..(hh * mq + i + 1) * d];
            let s: Vec<f64> = (0..t)
                .map(|j| {
                    (0..d)
                        .map(|c| qi[c] as f64 * kd[(hh * t + j) * d + c])
                        .sum()
                })
                .collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|x| (x - mx).exp()).sum();
            for c in 0..d {
                stored[(hh * mq + i) * d + c] = (0..t)
                    .map(|j| (s[j] - mx).exp() / z * vd[(hh * t + j) * d + c])
                    .sum();
            }
        }
    }
    let (ef, ei) = (flat(&exact), flat(&int8));
    let rms = |a: &dyn Fn(usize) -> f64| {
        ((0..ef.len()).map(|i| a(i).powi(2)).sum::<f64>() / ef.len() as f64).sqrt()
    };
    let kernel = rms(&|i| ei[i] as f64 - ef[i] as f64);
    let storage = rms(&|i| stored[i] - ef[i] as f64);
    let extra = rms(&|i| ei[i] as f64 - stored[i]);
    eprintln!("rms error vs f32: kernel {kernel:.3e}, storage alone {storage:.3e}; kernel vs storage {extra:.3e}");
    assert!(
        kernel <= storage * 1.02 && extra <= storage * 0.05,
        "int8 kernel rms error {kernel:.3e}, storage alone {storage:.3e}, between {extra:.3e}"
    );
}
