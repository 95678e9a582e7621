//! Per-request decoder state: self-attention K/V (grown in place) and cross-attention K/V (computed once
//! per window and shared by every row decoding that window).

use super::model::ce;
use candle_core::{DType, Tensor};
use dicta_core::{Error, Result};

/// One decoder layer's cross-attention keys and values over `W` windows (built once per window by
/// `Whisper::new_cache`, shared by every row that decodes the window).
#[derive(Debug, Clone)]
pub struct CrossKv {
    /// Keys: f32 [W, H, T_audio, Dh]; or in blocks [W, H, ⌈T_audio/16⌉, 16·Dh] of f16, or of
    /// int8 (u8 bits) with `scales` (see `kernels::attend_cross_rows`).
    pub k: Tensor,
    /// Values [W, H, T_audio, Dh]: f32, f16, or int8 (u8 bits) with `scales`.
    pub v: Tensor,
    /// Int8 keys and values: per window and head, the key channels' scales then the value
    /// channels' [W, H, 2, Dh] f32.
    pub scales: Option<Tensor>,
}

/// Decoder cache for a batch of rows.
///
/// `cross` holds one K/V per window ([W, H, T_audio, Dh] per layer) and each row names the window
/// it decodes (`window_of`): beams and samples of a window read one copy, and dropping or
/// reordering rows never copies the encoder K/V (windows whose rows all left stay until the cache
/// is dropped).
pub struct DecoderCache {
    /// Per layer: self-attention keys/values [N, H, cap, Dh]; positions `len..cap` are unused.
    /// With `f16`, the keys are in blocks of 16 positions ([N, H, cap/16, 16·Dh], see
    /// `kernels::attend_causal_f16`) and both are f16.
    self_k: Vec<Tensor>,
    self_v: Vec<Tensor>,
    /// Self-attention K/V in f16 (the int8 decoder on the CPU), else f32.
    f16: bool,
    cap: usize,
    len: usize,
    rows: usize,
    /// Per row: positions of left padding (a row whose prompt is shorter than its batch's);
    /// empty when no row is padded. Row `r`'s token at cache position `j` has position
    /// `j - starts[r]` and attends to positions `starts[r]..` only.
    starts: Vec<usize>,
    /// Per row: its family. Rows of one family hold the same self-attention K/V at positions
    /// `0..shared` (the beams of a window, copied from one row after its prompt); empty while
    /// every row is its own family.
    family: Vec<u32>,
    shared: usize,
    /// Per layer: cross-attention keys/values of every window.
    cross: Vec<CrossKv>,
    /// Per row: the window of `cross` it attends.
    window_of: Vec<usize>,
    n_head: usize,
    head_dim: usize,
}

impl std::fmt::Debug for DecoderCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecoderCache")
            .field("rows", &self.rows)
            .field("len", &self.len)
            .field("window_of", &self.window_of)
            .finish()
    }
}

impl DecoderCache {
    /// Cache over `cross` (per layer K/V [W, H, T, Dh]) with one row per window and nothing decoded.
    pub(crate) fn new(cross: Vec<CrossKv>, n_head: usize, head_dim: usize) -> Result<Self> {
        let rows = match cross.first() {
            Some(c) => c.k.dim(0).map_err(ce)?,
            None => 0,
        };
        Ok(Self {
            rows,
            cross,
            window_of: (0..rows).collect(),
            ..Self::empty(n_head, head_dim)
        })
    }

    /// No rows, no windows, nothing decoded.
    fn empty(n_head: usize, head_dim: usize) -> Self {
        Self {
            self_k: Vec::new(),
            self_v: Vec::new(),
            f16: false,
            cap: 0,
            len: 0,
            rows: 0,
            starts: Vec::new(),
            family: Vec::new(),
            shared: 0,
            cross: Vec::new(),
            window_of: Vec::new(),
            n_head,
            head_dim,
        }
    }

