//! CTranslate2 Whisper folders: `model.bin` (binary spec, see ctranslate2/specs/model_spec.py
//! `_serialize`), `config.json` (suppress ids, language ids, alignment heads) and `tokenizer.json`.
//!
//! Variables are renamed to Hugging Face names so one model builder serves both formats; fused
//! projections are split back (self-attention `linear_0` = q‖k‖v, cross-attention `linear_0` = q and
//! `linear_1` = k‖v; k has no bias in Whisper, so its zero bias slice is dropped).

use super::config::{SpecialTokens, WhisperConfig};
use super::model::{ce, WeightMap};
use super::tokenizer::WhisperTokenizer;
use candle_core::{DType, Device, Tensor};
use dicta_core::{Error, Result};
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// One raw variable of `model.bin`.
pub(crate) struct RawVar<'a> {
    pub shape: Vec<usize>,
    /// CTranslate2 type id: 0 f32, 1 i8, 2 i16, 3 i32, 4 f16, 5 bf16.
    pub dtype: u8,
    pub data: &'a [u8],
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'a str,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.pos + n > self.buf.len() {
            return Err(Error::model_load(format!(
                "{}: truncated at byte {} (wanted {n} more); download the model again",
                self.what, self.pos
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// Length-prefixed, NUL-terminated UTF-8 string.
    fn string(&mut self) -> Result<String> {
        let n = self.u16()? as usize;
        let b = self.bytes(n)?;
        let b = b.strip_suffix(&[0]).unwrap_or(b);
        String::from_utf8(b.to_vec())
            .map_err(|_| Error::model_load(format!("{}: a variable name is not UTF-8", self.what)))
    }
}

/// Parses `model.bin`: returns the spec name and the variables with aliases resolved.
pub(crate) fn parse<'a>(
    buf: &'a [u8],
    what: &'a str,
) -> Result<(String, BTreeMap<String, RawVar<'a>>)> {
    let mut r = Reader { buf, pos: 0, what };
    let version = r.u32()?;
    if !(5..=6).contains(&version) {
        return Err(Error::model_load(format!(
            "{what}: CTranslate2 binary version {version} is not supported (5 or 6 expected); \
             re-convert the model with ctranslate2 ≥ 3"
        )));
    }
    let spec = r.string()?;
    let _revision = r.u32()?;
    let n = r.u32()? as usize;
    let mut vars = BTreeMap::new();
    for _ in 0..n {
        let name = r.string()?;
        let rank = r.u8()? as usize;
        let shape = (0..rank)
            .map(|_| r.u32().map(|d| d as usize))
            .collect::<Result<Vec<_>>>()?;
        let dtype = r.u8()?;
        let nbytes = r.u32()? as usize;
        let data = r.bytes(nbytes)?;
        vars.insert(name, RawVar { shape, dtype, data });
    }
    let n_alias = r.u32()? as usize;
    for _ in 0..n_alias {
        let alias = r.string()?;
        let target = r.string()?;
        let v = vars.get(&target).ok_or_else(|| {
            Error::model_load(format!(
                "{what}: alias {alias} points to unknown variable {target}"
            ))
        })?;
        let copy = RawVar {
            shape: v.shape.clone(),
            dtype: v.dtype,
            data: v.data,
        };
        vars.insert(alias, copy);
    }
    Ok((spec, vars))
}

fn elem_size(dtype: u8) -> Option<usize> {
    match dtype {
        0 | 3 => Some(4),
        1 => Some(1),
        2 | 4 | 5 => Some(2),
        _ => None,
    }
}

/// Reads a scalar integer variable (num_heads, flags).
fn scalar_int(v: &RawVar) -> Option<i64> {
    match (v.dtype, v.data.len()) {
        (1, 1) => Some(v.data[0] as i8 as i64),
        (2, 2) => Some(i16::from_le_bytes([v.data[0], v.data[1]]) as i64),
        (3, 4) => Some(i32::from_le_bytes([v.data[0], v.data[1], v.data[2], v.data[3]]) as i64),
        _ => None,
    }
}

/// Little-endian float16 `bytes` as float32: every weight of a float16 model passes through
/// here once (candle's copy then one-element-at-a-time `to_dtype` took about half of model
/// loading).
fn f16_bytes_to_f32(bytes: &[u8]) -> Vec<f32> {
    let halves = bytes.as_ptr().cast::<half::f16>();
    if cfg!(target_endian = "little") && halves.is_aligned() {
        // SAFETY: `bytes` is 2-byte aligned (checked) and holds `len / 2` whole f16 values;
        // every bit pattern is a valid f16; little-endian, as the file stores them.
        return crate::kernels::widen_f16(unsafe {
            std::slice::from_raw_parts(halves, bytes.len() / 2)
        });
    }
    let mut out = vec![0f32; bytes.len() / 2];
    out.par_iter_mut()
        .zip(bytes.par_chunks_exact(2))
        .for_each(|(o, p)| *o = half::f16::from_le_bytes([p[0], p[1]]).to_f32());
    out
}

/// Converts a variable to a CPU tensor in its float dtype (f32/f16/bf16); integer weights are
/// dequantized to f32 with their `scale` (per output row, or one scalar).
fn to_tensor(name: &str, v: &RawVar, scale: Option<&RawVar>, what: &str) -> Result<Tensor> {
    let n: usize = v.shape.iter().product();
    let bad_dtype = || {
        Error::model_load(format!(
            "{what}: variable {name} has unsupported CTranslate2 type id {}; supported: float32, float16, bfloat16, int8, int16",
            v.dtype
        ))
    };
    let size = elem_size(v.dtype).ok_or_else(bad_dtype)?;
    if v.data.len() != n * size {
        return Err(Error::model_load(format!(
            "{what}: variable {name} holds {} bytes but shape {:?} needs {}",
            v.data.len(),
            v.shape,
            n * size
        )));
    }
    let cpu = Device::Cpu;
    let t = match v.dtype {
        0 => Tensor::from_raw_buffer(v.data, DType::F32, &v.shape, &cpu).map_err(ce)?,
        // float16 (CTranslate2's float16 models): float32 straight from the mapped bytes.
        4 => Tensor::from_vec(f16_bytes_to_f32(v.data), v.shape.as_slice(), &cpu).map_err(ce)?,
        5 => Tensor::from_raw_buffer(v.data, DType::BF16, &v.shape, &cpu).map_err(ce)?,
        1 => Tensor::from_vec(
            v.data.iter().map(|&b| b as i8 as f32).collect::<Vec<_>>(),
            v.shape.as_slice(),
            &cpu,
        )
        .map_err(ce)?,
        2 => Tensor::from_vec(
            v.data
                .chunks_exact(2)
                .map(|b| i16::from_le_bytes([b[0], b[1]]) as f32)
                .collect::<Vec<_>>(),
            v.shape.as_slice(),
            &cpu,
        )
        .map_err(ce)?,
        _ => return Err(bad_dtype()),
    };
    match scale {
        None if matches!(v.dtype, 1 | 2) => Err(Error::model_load(format!(
            "{what}: integer variable {name} has no {name}_scale; the file is damaged"
        ))),
        None => Ok(t),
        Some(s) => {
            let s = to_tensor(&format!("{name}_scale"), s, None, what)?
                .to_dtype(DType::F32)
                .map_err(ce)?;
            let t = t.to_dtype(DType::F32).map_err(ce)?;
            let rows = v.shape.first().copied().unwrap_or(1);
            let s = if s.elem_count() == 1 {
                s.reshape(()).map_err(ce)?
            } else if s.elem_count() == rows {
                let mut bshape = vec![1; v.shape.len()];
                bshape[0] = rows;
                s.reshape(bshape).map_err(ce)?
            } else {
                return Err(Error::model_load(format!(
                    "{what}: {name}_scale has {} entries for {rows} rows",
                    s.elem_count()
                )));
            };
            t.broadcast_div(&s).map_err(ce)
        }
    }
}

/// Scalar attributes this loader understands, with the values Whisper requires (None = any).
const SCALARS: &[(&str, Option<i64>)] = &[
    ("encoder/num_heads", None),
    ("decoder/num_heads", None),
    ("decoder/activation", Some(3)), // GELU (erf)
    ("decoder/pre_norm", Some(1)),
    ("decoder/scale_embeddings", Some(0)),
    ("decoder/alibi", Some(0)),
    ("decoder/alibi_use_positive_positions", Some(0)),
    ("decoder/scale_alibi", Some(0)),
    ("decoder/start_from_zero_embedding", Some(0)),
    ("decoder/alignment_heads", None),
    ("decoder/alignment_layer", None),
];

fn ct2_to_hf_name(name: &str) -> Option<String> {
    let (scope, leaf) = name.rsplit_once('/')?;
    let leaf = match leaf {
        "gamma" => "weight",
        "beta" => "bias",
        "weight" | "bias" => leaf,
        "encodings" => "weight",
        _ => return None,
    };
    let parts: Vec<&str> = scope.split('/').collect();
    let hf = match parts.as_slice() {
        ["encoder", "conv1"] => "model.encoder.conv1".to_string(),
        ["encoder", "conv2"] => "model.encoder.conv2".to_string(),
        [side @ ("encoder" | "decoder"), "position_encodings"] => {
            format!("model.{side}.embed_positions")
        }
        [side @ ("encoder" | "decoder"), "layer_norm"] => format!("model.{side}.layer_norm"),
        ["decoder", "embeddings"] => "model.decoder.embed_tokens".to_string(),
        ["decoder", "projection"] => "proj_out".to_string(),
        [side @ ("encoder" | "decoder"), layer, rest @ ..] => {
            let i: usize = layer.strip_prefix("layer_")?.parse().ok()?;
            let p = format!("model.{side}.layers.{i}");
            match rest {
                ["self_attention", "layer_norm"] => format!("{p}.self_attn_layer_norm"),
                ["self_attention", "linear_0"] => format!("{p}.self_attn.qkv"),
                ["self_attention", "linear_1"] => format!("{p}.self_attn.out_proj"),
                ["attention", "layer_norm"] => format!("{p}.encoder_attn_layer_norm"),
                ["attention", "linear_0"] => format!("{p}.encoder_attn.q_proj"),
                ["attention", "linear_1"] => format!("{p}.encoder_attn.kv"),
                ["attention", "linear_2"] => format!("{p}.encoder_attn.out_proj"),
                ["ffn", "layer_norm"] => format!("{p}.final_layer_norm"),
                ["ffn", "linear_0"] => format!("{p}.fc1"),
                ["ffn", "linear_1"] => format!("{p}.fc2"),
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(format!("{hf}.{leaf}"))
}

/// Splits fused `…qkv` / `…kv` tensors into HF's q/k/v projections (dropping k's zero bias).
fn split_fused(map: &mut HashMap<String, Tensor>) -> Result<()> {
    let fused: Vec<String> = map
        .keys()
        .filter(|k| k.contains(".qkv.") || k.contains(".kv."))
        .cloned()
        .collect();
    for name in fused {
        let Some(t) = map.remove(&name) else {
            continue;
        };
        let (prefix, parts): (&str, &[&str]) = if let Some(p) = name.split_once(".qkv.") {
            (p.0, &["q", "k", "v"])
        } else if let Some(p) = name.split_once(".kv.") {
            (p.0, &["k", "v"])
        } else {
            continue;
        };
        let leaf = name.rsplit('.').next().unwrap_or("weight");
        let rows = t.dim(0).map_err(ce)?;
        let d = rows / parts.len();
        for (i, part) in parts.iter().enumerate() {
            if *part == "k" && leaf == "bias" {
                continue;
            }
            let piece = t
                .narrow(0, i * d, d)
                .and_then(|p| p.contiguous())
                .map_err(ce)?;
            map.insert(format!("{prefix}.{part}_proj.{leaf}"), piece);
        }
    }
    Ok(())
}

#[derive(serde::Deserialize, Default)]
struct Ct2Config {
    #[serde(default)]
    suppress_ids: Vec<i64>,
    #[serde(default)]
    suppress_ids_begin: Vec<i64>,
    #[serde(default)]
    lang_ids: Vec<u32>,
    #[serde(default)]
    alignment_heads: Option<Vec<(usize, usize)>>,
}

/// What a CTranslate2 folder holds, renamed to HF names (weights kept in their float dtype).
pub(crate) struct Ct2Model {
    pub config: WhisperConfig,
    pub tokenizer: WhisperTokenizer,
    pub weights: WeightMap,
    /// Whether `decoder/projection/weight` is an alias of the embeddings (tied).
    pub tied: bool,
}

/// Reads a CTranslate2 Whisper folder.
pub(crate) fn read(dir: &Path) -> Result<Ct2Model> {
    // The tokenizer (a 2 MB JSON with its BPE merges: about a third of loading) is parsed on a
    // thread of its own while the weights are converted.
    std::thread::scope(|scope| {
        let tokenizer = scope.spawn(|| WhisperTokenizer::from_file(&dir.join("tokenizer.json")));
        read_with(dir, move || {
            tokenizer
                .join()
                .map_err(|_| Error::model_load("the tokenizer thread panicked"))?
        })
    })
}

/// [`read`], with the tokenizer from `tokenizer` once the weights are read.
fn read_with(dir: &Path, tokenizer: impl FnOnce() -> Result<WhisperTokenizer>) -> Result<Ct2Model> {
    let bin = dir.join("model.bin");
    let what = bin.display().to_string();
    let file = std::fs::File::open(&bin)
        .map_err(|e| Error::model_load(format!("{what}: cannot open ({e})")))?;
    // SAFETY: the map is read-only and dropped before returning; a concurrent truncation of the model
    // file would be a broken installation, which every memory-mapped loader accepts.
    let mmap = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| Error::model_load(format!("{what}: cannot map ({e})")))?;
    let (spec, vars) = parse(&mmap, &what)?;
    if spec != "WhisperSpec" {
        return Err(Error::model_load(format!(
            "{what}: holds a {spec}, not a WhisperSpec; point to a Whisper model"
        )));
    }
    let tied = vars
        .get("decoder/projection/weight")
        .zip(vars.get("decoder/embeddings/weight"))
        .is_some_and(|(p, e)| std::ptr::eq(p.data.as_ptr(), e.data.as_ptr()));
    let mut ints = HashMap::new();
    for (name, want) in SCALARS {
        if let Some(v) = vars.get(*name) {
            let got = scalar_int(v).ok_or_else(|| {
                Error::model_load(format!("{what}: {name} is not an integer scalar"))
            })?;
            if want.is_some_and(|w| w != got) {
                return Err(Error::model_load(format!(
                    "{what}: {name} = {got} is not supported for Whisper (expected {})",
                    want.unwrap_or_default()
                )));
            }
            ints.insert(*name, got);
        }
    }
    let heads = |side: &str| -> Result<usize> {
        ints.get(format!("{side}/num_heads").as_str())
            .map(|&h| h as usize)
            .ok_or_else(|| {
                Error::model_load(format!(
                    "{what}: {side}/num_heads is missing (old converter); re-convert with ctranslate2 ≥ 3.0"
                ))
            })
    };
    let (n_audio_head, n_text_head) = (heads("encoder")?, heads("decoder")?);

    let mut todo = Vec::with_capacity(vars.len());
    for (name, v) in &vars {
        if SCALARS.iter().any(|(s, _)| s == name) || name.ends_with("_scale") {
            continue;
        }
        if tied && name == "decoder/projection/weight" {
            continue;
        }
        if v.shape.is_empty() {
            // A flag from a newer converter: harmless when off, refused when on.
            if scalar_int(v) == Some(0) {
                tracing::debug!(variable = %name, "ignoring unknown CTranslate2 flag that is off");
                continue;
            }
            return Err(Error::model_load(format!(
                "{what}: unknown setting {name} is on; this Whisper variant is not supported"
            )));
        }
        let hf = ct2_to_hf_name(name).ok_or_else(|| {
            Error::model_load(format!(
                "{what}: unknown variable {name}; this Whisper variant is not supported"
            ))
        })?;
        todo.push((hf, name, v, vars.get(&format!("{name}_scale"))));
    }
    // Converted in parallel (float16 → float32 for a float16 model).
    let mut tensors = todo
        .into_par_iter()
        .map(|(hf, name, v, scale)| Ok((hf, to_tensor(name, v, scale, &what)?)))
        .collect::<Result<HashMap<String, Tensor>>>()?;
    split_fused(&mut tensors)?;

    let shape = |n: &str| -> Result<Vec<usize>> {
        vars.get(n).map(|v| v.shape.clone()).ok_or_else(|| {
            Error::model_load(format!(
                "{what}: variable {n} is missing; the file is incomplete"
            ))
        })
    };
    let count = |side: &str| {
        (0..)
            .take_while(|i| vars.contains_key(&format!("{side}/layer_{i}/ffn/linear_0/weight")))
            .count()
    };
    let conv1 = shape("encoder/conv1/weight")?;
    let enc_pos = shape("encoder/position_encodings/encodings")?;
    let emb = shape("decoder/embeddings/weight")?;
    let dec_pos = shape("decoder/position_encodings/encodings")?;
    let n_audio_ffn = shape("encoder/layer_0/ffn/linear_0/weight")?[0];
    let n_text_ffn = shape("decoder/layer_0/ffn/linear_0/weight")?[0];
    let (n_audio_layer, n_text_layer) = (count("encoder"), count("decoder"));
    if conv1.len() != 3 || enc_pos.len() != 2 || emb.len() != 2 || dec_pos.len() != 2 {
        return Err(Error::model_load(format!(
            "{what}: unexpected ranks of conv1/embeddings"
        )));
    }
    drop(mmap);

    let tokenizer = tokenizer()?;
    let tok_path = dir.join("tokenizer.json");
    let cfg_path = dir.join("config.json");
    let raw = std::fs::read_to_string(&cfg_path).map_err(|e| {
        Error::model_load(format!(
            "{}: cannot read ({e}); a CTranslate2 Whisper folder needs the config.json written by the converter",
            cfg_path.display()
        ))
    })?;
    let c2: Ct2Config = serde_json::from_str(&raw)
        .map_err(|e| Error::model_load(format!("{}: invalid JSON ({e})", cfg_path.display())))?;
    let special = SpecialTokens::from_tokenizer(&tokenizer, &tok_path.display().to_string())?;
    let is_multilingual = emb[0] >= 51865;
    // English-only checkpoints carry the multilingual id list, shifted by one against their own
    // vocabulary; they take no language token, so the list is dropped.
    let lang_ids = c2
        .lang_ids
        .iter()
        .filter(|_| is_multilingual)
        .filter_map(|&id| {
            let t = tokenizer.id_to_token(id)?;
            let code = t.strip_prefix("<|")?.strip_suffix("|>")?.to_string();
            Some((code, id))
        })
        .collect();
    let ids = |v: &[i64]| {
        v.iter()
            .filter(|&&x| x >= 0)
            .map(|&x| x as u32)
            .collect::<Vec<_>>()
    };
    let config = WhisperConfig {
        n_mels: conv1[1],
        n_audio_ctx: enc_pos[0],
        n_audio_state: conv1[0],
        n_audio_head,
        n_audio_layer,
        n_audio_ffn,
        n_vocab: emb[0],
        n_text_ctx: dec_pos[0],
        n_text_state: emb[1],
        n_text_head,
        n_text_layer,
        n_text_ffn,
        special,
        suppress_tokens: ids(&c2.suppress_ids),
        begin_suppress_tokens: ids(&c2.suppress_ids_begin),
        alignment_heads: c2
            .alignment_heads
            .unwrap_or_else(|| WhisperConfig::default_alignment_heads(n_text_layer, n_text_head)),
        // CTranslate2 and openai/whisper decide this from the vocabulary size.
        is_multilingual,
        lang_ids,
    };
    Ok(Ct2Model {
        config,
        tokenizer,
        weights: WeightMap {
            tensors,
            source: what,
        },
        tied,
    })
}

/// Loads a CTranslate2 folder for [`super::Whisper::load`].
pub(crate) fn load(dir: &Path) -> Result<(WhisperConfig, WhisperTokenizer, WeightMap)> {
    let m = read(dir)?;
    Ok((m.config, m.tokenizer, m.weights))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float16_bytes_convert_exactly_aligned_or_not() {
        // More than one parallel chunk, every finite f16 class (normal, subnormal, zero,
        // negative), infinities; read from an even and an odd offset (the fallback path).
        let vals: Vec<half::f16> = (0..150_001u32)
            .map(|i| half::f16::from_bits((i.wrapping_mul(2_654_435_761) >> 16) as u16))
            .filter(|h| !h.is_nan())
            .collect();
        let mut bytes = vec![0u8];
        for h in &vals {
            bytes.extend(h.to_le_bytes());
        }
        let want: Vec<f32> = vals.iter().map(|h| h.to_f32()).collect();
        let odd = &bytes[1..];
        let mut even = vec![0u16; odd.len() / 2];
        for (e, p) in even.iter_mut().zip(odd.chunks_exact(2)) {
            *e = u16::from_le_bytes([p[0], p[1]]);
        }
        // SAFETY: a u16 buffer viewed as its bytes (aligned to 2).
        let aligned =
            unsafe { std::slice::from_raw_parts(even.as_ptr().cast::<u8>(), even.len() * 2) };
        for input in [odd, aligned] {
            let got = f16_bytes_to_f32(input);
            assert_eq!(got.len(), want.len());
            assert!(got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }

    fn put_str(b: &mut Vec<u8>, s: &str) {
        b.extend(((s.len() + 1) as u16).to_le_bytes());
        b.extend(s.as_bytes());
        b.push(0);
    }

    fn put_var(b: &mut Vec<u8>, name: &str, shape: &[u32], dtype: u8, data: &[u8]) {
        put_str(b, name);
        b.push(shape.len() as u8);
        for d in shape {
            b.extend(d.to_le_bytes());
        }
        b.push(dtype);
        b.extend((data.len() as u32).to_le_bytes());
        b.extend(data);
    }

    /// A hand-written file in the layout of ctranslate2's `_serialize`: int8 weights with a per-row
    /// scale (quantized as the converter does: q = round(w · 127 / amax_row)), an f16 variable, a scalar
    /// and an alias.
    #[test]
    fn parses_binary_spec_and_dequantizes_int8() {
        let w = [[0.5f32, -1.0, 0.25], [2.0, 1.0, -0.5]];
        let scale: Vec<f32> = w
            .iter()
            .map(|r| 127.0 / r.iter().fold(0f32, |a, x| a.max(x.abs())))
            .collect();
        let q: Vec<u8> = w
            .iter()
            .zip(&scale)
            .flat_map(|(r, s)| r.iter().map(move |x| (x * s).round() as i8 as u8))
            .collect();
        let mut b = Vec::new();
        b.extend(6u32.to_le_bytes());
        put_str(&mut b, "WhisperSpec");
        b.extend(3u32.to_le_bytes());
        b.extend(4u32.to_le_bytes());
        put_var(
            &mut b,
            "decoder/layer_0/ffn/linear_0/weight",
            &[2, 3],
            1,
            &q,
        );
        let sb: Vec<u8> = scale.iter().flat_map(|s| s.to_le_bytes()).collect();
        put_var(
            &mut b,
            "decoder/layer_0/ffn/linear_0/weight_scale",
            &[2],
            0,
            &sb,
        );
        let h: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
            .collect();
        put_var(&mut b, "decoder/layer_norm/gamma", &[2], 4, &h);
        put_var(&mut b, "decoder/num_heads", &[], 2, &6i16.to_le_bytes());
        b.extend(1u32.to_le_bytes());
        put_str(&mut b, "decoder/projection/weight");
        put_str(&mut b, "decoder/layer_0/ffn/linear_0/weight");

        let (spec, vars) = parse(&b, "test.bin").unwrap();
        assert_eq!(spec, "WhisperSpec");
        assert_eq!(scalar_int(&vars["decoder/num_heads"]), Some(6));
        let name = "decoder/layer_0/ffn/linear_0/weight";
        let t = to_tensor(name, &vars[name], vars.get(&format!("{name}_scale")), "t").unwrap();
        let got: Vec<Vec<f32>> = t.to_vec2().unwrap();
        for (gr, wr) in got.iter().zip(&w) {
            for (g, x) in gr.iter().zip(wr) {
                assert!((g - x).abs() < 1e-2, "{g} vs {x}");
            }
        }
        assert_eq!(
            vars["decoder/projection/weight"].data.as_ptr(),
            vars[name].data.as_ptr()
        );
        let g = to_tensor("g", &vars["decoder/layer_norm/gamma"], None, "t").unwrap();
        assert_eq!(
            g.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap(),
            vec![1.5, -2.0]
        );
        assert_eq!(
            ct2_to_hf_name("decoder/layer_norm/gamma").as_deref(),
            Some("model.decoder.layer_norm.weight")
        );
        assert_eq!(
            ct2_to_hf_name("decoder/layer_3/attention/linear_1/bias").as_deref(),
            Some("model.decoder.layers.3.encoder_attn.kv.bias")
        );

        // An int8 variable without its scale, a truncated file and a foreign dtype are refused.
        assert!(to_tensor(name, &vars[name], None, "t").is_err());
        let e = parse(&b[..b.len() - 7], "test.bin").err().unwrap();
        assert!(e.message.contains("truncated"));
        let bad = RawVar {
            shape: vec![1],
            dtype: 9,
            data: &[0],
        };
        assert!(to_tensor("x", &bad, None, "t")
            .unwrap_err()
            .message
            .contains("unsupported"));
    }
}
