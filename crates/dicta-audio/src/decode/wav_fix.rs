//! WAV files whose size fields were never filled in: written to a pipe (`ffmpeg … -f wav -`,
//! `sox … -t wav -`, `arecord`) they carry `0xFFFFFFFF`, and a recording that was never
//! finalised carries 0. FFmpeg (and so faster-whisper) reads such a file to its end; symphonia
//! trusts the fields. [`repair`] rewrites the RIFF and `data` sizes in the first bytes of the
//! stream to what the file really holds, so everything after reads the audio to the end.

use std::io::{Read, Seek, SeekFrom};

use symphonia::core::io::MediaSource;

/// How many leading bytes are searched for the `data` chunk header.
const HEAD: usize = 64 << 10;

/// `source` with its WAV size fields repaired if it is a RIFF/WAVE file whose RIFF or `data`
/// size is 0 or a placeholder (≥ `0x7FFF0000`, beyond the file); otherwise `source` unchanged.
/// A source whose length is unknown is left alone.
pub(super) fn repair(mut source: Box<dyn MediaSource>) -> std::io::Result<Box<dyn MediaSource>> {
    let Some(total) = source.byte_len() else {
        return Ok(source);
    };
    let mut head = Vec::with_capacity(HEAD.min(total as usize));
    (&mut source).take(HEAD as u64).read_to_end(&mut head)?;
    source.seek(SeekFrom::Start(0))?;
    if !patch(&mut head, total) {
        return Ok(source);
    }
    Ok(Box::new(Patched {
        head,
        inner: source,
        pos: 0,
        total,
    }))
}

/// Fixes the size fields in `head` (the first bytes of a `total`-byte file); false when it is
/// not a WAV file or nothing needed fixing.
fn patch(head: &mut [u8], total: u64) -> bool {
    if head.len() < 12 || &head[0..4] != b"RIFF" || &head[8..12] != b"WAVE" {
        return false;
    }
    let field = |h: &[u8], at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    // 0 (never finalised) or a placeholder far beyond the file (0xFFFFFFFF from FFmpeg and
    // most pipe writers, 0x7FFFFFFF-ish from others). A size a little beyond the file is a
    // truncated file, which stays an error.
    let unset = |v: u32, actual: u64| v == 0 || (v >= 0x7FFF_0000 && u64::from(v) > actual);
    let mut changed = false;
    let riff_actual = total - 8;
    if unset(field(head, 4), riff_actual) && riff_actual <= u64::from(u32::MAX) {
        head[4..8].copy_from_slice(&(riff_actual as u32).to_le_bytes());
        changed = true;
    }
    // Walk the chunks: id, size, body (padded to even). `data` is the last one we need.
    let mut at = 12usize;
    let mut block_align = 1u64;
    while at + 8 <= head.len() {
        let id = &head[at..at + 4];
        let size = field(head, at + 4);
        if id == b"fmt " && at + 8 + 14 <= head.len() {
            block_align = u64::from(u16::from_le_bytes([head[at + 20], head[at + 21]])).max(1);
        }
        if id == b"data" {
            let body = total.saturating_sub(at as u64 + 8);
            let actual = body - body % block_align;
            if unset(size, body) && actual <= u64::from(u32::MAX) {
                head[at + 4..at + 8].copy_from_slice(&(actual as u32).to_le_bytes());
                changed = true;
            }
            return changed;
        }
        at += 8 + size as usize + (size as usize & 1);
    }
    changed
}

/// A source whose first bytes are replaced by `head`.
struct Patched {
    head: Vec<u8>,
    inner: Box<dyn MediaSource>,
    pos: u64,
    total: u64,
}

impl Read for Patched {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = if self.pos < self.head.len() as u64 {
            let from = &self.head[self.pos as usize..];
            let n = from.len().min(buf.len());
            buf[..n].copy_from_slice(&from[..n]);
            self.inner.seek(SeekFrom::Start(self.pos + n as u64))?;
            n
        } else {
            self.inner.read(buf)?
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Patched {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = self.inner.seek(to)?;
        Ok(self.pos)
    }
}

impl MediaSource for Patched {
    fn is_seekable(&self) -> bool {
        self.inner.is_seekable()
    }

    fn byte_len(&self) -> Option<u64> {
        Some(self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wav(frames: usize) -> Vec<u8> {
        let mut out = std::io::Cursor::new(Vec::new());
        let spec = hound::WavSpec {
            channels: 2,
            sample_rate: 16_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::new(&mut out, spec).unwrap();
        for i in 0..frames * 2 {
            w.write_sample(((i * 37) % 2000) as i16 - 1000).unwrap();
        }
        w.finalize().unwrap();
        out.into_inner()
    }

    /// Piped (0xFFFFFFFF) and unfinalised (0) size fields decode like the finished file.
    #[test]
    fn streamed_and_unfinalised_headers_read_to_the_end() {
        let good = wav(8000);
        let want = crate::decode::load_bytes(&good, "good.wav").unwrap();
        let data_at = good.windows(4).position(|w| w == b"data").unwrap();
        for value in [u32::MAX, 0] {
            let mut bad = good.clone();
            bad[4..8].copy_from_slice(&value.to_le_bytes());
            bad[data_at + 4..data_at + 8].copy_from_slice(&value.to_le_bytes());
            let got = crate::decode::load_bytes(&bad, "piped.wav").unwrap();
            assert_eq!(got, want, "size fields {value:#x}");
            // From a file too (the streamed path).
            let path = std::env::temp_dir().join(format!("dicta-wavfix-{value}.wav"));
            std::fs::write(&path, &bad).unwrap();
            assert_eq!(crate::decode::load_path(&path).unwrap(), want);
            let _ = std::fs::remove_file(path);
        }
        // A file cut mid-frame keeps whole frames only.
        let mut cut = good.clone();
        cut.truncate(good.len() - 3);
        cut[data_at + 4..data_at + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        let got = crate::decode::load_bytes(&cut, "cut.wav").unwrap();
        assert_eq!(got[..], want[..want.len() - 1]);
    }

    #[test]
    fn finished_and_foreign_files_are_left_alone() {
        let good = wav(100);
        let mut head = good.clone();
        assert!(!patch(&mut head, good.len() as u64));
        assert_eq!(head, good);
        let mut flac = b"fLaC\0\0\0\0\0\0\0\0".to_vec();
        assert!(!patch(&mut flac, 12));
    }
}