    /// Keeps the self-attention keys and values in f16, blocked (before anything is decoded):
    /// the int8 decoder's kernels read them so (`kernels::attend_causal_f16`).
    pub(crate) fn with_f16_self_kv(mut self) -> Self {
        debug_assert!(self.cap == 0);
        self.f16 = true;
        self
    }

    /// Whether the self-attention keys and values are f16 (see [`Self::with_f16_self_kv`]).
    pub(crate) fn f16_self_kv(&self) -> bool {
        self.f16
    }

    /// Positions cached (tokens decoded so far, prompt included).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no position has been decoded yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Rows in the batch.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Per row, the positions of left padding before its first token (empty: none).
    pub fn starts(&self) -> &[usize] {
        &self.starts
    }

    /// Left-pads rows, before anything is decoded: row `r` is then fed `pads[r]` padding tokens
    /// (any ids) before its prompt, so that prompts of different lengths share one batch; its
    /// real tokens keep positions `0, 1, …` and never attend to the padding, which gives them
    /// the same logits as the row alone. Needs a decoder with
    /// [`crate::whisper::Whisper::supports_left_padding`]; all zeros clears it.
    pub fn set_left_padding(&mut self, pads: &[usize]) -> Result<()> {
        if self.len > 0 || pads.len() != self.rows {
            return Err(Error::invalid_input(format!(
                "set_left_padding: {} pads for {} rows with {} positions cached (needs one per \
                 row, before the first decode)",
                pads.len(),
                self.rows,
                self.len
            )));
        }
        self.starts = if pads.iter().all(|&p| p == 0) {
            Vec::new()
        } else {
            pads.to_vec()
        };
        Ok(())
    }

    /// Per row, the row whose copy of the shared positions `..shared` it may read (the first row
    /// of its family), and `shared`; `None` while no rows share positions.
    pub(crate) fn prefix_sources(&self) -> Option<(Vec<usize>, usize)> {
        if self.family.is_empty() || self.shared == 0 {
            return None;
        }
        let mut first: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
        let sources = (0..self.rows)
            .map(|r| *first.entry(self.family[r]).or_insert(r))
            .collect();
        Some((sources, self.shared))
    }

    /// Forgets every position from `len` on (speculative decoding rolls back the drafted tokens
    /// the main model rejected); the next decode call writes from `len`. The positions stay
    /// allocated and are overwritten, so a rollback costs nothing.
    pub fn truncate(&mut self, len: usize) -> Result<()> {
        if len > self.len {
            return Err(Error::invalid_input(format!(
                "truncate: {len} positions asked, the cache holds {}",
                self.len
            )));
        }
        self.len = len;
        self.shared = self.shared.min(len);
        Ok(())
    }

    /// Keeps/reorders rows (beam search, dropping finished rows): new row `i` = old row `indices[i]`.
    /// Moves self-attention K/V; rows keep naming their windows of the encoder K/V, never copied.
    pub fn select_rows(&mut self, indices: &[u32]) -> Result<()> {
        self.select(indices, true)
    }

    /// A new cache whose row `i` is a copy of this cache's row `indices[i]`, as
    /// [`Self::select_rows`] would leave it, while this cache stays as it is: the self-attention
    /// K/V of the selected rows are copied, the encoder K/V are shared. Temperature fallback
    /// decodes a window's prompt once and forks the cache for every temperature.
    pub fn fork(&self, indices: &[u32]) -> Result<Self> {
        let mut out = Self {
            self_k: self.self_k.clone(),
            self_v: self.self_v.clone(),
            f16: self.f16,
            cap: self.cap,
            len: self.len,
            rows: self.rows,
            starts: self.starts.clone(),
            family: self.family.clone(),
            shared: self.shared,
            cross: self.cross.clone(),
            window_of: self.window_of.clone(),
            n_head: self.n_head,
            head_dim: self.head_dim,
        };
        // Not in place: the clones above share this cache's storage until replaced.
        out.select(indices, false)?;
        Ok(out)
    }

