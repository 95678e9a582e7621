//! The CTC path of the engine: plan → one scheduler for all inputs → model → stitch → decode.
//!
//! 1. Every recording is cut into windows ([`Planner`]) on the model's frame grid; each window
//!    retains a disjoint range of output frames.
//! 2. Windows of all inputs of a round are batched by length ([`schedule`]) under `batch_size`,
//!    `max_batch_frames` and `max_padding_fraction`.
//! 3. Batches run on the model one at a time (model calls of concurrent engine calls are
//!    serialised by the engine's lock). Each row's retained frames are copied straight into
//!    its recording's joined `[T, V]` matrix (the placement [`crate::offline::stitch`]
//!    defines), and the window's row is dropped.
//! 4. When a recording's last window is in, its audio is freed and the joined matrix goes to
//!    `decode_workers` threads (a bounded queue, so joined matrices waiting for a decoder stay
//!    few) that decode it once — greedy, or beam search with the shared n-gram LM — while the
//!    model runs the next batches.
//!
//! Steps 1–3 run round by round over the inputs the decode threads have ready (at least
//! `lookahead_windows` windows per round, see [`super`]): windows are sorted and batched within
//! a round, and a recording's windows always share one round.
//!
//! Memory: audio of the round's unfinished recordings and of the next round being decoded, one
//! batch of model activations (bounded by `batch_size` and `max_batch_frames`), the joined
//! matrices of the round's recordings still in flight, and at most `2 × decode_workers`
//! finished matrices waiting for a decoder.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use candle_core::Device;
use dicta_core::{Error, Result, Segment, Stats, Transcript, Word};
use dicta_decode::{
    greedy_decode, BeamConfig, BeamDecoder, Hypothesis, LmFusion, LmWeights, LogProbs, Vocabulary,
};
use dicta_models::ctc::{load_ctc_model, CtcModel};

use super::pipeline::{Audio, Prefetch};
use super::EngineConfig;
use crate::offline::{schedule, FrameGeometry, Planner, Window};

/// Which CTC decoder turns joined log-probs into text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CtcDecoderKind {
    /// Best path (arg-max per frame, merge repeats, drop blanks).
    #[default]
    Greedy,
    /// Prefix beam search, with n-gram LM fusion when [`CtcOptions::lm`] is set.
    Beam,
}

/// CTC decoding settings of an engine.
#[derive(Debug, Clone, PartialEq)]
pub struct CtcOptions {
    /// The decoder.
    pub decoder: CtcDecoderKind,
    /// Word n-gram LM (ARPA, `.arpa.gz` or Sphinx `.lm.bin`); beam decoder only. Loaded once
    /// per engine and shared by all decode workers.
    pub lm: Option<PathBuf>,
    /// Unigram list (one word a line) for partial-word scoring; default: every LM word.
    pub unigrams: Option<PathBuf>,
    /// LM weight (`alpha`) and word insertion bonus (`beta`).
    pub lm_weights: LmWeights,
    /// Beam width, pruning and hotwords.
    pub beam: BeamConfig,
    /// A silence of at least this many seconds between two words starts a new segment;
    /// `None`: one segment per recording.
    pub pause_seconds: Option<f32>,
}

impl Default for CtcOptions {
    fn default() -> Self {
        Self {
            decoder: CtcDecoderKind::Greedy,
            lm: None,
            unigrams: None,
            lm_weights: LmWeights::default(),
            beam: BeamConfig::default(),
            pause_seconds: Some(1.0),
        }
    }
}

impl CtcOptions {
    /// Checks that an LM comes with the beam decoder and that widths and weights are usable.
    pub fn validate(&self) -> Result<()> {
        if self.decoder == CtcDecoderKind::Greedy && (self.lm.is_some() || self.unigrams.is_some())
        {
            return Err(Error::invalid_input(
                "an LM needs the beam decoder (decoder = beam)",
            ));
        }
        if self.beam.beam_width == 0 {
            return Err(Error::invalid_input("beam_width must be >= 1, got 0"));
        }
        let w = self.lm_weights;
        if !w.alpha.is_finite() || !w.beta.is_finite() {
            return Err(Error::invalid_input(format!(
                "lm_alpha and lm_beta must be finite, got {} and {}",
                w.alpha, w.beta
            )));
        }
        if let Some(p) = self.pause_seconds {
            if !p.is_finite() || p <= 0.0 {
                return Err(Error::invalid_input(format!(
                    "pause_seconds must be a positive number, got {p}"
                )));
            }
        }
        Ok(())
    }
}

