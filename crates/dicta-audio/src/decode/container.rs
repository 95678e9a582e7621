//! Container decoding through symphonia (WAV, FLAC, MP3, OGG/Vorbis, MP4/AAC/ALAC, Matroska),
//! plus Opus (in Ogg, Matroska/WebM and MP4) through libopus, packet by packet into a [`Sink`]
//! that receives per-channel planes.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use dicta_core::{Error, ErrorKind, Result};
use symphonia::core::audio::{AudioBuffer, AudioBufferRef};
use symphonia::core::codecs::{
    self, CodecRegistry, CodecType, DecoderOptions, CODEC_TYPE_NULL, CODEC_TYPE_OPUS,
};
use symphonia::core::conv::IntoSample;
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::{MediaSource, MediaSourceStream};
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;
use symphonia::core::sample::Sample;
use symphonia_adapter_libopus::OpusDecoder;

/// The supported formats, as error messages list them.
const SUPPORTED: &str = "WAV, FLAC, MP3, OGG/Vorbis, OGG/Opus, M4A/MP4 with AAC or ALAC, Matroska/WebM with Opus, Vorbis, FLAC or AAC, raw PCM";

/// Opus always decodes at 48 kHz, whatever rate the container or the `OpusHead` names (that
/// one is the encoder's input rate, for information only).
const OPUS_RATE: u32 = 48_000;

/// symphonia's decoders plus libopus for Opus (symphonia 0.5 has no Opus decoder of its own).
fn codecs() -> &'static CodecRegistry {
    static CODECS: OnceLock<CodecRegistry> = OnceLock::new();
    CODECS.get_or_init(|| {
        let mut registry = CodecRegistry::new();
        symphonia::default::register_enabled_codecs(&mut registry);
        registry.register_all::<OpusDecoder>();
        registry
    })
}

/// What is known of a stream once its first packet is decoded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct StreamInfo {
    pub sample_rate: u32,
    pub channels: usize,
    /// 8- or 16-bit integer PCM (FFmpeg down-mixes those with integer arithmetic).
    pub int16: bool,
    /// Frames the header declares, if it does (exact for PCM and FLAC, an estimate for MP3).
    pub declared_frames: Option<u64>,
}

/// Where decoded audio goes, packet by packet, so that a caller can convert it as it comes
/// (and refuse it early) instead of holding the whole recording at its native rate.
pub(super) trait Sink {
    /// Called once, before the first [`Sink::planes`]; an error stops decoding.
    fn start(&mut self, info: &StreamInfo) -> Result<()>;
    /// One decoded packet: one plane per channel, all of the same length, finite samples.
    fn planes(&mut self, planes: &[Vec<f32>]) -> Result<()>;
}

/// Decodes `source` into `sink`.
///
/// Damage after some audio has been decoded does not fail the input: as FFmpeg-based tools do,
/// what decodes is kept, and the returned note (`Some`) says what was wrong and how much audio
/// there is (a file cut short, a header that promises more than the file holds, packets that
/// cannot be decoded, a checksum mismatch). A file with no decodable audio at all is an error.
///
/// symphonia is not hardened against every malformed stream; a panic inside it is caught here
/// and reported as `CorruptInput` so that one bad upload cannot take a worker down.
pub(super) fn decode(
    source: Box<dyn MediaSource>,
    name: &str,
    sink: &mut dyn Sink,
) -> Result<Option<String>> {
    match catch_unwind(AssertUnwindSafe(|| decode_unguarded(source, name, sink))) {
        Ok(result) => result,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            tracing::warn!(input = name, panic = %what, "decoder panicked on malformed input");
            Err(corrupt(
                name,
                format!("the decoder failed on malformed data ({what})"),
            ))
        }
    }
}

