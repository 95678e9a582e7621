//! Moonshine decoding policy: recordings cut at pauses into pieces, pieces of all recordings
//! sorted by length into batches, each piece encoded at its own length (no padding), the
//! batch decoded together with the shared greedy / beam search of [`crate::whisper::greedy`]
//! and [`crate::whisper::beam`], and each recording's pieces joined into timed segments.

pub mod pieces;

use dicta_core::{Error, Result, Segment, Transcript};
use dicta_models::moonshine::{Moonshine, MoonshineConfig, MoonshineModel, MoonshineState};
use rayon::prelude::*;

use crate::whisper::beam::beam_search;
use crate::whisper::greedy::{greedy_search, Sampler, SearchParams, StepModel};
use crate::whisper::logits::LogitRules;
use crate::whisper::{DecodeOptions, Task};

/// Longest piece a recording is cut into (seconds), for any Moonshine model.
pub const MAX_PIECE_SECONDS: f32 = 20.0;
/// Shortest piece before the last one when cutting at pauses (seconds).
pub const MIN_PIECE_SECONDS: f32 = 8.0;
/// Tiny's width: wider models (base) also end a piece at the first pause after
/// [`WIDE_PAUSE_AFTER_SECONDS`].
const TINY_WIDTH: usize = 288;
/// Shortest piece that ends at a pause, for models wider than tiny (seconds).
pub const WIDE_PAUSE_AFTER_SECONDS: f32 = 1.0;

/// For `config`'s model, the length (seconds) after which a piece ends at the first pause
/// ([`pieces::cut_at_first_pauses`]), or `None` to cut only recordings longer than
/// [`MAX_PIECE_SECONDS`], at their quietest points.
///
/// Base ends its text early on pieces that hold several utterances, dropping the later ones
/// (onnxruntime does the same on the same files: it is the model), more often the longer the
/// piece. Measured on the bench (session 44, `dicta bench engine -w short,mixed,4min --model
/// moonshine-base`, WER short / mixed / 4min): quietest points in 8–20 s 18.5 / 25.8 / 24.3%;
/// 4–10 s 19.5 / 21.4 / 14.5%; the first pause after 2 s 17.2 / 22.2 / 13.8%, after 1 s
/// 17.0 / 21.3 / 12.1%. Tiny is better as it was (first pause after 2 s: +0.9 / +0.9 / +0.2).
pub fn pause_after_seconds(config: &MoonshineConfig) -> Option<f32> {
    (config.d_model > TINY_WIDTH).then_some(WIDE_PAUSE_AFTER_SECONDS)
}

/// Token budget per second of audio (Moonshine's own generation cap), at least
/// [`MIN_TOKENS`] per piece.
pub const TOKENS_PER_SECOND: f64 = 6.5;
/// Smallest token budget of a piece.
pub const MIN_TOKENS: usize = 16;

const SR: usize = dicta_audio::SAMPLE_RATE as usize;

/// The most tokens (EOT included) decoded for a piece of `samples` samples.
pub fn max_tokens(samples: usize) -> usize {
    MIN_TOKENS.max((samples as f64 / SR as f64 * TOKENS_PER_SECOND).ceil() as usize)
}

/// Results of [`transcribe`].
#[derive(Debug)]
pub struct MoonshineOutput {
    /// One entry per recording, in order.
    pub transcripts: Vec<Result<Transcript>>,
    /// Pieces decoded.
    pub pieces: usize,
    /// Rows of each decoder batch.
    pub batch_sizes: Vec<usize>,
}

/// Options Moonshine cannot honour, as an error for every recording of the call.
fn check_options(opts: &DecodeOptions) -> Result<()> {
    if let Some(lang) = opts.language.as_deref() {
        if !lang.eq_ignore_ascii_case("en") {
            return Err(Error::invalid_input(format!(
                "language {lang:?}: Moonshine models are English-only; use language \"en\" or omit it"
            )));
        }
    }
    if opts.task == Task::Translate {
        return Err(Error::invalid_input(
            "task \"translate\": Moonshine models only transcribe English",
        ));
    }
    if opts.word_timestamps {
        return Err(Error::invalid_input(
            "word timestamps are not available for Moonshine models (segments are timed per piece)",
        ));
    }
    Ok(())
}

