//! `dicta models convert`: writes a Hugging Face–layout Whisper folder from a CTranslate2 one, so the
//! HF loader (and transformers) can run the same weights.

use super::ct2;
use candle_core::DType;
use dicta_core::{Error, Result};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::internal(format!("serialize {}: {e}", path.display())))?;
    std::fs::write(path, text + "\n").map_err(|e| {
        Error::new(
            dicta_core::ErrorKind::Io,
            format!("{}: cannot write ({e})", path.display()),
        )
    })
}

/// Converts the CTranslate2 Whisper folder `src` into a Hugging Face folder `dst` (created if needed):
/// `model.safetensors` (float weights keep their dtype; int8/int16 are dequantized to f32),
/// `config.json`, `generation_config.json`, `preprocessor_config.json` and a copy of `tokenizer.json`.
/// The result loads in transformers' `WhisperForConditionalGeneration` with no missing keys.
pub fn convert_ct2_to_hf(src: &Path, dst: &Path) -> Result<()> {
    let m = ct2::read(src)?;
    let c = &m.config;
    std::fs::create_dir_all(dst).map_err(|e| {
        Error::new(
            dicta_core::ErrorKind::Io,
            format!("{}: cannot create ({e})", dst.display()),
        )
    })?;

    let dtypes: Vec<DType> = m.weights.tensors.values().map(|t| t.dtype()).collect();
    let torch_dtype = if dtypes.iter().all(|&d| d == DType::F16) {
        "float16"
    } else if dtypes.iter().all(|&d| d == DType::BF16) {
        "bfloat16"
    } else {
        "float32"
    };
    let st = dst.join("model.safetensors");
    candle_core::safetensors::save(&m.weights.tensors, &st).map_err(|e| {
        Error::new(
            dicta_core::ErrorKind::Io,
            format!("{}: cannot write ({e})", st.display()),
        )
    })?;

    let s = &c.special;
    let config = json!({
        "architectures": ["WhisperForConditionalGeneration"],
        "model_type": "whisper",
        "vocab_size": c.n_vocab,
        "num_mel_bins": c.n_mels,
        "d_model": c.n_audio_state,
        "encoder_layers": c.n_audio_layer,
        "encoder_attention_heads": c.n_audio_head,
        "encoder_ffn_dim": c.n_audio_ffn,
        "decoder_layers": c.n_text_layer,
        "decoder_attention_heads": c.n_text_head,
        "decoder_ffn_dim": c.n_text_ffn,
        "max_source_positions": c.n_audio_ctx,
        "max_target_positions": c.n_text_ctx,
        "activation_function": "gelu",
        "scale_embedding": false,
        "tie_word_embeddings": m.tied,
        "use_cache": true,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "bos_token_id": s.eot,
        "eos_token_id": s.eot,
        "pad_token_id": s.eot,
        "decoder_start_token_id": s.sot,
        "suppress_tokens": c.suppress_tokens,
        "begin_suppress_tokens": c.begin_suppress_tokens,
        "torch_dtype": torch_dtype,
    });
    write_json(&dst.join("config.json"), &config)?;

    let lang_to_id: BTreeMap<String, u32> = c
        .lang_ids
        .iter()
        .map(|(code, id)| (format!("<|{code}|>"), *id))
        .collect();
    let heads: Vec<[usize; 2]> = c.alignment_heads.iter().map(|&(l, h)| [l, h]).collect();
    let mut generation = json!({
        "alignment_heads": heads,
        "begin_suppress_tokens": c.begin_suppress_tokens,
        "suppress_tokens": c.suppress_tokens,
        "bos_token_id": s.eot,
        "eos_token_id": s.eot,
        "pad_token_id": s.eot,
        "decoder_start_token_id": s.sot,
        "is_multilingual": c.is_multilingual,
        "lang_to_id": lang_to_id,
        "max_initial_timestamp_index": 50,
        "max_length": c.n_text_ctx,
        "no_timestamps_token_id": s.no_timestamps,
        "prev_sot_token_id": s.sot_prev,
        "return_timestamps": false,
    });
    if c.is_multilingual {
        generation["task_to_id"] = json!({"transcribe": s.transcribe, "translate": s.translate});
    }
    write_json(&dst.join("generation_config.json"), &generation)?;

    let frames = c.n_frames();
    let hop = 160;
    let rate = 16000;
    let preprocessor = json!({
        "feature_extractor_type": "WhisperFeatureExtractor",
        "processor_class": "WhisperProcessor",
        "feature_size": c.n_mels,
        "n_fft": 400,
        "hop_length": hop,
        "sampling_rate": rate,
        "chunk_length": frames * hop / rate,
        "n_samples": frames * hop,
        "nb_max_frames": frames,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": false,
    });
    write_json(&dst.join("preprocessor_config.json"), &preprocessor)?;

    let tok = dst.join("tokenizer.json");
    std::fs::copy(src.join("tokenizer.json"), &tok).map_err(|e| {
        Error::new(
            dicta_core::ErrorKind::Io,
            format!("{}: cannot write ({e})", tok.display()),
        )
    })?;
    tracing::info!(src = %src.display(), dst = %dst.display(), "converted CTranslate2 Whisper to Hugging Face layout");
    Ok(())
}