fn decode_unguarded(
    mut source: Box<dyn MediaSource>,
    name: &str,
    sink: &mut dyn Sink,
) -> Result<Option<String>> {
    let magic = sniff(&mut *source)
        .map_err(|e| Error::new(ErrorKind::Io, format!("{name}: cannot read: {e}")))?;
    let known_magic = magic.known;
    let mut source = super::wav_fix::repair(source)
        .map_err(|e| Error::new(ErrorKind::Io, format!("{name}: cannot read: {e}")))?;
    // MP4 encoder priming, which symphonia's MP4 reader leaves in.
    let mut skip = super::mp4_trim::priming(&mut *source).map_err(|cause| corrupt(name, cause))?;
    let mut hint = Hint::new();
    if let Some(ext) = std::path::Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
    {
        hint.with_extension(ext);
    }
    let mss = MediaSourceStream::new(source, Default::default());
    // Gapless trims MP3/Vorbis encoder delay and padding, as ffmpeg does, so timestamps line up
    // with other decoders.
    let format_opts = FormatOptions {
        enable_gapless: true,
        ..Default::default()
    };
    let probed = symphonia::default::get_probe()
        .format(&hint, mss, &format_opts, &MetadataOptions::default())
        .map_err(|e| match e {
            SymError::Unsupported(_) => Error::new(
                ErrorKind::UnsupportedFormat,
                format!("{name}: not a recognised audio format (supported: {SUPPORTED})"),
            ),
            // The prober scans past junk for a marker; if the file does not start like a
            // supported format, a failure after a chance match means "not audio we know".
            _ if !known_magic => Error::new(
                ErrorKind::UnsupportedFormat,
                format!(
                    "{name}: not a recognised audio format (no WAV/FLAC/MP3/OGG/MP4/Matroska header at the start; raw PCM needs its encoding and rate given)"
                ),
            ),
            SymError::IoError(ref io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
                corrupt(name, "truncated: the file ends inside its header")
            }
            other => corrupt(name, format!("unreadable header: {other}")),
        })?;
    let mut format = probed.format;

    let track = format
        .tracks()
        .iter()
        .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::UnsupportedFormat,
                format!("{name}: the container holds no audio track"),
            )
        })?;
    let track_id = track.id;
    let mut params = track.codec_params.clone();
    // Ogg/Opus states its exact length: the last granule position, less the pre-skip (RFC 7845
    // section 4). symphonia's Ogg reader can miss that end trim (a stream held in one page, as
    // libsndfile writes short files), so the output is cut there, as FFmpeg cuts it.
    let mut keep = None;
    if params.codec == CODEC_TYPE_OPUS {
        skip = opus_pre_skip(&mut params, magic.mp4, skip);
        if magic.ogg {
            keep = params.n_frames.map(|n| n.saturating_sub(skip.unwrap_or(0)));
        }
    }
    let sample_rate = match params.sample_rate {
        Some(r) if (1..=crate::MAX_SAMPLE_RATE).contains(&r) => r,
        Some(r) if r > 0 => {
            return Err(corrupt(
                name,
                format!(
                    "the header gives a sample rate of {r} Hz, past the {} Hz any recording uses",
                    crate::MAX_SAMPLE_RATE
                ),
            ))
        }
        _ => return Err(corrupt(name, "the header gives no valid sample rate")),
    };

    let mut decoder = codecs()
        .make(&params, &DecoderOptions { verify: true })
        .map_err(|e| match e {
            SymError::Unsupported(_) if params.codec == CODEC_TYPE_OPUS => Error::new(
                ErrorKind::UnsupportedFormat,
                format!(
                    "{name}: Opus with {} channels is not supported (mono and stereo are)",
                    params
                        .channel_layout
                        .map(|l| l.into_channels().count())
                        .or(params.channels.map(|c| c.count()))
                        .map_or_else(|| "unknown".to_string(), |n| n.to_string())
                ),
            ),
            SymError::Unsupported(_) => Error::new(
                ErrorKind::UnsupportedFormat,
                format!(
                    "{name}: the {} codec is not supported",
                    codec_name(params.codec)
                ),
            ),
            other => corrupt(name, format!("cannot initialise the decoder: {other}")),
        })?;

    let declared = params.n_frames;
    // One packet's planes, reused.
    let mut planes: Vec<Vec<f32>> = Vec::new();
    let mut have = 0u64;
    // Frames the decoder produced, before any MP4 trim.
    let mut decoded_frames = 0u64;
    // Why decoding stopped before the end of the stream, if it did.
    let mut stopped: Option<String> = None;
    // Packets that could not be decoded and were skipped (as FFmpeg skips them).
    let mut skipped = Skipped::default();

    loop {
        let packet = match format.next_packet() {
            Ok(p) => p,
            Err(SymError::IoError(ref e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(SymError::ResetRequired) => {
                return Err(Error::new(
                    ErrorKind::UnsupportedFormat,
                    format!("{name}: chained streams with changing parameters are not supported"),
                ))
            }
            // Damage in the container after some audio: keep what came before it.
            Err(e) if have > 0 => {
                stopped = Some(format!("the container is malformed after that point ({e})"));
                break;
            }
            Err(e) => return Err(corrupt(name, format!("malformed container: {e}"))),
        };
        if packet.track_id() != track_id {
            continue;
        }
        let decoded = match decoder.decode(&packet) {
            Ok(d) => d,
            // symphonia documents a decode error as recoverable: the packet is lost, decoding
            // goes on with the next one.
            Err(SymError::DecodeError(e)) => {
                skipped.add(packet.ts() as f64 / sample_rate as f64, e);
                if skipped.count > MAX_SKIPPED_PACKETS && have == 0 {
                    break;
                }
                continue;
            }
            Err(e) if have > 0 => {
                stopped = Some(format!(
                    "the packet at {:.3} s cannot be decoded ({e})",
                    packet.ts() as f64 / sample_rate as f64
                ));
                break;
            }
            Err(e) => {
                return Err(corrupt(
                    name,
                    format!(
                        "cannot decode the packet at {:.3} s: {e}",
                        packet.ts() as f64 / sample_rate as f64
                    ),
                ))
            }
        };
        if decoded.spec().rate != sample_rate {
            return Err(Error::new(
                ErrorKind::UnsupportedFormat,
                format!(
                    "{name}: the sample rate changes mid-stream ({sample_rate} Hz to {} Hz)",
                    decoded.spec().rate
                ),
            ));
        }
        if planes.is_empty() {
            let channels = decoded.spec().channels.count().max(1);
            planes = vec![Vec::new(); channels];
            sink.start(&StreamInfo {
                sample_rate,
                channels,
                int16: matches!(
                    decoded,
                    AudioBufferRef::U8(_)
                        | AudioBufferRef::S8(_)
                        | AudioBufferRef::U16(_)
                        | AudioBufferRef::S16(_)
                ),
                declared_frames: declared.map(|n| n.saturating_sub(skip.unwrap_or(0))),
            })?;
        }
        planes.iter_mut().for_each(Vec::clear);
        append_planes(&decoded, &mut planes, name, sample_rate, have)?;
        if let Some(skip) = skip {
            // Drop the first `skip` decoded frames of the stream (MP4 priming, Opus pre-skip).
            let (start, end) = (decoded_frames, decoded_frames + planes[0].len() as u64);
            decoded_frames = end;
            let lo = (skip.clamp(start, end) - start) as usize;
            for p in planes.iter_mut() {
                p.drain(..lo.min(p.len()));
            }
        }
        if let Some(keep) = keep {
            let room = usize::try_from(keep.saturating_sub(have)).unwrap_or(usize::MAX);
            planes.iter_mut().for_each(|p| p.truncate(room));
        }
        let frames = planes[0].len();
        if frames > 0 {
            have += frames as u64;
            sink.planes(&planes)?;
        }
    }

    let seconds = |frames: u64| frames as f64 / sample_rate as f64;
    let mut notes: Vec<String> = Vec::new();
    if let Some(n) = declared.map(|n| n.saturating_sub(skip.unwrap_or(0))) {
        // PCM and FLAC headers state the exact length. MP3 (Xing/LAME or a bitrate estimate)
        // and Vorbis (last granule) lengths matched the decoded length exactly on every real
        // file tried, but an estimate can be off for VBR files without a Xing header, so lossy
        // codecs get 1 % (at least two MP3 frames) of slack before we call the file truncated.
        let slack = if has_exact_length(params.codec) {
            0
        } else {
            (n / 100).max(2304)
        };
        if have + slack < n {
            notes.push(format!(
                "truncated: the header declares {n} frames ({:.3} s) but the file holds only {have} ({:.3} s)",
                seconds(n),
                seconds(have)
            ));
        }
    }
    if let Some(why) = stopped {
        notes.push(format!(
            "damaged: decoding stopped at {:.3} s because {why}",
            seconds(have)
        ));
    }
    if let Some(note) = skipped.note() {
        notes.push(note);
    }
    if have == 0 {
        // Nothing to keep: a file that is damaged from the start is corrupt, not empty.
        if let Some(first) = notes.first() {
            return Err(corrupt(name, first));
        }
        return Err(Error::new(
            ErrorKind::EmptyInput,
            format!("{name}: the file contains no audio samples"),
        ));
    }
    // A partial decode cannot match the checksum of the whole file; only a complete one is
    // checked.
    if notes.is_empty() && decoder.finalize().verify_ok == Some(false) {
        notes.push("the decoded audio does not match the file's checksum".to_string());
    }
    if notes.is_empty() {
        return Ok(None);
    }
    let note = format!(
        "{}; the {:.3} s of audio that could be read are used",
        notes.join("; "),
        seconds(have)
    );
    tracing::warn!(input = name, "{note}");
    Ok(Some(note))
}

/// Most undecodable packets skipped before any audio decodes; past that the file is given up.
const MAX_SKIPPED_PACKETS: usize = 64;

/// Undecodable packets skipped so far.
#[derive(Default)]
struct Skipped {
    count: usize,
    first: Option<(f64, String)>,
}

impl Skipped {
    fn add(&mut self, at: f64, why: &str) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some((at, why.to_string()));
        }
    }

    fn note(&self) -> Option<String> {
        let (at, why) = self.first.as_ref()?;
        Some(format!(
            "{} packet(s) could not be decoded and were skipped (the first at {at:.3} s: {why})",
            self.count
        ))
    }
}

