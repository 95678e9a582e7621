//! The int8 decoder's cached self-attention over f16 keys and values ([`attend_causal_f16`]).
//!
//! A decoder step's self-attention reads every cached key and value of its row: with a
//! 225-token prompt (conditioning on the previous window) that is 2.8 MB per tiny.en row in
//! f32, and beam search decodes 5 rows per window. In f32 with one horizontal sum per score it
//! was 11% of a beam-5 transcription of an hour (40 rows a step). Here the cache holds f16
//! (half the bytes; 10 mantissa bits, as the cross-attention's f16 storage); the keys are
//! blocked as the cross-attention keys are ([`KEY_BLOCK`] keys dimension-major), so a block's
//! 16 scores are the lanes of one vector (no horizontal sums), and a query's output stays in
//! registers over all its keys.
//!
//! Bits: every score is one chain of multiply-adds over the dimensions in order, the softmax
//! runs over exactly the query's keys, and every output is one chain over the keys in order.
//! A query so gets the same bits alone or with others, as a one-token step or inside a prompt,
//! read from its own copy or from its family's shared prefix ([`SharedPrefix`]), left-padded or
//! not. The AVX-512 and AVX2 kernels compute the same chains (the same bits, tested); the
//! portable one rounds each product before adding it.

use super::attention::Level;
use super::cross_lowp::{blocked_index, KEY_BLOCK};
#[cfg(target_arch = "x86_64")]
use super::cross_lowp::{vector_level, HEAD};
use super::{block_start, f16_storage, f32_input, softmax_in_place, with_cpu, SharedPrefix};
use candle_core::{DType, Tensor};
use half::f16;
use rayon::prelude::*;

/// Causal attention of `L` new positions over an f16 cache, as
/// [`super::attend_causal_shared`] over f32: q [B, H, L, D] f32 (already scaled); keys
/// [B, H, NB, 16·D] f16 in blocks of [`KEY_BLOCK`] positions ([`blocked_index`]), values
/// [B, H, CAP, D] f16, both holding at least `offset + L` positions (the decoder cache's whole
/// capacity, read in place) → out [B, H, L, D] f32. Query `i` of row `b` sees keys
/// `s..=offset + i` with `s = min(starts[b], offset + i)` (`starts` empty: all 0); with
/// `prefix`, row `b` reads the blocks wholly inside `..prefix.shared` from row
/// `prefix.source[b]` (the same values).
pub fn attend_causal_f16(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    offset: usize,
    starts: &[usize],
    prefix: Option<SharedPrefix<'_>>,
) -> candle_core::Result<Tensor> {
    attend_causal_f16_at(Level::best(), q, k, v, offset, starts, prefix)
}

/// [`attend_causal_f16`] at kernel `level` (which the CPU must support).
pub fn attend_causal_f16_at(
    level: Level,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    offset: usize,
    starts: &[usize],
    prefix: Option<SharedPrefix<'_>>,
) -> candle_core::Result<Tensor> {
    let (b, h, l, d) = q.dims4()?;
    let t = offset + l;
    let (nb, cap) = (k.dim(2)?, v.dim(2)?);
    let (ks, vs) = (k.stride(), v.stride());
    if k.dims4()? != (b, h, nb, KEY_BLOCK * d)
        || v.dims4()? != (b, h, cap, d)
        || k.dtype() != DType::F16
        || v.dtype() != DType::F16
        || nb * KEY_BLOCK < t
        || cap < t
        || ks[3] != 1
        || ks[2] != KEY_BLOCK * d
        || vs[3] != 1
        || vs[2] != d
        || !(starts.is_empty() || starts.len() == b)
        || prefix.is_some_and(|p| p.source.len() != b || p.source.iter().any(|&r| r >= b))
    {
        candle_core::bail!(
            "attend_causal_f16: q {:?}, k {:?} {:?}, v {:?} {:?}, offset {offset}, {} starts",
            q.dims(),
            k.dims(),
            k.dtype(),
            v.dims(),
            v.dtype(),
            starts.len()
        );
    }
    let q = q.contiguous()?;
    let mut out = vec![0f32; b * h * l * d];
    with_cpu(
        "attend_causal_f16",
        [&q, k, v],
        |[(qs, ql), (ks, kl), (vs, vl)]| {
            let qd = f32_input(qs, ql)?;
            let (kd, vd) = (
                f16_storage(ks, kl, h, nb * KEY_BLOCK * d)?,
                f16_storage(vs, vl, h, cap * d)?,
            );
            out.par_chunks_mut(l * d).enumerate().for_each(|(bh, o)| {
                let own = (block_start(kl, h, bh), block_start(vl, h, bh));
                // Where the row reads its whole shared blocks from, and how many there are.
                let (src, split) = match prefix {
                    Some(p) if p.source[bh / h] != bh / h && p.shared >= KEY_BLOCK => {
                        let at = p.source[bh / h] * h + bh % h;
                        (
                            (block_start(kl, h, at), block_start(vl, h, at)),
                            p.shared / KEY_BLOCK,
                        )
                    }
                    _ => (own, 0),
                };
                let head = Head {
                    k: [&kd[src.0..], &kd[own.0..]],
                    v: [&vd[src.1..], &vd[own.1..]],
                    split,
                    d,
                };
                let start = starts.get(bh / h).copied().unwrap_or(0);
                let mut p = vec![0f32; t.div_ceil(KEY_BLOCK) * KEY_BLOCK];
                for i in 0..l {
                    let ti = offset + i + 1;
                    let q = &qd[(bh * l + i) * d..(bh * l + i + 1) * d];
                    attend_query(
                        level,
                        q,
                        &head,
                        (start.min(ti - 1), ti),
                        &mut p,
                        &mut o[i * d..],
                    );
                }
            });
            Ok(())
        },
    )?;
    Tensor::from_vec(out, (b, h, l, d), q.device())
}

