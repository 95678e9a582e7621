//! CTranslate2 loading and parity with CTranslate2 (faster-whisper's engine) on real speech.
//! Fixtures: tests/fixtures/whisper/make_fixtures.py.

mod whisper_support;

use candle_core::{Device, IndexOp, Tensor};
use dicta_core::ErrorKind;
use dicta_models::whisper::{WeightFormat, Whisper};
use whisper_support::*;

#[test]
fn ct2_folder_loads_with_config_from_files() {
    let Some(m) = model() else { return };
    let c = &m.config;
    assert_eq!(m.format, WeightFormat::CTranslate2);
    assert_eq!((c.n_mels, c.n_audio_ctx, c.n_audio_state), (80, 1500, 384));
    assert_eq!(
        (
            c.n_audio_head,
            c.n_audio_layer,
            c.n_text_head,
            c.n_text_layer
        ),
        (6, 4, 6, 4)
    );
    assert_eq!((c.n_vocab, c.n_text_ctx, c.n_audio_ffn), (51864, 448, 1536));
    assert!(!c.is_multilingual);
    let s = &c.special;
    assert_eq!(
        (s.eot, s.sot, s.no_timestamps, s.timestamp_begin),
        (50256, 50257, 50362, 50363)
    );
    assert_eq!(
        m.tokenizer.id_to_token(s.no_speech).as_deref(),
        Some("<|nocaptions|>")
    );
    // Everything else comes from config.json.
    let raw: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(model_dir().unwrap().join("config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(c.suppress_tokens, ids(&raw["suppress_ids"]));
    assert_eq!(c.begin_suppress_tokens, ids(&raw["suppress_ids_begin"]));
    assert_eq!(
        c.alignment_heads.len(),
        raw["alignment_heads"].as_array().unwrap().len()
    );
    // English-only: no language tokens in the prompt (config.json's list is the multilingual one).
    assert!(c.lang_ids.is_empty() && c.lang_id("en").is_none());
    // Tokenizer round trip and byte-level text.
    let text = " And so my fellow Americans";
    let toks = m.tokenizer.encode(text).unwrap();
    assert_eq!(m.tokenizer.decode(&toks).unwrap(), text);
    let with_specials: Vec<u32> = [s.sot, s.no_timestamps]
        .iter()
        .chain(&toks)
        .chain(&[s.timestamp_begin + 10, s.eot])
        .copied()
        .collect();
    assert_eq!(m.tokenizer.decode(&with_specials).unwrap(), text);
    assert_eq!(m.tokenizer.token_bytes(toks[0]).unwrap(), b" And");
}

#[test]
fn encoder_matches_ctranslate2() {
    let Some(m) = model() else { return };
    let enc = m.encode(&mel()).unwrap();
    assert_eq!(enc.dims(), &[3, 1500, 384]);
    let stride = reference()["encoder_frame_stride"].as_u64().unwrap() as usize;
    let idx: Vec<u32> = (0..1500).step_by(stride).map(|i| i as u32).collect();
    let sub = enc
        .index_select(&Tensor::new(idx.as_slice(), &Device::Cpu).unwrap(), 1)
        .unwrap();
    let want = Tensor::read_npy(fixture("encoder.npy")).unwrap();
    let d = max_abs_diff(&sub, &want);
    eprintln!("encoder max abs diff vs CTranslate2: {d:e}");
    assert!(d < 5e-4, "encoder differs from CTranslate2 by {d}");
}

#[test]
fn first_step_logits_match_ctranslate2() {
    let Some(m) = model() else { return };
    let r = reference();
    let p = ids(&r["items"][0]["no_timestamps"]["prompt"]);
    let enc = m.encode(&mel()).unwrap();
    let mut cache = m.new_cache(&enc).unwrap();
    let got = m.decode_last(&prompt(&p, 3), &mut cache).unwrap();
    assert_eq!(cache.len(), p.len());
    let want: Vec<Vec<f32>> = Tensor::read_npy(fixture("logits0.npy"))
        .unwrap()
        .to_vec2()
        .unwrap();
    let got: Vec<Vec<f32>> = got.to_vec2().unwrap();
    let mut worst = 0f32;
    for (g, w) in got.iter().zip(&want) {
        for (a, b) in g.iter().zip(w) {
            // CTranslate2 writes -FLT_MAX into suppressed ids; compare the rest.
            if *b > -1e30 {
                worst = worst.max((a - b).abs());
            }
        }
    }
    eprintln!("first-step logits max abs diff vs CTranslate2: {worst:e}");
    assert!(worst < 5e-4, "first-step logits differ by {worst}");
}

#[test]
fn greedy_tokens_match_ctranslate2_without_timestamps() {
    let Some(m) = model() else { return };
    let r = reference();
    let items = r["items"].as_array().unwrap();
    let p = ids(&items[0]["no_timestamps"]["prompt"]);
    let got = greedy(m, &mel(), &p, 100);
    for (k, item) in items.iter().enumerate() {
        let want = ids(&item["no_timestamps"]["tokens"]);
        assert_eq!(got[k], want, "{}", item["id"]);
    }
    assert!(m
        .tokenizer
        .decode(&got[0])
        .unwrap()
        .contains("ask not what your country can do for you"));
}

/// Teacher-forced: feeding CTranslate2's timestamped greedy output, every chosen token gets the same
/// raw logit here (checks all positions of a single multi-token decode call, i.e. the causal mask).
#[test]
fn timestamp_sequence_logits_match_ctranslate2() {
    let Some(m) = model() else { return };
    let r = reference();
    let enc = m.encode(&mel()).unwrap();
    for (k, item) in r["items"].as_array().unwrap().iter().enumerate() {
        let p = ids(&item["timestamps"]["prompt"]);
        let toks = ids(&item["timestamps"]["tokens"]);
        let chosen: Vec<f64> = item["timestamps"]["chosen_logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let seq: Vec<u32> = p.iter().chain(&toks[..toks.len() - 1]).copied().collect();
        let mut cache = m.new_cache(&enc.i(k..k + 1).unwrap()).unwrap();
        let logits = m
            .decode(&prompt(&seq, 1), &mut cache)
            .unwrap()
            .squeeze(0)
            .unwrap();
        let logits: Vec<Vec<f32>> = logits.to_vec2().unwrap();
        for (i, &t) in toks.iter().enumerate() {
            let got = logits[p.len() - 1 + i][t as usize] as f64;
            assert!(
                (got - chosen[i]).abs() < 5e-4,
                "{} step {i}: logit {got} vs {}",
                item["id"],
                chosen[i]
            );
        }
        assert!(toks[0] >= m.config.special.timestamp_begin);
    }
}

#[test]
fn broken_folders_are_refused_with_model_load() {
    let Some(dir) = model_dir() else { return };
    let empty = tempfile::tempdir().unwrap();
    let e = Whisper::load(empty.path(), &Device::Cpu).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ModelLoad);
    assert!(e.message.contains("model.bin"), "{e}");

    let cut = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(dir.join("model.bin")).unwrap();
    std::fs::write(cut.path().join("model.bin"), &bytes[..bytes.len() / 2]).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(dir.join(f), cut.path().join(f)).unwrap();
    }
    let e = Whisper::load(cut.path(), &Device::Cpu).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ModelLoad);
    assert!(
        e.message.contains("truncated") && e.message.contains("model.bin"),
        "{e}"
    );

    std::fs::write(cut.path().join("model.bin"), &bytes).unwrap();
    std::fs::remove_file(cut.path().join("tokenizer.json")).unwrap();
    let e = Whisper::load(cut.path(), &Device::Cpu).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ModelLoad);
    assert!(e.message.contains("tokenizer.json"), "{e}");

    let m = model().unwrap();
    let e = m
        .encode(&Tensor::zeros((1, 80, 100), candle_core::DType::F32, &Device::Cpu).unwrap())
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidInput);
}

