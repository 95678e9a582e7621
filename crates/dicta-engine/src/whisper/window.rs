//! Decoding a batch of 30 s windows with the real model: encoder once per window, prompt,
//! search (greedy / beam / sampling) and temperature fallback, rows batched per model call.

use candle_core::{Device, Tensor};
use dicta_core::{Error, Result};
use dicta_models::whisper::{DecoderCache, Whisper};
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::beam::beam_search;
use super::fallback::{compression_ratio, needs_fallback, select_after_all_failed, Attempt};
use super::greedy::{greedy_search, Hypothesis, Sampler, SearchParams, StepModel};
use super::logits::{softmax_prob, LogitRules};
use super::lookup::{LookupDrafter, LOOKUP_DRAFT_TOKENS};
use super::options::DecodeOptions;
use super::speculative::{speculative_greedy, ModelDrafter};
use super::words::{
    alignment_matrix, clip_and_merge, find_alignment, negative_dtw, split_to_word_tokens,
    WindowWords, MEDIAN_FILTER_WIDTH,
};

/// One window to decode.
#[derive(Debug, Clone)]
pub struct WindowJob {
    /// Log-mel window `[n_mels, 3000]`, row-major, zero padded.
    pub mel: Vec<f32>,
    /// Full prompt: optional `<|startofprev|>` + previous text, then the SOT sequence
    /// (+ `<|notimestamps|>`).
    pub prompt: Vec<u32>,
    /// Tokens every hypothesis of the window starts with (faster-whisper's `prefix`, after
    /// `<|0.00|>` with timestamps): fed after the prompt, then part of the window's text and
    /// length but not of its log-probability. Empty for none.
    pub forced: Vec<u32>,
    /// Identifies the window for the sampler's seed (mel frame offset in its recording), so a
    /// window samples the same tokens alone or batched.
    pub seed_key: u64,
    /// Tokens the window's greedy search is likely to produce (a streaming buffer's previous
    /// hypothesis): drafted and verified ([`super::lookup`]), which changes no result.
    pub draft: Option<std::sync::Arc<[u32]>>,
    /// The sound of the window's audio when it is the last of its recording (or lane) and is
    /// finished in place ([`super::final_window`]); `None` otherwise.
    pub final_rest: Option<std::sync::Arc<super::final_window::FinalRest>>,
}

/// The rows of a group after their prompts ([`WindowDecoder::prefill`]).
struct Prefilled {
    /// Self-attention K/V of every row's prompt, and the rows' encoder K/V.
    cache: DecoderCache,
    /// Logits `[rows, V]` after each row's prompt.
    first: Vec<f32>,
    /// Probability of `<|nospeech|>` at each row's `<|startoftranscript|>`.
    no_speech: Vec<f32>,
}

/// One window to align words in: its text tokens over its encoder row.
#[derive(Debug, Clone)]
pub struct AlignRequest {
    /// Row of the encoder states the window was decoded from.
    pub row: usize,
    /// `<|startoftranscript|>` (+ language and task tokens on multilingual models).
    pub sot_sequence: Vec<u32>,
    /// The text tokens to align (ids below `<|endoftext|>`, all kept segments of the window).
    pub text_tokens: Vec<u32>,
    /// Mel frames of content in the window (≤ 3000).
    pub num_frames: usize,
    /// Split words at unicode boundaries (languages written without spaces).
    pub split_on_unicode: bool,
}

/// [`StepModel`] over the real model and one per-request cache.
pub(crate) struct CachedDecoder<'a> {
    pub model: &'a Whisper,
    pub cache: DecoderCache,
    /// Checked before every step: an abandoned search stops within one token.
    pub cancel: &'a dicta_core::Cancel,
    /// Taken for each model call (see [`WindowDecoder::gate`]).
    pub gate: Option<&'a crate::engine::Turns>,
}