/// Frames to drop at the start of an Opus stream, as FFmpeg drops them: the MP4 edit list's
/// priming when there is one (`mp4_priming`), else the pre-skip of the `OpusHead` (usually
/// 312 samples at 48 kHz; little-endian in Ogg and Matroska, big-endian in MP4's `dOps`,
/// which symphonia passes on behind an `OpusHead` magic). Also sets the decode rate to 48 kHz.
///
/// The pre-skip is zeroed in the copy of the header given to the decoder: libopus's adapter
/// would drop it from the first packet only (losing the rest when that packet is shorter),
/// while [`decode_unguarded`] drops it across packets, as it does MP4 priming.
fn opus_pre_skip(
    params: &mut codecs::CodecParameters,
    mp4: bool,
    mp4_priming: Option<u64>,
) -> Option<u64> {
    params.sample_rate = Some(OPUS_RATE);
    let mut head = params.extra_data.as_deref().map(<[u8]>::to_vec)?;
    if head.len() < 12 || !head.starts_with(b"OpusHead") {
        return mp4_priming;
    }
    let field = [head[10], head[11]];
    head[10..12].fill(0);
    params.extra_data = Some(head.into_boxed_slice());
    Some(match mp4_priming {
        Some(priming) => priming,
        None if mp4 => u64::from(u16::from_be_bytes(field)),
        None => u64::from(u16::from_le_bytes(field)),
    })
}