/// Alignment-head cross-attention (word-timestamp input) equals transformers' `cross_attentions`
/// on the same weights (fixture: make_alignment_fixture.py).
#[test]
fn alignment_weights_match_transformers() {
    let Some(m) = model() else { return };
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("alignment_tokens.json")).unwrap())
            .unwrap();
    let k = meta["item"].as_u64().unwrap() as usize;
    let stride = meta["frame_stride"].as_u64().unwrap() as usize;
    let seq = ids(&meta["tokens"]);
    let enc = m.encode(&mel().i(k..k + 1).unwrap()).unwrap();
    let w = m.alignment_weights(&enc, &prompt(&seq, 1)).unwrap();
    assert_eq!(
        w.dims(),
        &[1, m.config.alignment_heads.len(), seq.len(), 1500]
    );
    // Each row is a distribution over audio frames.
    let sums = w
        .sum(3)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    assert!(sums.iter().all(|s| (s - 1.0).abs() < 1e-4));
    let idx: Vec<u32> = (0..1500).step_by(stride).map(|i| i as u32).collect();
    let sub = w
        .squeeze(0)
        .unwrap()
        .index_select(&Tensor::new(idx.as_slice(), &Device::Cpu).unwrap(), 2)
        .unwrap();
    let want = Tensor::read_npy(fixture("alignment.npy")).unwrap();
    let d = max_abs_diff(&sub, &want);
    eprintln!("alignment weights max abs diff vs transformers: {d:e}");
    assert!(d < 1e-4, "alignment weights differ by {d}");
}
