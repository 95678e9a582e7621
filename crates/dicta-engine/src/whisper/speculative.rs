//! Speculative (assisted) greedy decoding: a small assistant model drafts a few tokens per row,
//! the main model checks them in one decoder pass per round and keeps the longest prefix its
//! own greedy choice agrees with, plus its own next token.
//!
//! Lossless: every kept token is the main model's argmax under the same [`LogitRules`] on the
//! same raw logits as in [`super::greedy::greedy_search`] — the verification pass
//! (`Whisper::decode_verify`) gives each position the very bits a one-token step gives it — and
//! the log-probabilities summed for the temperature fallback are the same floats, so the result
//! equals plain greedy decoding token for token.
//!
//! Rows of a batch keep one cache length (the model's caches are uniform): a row that accepted
//! more than the slowest row keeps its extra tokens "unfed" and feeds them again in the next
//! round, with correspondingly fewer drafts (at most `k` positions ahead of the slowest row).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use dicta_core::{Error, Result};
use dicta_models::whisper::{Whisper, WhisperConfig};

use super::greedy::{Hypothesis, SearchParams};
use super::logits::{argmax, log_softmax_in_place, LogitRules};

/// Drafted tokens per round by default (transformers' assisted generation starts at 5 too).
pub const DEFAULT_DRAFT_TOKENS: usize = 5;

/// An assistant (draft) model beside a main Whisper model, with the token id maps between
/// their vocabularies.
pub struct Assistant<'m> {
    /// The draft model.
    pub model: &'m Whisper,
    /// Drafted tokens per round (≥ 1).
    pub draft_tokens: usize,
    map: TokenMap,
    /// Counters over every assisted search (drafted, accepted).
    stats: SpecCounters,
}

/// Drafted and accepted token counts.
#[derive(Debug, Default)]
pub struct SpecCounters {
    drafted: AtomicUsize,
    accepted: AtomicUsize,
}

impl SpecCounters {
    /// Counts one search's drafted and accepted tokens.
    pub(crate) fn add(&self, drafted: usize, accepted: usize) {
        self.drafted.fetch_add(drafted, Ordering::Relaxed);
        self.accepted.fetch_add(accepted, Ordering::Relaxed);
    }

    /// (drafted, accepted) so far.
    pub fn get(&self) -> (usize, usize) {
        (
            self.drafted.load(Ordering::Relaxed),
            self.accepted.load(Ordering::Relaxed),
        )
    }
}

/// Ids of one vocabulary in the other. Text tokens are matched by their string (English-only
/// and multilingual Whisper have different BPE vocabularies: only a few hundred ids coincide,
/// but most English tokens exist in both); special tokens by name; timestamps by offset.
struct TokenMap {
    /// Assistant id → main id (`u32::MAX`: none).
    a2m: Vec<u32>,
    /// Main id → assistant id for the ids with one equivalent (`u32::MAX`: none; those are
    /// re-tokenised as text).
    m2a: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl TokenMap {
    fn new(main: &Whisper, asst: &Whisper) -> Self {
        let (mc, ac) = (&main.config, &asst.config);
        let mut index: HashMap<String, u32> = HashMap::new();
        for id in 0..mc.special.timestamp_begin {
            if let Some(s) = main.tokenizer.id_to_token(id) {
                index.insert(s, id);
            }
        }
        let mut a2m = vec![NONE; ac.n_vocab];
        let mut m2a = vec![NONE; mc.n_vocab];
        for (id, slot) in a2m.iter_mut().enumerate() {
            let id = id as u32;
            let m = if id >= ac.special.timestamp_begin {
                let m = mc.special.timestamp_begin + (id - ac.special.timestamp_begin);
                if (m as usize) < mc.n_vocab {
                    m
                } else {
                    NONE
                }
            } else {
                asst.tokenizer
                    .id_to_token(id)
                    .and_then(|s| index.get(&s).copied())
                    .unwrap_or(NONE)
            };
            *slot = m;
            if m != NONE {
                m2a[m as usize] = id;
            }
        }
        Self { a2m, m2a }
    }
}

impl<'m> Assistant<'m> {
    /// Pairs `assistant` with `main`: both must take the same log-mel input (n_mels).
    pub fn new(main: &Whisper, assistant: &'m Whisper, draft_tokens: usize) -> Result<Self> {
        if main.config.n_mels != assistant.config.n_mels {
            return Err(Error::invalid_input(format!(
                "the assistant model takes {} mel bands and the main model {}; they must match",
                assistant.config.n_mels, main.config.n_mels
            )));
        }
        if draft_tokens == 0 {
            return Err(Error::invalid_input(
                "assistant draft tokens must be >= 1, got 0",
            ));
        }
        Ok(Self {
            model: assistant,
            draft_tokens,
            map: TokenMap::new(main, assistant),
            stats: SpecCounters::default(),
        })
    }

