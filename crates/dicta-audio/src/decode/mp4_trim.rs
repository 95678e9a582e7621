//! The edit list of an MP4/M4A audio track: how many decoded samples at the start are encoder
//! priming (AAC encoders prepend 1024–2112 samples). FFmpeg (and so faster-whisper) drops them;
//! symphonia's MP4 reader does not, so without this every AAC file would start with tens of
//! milliseconds of priming and every timestamp would be late by as much. Like FFmpeg's decode,
//! the end (the encoder's padding up to a whole frame) is kept.
//!
//! Reading the index here also lets damaged sample tables be refused before symphonia sizes
//! buffers from them (see [`priming`]).

use std::io::SeekFrom;

use symphonia::core::io::MediaSource;

/// Largest `moov` box read (the index of a multi-hour file is a few MB).
const MAX_MOOV: u64 = 32 << 20;

/// Decoded frames to drop at the start of the first audio track (its edit's media time, in
/// the track's timescale, which for audio is its sample rate), or `None` when `source` is not
/// an MP4 file, has no edit list, or anything looks off (then nothing is dropped). Rewinds the
/// source.
///
/// Errors (the cause, for a `CorruptInput` message) when the `moov` box is larger than
/// [`MAX_MOOV`] or its sample tables announce more entries than they hold: symphonia's MP4
/// reader reserves that many entries before reading them, so a 5 KB upload announcing 2^32
/// `stsc` entries made it allocate 34 GB and abort the whole process (found by fuzzing).
pub(super) fn priming(source: &mut dyn MediaSource) -> Result<Option<u64>, String> {
    let checked = check_all(source);
    source
        .seek(SeekFrom::Start(0))
        .map_err(|e| format!("cannot rewind: {e}"))?;
    checked
}

/// Symphonia's probe takes the first format marker in the first MiB, so its MP4 reader may
/// start at any `ftyp` there (after junk), and it reads every top-level `moov`, not just the
/// first: walk the top level from the start and from each such `ftyp`, and check every `moov`
/// met. The priming comes from the first `moov` found.
fn check_all(source: &mut dyn MediaSource) -> Result<Option<u64>, String> {
    let Some(total) = source.byte_len() else {
        return Ok(None);
    };
    let mut starts = vec![0u64];
    let mut head = vec![0u8; PROBE_WINDOW.min(total) as usize];
    if source.seek(SeekFrom::Start(0)).is_ok() && source.read_exact(&mut head).is_ok() {
        starts.extend(
            head.windows(4)
                .enumerate()
                .filter(|(at, w)| *at >= 4 && *w == b"ftyp")
                .map(|(at, _)| at as u64 - 4),
        );
    }
    starts.dedup();
    let mut trim = None;
    for start in starts {
        walk(source, start, total, &mut |moov| {
            check_tables(moov, 0)?;
            if trim.is_none() {
                trim = Some(from_moov(moov));
            }
            Ok(())
        })?;
    }
    Ok(trim.flatten())
}

/// Bytes symphonia's probe scans for a format marker (its `PROBE_SEARCH_LIMIT`, plus its
/// 16-byte window).
const PROBE_WINDOW: u64 = (1 << 20) + 16;

/// Walks the top-level boxes from `at`, calling `each` with the body of every `moov` (cut to
/// what the file holds); stops quietly where the boxes stop making sense (not MP4 there).
fn walk(
    source: &mut dyn MediaSource,
    mut at: u64,
    total: u64,
    each: &mut dyn FnMut(&[u8]) -> Result<(), String>,
) -> Result<(), String> {
    let mut head = [0u8; 16];
    // Top level: skip everything else (mdat can be gigabytes).
    while at + 8 <= total {
        if source.seek(SeekFrom::Start(at)).is_err() || source.read_exact(&mut head[..8]).is_err() {
            return Ok(());
        }
        let mut size = u64::from(be32(&head[0..4]));
        let kind: [u8; 4] = [head[4], head[5], head[6], head[7]];
        let mut header = 8;
        if size == 1 {
            if source.read_exact(&mut head[8..16]).is_err() {
                return Ok(());
            }
            size = be64(&head[8..16]);
            header = 16;
        } else if size == 0 {
            size = total - at;
        }
        if size < header {
            return Ok(());
        }
        if &kind == b"moov" {
            if size > MAX_MOOV {
                return Err(format!(
                    "the MP4 index (moov box) is {size} bytes, past the {MAX_MOOV} any recording needs"
                ));
            }
            // A file cut inside its index is checked too (symphonia reads on to the end of
            // the file): read what there is.
            let there = (size - header).min(total.saturating_sub(at + header));
            let mut moov = vec![0u8; there as usize];
            if source.read_exact(&mut moov).is_err() {
                return Ok(());
            }
            each(&moov)?;
        }
        at = at.saturating_add(size);
    }
    Ok(())
}