    /// Moves the cache out, leaving one with no rows and nothing decoded in its place.
    pub fn take(&mut self) -> Self {
        let empty = Self::empty(self.n_head, self.head_dim);
        std::mem::replace(self, empty)
    }

    fn select(&mut self, indices: &[u32], allow_in_place: bool) -> Result<()> {
        if let Some(&bad) = indices.iter().find(|&&i| i as usize >= self.rows) {
            return Err(Error::invalid_input(format!(
                "select_rows: row {bad} is out of range (the cache holds {} rows)",
                self.rows
            )));
        }
        if indices.is_empty() {
            return Err(Error::invalid_input("select_rows: no rows selected"));
        }
        let dev = match self.cross.first() {
            Some(c) => c.k.device().clone(),
            None => return Ok(()),
        };
        if !self.starts.is_empty() {
            self.starts = indices.iter().map(|&i| self.starts[i as usize]).collect();
        }
        let in_place = allow_in_place && indices.len() <= self.rows && dev.is_cpu();
        let idx = Tensor::new(indices, &dev).map_err(ce)?;
        let old_family: Vec<u32> = if self.family.is_empty() {
            (0..self.rows as u32).collect()
        } else {
            self.family.clone()
        };
        // f16 keys are in blocks of 16 positions and move in whole blocks.
        let key_block = if self.f16 {
            crate::kernels::cross_lowp::KEY_BLOCK
        } else {
            1
        };
        let blocks = std::iter::repeat(key_block).zip(self.self_k.iter_mut());
        for (block, t) in blocks.chain(std::iter::repeat(1).zip(self.self_v.iter_mut())) {
            *t = if in_place {
                // Beam search reorders every step: moving the decoded positions of the rows
                // that change, in place, beats copying every row's whole capacity into a new
                // tensor (that copy and its allocation were 12% of a beam-5 transcription).
                t.inplace_op1(&GatherRows {
                    indices,
                    len: self.len.div_ceil(block),
                    family: &old_family,
                    shared: self.shared / block,
                })
                .map_err(ce)?;
                t.narrow(0, 0, indices.len()).map_err(ce)?
            } else {
                t.index_select(&idx, 0).map_err(ce)?
            };
        }
        self.window_of = indices
            .iter()
            .map(|&i| self.window_of[i as usize])
            .collect();
        self.rows = indices.len();
        // Rows copied from one row are equal up to `len`; while every row was its own family
        // (the expansion into beams, right after the prompt) that makes the new families share
        // all decoded positions. Later selections keep the shared length.
        if self.family.is_empty() {
            self.shared = self.len;
        }
        self.family = indices.iter().map(|&i| old_family[i as usize]).collect();
        Ok(())
    }

    /// Makes room for `total` positions, growing geometrically so appends stay amortized O(1).
    pub(crate) fn reserve(&mut self, total: usize) -> candle_core::Result<()> {
        if total <= self.cap {
            return Ok(());
        }
        // A whole number of key blocks (16 positions), so that the f16 layout's capacity is one.
        let new_cap = total
            .max(2 * self.cap)
            .max(32)
            .next_multiple_of(crate::kernels::cross_lowp::KEY_BLOCK);
        let dev = match self.cross.first() {
            Some(c) => c.k.device().clone(),
            None => return Ok(()),
        };
        let n_layers = self.cross.len();
        let (n, h, dh) = (self.rows, self.n_head, self.head_dim);
        let block = crate::kernels::cross_lowp::KEY_BLOCK;
        let (dtype, k_shape, k_used) = if self.f16 {
            (
                DType::F16,
                (n, h, new_cap / block, block * dh),
                self.len.div_ceil(block),
            )
        } else {
            (DType::F32, (n, h, new_cap, dh), self.len)
        };
        for li in 0..n_layers {
            let k = Tensor::zeros(k_shape, dtype, &dev)?;
            let v = Tensor::zeros((n, h, new_cap, dh), dtype, &dev)?;
            if self.len > 0 {
                k.slice_set(&self.self_k[li].narrow(2, 0, k_used)?.contiguous()?, 2, 0)?;
                v.slice_set(&self.self_v[li].narrow(2, 0, self.len)?.contiguous()?, 2, 0)?;
            }
            if li < self.self_k.len() {
                self.self_k[li] = k;
                self.self_v[li] = v;
            } else {
                self.self_k.push(k);
                self.self_v.push(v);
            }
        }
        self.cap = new_cap;
        Ok(())
    }