    /// (drafted, accepted) tokens over every assisted search so far.
    pub fn counts(&self) -> (usize, usize) {
        self.stats.get()
    }

    /// Whether drafts can help for a prompt of the main model: an English-only assistant only
    /// drafts English transcription.
    pub fn usable_for(&self, main: &WhisperConfig, prompt: &[u32]) -> bool {
        if self.model.config.is_multilingual || !main.is_multilingual {
            return true;
        }
        let sp = &main.special;
        let en = main.lang_id("en");
        let sot_at = prompt.iter().position(|&t| t == sp.sot).unwrap_or(0);
        let rest = &prompt[sot_at..];
        !rest.contains(&sp.translate)
            && rest
                .iter()
                .all(|&t| !main.lang_ids.iter().any(|(_, id)| *id == t) || Some(t) == en)
    }

    /// Assistant ids of main token `id` (text re-tokenised when it has no single equivalent).
    fn to_assistant(&self, main: &Whisper, id: u32) -> Vec<u32> {
        match self.map.m2a.get(id as usize) {
            Some(&a) if a != NONE => vec![a],
            _ if id < main.config.special.eot => main
                .tokenizer
                .decode(&[id])
                .ok()
                .and_then(|s| self.model.tokenizer.encode(&s).ok())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// The assistant's equivalent of a main prompt: `<|startofprev|>` and the previous text,
    /// `<|startoftranscript|>`, the language and task tokens only for a multilingual assistant,
    /// and `<|notimestamps|>`.
    pub fn prompt(&self, main: &Whisper, prompt: &[u32]) -> Vec<u32> {
        let (ms, asp) = (&main.config.special, &self.model.config.special);
        let mut out = Vec::with_capacity(prompt.len());
        for &t in prompt {
            if t == ms.sot_prev {
                out.push(asp.sot_prev);
            } else if t == ms.sot {
                out.push(asp.sot);
            } else if t == ms.no_timestamps {
                out.push(asp.no_timestamps);
            } else if t == ms.transcribe || t == ms.translate || t > ms.eot {
                // Language and task tokens: kept (by name) for a multilingual assistant.
                if self.model.config.is_multilingual {
                    if let Some(&a) = self.map.m2a.get(t as usize).filter(|&&a| a != NONE) {
                        out.push(a);
                    }
                }
            } else {
                out.extend(self.to_assistant(main, t));
            }
        }
        out
    }

    /// The assistant's logit rules, mirroring the main model's (drafts only need to be likely,
    /// not exact).
    pub fn rules(&self, main_rules: &LogitRules, suppress_blank: bool) -> LogitRules {
        let c = &self.model.config;
        let sp = &c.special;
        let begin = if suppress_blank {
            c.begin_suppress_tokens.clone()
        } else {
            Vec::new()
        };
        let ts = main_rules
            .timestamps()
            .map(|t| super::logits::TimestampIds {
                eot: sp.eot,
                no_timestamps: sp.no_timestamps,
                timestamp_begin: sp.timestamp_begin,
                timestamp_end: c.n_vocab as u32 - 1,
                max_initial_timestamp: sp.timestamp_begin
                    + (t.max_initial_timestamp - t.timestamp_begin),
            });
        let mut suppress = c.suppress_tokens.clone();
        suppress.extend([sp.transcribe, sp.translate, sp.sot, sp.sot_prev, sp.sot_lm]);
        suppress.extend([sp.no_speech]);
        LogitRules::new(suppress, begin, ts)
    }
}

/// A decoder over one per-request cache whose every position's logits come back.
pub(crate) trait SeqModel {
    /// Width of a logits row.
    fn vocab_size(&self) -> usize;
    /// Feeds `tokens` row-major `[rows, L]` at the cache's current length → logits
    /// `[rows, L, V]` of every new position, each the bits a one-token step there gives.
    fn feed_all(&mut self, tokens: &[u32], rows: usize) -> Result<Vec<f32>>;
    /// Feeds `tokens` `[rows, L]` → logits `[rows, V]` of position `pick[r]` of each row.
    fn feed_pick(&mut self, tokens: &[u32], rows: usize, pick: &[u32]) -> Result<Vec<f32>>;
    /// Positions cached.
    fn cached(&self) -> usize;
    /// Forgets the positions from `len` on.
    fn truncate(&mut self, len: usize) -> Result<()>;
    /// Keeps/reorders rows: new row `i` = old row `indices[i]`.
    fn keep_rows(&mut self, indices: &[u32]) -> Result<()>;
    /// Checked once per round.
    fn check_cancel(&self) -> Result<()>;
}

/// Per-row sequences fed into a [`SeqModel`] whose cache has one length for every row: each
/// call feeds every row's tokens past the common cached prefix (padded to one width), takes the
/// logits of each row's last token, then rolls the cache back to the positions that hold real
/// tokens of every row.
struct Lagged<M> {
    model: M,
    /// Tokens at the cached positions, per row.
    fed: Vec<Vec<u32>>,
    pad: u32,
}

impl<M: SeqModel> Lagged<M> {
    /// Next-token logits `[rows, V]` after each row's whole `seqs[r]` (non-empty past the
    /// part of the cache that still matches it).
    fn next_logits(&mut self, seqs: &[Vec<u32>]) -> Result<Vec<f32>> {
        let v = self.model.vocab_size();
        // Roll back to the longest prefix every row still agrees with (keeping one token to
        // feed per row).
        let mut keep = self.model.cached();
        for (f, s) in self.fed.iter().zip(seqs) {
            let common = f.iter().zip(s).take_while(|(a, b)| a == b).count();
            keep = keep.min(common).min(s.len() - 1);
        }
        self.model.truncate(keep)?;
        let width = seqs.iter().map(|s| s.len() - keep).max().unwrap_or(1);
        let rows = seqs.len();
        let mut flat = Vec::with_capacity(rows * width);
        for s in seqs {
            flat.extend_from_slice(&s[keep..]);
            flat.extend(std::iter::repeat_n(self.pad, width - (s.len() - keep)));
        }
        let pick: Vec<u32> = seqs.iter().map(|s| (s.len() - keep - 1) as u32).collect();
        let out = self.model.feed_pick(&flat, rows, &pick)?;
        debug_assert_eq!(out.len(), rows * v);
        let real = seqs.iter().map(Vec::len).min().unwrap_or(0);
        self.model.truncate(real)?;
        for (f, s) in self.fed.iter_mut().zip(seqs) {
            f.clear();
            f.extend_from_slice(&s[..real]);
        }
        Ok(out)
    }

    fn keep_rows(&mut self, indices: &[u32]) -> Result<()> {
        self.model.keep_rows(indices)?;
        self.fed = indices
            .iter()
            .map(|&i| self.fed[i as usize].clone())
            .collect();
        Ok(())
    }
}

/// Where the drafts of [`speculative_greedy`] come from: an assistant model
/// ([`ModelDrafter`]) or reference token sequences ([`super::lookup::LookupDrafter`]). Rows are
/// indexed as the live rows of the search (`keep_rows` follows the search's own).
pub(crate) trait Drafter {
    /// Most tokens drafted per row and round.
    fn max_draft(&self) -> usize;
    /// Drafts, in the main model's ids, at most `budgets[i]` tokens for live row `i`, whose
    /// tokens so far are `seqs[i]`.
    fn draft(&mut self, seqs: &[&[u32]], budgets: &[usize]) -> Result<Vec<Vec<u32>>>;
    /// Live row `i` accepted the first `accepted` tokens of its last draft, then the main model
    /// chose `own` (`None`: the row is finished).
    fn advance(&mut self, i: usize, accepted: usize, own: Option<u32>);
    /// Keeps/reorders live rows: new row `i` = old row `keep[i]`.
    fn keep_rows(&mut self, keep: &[u32]) -> Result<()>;
    /// Counts a finished search's drafted and accepted tokens.
    fn record(&self, drafted: usize, accepted: usize);
}

/// Drafts from an assistant Whisper decoding the same windows.
pub(crate) struct ModelDrafter<'a, A> {
    assistant: &'a Assistant<'a>,
    main_model: &'a Whisper,
    asst: Lagged<A>,
    rules: &'a LogitRules,
    /// Per live row: the assistant's prompt, then its ids of the main tokens so far.
    a_seqs: Vec<Vec<u32>>,
    a_prompt_lens: Vec<usize>,
    /// The last drafts, in assistant ids.
    drafts: Vec<Vec<u32>>,
    /// Whether the first round has mirrored the tokens chosen before it.
    started: bool,
}

impl<'a, A: SeqModel> ModelDrafter<'a, A> {
    /// `asst` is the assistant's decoder with an empty cache, `asst_prompts` its prompt per
    /// row, `rules` its logit rules ([`Assistant::rules`]).
    pub fn new(
        assistant: &'a Assistant<'a>,
        main_model: &'a Whisper,
        asst: A,
        asst_prompts: Vec<Vec<u32>>,
        rules: &'a LogitRules,
    ) -> Self {
        let rows = asst_prompts.len();
        Self {
            assistant,
            main_model,
            asst: Lagged {
                model: asst,
                fed: vec![Vec::new(); rows],
                pad: assistant.model.config.special.eot,
            },
            rules,
            a_prompt_lens: asst_prompts.iter().map(Vec::len).collect(),
            a_seqs: asst_prompts,
            drafts: vec![Vec::new(); rows],
            started: false,
        }
    }
}

impl<A: SeqModel> Drafter for ModelDrafter<'_, A> {
    fn max_draft(&self) -> usize {
        self.assistant.draft_tokens
    }