/// A loaded CTC model with its decoder and window planner.
pub(crate) struct CtcBackend {
    model: Arc<dyn CtcModel>,
    vocab: Vocabulary,
    beam: Option<BeamDecoder>,
    planner: Planner,
    /// Output frames of a full window (what `max_batch_frames` defaults from).
    window_frames: usize,
    pause_seconds: Option<f32>,
}

/// A recording's joined log-probs, ready for decoding.
struct Joined {
    recording: usize,
    /// Row-major `[frames, V]`.
    log_probs: Vec<f32>,
    frames: usize,
    n_samples: usize,
}

/// What the model loop measured.
#[derive(Default)]
struct LoopStats {
    model_seconds: f64,
    batch_sizes: Vec<usize>,
    padding_fractions: Vec<f64>,
    frames: usize,
    padded_frames: usize,
}

impl CtcBackend {
    /// Loads the model in `dir`, its vocabulary, the decoder (and LM) `config.ctc` asks for, and
    /// a planner for `config`'s chunking on the model's frame grid.
    pub(crate) fn load(dir: &Path, config: &EngineConfig) -> Result<Self> {
        let model: Arc<dyn CtcModel> = Arc::from(load_ctc_model(dir, &Device::Cpu)?);
        let vocab = Vocabulary::from_labels(&model.vocab().tokens).map_err(|e| {
            Error::model_load(format!("{}: vocabulary: {}", dir.display(), e.message))
        })?;
        if vocab.blank() != model.vocab().blank_id {
            return Err(Error::model_load(format!(
                "{}: the model's blank id is {} but the vocabulary's blank label is id {}",
                dir.display(),
                model.vocab().blank_id,
                vocab.blank()
            )));
        }
        let opts = &config.ctc;
        let beam = match opts.decoder {
            CtcDecoderKind::Greedy => None,
            CtcDecoderKind::Beam => {
                let fusion = match &opts.lm {
                    None => None,
                    Some(path) => Some(Arc::new(load_fusion(path, opts)?)),
                };
                Some(BeamDecoder::new(vocab.clone(), fusion, opts.beam.clone())?)
            }
        };
        let m = Arc::clone(&model);
        let geom =
            FrameGeometry::custom(model.samples_per_frame(), move |n| m.frames_for_samples(n));
        let planner = Planner::new(&config.plan_config(), geom)?;
        let window_frames = model.frames_for_samples(planner.chunk_samples());
        tracing::info!(
            model = %dir.display(),
            samples_per_frame = model.samples_per_frame(),
            window_frames,
            decoder = ?opts.decoder,
            lm = opts.lm.as_ref().map(|p| p.display().to_string()),
            "CTC engine loaded"
        );
        Ok(Self {
            model,
            vocab,
            beam,
            planner,
            window_frames,
            pause_seconds: opts.pause_seconds,
        })
    }

    pub(crate) fn model(&self) -> &dyn CtcModel {
        self.model.as_ref()
    }

    /// The loaded model, shared (streaming sessions run the same weights).
    pub(crate) fn shared_model(&self) -> Arc<dyn CtcModel> {
        Arc::clone(&self.model)
    }

    /// The configured beam decoder (its LM is shared when cloned); `None`: greedy.
    pub(crate) fn beam(&self) -> Option<&BeamDecoder> {
        self.beam.as_ref()
    }

    pub(crate) fn planner(&self) -> &Planner {
        &self.planner
    }

    /// Transcribes every input `audio` yields (inputs that failed to decode keep their error).
    /// Each recording is reported to `observer` as soon as it is decoded.
    pub(crate) fn transcribe(
        &self,
        audio: &mut Prefetch<'_>,
        config: &EngineConfig,
        acoustic: &super::Turns,
        observer: &super::observe::Observer,
        stats: &mut Stats,
    ) -> Vec<Result<Transcript>> {
        self.pipeline(audio, config, acoustic, stats, &|j| {
            let recording = j.recording;
            let r = self.to_transcript(j);
            if let Ok(t) = &r {
                observer.finished(recording, t);
            }
            r
        })
    }

