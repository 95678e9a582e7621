//! Hugging Face Whisper folders (transformers' `WhisperForConditionalGeneration`): `config.json`,
//! `model.safetensors` (or sharded with `model.safetensors.index.json`), `generation_config.json`,
//! `tokenizer.json`.

use super::config::{SpecialTokens, WhisperConfig};
use super::model::WeightMap;
use super::tokenizer::WhisperTokenizer;
use candle_core::Device;
use dicta_core::{Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

#[derive(serde::Deserialize)]
struct HfConfig {
    model_type: Option<String>,
    d_model: usize,
    encoder_layers: usize,
    encoder_attention_heads: usize,
    encoder_ffn_dim: usize,
    decoder_layers: usize,
    decoder_attention_heads: usize,
    decoder_ffn_dim: usize,
    num_mel_bins: usize,
    vocab_size: usize,
    max_source_positions: usize,
    max_target_positions: usize,
    activation_function: Option<String>,
    scale_embedding: Option<bool>,
    suppress_tokens: Option<Vec<i64>>,
    begin_suppress_tokens: Option<Vec<i64>>,
}

#[derive(serde::Deserialize, Default)]
struct GenConfig {
    alignment_heads: Option<Vec<(usize, usize)>>,
    lang_to_id: Option<BTreeMap<String, u32>>,
    is_multilingual: Option<bool>,
    suppress_tokens: Option<Vec<i64>>,
    begin_suppress_tokens: Option<Vec<i64>>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let raw = std::fs::read_to_string(path)
        .map_err(|e| Error::model_load(format!("{}: cannot read ({e})", path.display())))?;
    serde_json::from_str(&raw).map_err(|e| {
        Error::model_load(format!(
            "{}: not a Whisper config ({e}); use the file that came with the model",
            path.display()
        ))
    })
}

/// Safetensors files of the folder: `model.safetensors`, or the shards named by the index.
fn weight_files(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    #[derive(serde::Deserialize)]
    struct Index {
        weight_map: BTreeMap<String, String>,
    }
    let index: Index = read_json(&dir.join("model.safetensors.index.json"))?;
    let mut files: Vec<_> = index.weight_map.values().cloned().collect();
    files.sort();
    files.dedup();
    Ok(files.into_iter().map(|f| dir.join(f)).collect())
}

/// Loads a Hugging Face folder for [`super::Whisper::load`] (weights stay on the CPU in their dtype).
pub(crate) fn load(dir: &Path) -> Result<(WhisperConfig, WhisperTokenizer, WeightMap)> {
    let cfg_path = dir.join("config.json");
    let what = cfg_path.display().to_string();
    let hc: HfConfig = read_json(&cfg_path)?;
    if hc.model_type.as_deref().is_some_and(|t| t != "whisper") {
        return Err(Error::model_load(format!(
            "{what}: model_type is {:?}, not \"whisper\"",
            hc.model_type.unwrap_or_default()
        )));
    }
    if hc
        .activation_function
        .as_deref()
        .is_some_and(|a| a != "gelu")
        || hc.scale_embedding == Some(true)
    {
        return Err(Error::model_load(format!(
            "{what}: only activation_function \"gelu\" without scale_embedding is supported"
        )));
    }
    let gen_path = dir.join("generation_config.json");
    let gc: GenConfig = if gen_path.is_file() {
        read_json(&gen_path)?
    } else {
        tracing::warn!(path = %gen_path.display(), "no generation_config.json; using config.json defaults");
        GenConfig::default()
    };
    let tok_path = dir.join("tokenizer.json");
    let tokenizer = WhisperTokenizer::from_file(&tok_path)?;
    let special = SpecialTokens::from_tokenizer(&tokenizer, &tok_path.display().to_string())?;
    let ids = |v: Option<Vec<i64>>| {
        v.unwrap_or_default()
            .into_iter()
            .filter(|&x| x >= 0)
            .map(|x| x as u32)
            .collect::<Vec<_>>()
    };
    let mut lang_ids: Vec<(String, u32)> = gc
        .lang_to_id
        .unwrap_or_default()
        .into_iter()
        .map(|(tok, id)| {
            let code = tok
                .trim_start_matches("<|")
                .trim_end_matches("|>")
                .to_string();
            (code, id)
        })
        .collect();
    lang_ids.sort_by_key(|(_, id)| *id);
    let is_multilingual = gc.is_multilingual.unwrap_or(hc.vocab_size >= 51865);
    if !is_multilingual {
        // English-only checkpoints take no language token (their lang_to_id, if any, is the
        // multilingual table and does not match their vocabulary).
        lang_ids.clear();
    }
    let config = WhisperConfig {
        n_mels: hc.num_mel_bins,
        n_audio_ctx: hc.max_source_positions,
        n_audio_state: hc.d_model,
        n_audio_head: hc.encoder_attention_heads,
        n_audio_layer: hc.encoder_layers,
        n_audio_ffn: hc.encoder_ffn_dim,
        n_vocab: hc.vocab_size,
        n_text_ctx: hc.max_target_positions,
        n_text_state: hc.d_model,
        n_text_head: hc.decoder_attention_heads,
        n_text_layer: hc.decoder_layers,
        n_text_ffn: hc.decoder_ffn_dim,
        special,
        suppress_tokens: ids(gc.suppress_tokens.or(hc.suppress_tokens)),
        begin_suppress_tokens: ids(gc.begin_suppress_tokens.or(hc.begin_suppress_tokens)),
        alignment_heads: gc.alignment_heads.unwrap_or_else(|| {
            WhisperConfig::default_alignment_heads(hc.decoder_layers, hc.decoder_attention_heads)
        }),
        is_multilingual,
        lang_ids,
    };

    let mut tensors = HashMap::new();
    let files = weight_files(dir)?;
    for f in &files {
        let loaded = candle_core::safetensors::load(f, &Device::Cpu).map_err(|e| {
            Error::model_load(format!("{}: cannot read safetensors ({e})", f.display()))
        })?;
        for (name, t) in loaded {
            // Checkpoints of the bare `WhisperModel` omit the `model.` prefix.
            let name = if name.starts_with("model.") || name == "proj_out.weight" {
                name
            } else {
                format!("model.{name}")
            };
            tensors.insert(name, t);
        }
    }
    let source = files
        .first()
        .map(|f| f.display().to_string())
        .unwrap_or_else(|| dir.display().to_string());
    Ok((config, tokenizer, WeightMap { tensors, source }))
}