/// One (batch, head) of the cache: blocks `..split` (positions `..split · 16`) from the first
/// parts, the rest from the second.
struct Head<'a> {
    k: [&'a [f16]; 2],
    v: [&'a [f16]; 2],
    split: usize,
    d: usize,
}

impl Head<'_> {
    /// Key block `b` ([16 · D]).
    fn key_block(&self, b: usize) -> &[f16] {
        let n = KEY_BLOCK * self.d;
        &self.k[usize::from(b >= self.split)][b * n..(b + 1) * n]
    }

    /// Values of positions `lo..hi` ([hi − lo, D]), all from one part: `hi ≤ split · 16` or
    /// `lo ≥ split · 16`.
    fn values(&self, lo: usize, hi: usize) -> &[f16] {
        let part = usize::from(lo >= self.split * KEY_BLOCK);
        &self.v[part][lo * self.d..hi * self.d]
    }
}

/// One query `q` [D] over keys `s..ti` of `head` → `out[..D]`; `p` is scratch of whole blocks.
fn attend_query(
    level: Level,
    q: &[f32],
    head: &Head,
    (s, ti): (usize, usize),
    p: &mut [f32],
    out: &mut [f32],
) {
    let d = head.d;
    let (b0, b1) = (s / KEY_BLOCK, ti.div_ceil(KEY_BLOCK));
    let mid = (head.split * KEY_BLOCK).clamp(s, ti);
    let parts = [head.values(s, mid), head.values(mid, ti)];
    let out = &mut out[..d];
    #[cfg(target_arch = "x86_64")]
    if let Some(avx512) = vector_level(level, d) {
        for b in b0..b1 {
            let (kb, dst) = (head.key_block(b), &mut p[(b - b0) * KEY_BLOCK..]);
            assert!(kb.len() == KEY_BLOCK * HEAD && dst.len() >= KEY_BLOCK);
            // SAFETY: the CPU has the level's features (`vector_level`); sizes asserted.
            unsafe {
                if avx512 {
                    x86::scores_avx512(q.as_ptr(), kb.as_ptr(), dst.as_mut_ptr())
                } else {
                    x86::scores_avx2(q.as_ptr(), kb.as_ptr(), dst.as_mut_ptr())
                }
            }
        }
        let row = &mut p[s - b0 * KEY_BLOCK..ti - b0 * KEY_BLOCK];
        // SAFETY: as above; `row` holds one weight per value row of `parts`.
        unsafe {
            if avx512 {
                x86::softmax_pv_avx512(row, parts, out)
            } else {
                x86::softmax_pv_avx2(row, parts, out)
            }
        }
        return;
    }
    let _ = level;
    for b in b0..b1 {
        let kb = head.key_block(b);
        for (lane, dst) in p[(b - b0) * KEY_BLOCK..][..KEY_BLOCK]
            .iter_mut()
            .enumerate()
        {
            *dst = q
                .iter()
                .enumerate()
                .map(|(c, &x)| x * kb[blocked_index(lane, c, d)].to_f32())
                .fold(0.0, |a, x| a + x);
        }
    }
    let row = &mut p[s - b0 * KEY_BLOCK..ti - b0 * KEY_BLOCK];
    softmax_in_place::<false>(row);
    out.fill(0.0);
    let values = parts.iter().flat_map(|v| v.chunks_exact(d));
    for (&w, value) in row.iter().zip(values) {
        for (o, x) in out.iter_mut().zip(value) {
            *o += w * x.to_f32();
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{softmax_in_place, HEAD, KEY_BLOCK};
    use half::f16;
    use std::arch::x86_64::*;

    /// The 16 scores of one key block `kb` ([64, 16] f16) for query `q` [64] into `p[..16]`.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn scores_avx512(q: *const f32, kb: *const f16, p: *mut f32) {
        let mut acc = _mm512_setzero_ps();
        for c in 0..HEAD {
            let k = _mm512_cvtph_ps(_mm256_loadu_si256(kb.add(c * KEY_BLOCK) as *const _));
            acc = _mm512_fmadd_ps(_mm512_set1_ps(*q.add(c)), k, acc);
        }
        _mm512_storeu_ps(p, acc);
    }

    /// [`scores_avx512`] in two 8-lane halves (the same chains).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn scores_avx2(q: *const f32, kb: *const f16, p: *mut f32) {
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for c in 0..HEAD {
            let at = kb.add(c * KEY_BLOCK);
            let w = _mm256_set1_ps(*q.add(c));
            lo = _mm256_fmadd_ps(w, _mm256_cvtph_ps(_mm_loadu_si128(at as *const _)), lo);
            hi = _mm256_fmadd_ps(
                w,
                _mm256_cvtph_ps(_mm_loadu_si128(at.add(8) as *const _)),
                hi,
            );
        }
        _mm256_storeu_ps(p, lo);
        _mm256_storeu_ps(p.add(8), hi);
    }

    /// Softmax of the scores `p` in place, then `out[..64] = Σ_j p[j] · v_j` over the value
    /// rows of both `parts` in order ([n, 64] f16 each, `n` summing to `p.len()`).
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn softmax_pv_avx512(p: &mut [f32], parts: [&[f16]; 2], out: &mut [f32]) {
        softmax_in_place::<true>(p);
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut j = 0;
        for part in parts {
            for row in part.chunks_exact(HEAD) {
                let w = _mm512_set1_ps(p[j]);
                for (c, a) in acc.iter_mut().enumerate() {
                    let v =
                        _mm512_cvtph_ps(_mm256_loadu_si256(row.as_ptr().add(16 * c) as *const _));
                    *a = _mm512_fmadd_ps(w, v, *a);
                }
                j += 1;
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(out.as_mut_ptr().add(16 * c), *a);
        }
    }

    /// [`softmax_pv_avx512`] on 8-lane vectors (the same chains).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn softmax_pv_avx2(p: &mut [f32], parts: [&[f16]; 2], out: &mut [f32]) {
        softmax_in_place::<true>(p);
        let mut acc = [_mm256_setzero_ps(); 8];
        let mut j = 0;
        for part in parts {
            for row in part.chunks_exact(HEAD) {
                let w = _mm256_set1_ps(p[j]);
                for (c, a) in acc.iter_mut().enumerate() {
                    let v = _mm256_cvtph_ps(_mm_loadu_si128(row.as_ptr().add(8 * c) as *const _));
                    *a = _mm256_fmadd_ps(w, v, *a);
                }
                j += 1;
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * c), *a);
        }
    }
}

