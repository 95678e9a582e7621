//! AMX tiles (Intel Advanced Matrix Extensions, Sapphire Rapids and later) for the int8
//! products: one `tdpbusd` multiplies 16 rows × 64 bytes of activations by 64 × 16 weights,
//! 16 384 multiply-adds, where one 512-bit `vpdpbusd` does 64.
//!
//! The operands are the byte kernels' own: activations as `u8` shifted by +128 ([`super`]'s
//! row quantizer, rows `k4` bytes apart), weights in [`PackedI8`]'s panels, whose (panel,
//! 16 k-groups) runs are exactly AMX's "VNNI" B layout (16 rows of 16 channels × 4 bytes, 64
//! bytes apart). The integer sums are exact, so this level's `i32` sums, and hence its
//! outputs, equal the other levels' bit for bit (tested with them).
//!
//! Linux hands tile registers to a process only on request (`arch_prctl(ARCH_REQ_XCOMP_PERM,
//! XFEATURE_XTILEDATA)`); [`available`] asks once. A thread loads the tile configuration
//! before its first tile instruction and releases it after its last ([`Tiles`]), so a thread
//! that has finished carries no tile state through context switches. Stable Rust has no AMX
//! intrinsics, so the instructions are written as inline assembly. `DICTA_NO_AMX=1` turns the
//! level off (for side-by-side measurements).

use super::{PackedI8, NR};

/// Rows of one activation / sum tile.
pub(super) const TILE_ROWS: usize = 16;
/// Bytes of `k` per tile step (one tile row).
pub(super) const TILE_K: usize = 64;

/// Whether this CPU has AMX-TILE and AMX-INT8, the OS granted this process tile data, and
/// `DICTA_NO_AMX` is not set.
#[cfg(target_arch = "x86_64")]
pub(super) fn available() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        if std::env::var_os("DICTA_NO_AMX").is_some_and(|v| v != "0") {
            return false;
        }
        let c = std::arch::x86_64::__cpuid_count(7, 0);
        let (tile, int8) = ((c.edx >> 24) & 1 == 1, (c.edx >> 25) & 1 == 1);
        if !(tile && int8) {
            return false;
        }
        const SYS_ARCH_PRCTL: i64 = 158;
        const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
        const XFEATURE_XTILEDATA: i64 = 18;
        let rc: i64;
        // SAFETY: arch_prctl only changes this process's permitted extended states; a kernel
        // without AMX support answers with an error code.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") SYS_ARCH_PRCTL => rc,
                in("rdi") ARCH_REQ_XCOMP_PERM,
                in("rsi") XFEATURE_XTILEDATA,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack)
            );
        }
        rc == 0
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    false
}

/// Whether [`available`] holds and the CPU also has AMX-BF16 (`tdpbf16ps`).
pub(super) fn bf16_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::Level::available().contains(&super::Level::Amx)
            && (std::arch::x86_64::__cpuid_count(7, 0).edx >> 22) & 1 == 1
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Head width of [`pv_block`]: four 16-column tiles.
pub(super) const PV_DH: usize = 64;
/// Keys per [`pv_block`] step (16 rows of bf16 pairs).
pub(super) const PV_KEYS: usize = 32;

/// One head's V `[t, 64]` (row `j` from `v(j)`) in bf16 in the tiles' pair layout: for each
/// 16-column block `cb`, each pair of keys `kk`, 16 columns × (key `2kk`, key `2kk + 1`);
/// keys padded with zeros to `kp` (a multiple of [`PV_KEYS`]). Inlined so that it runs at
/// the caller's instruction set; each bf16 pair is worked out as one 32-bit lane (`a`'s
/// rounded bits below, `b`'s above), which vectorises where the element-wise interleave did
/// not (≈ 8% of the AVX-512 BF16 attention's samples, scalar).
#[inline(always)]
pub(super) fn pack_v_bf16<'a>(v: impl Fn(usize) -> &'a [f32], t: usize, kp: usize) -> Vec<u16> {
    let mut out = vec![0u16; PV_DH * kp];
    let half = kp / 2;
    for kk in 0..t.div_ceil(2) {
        let a = &v(2 * kk)[..PV_DH];
        let b = if 2 * kk + 1 < t {
            &v(2 * kk + 1)[..PV_DH]
        } else {
            &[0f32; PV_DH][..]
        };
        for cb in 0..PV_DH / 16 {
            let dst = &mut out[(cb * half + kk) * 32..(cb * half + kk + 1) * 32];
            let (a, b) = (&a[cb * 16..cb * 16 + 16], &b[cb * 16..cb * 16 + 16]);
            for ((pair, &x), &y) in dst.chunks_exact_mut(2).zip(a).zip(b) {
                let w = (bf16_round(x) >> 16) | (bf16_round(y) & 0xFFFF_0000);
                pair[0] = w as u16;
                pair[1] = (w >> 16) as u16;
            }
        }
    }
    out
}