/// What the first bytes of the input say.
struct Magic {
    /// The stream starts with the signature of a container we decode (RIFF/WAVE, fLaC, OggS,
    /// an MP4 `ftyp` box, a Matroska/WebM EBML header, an ID3 tag or an MPEG audio frame sync).
    known: bool,
    /// It starts with an MP4 `ftyp` box.
    mp4: bool,
    /// It starts with an Ogg page.
    ogg: bool,
}

/// Reads the first bytes of the input ([`Magic`]). Rewinds the source afterwards.
fn sniff(source: &mut dyn MediaSource) -> std::io::Result<Magic> {
    use std::io::SeekFrom;
    let mut head = [0u8; 12];
    let mut got = 0;
    while got < head.len() {
        match source.read(&mut head[got..])? {
            0 => break,
            n => got += n,
        }
    }
    source.seek(SeekFrom::Start(0))?;
    let h = &head[..got];
    let mp4 = h.len() >= 8 && &h[4..8] == b"ftyp";
    let ogg = h.starts_with(b"OggS");
    let known = h.starts_with(b"fLaC")
        || h.starts_with(b"OggS")
        || (h.len() >= 8 && &h[4..8] == b"ftyp")
        || h.starts_with(&[0x1A, 0x45, 0xDF, 0xA3])
        || h.starts_with(b"ID3")
        || ((h.starts_with(b"RIFF") || h.starts_with(b"RIFX") || h.starts_with(b"RF64"))
            && (h.len() < 12 || &h[8..12] == b"WAVE"))
        || (h.len() >= 2 && h[0] == 0xFF && h[1] & 0xE0 == 0xE0);
    Ok(Magic { known, mp4, ogg })
}