    /// Writes new K/V [N, H, L, Dh] f32 of `layer` at `offset` and returns views of all
    /// positions ([N, H, offset+L, Dh]); with f16 K/V, the whole cache tensors instead (blocked
    /// keys, see the field), rounded to f16 on the way in.
    pub(crate) fn append(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
        offset: usize,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let l = k.dim(2)?;
        if self.f16 {
            for (dst, src, blocked) in [
                (&self.self_k[layer], k, true),
                (&self.self_v[layer], v, false),
            ] {
                let dims = src.dims4()?;
                super::quant::with_values(src, |src| {
                    dst.inplace_op1(&crate::kernels::PutF16 {
                        src,
                        dims,
                        offset,
                        blocked,
                    })
                })??;
            }
            return Ok((self.self_k[layer].clone(), self.self_v[layer].clone()));
        }
        self.self_k[layer].slice_set(k, 2, offset)?;
        self.self_v[layer].slice_set(v, 2, offset)?;
        Ok((
            self.self_k[layer].narrow(2, 0, offset + l)?,
            self.self_v[layer].narrow(2, 0, offset + l)?,
        ))
    }

    /// Marks `l` more positions as cached (after every layer appended them).
    pub(crate) fn advance(&mut self, l: usize) {
        self.len += l;
    }

    /// Cross-attention of `layer`: queries [N, H, L, Dh] (already scaled) → [N, L, H·Dh], plus the
    /// attention probabilities [N, H, L, T_audio] when `want_probs`.
    pub(crate) fn cross_attend(
        &self,
        layer: usize,
        q: &Tensor,
        want_probs: bool,
    ) -> candle_core::Result<(Tensor, Option<Tensor>)> {
        let c = &self.cross[layer];
        let (n, _, l, _) = q.dims4()?;
        let (a, p) = crate::kernels::attend_cross_rows(
            q,
            &c.k,
            &c.v,
            c.scales.as_ref(),
            &self.window_of,
            want_probs,
        )?;
        Ok((a.transpose(1, 2)?.reshape((n, l, ()))?, p))
    }
}

/// Row `i` of a contiguous f32 or f16 `[N, H, cap, Dh]` cache ← old row `indices[i]`
/// (`indices.len() ≤ N`), positions `0..len` only (the rest is unused), in place. Rows past
/// `indices.len()` are left as they are (the caller narrows them away). Positions `0..shared` are
/// not copied between rows of one `family` (they hold the same values): a beam's prompt, often
/// 200 of its 250 positions. Blocked keys ([N, H, cap/16, 16·Dh]) move the same way with blocks
/// for positions: `len` counts the blocks in use (partly filled included), `shared` the blocks
/// wholly shared.
struct GatherRows<'a> {
    indices: &'a [u32],
    len: usize,
    /// Per old row: its family ([`DecoderCache::family`]).
    family: &'a [u32],
    shared: usize,
}

impl candle_core::InplaceOp1 for GatherRows<'_> {
    fn name(&self) -> &'static str {
        "gather-rows"
    }

    fn cpu_fwd(
        &self,
        storage: &mut candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<()> {
        match storage {
            candle_core::CpuStorage::F32(data) => self.gather(data, layout),
            candle_core::CpuStorage::F16(data) => self.gather(data, layout),
            _ => candle_core::bail!("gather-rows: f32 or f16 cache expected"),
        }
    }
}