/// One decoder batch as the shared search sees it.
struct Stepper<'a> {
    model: &'a Moonshine,
    state: MoonshineState,
    cancel: &'a dicta_core::Cancel,
}

impl StepModel for Stepper<'_> {
    fn vocab_size(&self) -> usize {
        self.model.config().vocab_size
    }

    fn step(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.cancel.check()?;
        let logits = self.model.step(tokens, &mut self.state)?;
        logits
            .flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|e| Error::internal(format!("tensor backend: {e}")))
    }

    fn select_rows(&mut self, indices: &[u32]) -> Result<()> {
        let keep: Vec<usize> = indices.iter().map(|&i| i as usize).collect();
        self.state.select_rows(&keep)
    }
}

/// Decodes one batch of pieces (16 kHz samples each) → tokens per piece (without EOT).
fn decode_batch(
    m: &MoonshineModel,
    pieces: &[&[f32]],
    opts: &DecodeOptions,
) -> Result<Vec<Vec<u32>>> {
    // Pieces encode side by side: a short piece's layers are too small to keep every thread
    // busy on their own (each piece is still encoded alone, so its states do not change).
    let encoded = pieces
        .par_iter()
        .map(|p| m.model.encode(p))
        .collect::<Result<Vec<_>>>()?;
    let cfg = m.model.config();
    let mut stepper = Stepper {
        model: &m.model,
        state: m.model.start(&encoded)?,
        cancel: &opts.cancel,
    };
    let rows = pieces.len();
    let first = stepper.step(&vec![cfg.bos; rows])?;
    let rules = LogitRules::new(Vec::new(), Vec::new(), None);
    // Rows share one search, so they share its length cap: the longest piece's budget (each
    // row still stops at its own EOT; a looping row is cut at the batch's cap, then trimmed
    // to its own below).
    let max_len = pieces
        .iter()
        .map(|p| max_tokens(p.len()))
        .max()
        .unwrap_or(MIN_TOKENS);
    let max_len = opts.max_new_tokens.map_or(max_len, |n| n.clamp(1, max_len));
    let params = SearchParams {
        rules: &rules,
        eot: cfg.eos,
        max_len,
        length_penalty: opts.length_penalty,
        forced: &[],
    };
    let hyps = if opts.beam_size > 1 {
        beam_search(
            &mut stepper,
            first,
            rows,
            opts.beam_size,
            opts.patience,
            &params,
        )?
    } else {
        greedy_search(&mut stepper, first, rows, &params, Sampler::Argmax)?
    };
    Ok(hyps
        .into_iter()
        .zip(pieces)
        .map(|(h, p)| {
            let mut t = h.tokens;
            t.retain(|&x| x != cfg.eos);
            // A row's own budget: greedy rows are independent, so the first `own` tokens are
            // exactly what the row decodes alone with its own cap.
            let own = opts
                .max_new_tokens
                .map_or(max_tokens(p.len()), |n| n.clamp(1, max_tokens(p.len())));
            t.truncate(own);
            t
        })
        .collect())
}

