//! Opening Hugging Face weight files as a candle `VarBuilder`, and folding weight norm.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use dicta_core::{Error, Result};

use crate::ctc::util::{load_err, read_json};

/// Opens the weights of `dir`: `model.safetensors`, a sharded `model.safetensors.index.json`, or
/// a torch zip pickle `pytorch_model.bin` (read by candle's pickle loader). Tensors are
/// converted to `dtype` on `device` as they are fetched.
pub fn open(dir: &Path, dtype: DType, device: &Device) -> Result<VarBuilder<'static>> {
    let single = dir.join("model.safetensors");
    let index = dir.join("model.safetensors.index.json");
    let bin = dir.join("pytorch_model.bin");
    if single.exists() {
        return mmap_safetensors(&[single], dtype, device);
    }
    if index.exists() {
        return mmap_safetensors(&shards(dir, &index)?, dtype, device);
    }
    if bin.exists() {
        tracing::debug!(path = %bin.display(), "loading torch pickle weights");
        return VarBuilder::from_pth(&bin, dtype, device).map_err(|e| {
            Error::model_load(format!(
                "{}: cannot read this torch checkpoint ({e}); only zip-format pickles are \
                 supported, convert it to model.safetensors (e.g. save_pretrained with safetensors)",
                bin.display()
            ))
        });
    }
    Err(Error::model_load(format!(
        "{}: no weights found; expected model.safetensors, model.safetensors.index.json or \
         pytorch_model.bin",
        dir.display()
    )))
}

fn mmap_safetensors(
    paths: &[PathBuf],
    dtype: DType,
    device: &Device,
) -> Result<VarBuilder<'static>> {
    // SAFETY: the files are mapped read-only; as with every mmap loader, another process
    // truncating them while the model is loaded is undefined behaviour, which model folders
    // (immutable once written) do not do.
    unsafe { VarBuilder::from_mmaped_safetensors(paths, dtype, device) }
        .map_err(load_err(format!("cannot open {}", paths[0].display())))
}

fn shards(dir: &Path, index: &Path) -> Result<Vec<PathBuf>> {
    #[derive(serde::Deserialize)]
    struct Index {
        weight_map: std::collections::HashMap<String, String>,
    }
    let idx: Index = read_json(index)?;
    let files: BTreeSet<String> = idx.weight_map.into_values().collect();
    Ok(files.into_iter().map(|f| dir.join(f)).collect())
}

/// Reads a weight-normalised conv kernel `[out, in/groups, k]` (normalised over all dims but the
/// last, as `weight_norm(conv, dim=2)` does) and folds it into a plain kernel once at load.
///
/// Accepts the legacy names `weight_g`/`weight_v`, the parametrization names
/// `parametrizations.weight.original0/1`, and an already folded `weight`.
pub fn weight_norm_conv(vb: &VarBuilder, shape: (usize, usize, usize)) -> Result<Tensor> {
    let (_, _, k) = shape;
    let names = [
        ("weight_g", "weight_v"),
        (
            "parametrizations.weight.original0",
            "parametrizations.weight.original1",
        ),
    ];
    for (g_name, v_name) in names {
        if vb.contains_tensor(g_name) {
            let ctx = format!("{}.{g_name}", vb.prefix());
            let g = vb.get((1, 1, k), g_name).map_err(load_err(&ctx))?;
            let v = vb.get(shape, v_name).map_err(load_err(&ctx))?;
            let fold = || -> candle_core::Result<Tensor> {
                let norm = v.sqr()?.sum_keepdim(0)?.sum_keepdim(1)?.sqrt()?;
                v.broadcast_mul(&g.broadcast_div(&norm)?)
            };
            return fold().map_err(load_err(ctx));
        }
    }
    vb.get(shape, "weight")
        .map_err(load_err(format!("{}.weight", vb.prefix())))
}
