#[test]
#[ignore]
fn bench_base_30s_b4() {
    use dicta_models::ctc::load_ctc_model;
    let m = load_ctc_model(std::path::Path::new("/tmp/w2v2bench/base"), &candle_core::Device::Cpu).unwrap();
    let waves: Vec<Vec<f32>> = (0..4).map(|r| (0..480000).map(|i| (((i * 31 + r * 7) % 1000) as f32 / 1000.0 - 0.5)).collect()).collect();
    let rows: Vec<&[f32]> = waves.iter().map(|w| w.as_slice()).collect();
    let _ = m.forward(&[&waves[0][..16000]]).unwrap();
    for _ in 0..2 {
        let t = std::time::Instant::now();
        let out = m.forward(&rows).unwrap();
        eprintln!("forward 4x30s: {:?} t_max {}", t.elapsed(), out.t_max);
    }
}