    fn draft(&mut self, seqs: &[&[u32]], budgets: &[usize]) -> Result<Vec<Vec<u32>>> {
        let av = self.asst.model.vocab_size();
        let a_eot = self.assistant.model.config.special.eot;
        let a_tb = self.assistant.model.config.special.timestamp_begin;
        if !self.started {
            // The first round: the assistant's ids of the main tokens chosen from the prompt's
            // logits (later ones arrive through `advance`).
            self.started = true;
            for (a, s) in self.a_seqs.iter_mut().zip(seqs) {
                for &t in *s {
                    a.extend(self.assistant.to_assistant(self.main_model, t));
                }
            }
        }
        let rows = seqs.len();
        let mut drafts: Vec<Vec<u32>> = vec![Vec::new(); rows];
        let mut drafting: Vec<bool> = budgets.iter().map(|&b| b > 0).collect();
        let mut a_gen: Vec<Vec<u32>> = self
            .a_seqs
            .iter()
            .zip(&self.a_prompt_lens)
            .map(|(a, &p)| a[p..].to_vec())
            .collect();
        for _ in 0..self.assistant.draft_tokens {
            if !drafting.iter().any(|&d| d) {
                break;
            }
            let cur: Vec<Vec<u32>> = self
                .a_seqs
                .iter()
                .zip(&drafts)
                .map(|(a, d)| a.iter().chain(d).copied().collect())
                .collect();
            let logits = self.asst.next_logits(&cur)?;
            for (i, d) in drafts.iter_mut().enumerate() {
                if !drafting[i] {
                    continue;
                }
                let mut row = logits[i * av..(i + 1) * av].to_vec();
                self.rules.apply(&mut row, &a_gen[i]);
                let t = argmax(&row) as u32;
                let m = self
                    .assistant
                    .map
                    .a2m
                    .get(t as usize)
                    .copied()
                    .unwrap_or(NONE);
                let is_text_or_ts = t < a_eot || t >= a_tb;
                if m == NONE || !(is_text_or_ts || t == a_eot) {
                    drafting[i] = false;
                    continue;
                }
                d.push(t);
                a_gen[i].push(t);
                if t == a_eot || d.len() >= budgets[i] {
                    drafting[i] = false;
                }
            }
        }
        let main = drafts
            .iter()
            .map(|d| {
                d.iter()
                    .map(|&t| self.assistant.map.a2m[t as usize])
                    .collect()
            })
            .collect();
        self.drafts = drafts;
        Ok(main)
    }