/// Checks, through `trak/mdia/minf/stbl`, that no box overruns its parent and that every
/// sample table symphonia sizes from its count (`stco`, `co64`, `stsc`, `stsz`, `stts`) holds
/// the entries it announces.
fn check_tables(mut b: &[u8], depth: u8) -> Result<(), String> {
    while b.len() >= 8 {
        let (kind, body, size) = first_box(b)?;
        let kind = String::from_utf8_lossy(kind).into_owned();
        match &b[4..8] {
            b"trak" | b"mdia" | b"minf" | b"stbl" if depth < 8 => check_tables(body, depth + 1)?,
            b"stco" => entries(&kind, body, 4, 4)?,
            b"co64" | b"stts" => entries(&kind, body, 4, 8)?,
            b"stsc" => entries(&kind, body, 4, 12)?,
            // version/flags, sample size, count; a table only when the size is 0 (varies).
            b"stsz" if body.len() >= 12 && be32(&body[4..8]) == 0 => {
                entries(&kind, body, 8, 4)?;
            }
            _ => {}
        }
        b = &b[size..];
    }
    Ok(())
}

/// The first box of `b` (at least 8 bytes): its type, its body and the bytes it takes, or
/// why it is not a box that fits in `b`.
fn first_box(b: &[u8]) -> Result<(&[u8], &[u8], usize), String> {
    let kind = &b[4..8];
    let (size, header) = match be32(&b[0..4]) {
        1 if b.len() >= 16 => (be64(&b[8..16]), 16),
        1 => {
            let kind = String::from_utf8_lossy(kind);
            return Err(format!("a truncated {kind:?} box header"));
        }
        0 => (b.len() as u64, 8),
        s => (u64::from(s), 8),
    };
    if size < header || size > b.len() as u64 {
        let kind = String::from_utf8_lossy(kind);
        return Err(format!(
            "a {kind:?} box of {size} bytes overruns the {} bytes left in its parent",
            b.len()
        ));
    }
    Ok((kind, &b[header as usize..size as usize], size as usize))
}

/// The table of `body` (its count at `count_at`, entries after it) fits in `body`.
fn entries(kind: &str, body: &[u8], count_at: usize, entry: u64) -> Result<(), String> {
    let Some(count) = body.get(count_at..count_at + 4).map(be32) else {
        return Err(format!("a truncated {kind:?} box"));
    };
    let room = (body.len() - count_at - 4) as u64;
    if u64::from(count) * entry > room {
        return Err(format!(
            "the {kind:?} table announces {count} entries, more than its {room} bytes hold"
        ));
    }
    Ok(())
}

/// Children of a box body: (type, body).
fn boxes(mut b: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 8 {
            return None;
        }
        // Lenient where `check_tables` is strict: a box that does not fit ends the list.
        let (kind, body, size) = first_box(b).ok()?;
        b = &b[size..];
        Some((kind, body))
    })
}

fn child<'a>(body: &'a [u8], kind: &[u8]) -> Option<&'a [u8]> {
    boxes(body).find(|(k, _)| *k == kind).map(|(_, b)| b)
}

fn from_moov(moov: &[u8]) -> Option<u64> {
    for (kind, trak) in boxes(moov) {
        if kind != b"trak" {
            continue;
        }
        let mdia = child(trak, b"mdia")?;
        let hdlr = child(mdia, b"hdlr")?;
        if hdlr.len() < 12 || &hdlr[8..12] != b"soun" {
            continue;
        }
        let elst = child(trak, b"edts").and_then(|e| child(e, b"elst"))?;
        let (version, count) = (elst.first()?, be32(elst.get(4..8)?));
        // One edit (the usual priming trim); an empty edit first (a delayed start) or several
        // edits are left to the decoder as they are.
        if count != 1 {
            return None;
        }
        let media_time = match version {
            0 => i64::from(be32(elst.get(12..16)?) as i32),
            1 => be64(elst.get(16..24)?) as i64,
            _ => return None,
        };
        // media_time is in the media's timescale, the audio sample rate (mdhd).
        if media_time <= 0 {
            return None;
        }
        return Some(media_time as u64);
    }
    None
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/audio")
            .join(name)
    }

    #[test]
    fn ffmpeg_m4a_has_its_priming_edit() {
        let mut f = std::fs::File::open(fixture("speech.m4a")).unwrap();
        assert_eq!(
            priming(&mut f),
            Ok(Some(1024)),
            "FFmpeg's AAC encoder primes 1024 samples"
        );
    }

    #[test]
    fn other_files_have_none() {
        for name in ["pcm_s16.wav", "speech.mp3", "speech_s16.flac"] {
            let mut f = std::fs::File::open(fixture(name)).unwrap();
            assert_eq!(priming(&mut f), Ok(None), "{name}");
        }
    }
}
