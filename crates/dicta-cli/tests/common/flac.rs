//! A minimal FLAC writer for digital silence: every subframe is CONSTANT, so hours of
//! multichannel audio take about a megabyte — the decompression bombs a server must survive.
#![allow(dead_code)] // each test binary uses its own subset

/// Samples per FLAC frame (block size code 12).
const BLOCK: u64 = 4096;

/// A FLAC file of `seconds` of 16-bit silence, `channels` (1–8) at `rate` Hz. With
/// `declare_length` the STREAMINFO states the length (as encoders write it); without, the
/// length is "unknown" (0), as a streamed or hostile file may say, so only decoding tells.
/// The length is rounded up to whole 4096-sample frames.
pub fn silent_flac(seconds: f64, channels: u8, rate: u32, declare_length: bool) -> Vec<u8> {
    assert!((1..=8).contains(&channels) && rate > 0 && rate < 1 << 20);
    let frames = ((seconds * f64::from(rate)) as u64).div_ceil(BLOCK);
    let total = frames * BLOCK;
    let mut out = b"fLaC".to_vec();
    // STREAMINFO, the last metadata block (flag 0x80), 34 bytes.
    out.push(0x80);
    out.extend_from_slice(&[0, 0, 34]);
    out.extend_from_slice(&(BLOCK as u16).to_be_bytes()); // min block size
    out.extend_from_slice(&(BLOCK as u16).to_be_bytes()); // max block size
    out.extend_from_slice(&[0; 6]); // min/max frame size unknown
                                    // 20 bits rate, 3 bits channels-1, 5 bits bps-1, 36 bits total samples.
    let declared = if declare_length { total } else { 0 };
    let packed: u64 = (u64::from(rate) << 44)
        | (u64::from(channels - 1) << 41)
        | (15u64 << 36)
        | (declared & ((1 << 36) - 1));
    out.extend_from_slice(&packed.to_be_bytes());
    out.extend_from_slice(&[0; 16]); // MD5 unknown
    for n in 0..frames {
        let start = out.len();
        out.extend_from_slice(&[0xFF, 0xF8]); // sync, fixed block size
        out.push(0xC0); // block size 4096, sample rate from STREAMINFO
        out.push(((channels - 1) << 4) | 0x08); // independent channels, 16 bits
        utf8_number(n, &mut out);
        let crc = crc8(&out[start..]);
        out.push(crc);
        for _ in 0..channels {
            out.extend_from_slice(&[0x00, 0x00, 0x00]); // CONSTANT subframe, value 0
        }
        let crc = crc16(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }
    out
}

/// FLAC's "UTF-8" coding of the frame number.
fn utf8_number(n: u64, out: &mut Vec<u8>) {
    if n < 0x80 {
        out.push(n as u8);
        return;
    }
    let mut bytes = 2;
    while n >= 1 << (5 * bytes + 1) {
        bytes += 1;
    }
    let lead = (0xFFu16 << (8 - bytes)) as u8;
    out.push(lead | (n >> (6 * (bytes - 1))) as u8);
    for i in (0..bytes - 1).rev() {
        out.push(0x80 | ((n >> (6 * i)) & 0x3F) as u8);
    }
}

fn crc8(data: &[u8]) -> u8 {
    let mut crc = 0u8;
    for &b in data {
        crc ^= b;
        for _ in 0..8 {
            crc = if crc & 0x80 != 0 {
                (crc << 1) ^ 0x07
            } else {
                crc << 1
            };
        }
    }
    crc
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc = 0u16;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x8005
            } else {
                crc << 1
            };
        }
    }
    crc
}
