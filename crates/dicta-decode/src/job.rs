//! The `dicta decode` command as a library function: decode saved CTC log-prob matrices
//! (`[T, V]` float32 `.npy`, as pyctcdecode users save logits) and write one JSON line each.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dicta_core::{Error, ErrorKind, Result};
use serde::Serialize;

use crate::beam::{BeamConfig, BeamDecoder, LmFusion, LmWeights, Unigrams};
use crate::greedy_decode;
use crate::hotword::{Hotword, DEFAULT_HOTWORD_WEIGHT};
use crate::hypothesis::{Hypothesis, WordSpan};
use crate::lm::NgramLm;
use crate::logprobs::LogProbs;
use crate::vocab::Vocabulary;

/// Which decoder to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderKind {
    /// Best path.
    Greedy,
    /// Prefix beam search (with the LM when one is given).
    Beam,
}

/// Everything `dicta decode` needs.
#[derive(Debug, Clone)]
pub struct DecodeJob {
    /// `[T, V]` float32 `.npy` files, decoded in order.
    pub logprobs: Vec<PathBuf>,
    /// `vocab.json` (`{token: id}` or a list of labels).
    pub vocab: PathBuf,
    /// Word n-gram LM: ARPA (`.arpa`, `.arpa.gz`) or Sphinx binary trie (`.lm.bin`); beam only.
    pub lm: Option<PathBuf>,
    /// Unigram list (one word a line); default: every LM word.
    pub unigrams: Option<PathBuf>,
    /// Decoder.
    pub decoder: DecoderKind,
    /// Beam settings (hotwords included).
    pub beam: BeamConfig,
    /// LM fusion weights.
    pub weights: LmWeights,
}

#[derive(Serialize)]
struct Line<'a> {
    text: &'a str,
    words: &'a [WordSpan],
}

/// Parses `WORD` or `WORD:WEIGHT` (a phrase may contain spaces; weight defaults to 10).
pub fn parse_hotword(spec: &str) -> Result<Hotword> {
    let (word, weight) = match spec.rsplit_once(':') {
        Some((w, v)) => {
            let weight: f32 = v.trim().parse().map_err(|_| {
                Error::invalid_input(format!("hotword {spec:?}: weight {v:?} is not a number"))
            })?;
            (w, weight)
        }
        None => (spec, DEFAULT_HOTWORD_WEIGHT),
    };
    if word.trim().is_empty() || !weight.is_finite() {
        return Err(Error::invalid_input(format!(
            "hotword {spec:?}: expected WORD or WORD:WEIGHT with a finite weight"
        )));
    }
    Ok(Hotword {
        word: word.trim().to_string(),
        weight,
    })
}

/// Builds the decoder a job asks for (loads the vocabulary and LM).
pub fn build_decoder(job: &DecodeJob) -> Result<Option<BeamDecoder>> {
    let vocab = Vocabulary::from_json_path(&job.vocab)?;
    match job.decoder {
        DecoderKind::Greedy => {
            if job.lm.is_some() {
                return Err(Error::invalid_input("--lm needs the beam decoder"));
            }
            Ok(None)
        }
        DecoderKind::Beam => {
            let fusion = match &job.lm {
                None => None,
                Some(path) => Some(Arc::new(load_lm_fusion(
                    path,
                    job.unigrams.as_deref(),
                    job.weights,
                )?)),
            };
            Ok(Some(BeamDecoder::new(vocab, fusion, job.beam.clone())?))
        }
    }
}

/// Runs the job, writing one JSON line `{"text", "words": [{"word", "start_frame",
/// "end_frame"}]}` per input to `out`.
pub fn run_decode_job(job: &DecodeJob, out: &mut dyn Write) -> Result<()> {
    if job.logprobs.is_empty() {
        return Err(Error::invalid_input("give at least one --logprobs file"));
    }
    let beam = build_decoder(job)?;
    let vocab = match &beam {
        Some(b) => b.vocab().clone(),
        None => Vocabulary::from_json_path(&job.vocab)?,
    };
    for path in &job.logprobs {
        let lp = LogProbs::from_npy_path(path)?;
        let hyp: Hypothesis = match &beam {
            Some(b) => b.decode(&lp),
            None => greedy_decode(&lp, &vocab),
        }
        .map_err(|e| e.context(path.display()))?;
        let line = serde_json::to_string(&Line {
            text: &hyp.text,
            words: &hyp.words,
        })
        .map_err(|e| Error::internal(format!("JSON: {e}")))?;
        writeln!(out, "{line}").map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?;
    }
    Ok(())
}

/// Loads an n-gram LM (ARPA, .arpa.gz or Sphinx .lm.bin) and the unigram list for partial-word
/// scoring (one word per line; `None` takes the LM's own vocabulary), ready for the beam decoder.
pub fn load_lm_fusion(lm: &Path, unigrams: Option<&Path>, weights: LmWeights) -> Result<LmFusion> {
    let t0 = std::time::Instant::now();
    let model = Arc::new(NgramLm::from_path(lm)?);
    tracing::info!(
        path = %lm.display(),
        order = model.order(),
        words = model.vocab_size(),
        seconds = t0.elapsed().as_secs_f64(),
        "loaded n-gram LM"
    );
    let unigrams = match unigrams {
        None => Unigrams::FromLm,
        Some(p) => Unigrams::List(
            std::fs::read_to_string(p)
                .map_err(|e| Error::from(e).context(p.display()))?
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect(),
        ),
    };
    Ok(LmFusion::new(model, weights, unigrams))
}