/// `x` rounded to bfloat16 (nearest, ties to even), as its bits; finite inputs.
#[inline(always)]
pub(super) fn bf16_bits(x: f32) -> u16 {
    (bf16_round(x) >> 16) as u16
}

/// `x`'s bits rounded so that the upper 16 are its bfloat16 (nearest, ties to even).
#[inline(always)]
fn bf16_round(x: f32) -> u32 {
    let b = x.to_bits();
    b + 0x7FFF + ((b >> 16) & 1)
}

/// `out[r][c] = Σ_j p[r][j] · v[j][c]` for 16 rows of bf16 probabilities `p` (row `r` at
/// `p + r · ldp` elements, keys `0..kp`) and [`pack_v_bf16`]'s `vb`, in f32.
///
/// # Safety
/// [`bf16_available`] must hold; `p` must hold 16 rows of `kp` elements `ldp` apart, `kp` a
/// multiple of [`PV_KEYS`], and `vb` `64 · kp` elements.
#[allow(unused_variables)]
pub(super) unsafe fn pv_block(
    _tiles: &Tiles,
    p: &[u16],
    ldp: usize,
    vb: &[u16],
    kp: usize,
    out: &mut [[f32; PV_DH]; TILE_ROWS],
) {
    debug_assert!(kp.is_multiple_of(PV_KEYS) && vb.len() >= PV_DH * kp);
    debug_assert!(p.len() >= (TILE_ROWS - 1) * ldp + kp);
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::asm;
        let pa = p.as_ptr();
        // Column block cb's tile for step s: 16 pair-rows of 16 × 2 bf16 (1 KB), 64 bytes apart.
        let block = kp / 2 * 16 * 2;
        let vp = vb.as_ptr();
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        );
        for s in 0..kp / PV_KEYS {
            let b = vp.add(s * 16 * 32);
            asm!(
                "tileloadd tmm4, [{a} + {lda}*1]",
                "tileloadd tmm5, [{b0} + {s64}*1]",
                "tileloadd tmm6, [{b1} + {s64}*1]",
                "tdpbf16ps tmm0, tmm4, tmm5",
                "tileloadd tmm7, [{b2} + {s64}*1]",
                "tdpbf16ps tmm1, tmm4, tmm6",
                "tileloadd tmm5, [{b3} + {s64}*1]",
                "tdpbf16ps tmm2, tmm4, tmm7",
                "tdpbf16ps tmm3, tmm4, tmm5",
                a = in(reg) pa.add(s * PV_KEYS),
                lda = in(reg) ldp * 2,
                b0 = in(reg) b,
                b1 = in(reg) b.add(block),
                b2 = in(reg) b.add(2 * block),
                b3 = in(reg) b.add(3 * block),
                s64 = in(reg) 64usize,
                options(nostack, readonly)
            );
        }
        let o = out.as_mut_ptr() as *mut f32;
        asm!(
            "tilestored [{o0} + {ldo}*1], tmm0",
            "tilestored [{o1} + {ldo}*1], tmm1",
            "tilestored [{o2} + {ldo}*1], tmm2",
            "tilestored [{o3} + {ldo}*1], tmm3",
            o0 = in(reg) o,
            o1 = in(reg) o.add(16),
            o2 = in(reg) o.add(32),
            o3 = in(reg) o.add(48),
            ldo = in(reg) PV_DH * 4,
            options(nostack)
        );
    }
}

/// The tile configuration: palette 1, all eight tiles 16 rows × 64 bytes. tmm0–3 hold sums
/// (rows 0–15 / 16–31 × channels 0–15 / 16–31), tmm4–5 activations (rows 0–15, 16–31),
/// tmm6–7 weights (panels `p`, `p + 1`).
#[cfg(target_arch = "x86_64")]
#[repr(C, align(64))]
struct Config([u8; 64]);