    /// The joined log-probs of each input, undecoded.
    pub(crate) fn log_probs(
        &self,
        audio: &mut Prefetch<'_>,
        config: &EngineConfig,
        acoustic: &super::Turns,
        stats: &mut Stats,
    ) -> Vec<Result<LogProbs>> {
        let v = self.vocab.len();
        self.pipeline(audio, config, acoustic, stats, &|j| {
            LogProbs::new(j.log_probs, j.frames, v)
        })
    }

    /// Takes decoded inputs round by round (at least `lookahead_windows` windows each, see
    /// [`super`]), plans, schedules and runs the model over each round, handing each finished
    /// recording to `finish` on a decode worker. Returns one result per input, in input order.
    fn pipeline<R: Send>(
        &self,
        audio: &mut Prefetch<'_>,
        config: &EngineConfig,
        acoustic: &super::Turns,
        stats: &mut Stats,
        finish: &(dyn Fn(Joined) -> Result<R> + Sync),
    ) -> Vec<Result<R>> {
        let n = audio.len();
        let mut results: Vec<Option<Result<R>>> = (0..n).map(|_| None).collect();
        let mut samples: Vec<Audio<'_>> = vec![Audio::Borrowed(&[]); n];
        let mut n_samples = vec![0usize; n];
        let mut remaining = vec![0usize; n];
        let target = config.lookahead_windows();
        let schedule_cfg = config.schedule_config(self.window_frames);

        let workers = config.decode_workers.max(1);
        let (job_tx, job_rx) = mpsc::sync_channel::<Joined>(2 * workers);
        let job_rx = Mutex::new(job_rx);
        let (res_tx, res_rx) = mpsc::channel::<(usize, Result<R>, f64)>();
        let mut loop_stats = LoopStats::default();
        std::thread::scope(|s| {
            for _ in 0..workers {
                let res_tx = res_tx.clone();
                let job_rx = &job_rx;
                s.spawn(move || loop {
                    // The lock is held only while waiting for the next job.
                    let job = job_rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    let Ok(job) = job else { break };
                    let t = Instant::now();
                    let rec = job.recording;
                    let r = finish(job);
                    if res_tx.send((rec, r, t.elapsed().as_secs_f64())).is_err() {
                        break;
                    }
                });
            }
            drop(res_tx);
            'rounds: loop {
                // Take inputs until the round holds `target` windows. Windows that retain
                // nothing (a recording shorter than one receptive field) never reach the model.
                let mut windows: Vec<Window> = Vec::new();
                let mut round: Vec<usize> = Vec::new();
                while windows.len() < target {
                    let Some((i, a)) = audio.next() else { break };
                    let a = match a {
                        Ok(a) => a,
                        Err(e) => {
                            results[i] = Some(Err(e));
                            continue;
                        }
                    };
                    n_samples[i] = a.len();
                    stats.audio_seconds += a.len() as f64 / f64::from(dicta_audio::SAMPLE_RATE);
                    let planned = self.planner.plan(i, a.len());
                    stats.windows += planned.len();
                    for w in planned.into_iter().filter(|w| !w.retain.is_empty()) {
                        remaining[i] += 1;
                        windows.push(w);
                    }
                    if remaining[i] > 0 {
                        samples[i] = a;
                        round.push(i);
                        continue;
                    }
                    audio.release(a.len());
                    let joined = Joined {
                        recording: i,
                        log_probs: Vec::new(),
                        frames: 0,
                        n_samples: n_samples[i],
                    };
                    if job_tx.send(joined).is_err() {
                        break 'rounds;
                    }
                }
                if windows.is_empty() {
                    break;
                }
                let lens: Vec<usize> = windows.iter().map(|w| w.n_frames).collect();
                let open = match schedule(&lens, &schedule_cfg) {
                    Ok(batches) => self.model_loop(
                        &batches,
                        &windows,
                        &mut samples,
                        &n_samples,
                        &mut remaining,
                        &mut results,
                        acoustic,
                        &job_tx,
                        &mut loop_stats,
                    ),
                    Err(e) => {
                        for &r in &round {
                            results[r] = Some(Err(e.clone()));
                        }
                        true
                    }
                };
                // Every recording of the round is finished (decoded or failed) by now.
                for &r in &round {
                    samples[r] = Audio::Borrowed(&[]);
                    audio.release(n_samples[r]);
                }
                if !open {
                    break;
                }
            }
            drop(job_tx);
        });
        for (rec, r, seconds) in res_rx.try_iter() {
            stats.decoder_seconds += seconds;
            results[rec] = Some(r);
        }
        stats.model_seconds += loop_stats.model_seconds;
        stats.batch_sizes.extend(loop_stats.batch_sizes);
        stats.padding_fractions.extend(loop_stats.padding_fractions);
        stats.frames += loop_stats.frames;
        stats.padded_frames += loop_stats.padded_frames;
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::internal("recording was not decoded"))))
            .collect()
    }

    /// Runs one round's batches in order, joins rows into recordings and sends finished
    /// recordings to the decode queue. A failed model call fails the recordings in its batch
    /// only. Returns `false` when the decode queue is gone.
    #[allow(clippy::too_many_arguments)]
    fn model_loop<R>(
        &self,
        batches: &[crate::offline::Batch],
        windows: &[Window],
        samples: &mut [Audio<'_>],
        n_samples: &[usize],
        remaining: &mut [usize],
        results: &mut [Option<Result<R>>],
        acoustic: &super::Turns,
        job_tx: &mpsc::SyncSender<Joined>,
        ls: &mut LoopStats,
    ) -> bool {
        let v = self.vocab.len();
        // Joined matrices of the round's recordings, keyed by recording (a round holds all
        // windows of its recordings, so none outlives the round).
        let mut joined: HashMap<usize, Vec<f32>> = HashMap::new();
        for batch in batches {
            let items: Vec<usize> = batch
                .items
                .iter()
                .copied()
                .filter(|&k| results[windows[k].recording].is_none())
                .collect();
            if items.is_empty() {
                continue;
            }
            let t = Instant::now();
            let out = {
                let waves: Vec<&[f32]> = items
                    .iter()
                    .map(|&k| {
                        let w = &windows[k];
                        &samples[w.recording][w.start_sample..w.end_sample()]
                    })
                    .collect();
                let _turn = acoustic.take();
                self.model.forward(&waves)
            };
            ls.model_seconds += t.elapsed().as_secs_f64();
            let longest = items
                .iter()
                .map(|&k| windows[k].n_frames)
                .max()
                .unwrap_or(0);
            let real: usize = items.iter().map(|&k| windows[k].n_frames).sum();
            let padded = longest * items.len();
            ls.batch_sizes.push(items.len());
            ls.padding_fractions.push(if padded == 0 {
                0.0
            } else {
                (padded - real) as f64 / padded as f64
            });
            ls.frames += real;
            ls.padded_frames += padded;
            let out = match out {
                Ok(o) if o.vocab_size == v && o.n_rows == items.len() => o,
                Ok(o) => {
                    let e = Error::internal(format!(
                        "the CTC model returned {} rows of width {} for {} windows of width {v}",
                        o.n_rows,
                        o.vocab_size,
                        items.len()
                    ));
                    fail_items(&items, windows, results, samples, &mut joined, &e);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, rows = items.len(), "CTC model call failed");
                    fail_items(&items, windows, results, samples, &mut joined, &e);
                    continue;
                }
            };
            for (row_i, &k) in items.iter().enumerate() {
                let w = &windows[k];
                let r = w.recording;
                if results[r].is_some() {
                    continue;
                }
                let row = out.row(row_i);
                if row.len() < w.retain.end * v {
                    let e = Error::internal(format!(
                        "window {} of input {r}: the model returned {} frames, the plan needs {}",
                        w.index,
                        row.len() / v,
                        w.retain.end
                    ));
                    fail_items(&[k], windows, results, samples, &mut joined, &e);
                    continue;
                }
                let total = self.model.frames_for_samples(n_samples[r]);
                let buf = joined.entry(r).or_insert_with(|| vec![0.0; total * v]);
                let dst = w.retained_recording_frames();
                buf[dst.start * v..dst.end * v]
                    .copy_from_slice(&row[w.retain.start * v..w.retain.end * v]);
                remaining[r] -= 1;
                if remaining[r] == 0 {
                    // Free the audio now: a long recording's samples are not needed again.
                    samples[r] = Audio::Borrowed(&[]);
                    let log_probs = joined.remove(&r).unwrap_or_default();
                    let job = Joined {
                        recording: r,
                        frames: log_probs.len() / v,
                        log_probs,
                        n_samples: n_samples[r],
                    };
                    if job_tx.send(job).is_err() {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// Decodes a recording's joined log-probs into a transcript with word times.
    fn to_transcript(&self, j: Joined) -> Result<Transcript> {
        let sr = f64::from(dicta_audio::SAMPLE_RATE);
        let duration = j.n_samples as f64 / sr;
        let mut t = Transcript {
            id: String::new(),
            audio: String::new(),
            text: String::new(),
            language: None,
            language_probability: None,
            all_language_probs: None,
            duration,
            segments: Vec::new(),
            warnings: Vec::new(),
        };
        if j.frames == 0 {
            return Ok(t);
        }
        let lp = LogProbs::new(j.log_probs, j.frames, self.vocab.len())?;
        let hyp: Hypothesis = match &self.beam {
            Some(b) => b.decode(&lp)?,
            None => greedy_decode(&lp, &self.vocab)?,
        };
        // Frame f covers samples [f * spf, f * spf + receptive field); its start is the
        // conventional CTC time stamp (as transformers' `output_word_offsets` × stride).
        let spf = self.model.samples_per_frame() as f64;
        let seconds = |frame: i64| (frame.max(0) as f64 * spf / sr).min(duration);
        let words: Vec<Word> = hyp
            .words
            .iter()
            .map(|w| Word {
                speaker: None,
                word: w.word.clone(),
                start: seconds(w.start_frame),
                end: seconds(w.end_frame),
                probability: None,
            })
            .collect();
        t.segments = segments_from_words(words, self.pause_seconds.map(f64::from));
        t.text = hyp.text;
        Ok(t)
    }
}

fn fail_items<R>(
    items: &[usize],
    windows: &[Window],
    results: &mut [Option<Result<R>>],
    samples: &mut [Audio<'_>],
    joined: &mut HashMap<usize, Vec<f32>>,
    e: &Error,
) {
    for &k in items {
        let r = windows[k].recording;
        if results[r].is_none() {
            results[r] = Some(Err(e.clone()));
            samples[r] = Audio::Borrowed(&[]);
            joined.remove(&r);
        }
    }
}

fn load_fusion(path: &Path, opts: &CtcOptions) -> Result<LmFusion> {
    dicta_decode::job::load_lm_fusion(path, opts.unigrams.as_deref(), opts.lm_weights)
}

/// Groups words into segments, starting a new one after a silence of at least `pause` seconds
/// (never, when `None`).
pub fn segments_from_words(words: Vec<Word>, pause: Option<f64>) -> Vec<Segment> {
    let mut segments: Vec<Segment> = Vec::new();
    for w in words {
        let split = match (segments.last(), pause) {
            (None, _) => true,
            (Some(s), Some(p)) => w.start - s.end >= p,
            (Some(_), None) => false,
        };
        if split {
            let mut s = Segment::new(w.start, w.end, w.word.clone());
            s.words.push(w);
            segments.push(s);
        } else if let Some(s) = segments.last_mut() {
            s.end = s.end.max(w.end);
            s.text.push(' ');
            s.text.push_str(&w.word);
            s.words.push(w);
        }
    }
    segments
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(w: &str, start: f64, end: f64) -> Word {
        Word {
            speaker: None,
            word: w.into(),
            start,
            end,
            probability: None,
        }
    }

    #[test]
    fn segments_split_at_long_pauses_only() {
        let words = vec![
            word("a", 0.0, 0.2),
            word("b", 0.5, 0.7),
            word("c", 1.7, 1.9),
            word("d", 2.0, 2.4),
        ];
        let s = segments_from_words(words.clone(), Some(1.0));
        let texts: Vec<_> = s
            .iter()
            .map(|s| (s.text.as_str(), s.start, s.end))
            .collect();
        assert_eq!(texts, [("a b", 0.0, 0.7), ("c d", 1.7, 2.4)]);
        assert_eq!(s[1].words.len(), 2);
        let one = segments_from_words(words, None);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].text, "a b c d");
        assert!(segments_from_words(Vec::new(), Some(1.0)).is_empty());
    }

    #[test]
    fn an_lm_needs_the_beam_decoder() {
        let opts = CtcOptions {
            lm: Some("x.arpa".into()),
            ..CtcOptions::default()
        };
        assert!(opts.validate().unwrap_err().message.contains("beam"));
        let opts = CtcOptions {
            decoder: CtcDecoderKind::Beam,
            ..opts
        };
        assert!(opts.validate().is_ok());
        let bad = CtcOptions {
            pause_seconds: Some(0.0),
            ..CtcOptions::default()
        };
        assert!(bad.validate().is_err());
    }
}