impl CachedDecoder<'_> {
    /// tokens: row-major `[rows, len]` → last-position logits `[rows, V]`.
    fn feed(&mut self, tokens: &[u32], rows: usize) -> Result<Vec<f32>> {
        let mut logits = Vec::new();
        self.feed_into(tokens, rows, &mut logits)?;
        Ok(logits)
    }

    /// [`Self::feed`] into `logits`, reusing its allocation.
    fn feed_into(&mut self, tokens: &[u32], rows: usize, logits: &mut Vec<f32>) -> Result<()> {
        let _turn = self.gate.map(|g| g.take());
        let len = tokens.len() / rows.max(1);
        let t = Tensor::from_slice(tokens, (rows, len), self.model.device()).map_err(ce)?;
        self.model.decode_last_into(&t, &mut self.cache, logits)
    }
}

impl super::speculative::SeqModel for CachedDecoder<'_> {
    fn vocab_size(&self) -> usize {
        self.model.config.n_vocab
    }
    fn feed_all(&mut self, tokens: &[u32], rows: usize) -> Result<Vec<f32>> {
        let _turn = self.gate.map(|g| g.take());
        let len = tokens.len() / rows.max(1);
        let t = Tensor::from_slice(tokens, (rows, len), self.model.device()).map_err(ce)?;
        let logits = self.model.decode_verify(&t, &mut self.cache)?;
        logits
            .flatten_all()
            .and_then(|l| l.to_vec1::<f32>())
            .map_err(ce)
    }
    fn feed_pick(&mut self, tokens: &[u32], rows: usize, pick: &[u32]) -> Result<Vec<f32>> {
        let _turn = self.gate.map(|g| g.take());
        let len = tokens.len() / rows.max(1);
        let t = Tensor::from_slice(tokens, (rows, len), self.model.device()).map_err(ce)?;
        let logits = self.model.decode_pick(&t, &mut self.cache, pick)?;
        logits
            .flatten_all()
            .and_then(|l| l.to_vec1::<f32>())
            .map_err(ce)
    }
    fn cached(&self) -> usize {
        self.cache.len()
    }
    fn truncate(&mut self, len: usize) -> Result<()> {
        self.cache.truncate(len)
    }
    fn keep_rows(&mut self, indices: &[u32]) -> Result<()> {
        self.cache.select_rows(indices)
    }
    fn check_cancel(&self) -> Result<()> {
        self.cancel.check()
    }
}

impl StepModel for CachedDecoder<'_> {
    fn vocab_size(&self) -> usize {
        self.model.config.n_vocab
    }
    fn step(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.cancel.check()?;
        self.feed(tokens, tokens.len())
    }
    fn step_into(&mut self, tokens: &[u32], logits: &mut Vec<f32>) -> Result<()> {
        self.cancel.check()?;
        self.feed_into(tokens, tokens.len(), logits)
    }
    fn select_rows(&mut self, indices: &[u32]) -> Result<()> {
        self.cache.select_rows(indices)
    }
}

pub(crate) fn ce(e: candle_core::Error) -> Error {
    Error::internal(format!("tensor backend: {e}"))
}

/// Everything a batch of windows shares.
pub(crate) struct WindowDecoder<'a> {
    pub model: &'a Whisper,
    pub opts: &'a DecodeOptions,
    /// Suppressed at every step.
    pub suppress: Vec<u32>,
    /// Held for each batch of model work when several transcriptions share the model (see
    /// [`super::transcriber::WhisperTranscriber::transcribe_gated`]).
    pub gate: Option<&'a crate::engine::Turns>,
    /// Drafts tokens for temperature-0 greedy passes (speculative decoding; lossless).
    pub assistant: Option<&'a super::speculative::Assistant<'a>>,
    /// Counts the tokens drafted from [`WindowJob::draft`]s and accepted.
    pub lookup_stats: &'a super::speculative::SpecCounters,
}