    fn advance(&mut self, i: usize, accepted: usize, own: Option<u32>) {
        // The assistant's sequence follows the main one: accepted drafts, then the assistant
        // ids of the main model's own token.
        let a = &mut self.a_seqs[i];
        a.extend_from_slice(&self.drafts[i][..accepted]);
        if let Some(own) = own {
            a.extend(self.assistant.to_assistant(self.main_model, own));
        }
    }

    fn keep_rows(&mut self, keep: &[u32]) -> Result<()> {
        self.asst.keep_rows(keep)?;
        let pick = |v: &Vec<Vec<u32>>| keep.iter().map(|&i| v[i as usize].clone()).collect();
        self.a_seqs = pick(&self.a_seqs);
        self.drafts = pick(&self.drafts);
        self.a_prompt_lens = keep
            .iter()
            .map(|&i| self.a_prompt_lens[i as usize])
            .collect();
        Ok(())
    }

    fn record(&self, drafted: usize, accepted: usize) {
        self.assistant.stats.add(drafted, accepted);
    }
}

/// Greedy search with drafts from `drafter`, equal to [`super::greedy::greedy_search`] with
/// [`super::greedy::Sampler::Argmax`].
///
/// `main` holds the cache after the prompt (`prompt_len` positions, the same for every row) and
/// `first` its logits `[rows, V]`; `n_ctx` is the main model's text context. Returns one
/// hypothesis per row.
pub(crate) fn speculative_greedy<M: SeqModel, D: Drafter>(
    main: &mut M,
    n_ctx: usize,
    first: Vec<f32>,
    rows: usize,
    prompts: &[Vec<u32>],
    params: &SearchParams<'_>,
    drafter: &mut D,
) -> Result<Vec<Hypothesis>> {
    let SearchParams {
        rules,
        eot,
        max_len,
        length_penalty,
        forced,
    } = *params;
    if !forced.is_empty() {
        return Err(Error::internal(
            "speculative greedy search takes no forced tokens",
        ));
    }
    let v = main.vocab_size();
    let k = drafter.max_draft().max(1);
    let mut seqs: Vec<Vec<u32>> = vec![Vec::new(); rows];
    let mut sums = vec![0f32; rows];
    // Whether a row's last-window hold was used (`LogitRules::apply_row`), as in greedy_search.
    let mut held = vec![false; rows];
    let mut done = vec![max_len == 0; rows];
    // The first token from the prompt's logits, exactly as greedy_search's first step.
    if max_len > 0 {
        for r in 0..rows {
            let mut row = first[r * v..(r + 1) * v].to_vec();
            rules.apply_row(&mut row, &seqs[r], r, &mut held[r]);
            log_softmax_in_place(&mut row);
            let t = argmax(&row) as u32;
            sums[r] += row[t as usize];
            if t == eot {
                done[r] = true;
            } else {
                seqs[r].push(t);
                done[r] = seqs[r].len() >= max_len;
            }
        }
    }
    // Live rows (original indices) in cache row order.
    let mut active: Vec<usize> = (0..rows).filter(|&r| !done[r]).collect();
    if active.len() != rows {
        if active.is_empty() {
            return Ok(finish(seqs, sums, length_penalty));
        }
        let keep: Vec<u32> = active.iter().map(|&r| r as u32).collect();
        main.keep_rows(&keep)?;
        drafter.keep_rows(&keep)?;
    }
    let (mut drafted_total, mut accepted_total) = (0usize, 0usize);
    let mut row_logits = vec![0f32; v];
    while !active.is_empty() {
        main.check_cancel()?;
        // Each row's tokens not yet in the main cache (at least its last token).
        let c = main.cached();
        let unfed: Vec<Vec<u32>> = active
            .iter()
            .map(|&r| {
                let full = prompts[r].len() + seqs[r].len();
                (c..full)
                    .map(|p| {
                        if p < prompts[r].len() {
                            prompts[r][p]
                        } else {
                            seqs[r][p - prompts[r].len()]
                        }
                    })
                    .collect()
            })
            .collect();
        let u_min = unfed.iter().map(Vec::len).min().unwrap_or(1);
        // Room left: the context, and no row needs positions past its last possible token.
        let width_cap = (u_min + k).min(n_ctx - c);
        let budgets: Vec<usize> = active
            .iter()
            .zip(&unfed)
            .map(|(&r, u)| {
                width_cap
                    .saturating_sub(u.len())
                    .min(max_len.saturating_sub(seqs[r].len() + 1))
            })
            .collect();
        let views: Vec<&[u32]> = active.iter().map(|&r| seqs[r].as_slice()).collect();
        let drafts = drafter.draft(&views, &budgets)?;
        // One verification pass of the main model over unfed + drafted tokens of every row.
        let width = unfed
            .iter()
            .zip(&drafts)
            .map(|(u, d)| u.len() + d.len())
            .max()
            .unwrap_or(1)
            .min(width_cap)
            .max(1);
        let mut flat = Vec::with_capacity(active.len() * width);
        for (u, d) in unfed.iter().zip(&drafts) {
            let row: Vec<u32> = u.iter().chain(d).copied().take(width).collect();
            drafted_total += row.len().saturating_sub(u.len());
            flat.extend_from_slice(&row);
            flat.extend(std::iter::repeat_n(eot, width - row.len()));
        }
        let all = main.feed_all(&flat, active.len())?;
        let mut valid = Vec::with_capacity(active.len());
        for (i, &r) in active.iter().enumerate() {
            let u = unfed[i].len();
            if u > width {
                // A row far ahead: it only fed known tokens this round.
                valid.push(c + width);
                continue;
            }
            let fed = &flat[i * width..(i + 1) * width];
            let real = (u + drafts[i].len()).min(width);
            let mut accepted = 0;
            let mut j = u - 1;
            loop {
                let at = (i * width + j) * v;
                row_logits.copy_from_slice(&all[at..at + v]);
                rules.apply_row(&mut row_logits, &seqs[r], r, &mut held[r]);
                log_softmax_in_place(&mut row_logits);
                let t = argmax(&row_logits) as u32;
                sums[r] += row_logits[t as usize];
                if t == eot {
                    done[r] = true;
                    break;
                }
                seqs[r].push(t);
                if seqs[r].len() >= max_len {
                    done[r] = true;
                    break;
                }
                if j + 1 < real && fed[j + 1] == t {
                    accepted += 1;
                    j += 1;
                } else {
                    break;
                }
            }
            accepted_total += accepted;
            valid.push(c + (u + accepted).min(width));
            let own = (!done[r]).then(|| *seqs[r].last().expect("a token was kept"));
            drafter.advance(i, accepted, own);
        }
        let still: Vec<usize> = (0..active.len()).filter(|&i| !done[active[i]]).collect();
        let new_len = still.iter().map(|&i| valid[i]).min().unwrap_or(c);
        main.truncate(new_len.max(c))?;
        if still.len() != active.len() {
            if still.is_empty() {
                break;
            }
            let keep: Vec<u32> = still.iter().map(|&i| i as u32).collect();
            main.keep_rows(&keep)?;
            drafter.keep_rows(&keep)?;
            active = still.iter().map(|&i| active[i]).collect();
        }
    }
    drafter.record(drafted_total, accepted_total);
    Ok(finish(seqs, sums, length_penalty))
}

fn finish(seqs: Vec<Vec<u32>>, sums: Vec<f32>, length_penalty: f32) -> Vec<Hypothesis> {
    seqs.into_iter()
        .zip(sums)
        .map(|(t, s)| Hypothesis::finalize(t, s, length_penalty))
        .collect()
}