/// Transcribes whole recordings (16 kHz mono): cut, batched `batch_size` pieces at a time in
/// length order, decoded, joined per recording. A failure of the model fails the recordings
/// of the batch it happened in; bad options fail every recording.
pub fn transcribe(
    m: &MoonshineModel,
    recordings: &[&[f32]],
    opts: &DecodeOptions,
    batch_size: usize,
) -> MoonshineOutput {
    let n = recordings.len();
    if let Err(e) = check_options(opts) {
        return MoonshineOutput {
            transcripts: (0..n).map(|_| Err(e.clone())).collect(),
            pieces: 0,
            batch_sizes: Vec::new(),
        };
    }
    let (min, max) = (
        (MIN_PIECE_SECONDS * SR as f32) as usize,
        (MAX_PIECE_SECONDS * SR as f32) as usize,
    );
    let pause_after = pause_after_seconds(m.model.config()).map(|s| (s * SR as f32) as usize);
    // (recording, range) of every piece with audio the stem can read.
    let mut pieces: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
    for (r, rec) in recordings.iter().enumerate() {
        let cuts = match pause_after {
            Some(after) => pieces::cut_at_first_pauses(rec, after, min, max),
            None => pieces::cut_at_pauses(rec, min, max),
        };
        for p in cuts {
            if !p.is_empty() {
                pieces.push((r, p));
            }
        }
    }
    // Pieces of recording r: `pieces[of[r]..of[r + 1]]`, in time order (for progress).
    let mut of = vec![0usize; n + 1];
    for (r, _) in &pieces {
        of[r + 1] += 1;
    }
    for r in 0..n {
        of[r + 1] += of[r];
    }
    // Longest first, ties in input order: rows of a batch end at similar steps.
    let mut order: Vec<usize> = (0..pieces.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(pieces[i].1.len()));
    let mut tokens: Vec<Option<Result<Vec<u32>>>> = vec![None; pieces.len()];
    let mut batch_sizes = Vec::new();
    for batch in order.chunks(batch_size.max(1)) {
        let audio: Vec<&[f32]> = batch
            .iter()
            .map(|&i| &recordings[pieces[i].0][pieces[i].1.clone()])
            .collect();
        batch_sizes.push(batch.len());
        match decode_batch(m, &audio, opts) {
            Ok(out) => {
                for (&i, t) in batch.iter().zip(out) {
                    tokens[i] = Some(Ok(t));
                }
            }
            Err(e) => {
                for &i in batch {
                    tokens[i] = Some(Err(e.clone()));
                }
            }
        }
        if opts.progress.is_active() {
            // Each recording of the batch is done up to its first piece not decoded yet.
            let mut touched: Vec<usize> = batch.iter().map(|&i| pieces[i].0).collect();
            touched.sort_unstable();
            touched.dedup();
            for r in touched {
                let decoded = (of[r]..of[r + 1])
                    .take_while(|&j| tokens[j].is_some())
                    .last();
                if let Some(j) = decoded {
                    opts.progress.audio(r, pieces[j].1.end as f64 / SR as f64);
                }
            }
        }
    }
    let mut transcripts: Vec<Result<Transcript>> = recordings
        .iter()
        .map(|rec| {
            Ok(Transcript {
                id: String::new(),
                audio: String::new(),
                text: String::new(),
                language: Some("en".into()),
                language_probability: None,
                all_language_probs: None,
                duration: rec.len() as f64 / SR as f64,
                segments: Vec::new(),
                warnings: Vec::new(),
            })
        })
        .collect();
    for ((r, range), t) in pieces.iter().zip(tokens) {
        let Ok(tr) = &mut transcripts[*r] else {
            continue;
        };
        let toks = match t.unwrap_or_else(|| Err(Error::internal("piece was not decoded"))) {
            Ok(t) => t,
            Err(e) => {
                transcripts[*r] = Err(e);
                continue;
            }
        };
        let text = match m.decode_text(&toks) {
            Ok(s) => s.trim().to_string(),
            Err(e) => {
                transcripts[*r] = Err(e);
                continue;
            }
        };
        if text.is_empty() {
            continue;
        }
        let mut seg = Segment::new(
            range.start as f64 / SR as f64,
            range.end as f64 / SR as f64,
            text,
        );
        seg.tokens = toks;
        tr.segments.push(seg);
    }
    for tr in transcripts.iter_mut().flatten() {
        tr.text = tr
            .segments
            .iter()
            .map(|s| s.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
    }
    for (r, tr) in transcripts.iter().enumerate() {
        if let Ok(tr) = tr {
            opts.progress.segments(r, &tr.segments);
            opts.progress.audio(r, tr.duration);
        }
    }
    MoonshineOutput {
        transcripts,
        pieces: pieces.len(),
        batch_sizes,
    }
}