impl WindowDecoder<'_> {
    /// Takes a turn of the gate (if any) for one batch of model work.
    pub fn hold(&self) -> Option<crate::engine::Turn<'_>> {
        self.gate.map(|g| g.take())
    }

    /// Encodes the windows `[N, n_mels, 3000]` → encoder states `[N, 1500, d]`.
    pub fn encode(&self, jobs: &[&WindowJob]) -> Result<Tensor> {
        let n_mels = self.model.config.n_mels;
        let frames = self.model.config.n_frames();
        let mut data = Vec::with_capacity(jobs.len() * n_mels * frames);
        for j in jobs {
            data.extend_from_slice(&j.mel);
        }
        let mel = Tensor::from_vec(data, (jobs.len(), n_mels, frames), self.model.device())
            .map_err(ce)?;
        self.model.encode(&mel)
    }

    /// Encodes and decodes every job with temperature fallback; returns the settled attempt per
    /// job and the encoder states `[N, 1500, d]` (row `i` = job `i`), which word alignment
    /// reuses. Jobs are grouped by prompt shape (rows of one model call must share positions).
    pub fn decode_keep(&self, jobs: &[&WindowJob]) -> Result<(Vec<Attempt>, Tensor)> {
        let enc = self.encode_jobs(jobs)?;
        Ok((self.decode_encoded(jobs, &enc)?, enc))
    }

    /// The encoder states `[N, 1500, d]` of the jobs' windows, one turn of the gate.
    pub fn encode_jobs(&self, jobs: &[&WindowJob]) -> Result<Tensor> {
        if jobs.is_empty() {
            return Err(Error::invalid_input("decode: no windows given"));
        }
        // Every model call of every long-form mode comes through here (and each temperature
        // of the fallback, in `decode_encoded`): abandoned work stops within one search.
        self.opts.cancel.check()?;
        // Turns are per model pass (the encoder here, each decoder step in `run`), not per
        // whole search: a window that falls back through every temperature would otherwise
        // hold the model for seconds while a short request waits behind it.
        // Each phase's time is logged at debug (`--log dicta_engine=debug`): encoder, prompt,
        // and each temperature's search, which tells where a long recording's time goes.
        let started = std::time::Instant::now();
        let enc = {
            let _turn = self.hold();
            self.encode(jobs)?
        };
        tracing::debug!(
            windows = jobs.len(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "encoded"
        );
        Ok(enc)
    }

    /// [`Self::decode_keep`] of jobs already encoded (`enc` row `i` = job `i`).
    pub fn decode_encoded(&self, jobs: &[&WindowJob], enc: &Tensor) -> Result<Vec<Attempt>> {
        let mut out: Vec<Option<Attempt>> = vec![None; jobs.len()];
        let left_padding = self.left_padding(jobs);
        let keys = jobs
            .iter()
            .map(|j| self.group_key(j, left_padding))
            .collect::<Result<Vec<_>>>()?;
        let mut shapes = keys.clone();
        shapes.sort_unstable();
        shapes.dedup();
        for shape in shapes {
            let rows: Vec<usize> = (0..jobs.len()).filter(|&i| keys[i] == shape).collect();
            let settled = self.decode_group(jobs, enc, &rows)?;
            for (r, a) in rows.into_iter().zip(settled) {
                out[r] = Some(a);
            }
        }
        Ok(out
            .into_iter()
            .map(|a| a.expect("every job is in a group"))
            .collect())
    }

    /// Word timings of decoded windows (CTranslate2's `align` + faster-whisper's
    /// `find_alignment`, then sentence-end clipping and punctuation merging): one teacher-forced
    /// decoder pass over all requests with text, batched, on the encoder states `enc`
    /// `[N, 1500, d]` of [`WindowDecoder::decode_keep`]. Returns one result per request, in order.
    pub fn align(&self, enc: &Tensor, requests: &[AlignRequest]) -> Result<Vec<WindowWords>> {
        let _turn = self.hold();
        let mut out = vec![WindowWords::default(); requests.len()];
        let live: Vec<usize> = (0..requests.len())
            .filter(|&i| !requests[i].text_tokens.is_empty())
            .collect();
        if live.is_empty() {
            return Ok(out);
        }
        let sp = &self.model.config.special;
        let seqs: Vec<Vec<u32>> = live
            .iter()
            .map(|&i| {
                let r = &requests[i];
                let mut t = r.sot_sequence.clone();
                t.push(sp.no_timestamps);
                t.extend_from_slice(&r.text_tokens);
                t.push(sp.eot);
                t
            })
            .collect();
        let width = seqs.iter().map(Vec::len).max().unwrap_or(0);
        // Padding after the end is harmless: attention is causal.
        let flat: Vec<u32> = seqs
            .iter()
            .flat_map(|s| {
                s.iter()
                    .copied()
                    .chain(std::iter::repeat_n(sp.eot, width - s.len()))
            })
            .collect();
        // Next-token ids, for the probability of each text token (0 where no text follows).
        let next: Vec<u32> = seqs
            .iter()
            .flat_map(|s| {
                (0..width).map(move |p| match s.get(p + 1) {
                    Some(&t) if t < sp.eot => t,
                    _ => 0,
                })
            })
            .collect();
        let dev = self.model.device();
        let n = live.len();
        let rows: Vec<u32> = live.iter().map(|&i| requests[i].row as u32).collect();
        let enc = select(enc, &rows)?;
        let tokens = Tensor::from_vec(flat, (n, width), dev).map_err(ce)?;
        let (weights, logits) = self.model.alignment(&enc, &tokens)?;
        let frames_max = live
            .iter()
            .map(|&i| requests[i].num_frames / 2)
            .max()
            .unwrap_or(0)
            .clamp(1, weights.dim(3).map_err(ce)?);
        let (_, heads, _, _) = weights.dims4().map_err(ce)?;
        let weights: Vec<f32> = weights
            .narrow(3, 0, frames_max)
            .and_then(|w| w.flatten_all())
            .and_then(|w| w.to_vec1())
            .map_err(ce)?;
        // Probabilities over the text vocabulary only (ids below <|endoftext|>).
        let next = Tensor::from_vec(next, (n, width, 1), dev).map_err(ce)?;
        let probs: Vec<f32> = (|| {
            let l = logits.narrow(2, 0, sp.eot as usize)?;
            let shifted = l.broadcast_sub(&l.max_keepdim(2)?)?;
            let log_sum = shifted.exp()?.sum_keepdim(2)?.log()?;
            (shifted.gather(&next, 2)? - log_sum)?
                .exp()?
                .flatten_all()?
                .to_vec1()
        })()
        .map_err(ce)?;
        let tok = &self.model.tokenizer;
        for (k, &i) in live.iter().enumerate() {
            let r = &requests[i];
            let len = seqs[k].len();
            let frames = (r.num_frames / 2).clamp(1, frames_max);
            // The model's softmax ran over all 1500 frames; CTranslate2's runs over the content
            // frames only, i.e. the same probabilities renormalised over them.
            let mut w = Vec::with_capacity(heads * len * frames);
            for a in 0..heads {
                for l in 0..len {
                    let at = ((k * heads + a) * width + l) * frames_max;
                    let row = &weights[at..at + frames];
                    let sum: f32 = row.iter().sum();
                    w.extend(row.iter().map(|x| x / sum));
                }
            }
            let sot_len = r.sot_sequence.len();
            let text_len = r.text_tokens.len();
            let matrix = alignment_matrix(
                &mut w,
                heads,
                len,
                frames,
                MEDIAN_FILTER_WIDTH,
                sot_len,
                text_len + 1,
            );
            let path = negative_dtw(&matrix, text_len + 1, frames);
            let token_probs = &probs[k * width + sot_len..k * width + sot_len + text_len];
            let mut with_eot = r.text_tokens.clone();
            with_eot.push(sp.eot);
            let (words, word_tokens) = split_to_word_tokens(
                &with_eot,
                sp.eot,
                r.split_on_unicode,
                &mut |ids: &[u32]| tok.decode(ids),
            )?;
            let timings = find_alignment(&words, &word_tokens, &path, token_probs);
            out[i] = WindowWords {
                token_probs: token_probs.to_vec(),
                ..clip_and_merge(
                    timings,
                    &self.opts.prepend_punctuations,
                    &self.opts.append_punctuations,
                )
            };
        }
        Ok(out)
    }

    /// Whether the windows of a batch whose prompts differ in length may share decoder calls
    /// (left-padded, see `DecoderCache::set_left_padding`): the int8 decoder masks per row;
    /// the assistant and the lookup drafts keep one prompt length per group.
    fn left_padding(&self, jobs: &[&WindowJob]) -> bool {
        self.model.supports_left_padding()
            && self.assistant.is_none()
            && jobs
                .iter()
                .all(|j| j.draft.as_ref().is_none_or(|d| d.is_empty()))
    }

    /// The rows of one decoder call share this key: the tokens from `<|startoftranscript|>` on
    /// (so the no-speech position and the first sampled one line up), the search length, the
    /// forced tokens (a call forces the same ones on every window it forces), and, without
    /// left padding, the prompt length itself.
    fn group_key(
        &self,
        job: &WindowJob,
        left_padding: bool,
    ) -> Result<(usize, usize, usize, usize)> {
        let len = job.prompt.len();
        let suffix = len - sot_index(&job.prompt, self.model.config.special.sot);
        let exact = if left_padding { 0 } else { len };
        Ok((
            suffix,
            self.max_len(len, job.forced.len())?,
            job.forced.len(),
            exact,
        ))
    }

    /// Tokens a hypothesis may hold (forced ones included) after a prompt of `prompt_len`
    /// tokens and `forced` forced ones (CTranslate2: `max_length = min(total / 2, total -
    /// start_step)`, where faster-whisper's `total` counts the forced tokens as prompt).
    fn max_len(&self, prompt_len: usize, forced: usize) -> Result<usize> {
        let max_total = self.model.config.n_text_ctx;
        let total = match self.opts.max_new_tokens {
            Some(n) => prompt_len + forced + n,
            None => max_total,
        };
        if total > max_total {
            return Err(Error::invalid_input(format!(
                "the prompt has {} tokens and max_new_tokens is {:?}; together they exceed \
                 the model's {max_total}-token context",
                prompt_len + forced,
                self.opts.max_new_tokens
            )));
        }
        Ok((total / 2).min(total - (prompt_len - 1)))
    }

    fn decode_group(
        &self,
        jobs: &[&WindowJob],
        enc: &Tensor,
        rows: &[usize],
    ) -> Result<Vec<Attempt>> {
        let mut attempts: Vec<Vec<Attempt>> = vec![Vec::new(); rows.len()];
        let mut settled: Vec<Option<Attempt>> = vec![None; rows.len()];
        let mut pending: Vec<usize> = (0..rows.len()).collect();
        let group: Vec<&WindowJob> = rows.iter().map(|&r| jobs[r]).collect();
        let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
        // The prompt is decoded once per window and every temperature forks that state: the
        // prompt's result does not depend on the temperature, and a window that falls back
        // through every temperature would otherwise build its encoder K/V and decode its
        // prompt six times.
        let started = std::time::Instant::now();
        let mut prefilled = self.prefill(&group, &select(enc, &idx)?)?;
        tracing::debug!(
            windows = group.len(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "prefilled"
        );
        let temperatures = &self.opts.temperatures;
        for (ti, &temperature) in temperatures.iter().enumerate() {
            if pending.is_empty() {
                break;
            }
            self.opts.cancel.check()?;
            let sub: Vec<&WindowJob> = pending.iter().map(|&p| group[p]).collect();
            // Row `r` of the search is row `pending[r / n]` of the prefilled cache (`n`
            // samples each). The last temperature takes the cache itself.
            let n = if temperature > 0.0 {
                self.opts.best_of
            } else {
                1
            };
            let expand: Vec<u32> = pending
                .iter()
                .flat_map(|&p| std::iter::repeat_n(p as u32, n))
                .collect();
            let cache = if ti + 1 < temperatures.len() {
                prefilled.cache.fork(&expand)?
            } else {
                // In place: rows that stay where they are are not moved.
                let mut cache = prefilled.cache.take();
                cache.select_rows(&expand)?;
                cache
            };
            let started = std::time::Instant::now();
            let results = self.run(&sub, &prefilled, cache, &expand, temperature, ti)?;
            tracing::debug!(
                windows = sub.len(),
                rows = expand.len(),
                temperature,
                // The search runs until its longest window ends.
                max_tokens = results
                    .iter()
                    .map(|(h, _)| h.tokens.len())
                    .max()
                    .unwrap_or(0),
                tokens = results.iter().map(|(h, _)| h.tokens.len()).sum::<usize>(),
                ms = started.elapsed().as_secs_f64() * 1e3,
                "searched"
            );
            let mut still = Vec::new();
            for (&p, (hyp, no_speech_prob)) in pending.iter().zip(results) {
                let text = self.model.tokenizer.decode(&hyp.tokens)?;
                let a = Attempt {
                    temperature,
                    avg_logprob: hyp.avg_logprob(),
                    compression_ratio: compression_ratio(text.trim()),
                    tokens: hyp.tokens,
                    no_speech_prob,
                };
                if needs_fallback(&a, self.opts) {
                    attempts[p].push(a);
                    still.push(p);
                } else {
                    settled[p] = Some(a);
                }
            }
            pending = still;
        }
        for p in pending {
            settled[p] = Some(select_after_all_failed(&attempts[p], self.opts));
        }
        Ok(settled.into_iter().map(|a| a.expect("settled")).collect())
    }

    /// Decodes the prompts of rows sharing a group key ([`Self::group_key`]) over their
    /// encoder states `enc` `[N, 1500, d]`: shorter prompts are left-padded to the longest.
    /// No row's logits depend on the other rows (the cache never lets a real token see another
    /// row or the padding), so a subset forked from it decodes as if prefilled alone.
    fn prefill(&self, jobs: &[&WindowJob], enc: &Tensor) -> Result<Prefilled> {
        let sp = &self.model.config.special;
        let v = self.model.config.n_vocab;
        let rows = jobs.len();
        // Each row's prompt, then its forced tokens (the same count in every row of a group).
        let fed = |j: &WindowJob| j.prompt.len() + j.forced.len();
        let prompt_len = jobs.iter().map(|j| fed(j)).max().unwrap_or(0);
        let pads: Vec<usize> = jobs.iter().map(|j| prompt_len - fed(j)).collect();
        // The same in every row of the group: its tokens from SOT on line up.
        let sot_at = pads[0] + sot_index(&jobs[0].prompt, sp.sot);
        let mut cache = {
            let _turn = self.hold();
            self.model.new_cache(enc)?
        };
        if pads.iter().any(|&p| p > 0) {
            cache.set_left_padding(&pads)?;
        }
        let mut dec = CachedDecoder {
            model: self.model,
            cache,
            cancel: &self.opts.cancel,
            gate: self.gate,
        };
        // Padding repeats a row's first token; the cache never lets a real token see it.
        let padded: Vec<Vec<u32>> = jobs
            .iter()
            .zip(&pads)
            .map(|(j, &p)| {
                let mut row = vec![j.prompt[0]; p];
                row.extend_from_slice(&j.prompt);
                row.extend_from_slice(&j.forced);
                row
            })
            .collect();
        let flat = |range: std::ops::Range<usize>| -> Vec<u32> {
            padded
                .iter()
                .flat_map(|row| row[range.clone()].iter().copied())
                .collect()
        };
        let (no_speech, first) = if sot_at + 1 == prompt_len {
            let logits = dec.feed(&flat(0..prompt_len), rows)?;
            (no_speech_probs(&logits, v, sp.no_speech), logits)
        } else {
            let at_sot = dec.feed(&flat(0..sot_at + 1), rows)?;
            let ns = no_speech_probs(&at_sot, v, sp.no_speech);
            (ns, dec.feed(&flat(sot_at + 1..prompt_len), rows)?)
        };
        Ok(Prefilled {
            cache: dec.cache,
            first,
            no_speech,
        })
    }

    /// One search at one temperature: `cache` holds row `expand[r]` of `prefilled` as its row
    /// `r` (a window's `best_of` samples side by side when sampling, one row per window
    /// otherwise), `jobs` one job per window. Returns the best hypothesis and the no-speech
    /// probability per window.
    fn run(
        &self,
        jobs: &[&WindowJob],
        prefilled: &Prefilled,
        cache: DecoderCache,
        expand: &[u32],
        temperature: f32,
        temperature_index: usize,
    ) -> Result<Vec<(Hypothesis, f32)>> {
        let cfg = &self.model.config;
        let sp = &cfg.special;
        let rows = jobs.len();
        let v = cfg.n_vocab;
        let forced = &jobs[0].forced;
        let max_len = self.max_len(jobs[0].prompt.len(), forced.len())?;
        let sampled = temperature > 0.0;
        let n = expand.len() / rows.max(1);
        let no_speech: Vec<f32> = expand
            .iter()
            .step_by(n.max(1))
            .map(|&p| prefilled.no_speech[p as usize])
            .collect();
        let first: Vec<f32> = expand
            .iter()
            .flat_map(|&p| {
                prefilled.first[p as usize * v..(p as usize + 1) * v]
                    .iter()
                    .copied()
            })
            .collect();
        let mut dec = CachedDecoder {
            model: self.model,
            cache,
            cancel: &self.opts.cancel,
            gate: self.gate,
        };
        let with_timestamps = *jobs[0].prompt.last().unwrap_or(&0) != sp.no_timestamps;
        let finals: Vec<_> = jobs.iter().map(|j| j.final_rest.clone()).collect();
        let rules = self
            .rules(with_timestamps)
            .with_finals(finals.clone())
            .with_forced(forced.len());
        let params = SearchParams {
            rules: &rules,
            eot: sp.eot,
            max_len,
            length_penalty: self.opts.length_penalty,
            forced,
        };
        let hyps = if sampled {
            let mut rngs: Vec<StdRng> = jobs
                .iter()
                .flat_map(|j| {
                    (0..n).map(move |h| {
                        StdRng::seed_from_u64(mix(self.opts.seed, j.seed_key, temperature_index, h))
                    })
                })
                .collect();
            let sampler = Sampler::Temperature {
                temperature,
                rngs: &mut rngs,
            };
            // The search sees `n` rows per window.
            let expanded = rules.clone().with_finals(
                finals
                    .iter()
                    .flat_map(|f| std::iter::repeat_n(f.clone(), n))
                    .collect(),
            );
            let params = SearchParams {
                rules: &expanded,
                ..params
            };
            let all = greedy_search(&mut dec, first, rows * n, &params, sampler)?;
            all.chunks(n)
                .map(|c| {
                    // Best score first; the earliest candidate wins ties (stable order).
                    let mut best = &c[0];
                    for h in &c[1..] {
                        if h.score > best.score {
                            best = h;
                        }
                    }
                    best.clone()
                })
                .collect()
        } else if self.opts.beam_size > 1 {
            beam_search(
                &mut dec,
                first,
                rows,
                self.opts.beam_size,
                self.opts.patience,
                &params,
            )?
        } else if let Some(asst) = self
            .assistant
            .filter(|a| forced.is_empty() && a.usable_for(cfg, &jobs[0].prompt))
        {
            self.assisted(jobs, &mut dec, first, &params, &rules, asst)?
        } else if forced.is_empty()
            && jobs
                .iter()
                .any(|j| j.draft.as_ref().is_some_and(|d| !d.is_empty()))
        {
            let refs = jobs
                .iter()
                .map(|j| j.draft.as_deref().unwrap_or_default().to_vec())
                .collect();
            let mut drafter =
                LookupDrafter::new(refs, sp.eot, LOOKUP_DRAFT_TOKENS, self.lookup_stats);
            let prompts: Vec<Vec<u32>> = jobs.iter().map(|j| j.prompt.clone()).collect();
            speculative_greedy(
                &mut dec,
                cfg.n_text_ctx,
                first,
                rows,
                &prompts,
                &params,
                &mut drafter,
            )?
        } else {
            greedy_search(&mut dec, first, rows, &params, Sampler::Argmax)?
        };
        Ok(hyps.into_iter().zip(no_speech).collect())
    }

    /// Greedy search with drafts from the assistant (see [`super::speculative`]): the
    /// assistant encodes the same windows, then drafts for every row.
    fn assisted(
        &self,
        jobs: &[&WindowJob],
        dec: &mut CachedDecoder<'_>,
        first: Vec<f32>,
        params: &SearchParams<'_>,
        rules: &LogitRules,
        asst: &super::speculative::Assistant<'_>,
    ) -> Result<Vec<Hypothesis>> {
        let am = asst.model;
        let cache = {
            let _turn = self.hold();
            let n_mels = am.config.n_mels;
            let frames = am.config.n_frames();
            let mut data = Vec::with_capacity(jobs.len() * n_mels * frames);
            for j in jobs {
                data.extend_from_slice(&j.mel);
            }
            let mel =
                Tensor::from_vec(data, (jobs.len(), n_mels, frames), am.device()).map_err(ce)?;
            am.new_cache(&am.encode(&mel)?)?
        };
        let helper = CachedDecoder {
            model: am,
            cache,
            cancel: &self.opts.cancel,
            gate: self.gate,
        };
        let prompts: Vec<Vec<u32>> = jobs.iter().map(|j| j.prompt.clone()).collect();
        let asst_prompts = prompts.iter().map(|p| asst.prompt(self.model, p)).collect();
        let asst_rules = asst.rules(rules, self.opts.suppress_blank);
        let mut drafter = ModelDrafter::new(asst, self.model, helper, asst_prompts, &asst_rules);
        speculative_greedy(
            dec,
            self.model.config.n_text_ctx,
            first,
            jobs.len(),
            &prompts,
            params,
            &mut drafter,
        )
    }

    fn rules(&self, with_timestamps: bool) -> LogitRules {
        let cfg = &self.model.config;
        let sp = &cfg.special;
        let begin = if self.opts.suppress_blank {
            cfg.begin_suppress_tokens.clone()
        } else {
            Vec::new()
        };
        let ts = with_timestamps.then(|| {
            let max_initial = (self.opts.max_initial_timestamp / 0.02).round() as u32;
            super::logits::TimestampIds {
                eot: sp.eot,
                no_timestamps: sp.no_timestamps,
                timestamp_begin: sp.timestamp_begin,
                timestamp_end: cfg.n_vocab as u32 - 1,
                max_initial_timestamp: sp.timestamp_begin + max_initial,
            }
        });
        LogitRules::new(self.suppress.clone(), begin, ts)
            .with_repetition(self.opts.repetition_penalty, self.opts.no_repeat_ngram_size)
    }
}

pub(super) fn sot_index(prompt: &[u32], sot: u32) -> usize {
    prompt.iter().position(|&t| t == sot).unwrap_or(0)
}

fn no_speech_probs(logits: &[f32], v: usize, no_speech: u32) -> Vec<f32> {
    logits
        .chunks(v)
        .map(|row| softmax_prob(row, no_speech))
        .collect()
}

/// Rows `idx` of `t` along dim 0 (no copy when all rows are kept in order).
fn select(t: &Tensor, idx: &[u32]) -> Result<Tensor> {
    let n = t.dim(0).map_err(ce)?;
    if idx.len() == n && idx.iter().enumerate().all(|(i, &r)| r as usize == i) {
        return Ok(t.clone());
    }
    let dev: &Device = t.device();
    let ids = Tensor::new(idx, dev).map_err(ce)?;
    t.index_select(&ids, 0).map_err(ce)
}

/// SplitMix64-style mixing of the sampler seed inputs.
fn mix(seed: u64, key: u64, temperature_index: usize, hyp: usize) -> u64 {
    let mut x = seed
        ^ key.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ ((temperature_index as u64) << 32)
        ^ (hyp as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}