/// Writes new f32 positions into an f16 cache tensor in place: `src` [N, H, L, D] (contiguous)
/// at positions `offset..offset + L` of the cache's first N rows, blocked keys ([B, H, NB,
/// 16·D], `blocked`) or plain rows ([B, H, CAP, D]), each value rounded to the nearest f16.
pub(crate) struct PutF16<'a> {
    pub src: &'a [f32],
    pub dims: (usize, usize, usize, usize),
    pub offset: usize,
    pub blocked: bool,
}

impl candle_core::InplaceOp1 for PutF16<'_> {
    fn name(&self) -> &'static str {
        "put-f16"
    }

    fn cpu_fwd(
        &self,
        storage: &mut candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<()> {
        let candle_core::CpuStorage::F16(data) = storage else {
            candle_core::bail!("put-f16: f16 cache expected");
        };
        let (n, h, l, d) = self.dims;
        let (cn, ch, c2, c3) = layout.shape().dims4()?;
        // Elements of one (row, head) block, and the positions it holds.
        let (block, positions) = if self.blocked {
            (c2 * c3, c2 * KEY_BLOCK)
        } else {
            (c2 * c3, c2)
        };
        let fits = if self.blocked {
            c3 == KEY_BLOCK * d
        } else {
            c3 == d
        };
        if !layout.is_contiguous()
            || n > cn
            || h != ch
            || !fits
            || self.offset + l > positions
            || self.src.len() != n * h * l * d
        {
            candle_core::bail!(
                "put-f16: {:?} new positions at {} into a cache of {:?}",
                self.dims,
                self.offset,
                layout.shape()
            );
        }
        // `half`'s slice conversion uses F16C where the CPU has it (round to nearest even,
        // as `f16::from_f32`).
        use half::slice::HalfFloatSliceExt;
        let data = &mut data[layout.start_offset()..];
        let mut key = vec![f16::ZERO; d];
        for (bh, src) in self.src.chunks_exact(l * d).enumerate() {
            let dst = &mut data[bh * block..(bh + 1) * block];
            if !self.blocked {
                dst[self.offset * d..(self.offset + l) * d].convert_from_f32_slice(src);
                continue;
            }
            for (i, row) in src.chunks_exact(d).enumerate() {
                key.convert_from_f32_slice(row);
                for (c, &x) in key.iter().enumerate() {
                    dst[blocked_index(self.offset + i, c, d)] = x;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
