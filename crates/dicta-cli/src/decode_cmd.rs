//! `dicta decode`: decode saved CTC log-probs (`[T, V]` float32 `.npy`) with the greedy or beam
//! decoder, optionally fused with an n-gram LM; prints one JSON line per input:
//! `{"text": …, "words": [{"word", "start_frame", "end_frame"}]}`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use dicta_decode::job::{parse_hotword, run_decode_job, DecodeJob, DecoderKind};
use dicta_decode::{BeamConfig, LmWeights};

/// Decoder choice on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DecoderArg {
    /// Best path: merge repeats, drop blanks.
    Greedy,
    /// Prefix beam search (uses --lm when given).
    Beam,
}

/// `dicta decode …`
#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// CTC log-probs saved as a [T, V] float32 .npy (logits or probabilities also work);
    /// repeat for several inputs, one JSON line each.
    #[arg(long, required = true)]
    pub logprobs: Vec<PathBuf>,
    /// Vocabulary: vocab.json as {token: id} (wav2vec2) or a JSON list of labels.
    #[arg(long)]
    pub vocab: PathBuf,
    /// Word n-gram LM: ARPA (.arpa, .arpa.gz) or Sphinx binary trie (.lm.bin, as in pocketsphinx); beam decoder only.
    #[arg(long)]
    pub lm: Option<PathBuf>,
    /// Known words for partial-word scoring, one per line (default: the LM's vocabulary).
    #[arg(long)]
    pub unigrams: Option<PathBuf>,
    /// Decoder.
    #[arg(long, value_enum, default_value_t = DecoderArg::Beam)]
    pub decoder: DecoderArg,
    /// Beams kept per frame.
    #[arg(long, default_value_t = 25)]
    pub beam_width: usize,
    /// LM weight (alpha).
    #[arg(long, default_value_t = 0.5, allow_hyphen_values = true)]
    pub lm_alpha: f64,
    /// Word insertion bonus (beta).
    #[arg(long, default_value_t = 1.0, allow_hyphen_values = true)]
    pub lm_beta: f64,
    /// log10 offset for words outside the unigram list.
    #[arg(long, default_value_t = -10.0, allow_hyphen_values = true)]
    pub unk_score_offset: f64,
    /// Drop beams this far (natural log) below the best.
    #[arg(long, default_value_t = -10.0, allow_hyphen_values = true)]
    pub beam_prune_logp: f64,
    /// Skip tokens below this log-prob (the frame's best token is always tried).
    #[arg(long, default_value_t = -5.0, allow_hyphen_values = true)]
    pub token_min_logp: f64,
    /// Hotword to favour, as WORD or WORD:WEIGHT (weight default 10); repeatable.
    #[arg(long = "hotword")]
    pub hotwords: Vec<String>,
}

/// Runs `dicta decode`; returns the exit code (0, or an error for the caller to report).
pub fn run(args: &DecodeArgs) -> anyhow::Result<i32> {
    let hotwords = args
        .hotwords
        .iter()
        .map(|h| parse_hotword(h))
        .collect::<Result<Vec<_>, _>>()?;
    let job = DecodeJob {
        logprobs: args.logprobs.clone(),
        vocab: args.vocab.clone(),
        lm: args.lm.clone(),
        unigrams: args.unigrams.clone(),
        decoder: match args.decoder {
            DecoderArg::Greedy => DecoderKind::Greedy,
            DecoderArg::Beam => DecoderKind::Beam,
        },
        beam: BeamConfig {
            beam_width: args.beam_width,
            beam_prune_logp: args.beam_prune_logp,
            token_min_logp: args.token_min_logp,
            prune_history: true,
            hotwords,
        },
        weights: LmWeights {
            alpha: args.lm_alpha,
            beta: args.lm_beta,
            unk_score_offset: args.unk_score_offset,
            score_boundary: true,
        },
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    run_decode_job(&job, &mut out)?;
    Ok(0)
}