#[cfg(target_arch = "x86_64")]
const CONFIG: Config = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = TILE_K as u8; // bytes per row (u16, little-endian)
        c[48 + t] = TILE_ROWS as u8;
        t += 1;
    }
    Config(c)
};

/// Proof that this thread has loaded [`CONFIG`]; releases the tiles when dropped.
pub(super) struct Tiles(std::marker::PhantomData<*const ()>);

impl Tiles {
    /// Loads the configuration on this thread.
    ///
    /// # Safety
    /// [`available`] must have returned true in this process.
    pub(super) unsafe fn load() -> Self {
        #[cfg(target_arch = "x86_64")]
        std::arch::asm!("ldtilecfg [{0}]", in(reg) CONFIG.0.as_ptr(), options(nostack));
        Tiles(std::marker::PhantomData)
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: the configuration was loaded by `load` on this thread (`Tiles` is not Send).
        #[cfg(target_arch = "x86_64")]
        unsafe {
            std::arch::asm!("tilerelease", options(nostack, nomem));
        }
    }
}

/// The sums of 16 or 32 (`two_blocks`) activation rows with panels `p, p + 1`:
/// `out[r][c] = Σ_k a[r][k] · w[c][k]` for channels `c` of the panel pair.
///
/// # Safety
/// `a` must hold 16 (32 with `two_blocks`) rows of `w.k4` bytes, `k4` a multiple of
/// [`TILE_K`], and `p + 1` a panel of `w`.
#[allow(unused_variables)]
pub(super) unsafe fn block(
    _tiles: &Tiles,
    a: &[u8],
    w: &PackedI8,
    p: usize,
    two_blocks: bool,
    out: &mut [[i32; NR]; 2 * TILE_ROWS],
) {
    let k4 = w.k4;
    debug_assert!(k4.is_multiple_of(TILE_K));
    debug_assert!(a.len() >= if two_blocks { 2 } else { 1 } * TILE_ROWS * k4);
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::asm;
        let (b0, b1) = (w.group(p, 0), w.group(p + 1, 0));
        let a0 = a.as_ptr();
        let a1 = a0.add(if two_blocks { TILE_ROWS * k4 } else { 0 });
        // One panel's 16 k-groups: 16 rows of 64 bytes, contiguous.
        const B_STEP: usize = 16 * 64;
        let steps = k4 / TILE_K;
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        );
        for s in 0..steps {
            asm!(
                "tileloadd tmm6, [{b0} + {s64}*1]",
                "tileloadd tmm7, [{b1} + {s64}*1]",
                "tileloadd tmm4, [{a0} + {lda}*1]",
                "tdpbusd tmm0, tmm4, tmm6",
                "tdpbusd tmm1, tmm4, tmm7",
                b0 = in(reg) b0.add(s * B_STEP),
                b1 = in(reg) b1.add(s * B_STEP),
                a0 = in(reg) a0.add(s * TILE_K),
                lda = in(reg) k4,
                s64 = in(reg) 64usize,
                options(nostack, readonly)
            );
            if two_blocks {
                asm!(
                    "tileloadd tmm5, [{a1} + {lda}*1]",
                    "tdpbusd tmm2, tmm5, tmm6",
                    "tdpbusd tmm3, tmm5, tmm7",
                    a1 = in(reg) a1.add(s * TILE_K),
                    lda = in(reg) k4,
                    options(nostack, readonly)
                );
            }
        }
        let o = out.as_mut_ptr() as *mut i32;
        let ldo = NR * 4;
        asm!(
            "tilestored [{o0} + {ldo}*1], tmm0",
            "tilestored [{o1} + {ldo}*1], tmm1",
            o0 = in(reg) o,
            o1 = in(reg) o.add(16),
            ldo = in(reg) ldo,
            options(nostack)
        );
        if two_blocks {
            asm!(
                "tilestored [{o0} + {ldo}*1], tmm2",
                "tilestored [{o1} + {ldo}*1], tmm3",
                o0 = in(reg) o.add(TILE_ROWS * NR),
                o1 = in(reg) o.add(TILE_ROWS * NR + 16),
                ldo = in(reg) ldo,
                options(nostack)
            );
        }
    }
}