fn corrupt(name: &str, cause: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::CorruptInput, format!("{name}: {cause}"))
}

/// Codecs whose containers state the exact number of frames (WAV/PCM data size, FLAC
/// STREAMINFO), so decoding fewer means the file was cut short or its header lies.
fn has_exact_length(codec: CodecType) -> bool {
    use codecs::*;
    codec == CODEC_TYPE_FLAC
        || [
            CODEC_TYPE_PCM_S8,
            CODEC_TYPE_PCM_U8,
            CODEC_TYPE_PCM_S16LE,
            CODEC_TYPE_PCM_S24LE,
            CODEC_TYPE_PCM_S32LE,
            CODEC_TYPE_PCM_F32LE,
            CODEC_TYPE_PCM_F64LE,
            CODEC_TYPE_PCM_S16BE,
            CODEC_TYPE_PCM_S24BE,
            CODEC_TYPE_PCM_S32BE,
            CODEC_TYPE_PCM_F32BE,
            CODEC_TYPE_PCM_F64BE,
            CODEC_TYPE_PCM_ALAW,
            CODEC_TYPE_PCM_MULAW,
        ]
        .contains(&codec)
}

fn codec_name(codec: CodecType) -> String {
    use codecs::*;
    let known = [
        (CODEC_TYPE_OPUS, "Opus"),
        (CODEC_TYPE_AAC, "AAC"),
        (CODEC_TYPE_ALAC, "ALAC"),
        (CODEC_TYPE_WAVPACK, "WavPack"),
        (CODEC_TYPE_SPEEX, "Speex"),
        (CODEC_TYPE_MP1, "MP1"),
        (CODEC_TYPE_MP2, "MP2"),
        (CODEC_TYPE_ATRAC3, "ATRAC3"),
        (CODEC_TYPE_WMA, "WMA"),
    ];
    known
        .iter()
        .find(|(c, _)| *c == codec)
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|| format!("{codec:?}"))
}

/// Appends each channel of `buf` to its plane in `out`, rejecting non-finite float samples.
fn append_planes(
    buf: &AudioBufferRef<'_>,
    out: &mut [Vec<f32>],
    name: &str,
    rate: u32,
    offset: u64,
) -> Result<()> {
    if buf.spec().channels.count().max(1) != out.len() {
        return Err(Error::new(
            ErrorKind::UnsupportedFormat,
            format!("{name}: the channel count changes mid-stream"),
        ));
    }
    let start = out[0].len();
    match buf {
        AudioBufferRef::U8(b) => copy(b, out),
        AudioBufferRef::U16(b) => copy(b, out),
        AudioBufferRef::U24(b) => copy(b, out),
        AudioBufferRef::U32(b) => copy(b, out),
        AudioBufferRef::S8(b) => copy(b, out),
        AudioBufferRef::S16(b) => copy(b, out),
        AudioBufferRef::S24(b) => copy(b, out),
        AudioBufferRef::S32(b) => copy(b, out),
        AudioBufferRef::F32(b) => copy(b, out),
        AudioBufferRef::F64(b) => copy(b, out),
    }
    // Integer samples are always finite; floats (and f64 values beyond f32's range) may not be.
    if matches!(buf, AudioBufferRef::F32(_) | AudioBufferRef::F64(_)) {
        for plane in out.iter() {
            if let Some(i) = plane[start..].iter().position(|s| !s.is_finite()) {
                let at = offset + (start + i) as u64;
                return Err(corrupt(
                    name,
                    format!(
                        "sample {at} (at {:.3} s) is not finite (NaN or infinity); such input is rejected",
                        at as f64 / rate as f64
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Appends every plane of one decoded buffer to the matching output plane.
fn copy<S: Sample + IntoSample<f32>>(buf: &AudioBuffer<S>, out: &mut [Vec<f32>]) {
    for (plane, o) in buf.planes().planes().iter().zip(out.iter_mut()) {
        o.extend(plane.iter().map(|&s| -> f32 { s.into_sample() }));
    }
}