impl GatherRows<'_> {
    fn gather<T: Copy>(
        &self,
        data: &mut [T],
        layout: &candle_core::Layout,
    ) -> candle_core::Result<()> {
        let (n, h, cap, dh) = layout.shape().dims4()?;
        if !layout.is_contiguous() || self.indices.len() > n || self.len > cap {
            candle_core::bail!(
                "gather-rows: {} rows of {n}, {} positions of {cap}",
                self.indices.len(),
                self.len
            );
        }
        let data = &mut data[layout.start_offset()..layout.start_offset() + n * h * cap * dh];
        if self.family.len() < n || self.shared > self.len {
            candle_core::bail!("gather-rows: {} families for {n} rows", self.family.len());
        }
        let (row, plane, used) = (h * cap * dh, cap * dh, self.len * dh);
        let changes = |i: usize| self.indices.get(i).is_some_and(|&s| s as usize != i);
        // The first position row `dst` takes from `src`: past the shared prefix within a family.
        let from = |dst: usize, src: usize| {
            if self.family[dst] == self.family[src] {
                self.shared * dh
            } else {
                0
            }
        };
        // A source row that is itself overwritten is read from a copy taken first (of the
        // positions its readers take).
        let mut saved: Vec<(usize, usize, Vec<T>)> = Vec::new();
        for &src in self.indices {
            let src = src as usize;
            if changes(src) && !saved.iter().any(|(s, _, _)| *s == src) {
                let lo = (0..self.indices.len())
                    .filter(|&d| self.indices[d] as usize == src && d != src)
                    .map(|d| from(d, src))
                    .min()
                    .unwrap_or(used);
                let mut copy = Vec::with_capacity(h * (used - lo));
                for p in 0..h {
                    let at = src * row + p * plane;
                    copy.extend_from_slice(&data[at + lo..at + used]);
                }
                saved.push((src, lo, copy));
            }
        }
        for (dst, &src) in self.indices.iter().enumerate() {
            let src = src as usize;
            if src == dst {
                continue;
            }
            let lo = from(dst, src);
            let copy = saved.iter().find(|(s, _, _)| *s == src);
            for p in 0..h {
                let to = dst * row + p * plane;
                match copy {
                    Some((_, start, copy)) => {
                        let w = used - start;
                        data[to + lo..to + used]
                            .copy_from_slice(&copy[p * w + lo - start..(p + 1) * w])
                    }
                    None => {
                        let at = src * row + p * plane;
                        data.copy_within(at + lo..at + used, to + lo)
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, IndexOp};

    /// Gathers `indices` into `t` in place and asserts its decoded positions (`..len`) equal
    /// `want`'s; returns `t` narrowed to the kept rows.
    fn gather_equals(
        t: &Tensor,
        want: &Tensor,
        indices: &[u32],
        len: usize,
        family: &[u32],
        shared: usize,
    ) -> Tensor {
        t.inplace_op1(&GatherRows {
            indices,
            len,
            family,
            shared,
        })
        .unwrap();
        let t = t.narrow(0, 0, indices.len()).unwrap();
        let got = t.i((.., .., ..len, ..)).unwrap().flatten_all().unwrap();
        let exp = want.i((.., .., ..len, ..)).unwrap().flatten_all().unwrap();
        assert_eq!(
            got.to_vec1::<f32>().unwrap(),
            exp.to_vec1::<f32>().unwrap(),
            "{indices:?}"
        );
        t
    }

    /// In-place gathers equal `index_select` on the decoded positions, for swaps, cycles,
    /// duplicates and dropped rows, also on a cache already narrowed by an earlier gather.
    #[test]
    fn rows_gathered_in_place_equal_index_select() {
        let (n, h, cap, dh, len) = (6, 3, 10, 4, 7);
        let data: Vec<f32> = (0..n * h * cap * dh).map(|i| i as f32).collect();
        let mut t = Tensor::from_vec(data, (n, h, cap, dh), &Device::Cpu).unwrap();
        let mut want = t.clone().copy().unwrap();
        for indices in [
            vec![1u32, 0, 3, 2, 4, 5],
            vec![2, 0, 1, 5, 3, 4],
            vec![0, 0, 1, 1, 4, 4],
            vec![5, 5, 2],
            vec![2, 1],
            vec![1, 1],
        ] {
            want = want
                .index_select(&Tensor::new(indices.as_slice(), &Device::Cpu).unwrap(), 0)
                .unwrap();
            let family: Vec<u32> = (0..n as u32).collect();
            t = gather_equals(&t, &want, &indices, len, &family, 0);
        }
    }

    /// f16 caches gather the same way, in blocks of positions for blocked keys: a family's
    /// rows skip their wholly shared blocks and still equal `index_select` on the blocks in use.
    #[test]
    fn f16_blocked_keys_gather_in_whole_blocks() {
        let (n, h, blocks, width) = (4, 2, 5, 8);
        // Rows 0, 1 are family 0 and agree on blocks 0..2; rows 2, 3 family 1.
        let data: Vec<half::f16> = (0..n * h * blocks * width)
            .map(|i| {
                let (r, b) = (i / (h * blocks * width), (i / width) % blocks);
                let v = if b < 2 {
                    r / 2 * 1000 + i % (h * blocks * width)
                } else {
                    i
                };
                half::f16::from_f32(v as f32)
            })
            .collect();
        let family = [0u32, 0, 1, 1];
        // 37 positions in blocks of 16: 3 blocks in use, 2 wholly shared (33 shared positions).
        let (len, shared) = (37usize.div_ceil(16), 33 / 16);
        for indices in [vec![1u32, 0, 3, 3], vec![1, 1, 2], vec![3, 0]] {
            let t = Tensor::from_vec(data.clone(), (n, h, blocks, width), &Device::Cpu).unwrap();
            let want = t
                .index_select(&Tensor::new(indices.as_slice(), &Device::Cpu).unwrap(), 0)
                .unwrap();
            t.inplace_op1(&GatherRows {
                indices: &indices,
                len,
                family: &family,
                shared,
            })
            .unwrap();
            let got = t.narrow(0, 0, indices.len()).unwrap();
            let used = |x: &Tensor| -> Vec<half::f16> {
                x.i((.., .., ..len, ..))
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1()
                    .unwrap()
            };
            assert_eq!(used(&got), used(&want), "{indices:?}");
        }
    }

    /// Rows of one family skip their shared prefix and still end up equal to `index_select`:
    /// beams reordered within and across windows (families 0, 1), with a row saved first.
    #[test]
    fn a_family_skips_its_shared_prefix() {
        let (n, h, cap, dh, len, shared) = (6, 2, 9, 3, 8, 5);
        // Rows 0..3 are family 0 and rows 3..6 family 1; a family's rows agree on 0..shared.
        let data: Vec<f32> = (0..n * h * cap * dh)
            .map(|i| {
                let (r, pos) = (i / (h * cap * dh), (i / dh) % cap);
                if pos < shared {
                    (r / 3 * 1000 + i % (h * cap * dh)) as f32
                } else {
                    i as f32
                }
            })
            .collect();
        let family = [0u32, 0, 0, 1, 1, 1];
        for indices in [
            vec![2u32, 0, 0, 4, 3, 3],
            vec![1, 2, 0, 5, 5, 4],
            vec![3, 0, 1],
        ] {
            let t = Tensor::from_vec(data.clone(), (n, h, cap, dh), &Device::Cpu).unwrap();
            let want = t
                .index_select(&Tensor::new(indices.as_slice(), &Device::Cpu).unwrap(), 0)
                .unwrap();
            gather_equals(&t, &want, &indices, len, &family, shared);
        }
    }
}
