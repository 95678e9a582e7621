//! Beam search with CTranslate2's bookkeeping (what faster-whisper runs at temperature 0):
//! the first step expands one row into the beam, `2 * beam` candidates are ranked per step
//! so finished (EOT) candidates can be replaced by live ones, hypotheses are ranked by
//! `sum_logprob / len^length_penalty`, and the search of a row stops once
//! `round(beam * patience)` hypotheses finished.

use dicta_core::Result;
use rayon::prelude::*;

use super::greedy::{Hypothesis, SearchParams, StepModel};
use super::logits::log_sum_exp;

/// One ranked candidate: the beam it extends, the token, the cumulative log-probability.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    origin: usize,
    token: u32,
    score: f32,
}

/// Live state of one input row.
struct RowState {
    /// Original input row.
    input: usize,
    seqs: Vec<Vec<u32>>,
    scores: Vec<f32>,
    /// Per beam: whether its last-window hold was used (`LogitRules::apply_row`).
    held: Vec<bool>,
    finished: Vec<(Vec<u32>, f32)>,
    top_beam_finished: bool,
}

/// Beam search on `rows` input rows. `logits` holds the first step's raw logits `[rows, V]`
/// (one cache row per input row, not yet expanded, after the prompt and the forced tokens).
/// Returns the best hypothesis per row.
pub fn beam_search<M: StepModel>(
    model: &mut M,
    mut logits: Vec<f32>,
    rows: usize,
    beam_size: usize,
    patience: f32,
    params: &SearchParams<'_>,
) -> Result<Vec<Hypothesis>> {
    if let Some(done) = params.forced_only(rows) {
        return Ok(done);
    }
    let v = model.vocab_size();
    let num_candidates = 2 * beam_size;
    let forced = params.forced.len();
    let max_finished = ((beam_size as f32) * patience).round().max(1.0) as usize;
    let early_exit = params.length_penalty == 0.0;
    let mut results: Vec<Option<Hypothesis>> = vec![None; rows];
    let mut states: Vec<RowState> = (0..rows)
        .map(|input| RowState {
            input,
            seqs: vec![params.forced.to_vec()],
            scores: vec![0.0],
            held: vec![false],
            finished: Vec::new(),
            top_beam_finished: false,
        })
        .collect();
    let mut cands: Vec<Candidate> = Vec::with_capacity(beam_size * num_candidates);
    // `step`: the hypotheses' length so far.
    for step in forced..params.max_len {
        let last_step = step + 1 == params.max_len;
        // Cache rows per state at this step: 1 before the first expansion, beam_size after.
        let width = if step == forced { 1 } else { beam_size };
        // Each row's rules, log-softmax and top candidates (passes over the whole vocabulary)
        // on every thread: run one row at a time they left the other core idle for ≈ 7% of a
        // beam-5 transcription. Per row: its candidates (token, log-probability) and its hold.
        let ranked: Vec<(Vec<(u32, f32)>, bool)> = logits[..states.len() * width * v]
            .par_chunks_mut(v)
            .enumerate()
            .map(|(r, row)| {
                let (st, k) = (&states[r / width], r % width);
                let mut held = st.held[k];
                params
                    .rules
                    .apply_row(row, &st.seqs[k], st.input, &mut held);
                // The log-softmax `x - lse` of each entry as the top-k pass reads it (the same
                // values `log_softmax_in_place` would store; the row is not needed after).
                let lse = log_sum_exp(row);
                let mut top = Vec::with_capacity(num_candidates);
                top_k_into(row, lse, num_candidates, |token, lp| top.push((token, lp)));
                (top, held)
            })
            .collect();
        let mut select: Vec<u32> = Vec::new();
        let mut next_tokens: Vec<u32> = Vec::new();
        let mut next_states = Vec::with_capacity(states.len());
        for (pos, mut st) in states.into_iter().enumerate() {
            cands.clear();
            for k in 0..width {
                let (top, held) = &ranked[pos * width + k];
                st.held[k] = *held;
                let base = st.scores[k];
                cands.extend(top.iter().map(|&(token, lp)| Candidate {
                    origin: k,
                    token,
                    score: base + lp,
                }));
            }
            // Stable sort keeps lower beam / lower token first on exact ties.
            cands.sort_by(|a, b| b.score.total_cmp(&a.score));
            cands.truncate(num_candidates);
            // Tiny vocabularies (or heavy masking) can leave fewer candidates than beams; pad
            // with hopeless copies so every row keeps exactly `beam_size` cache rows.
            let pad = Candidate {
                score: f32::NEG_INFINITY,
                ..cands.first().copied().unwrap_or(Candidate {
                    origin: 0,
                    token: params.eot,
                    score: f32::NEG_INFINITY,
                })
            };
            cands.resize(num_candidates, pad);
            if forced > 0 && step == forced {
                // CTranslate2 after a forced prefix: an end-of-text candidate other than the
                // best, at the first free step, becomes a hopeless beam (token 0 at -1e10)
                // rather than a finished hypothesis (its `update_sample_with_prefix`).
                for c in cands.iter_mut().skip(1) {
                    if c.token == params.eot {
                        (c.token, c.score) = (0, -1e10);
                    }
                }
            }
            let mut new_seqs = Vec::with_capacity(beam_size);
            let mut new_scores = Vec::with_capacity(beam_size);
            let mut new_held = Vec::with_capacity(beam_size);
            let mut secondary = beam_size;
            for k in 0..beam_size {
                let mut chosen = k;
                let c = cands[k];
                if c.token == params.eot || last_step {
                    if k == 0 {
                        st.top_beam_finished = true;
                    }
                    let mut toks = st.seqs[c.origin].clone();
                    if c.token != params.eot {
                        toks.push(c.token);
                    }
                    st.finished.push((toks, c.score));
                    if let Some(j) =
                        (secondary..cands.len()).find(|&j| cands[j].token != params.eot)
                    {
                        chosen = j;
                        secondary = j + 1;
                    }
                }
                let c = cands[chosen];
                let mut seq = st.seqs[c.origin].clone();
                seq.push(c.token);
                new_seqs.push(seq);
                new_scores.push(c.score);
                new_held.push(st.held[c.origin]);
                select.push((pos * width + c.origin) as u32);
                next_tokens.push(c.token);
            }
            let done = last_step
                || if early_exit {
                    st.top_beam_finished && !st.finished.is_empty()
                } else {
                    st.finished.len() >= max_finished
                };
            if done {
                results[st.input] = Some(best_finished(&st.finished, params.length_penalty));
                let n = new_seqs.len();
                select.truncate(select.len() - n);
                next_tokens.truncate(next_tokens.len() - n);
            } else {
                st.seqs = new_seqs;
                st.scores = new_scores;
                st.held = new_held;
                next_states.push(st);
            }
        }
        states = next_states;
        if states.is_empty() {
            break;
        }
        model.select_rows(&select)?;
        model.step_into(&next_tokens, &mut logits)?;
    }
    Ok(results
        .into_iter()
        .map(|r| {
            r.unwrap_or(Hypothesis {
                tokens: Vec::new(),
                sum_logprob: f32::NEG_INFINITY,
                score: f32::NEG_INFINITY,
            })
        })
        .collect())
}

fn best_finished(finished: &[(Vec<u32>, f32)], length_penalty: f32) -> Hypothesis {
    finished
        .iter()
        .map(|(t, s)| Hypothesis::finalize(t.clone(), *s, length_penalty))
        // max_by keeps the last of equal maxima; reverse so the earliest finished wins ties.
        .rev()
        .max_by(|a, b| a.score.total_cmp(&b.score))
        .expect("a finished row has at least one hypothesis")
}

/// Calls `emit(token, x - lse)` for the `k` largest finite `x - lse` over the entries `x` of
/// `row`, best first (earlier tokens first on ties).
fn top_k_into(row: &[f32], lse: f32, k: usize, mut emit: impl FnMut(u32, f32)) {
    // Small k (<= 2 * beam): keep a sorted buffer instead of sorting the whole vocabulary.
    let mut best: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
    let offer = |best: &mut Vec<(f32, u32)>, i: usize, raw: f32| {
        let x = raw - lse;
        if x == f32::NEG_INFINITY || (best.len() == k && x <= best[k - 1].0) {
            return;
        }
        let at = best.partition_point(|&(b, _)| b >= x);
        best.insert(at, (x, i as u32));
        best.truncate(k);
    };
    // Once `k` entries are held, a block of 16 of which none passes the test above (one
    // vectorised compare per entry instead of a branch) is skipped whole: nothing in it would
    // have entered, so the result is the same. Beam search ranks every row of every step this
    // way (40 rows × 51 864 entries a step at beam 5 over 8 windows).
    const BLOCK: usize = 16;
    let mut blocks = row.chunks_exact(BLOCK);
    for (b, block) in (&mut blocks).enumerate() {
        if k > 0 && best.len() == k {
            // An entry passes unless `x <= thr`: when `x > thr`, or either is NaN.
            let thr = best[k - 1].0;
            let passes = |raw: f32| {
                let x = raw - lse;
                x > thr || x.is_nan()
            };
            if !thr.is_nan() && !block.iter().fold(false, |any, &raw| any | passes(raw)) {
                continue;
            }
        }
        for (j, &raw) in block.iter().enumerate() {
            offer(&mut best, b * BLOCK + j, raw);
        }
    }
    let tail = row.len() - blocks.remainder().len();
    for (j, &raw) in blocks.remainder().iter().enumerate() {
        offer(&mut best, tail + j, raw);
    }
    for (x, i) in best {
        emit(i, x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::whisper::greedy::tests::{params, TableModel};
    use crate::whisper::greedy::{greedy_search, Sampler};
    use crate::whisper::logits::{log_softmax_in_place, LogitRules};

    /// Exhaustive reference: every sequence up to `max_len` tokens; best by normalised score.
    fn brute_force(m: &TableModel, rules: &LogitRules, max_len: usize) -> Hypothesis {
        brute_force_from(m, rules, max_len, &[])
    }

    /// [`brute_force`] over the sequences that start with `forced` (log-probability 0).
    fn brute_force_from(
        m: &TableModel,
        rules: &LogitRules,
        max_len: usize,
        forced: &[u32],
    ) -> Hypothesis {
        let mut best: Option<Hypothesis> = None;
        let mut stack: Vec<(Vec<u32>, f32)> = vec![(forced.to_vec(), 0.0)];
        while let Some((seq, sum)) = stack.pop() {
            let mut l = m.logits_for(&seq);
            rules.apply(&mut l, &seq);
            log_softmax_in_place(&mut l);
            for (t, &lp) in l.iter().enumerate() {
                if lp == f32::NEG_INFINITY {
                    continue;
                }
                let mut s2 = seq.clone();
                let done = t == 0 || s2.len() + 1 == max_len;
                if t != 0 {
                    s2.push(t as u32);
                }
                if done {
                    let h = Hypothesis::finalize(s2, sum + lp, 1.0);
                    if best.as_ref().is_none_or(|b| h.score > b.score) {
                        best = Some(h);
                    }
                } else {
                    stack.push((s2, sum + lp));
                }
            }
        }
        best.unwrap()
    }

    /// Forced tokens (faster-whisper's `prefix`) start every hypothesis, count in its length
    /// and add nothing to its log-probability; the search continues from them; and where they
    /// fill `max_len` they are the hypothesis.
    #[test]
    fn forced_tokens_start_every_hypothesis() {
        let forced = [2u32, 3];
        // End-of-text (0) is blank-suppressed at the first free token, as by default.
        let rules = LogitRules::new(vec![], vec![0], None).with_forced(forced.len());
        let feed = || {
            let mut m = TableModel::new(4, 1);
            for &t in &forced {
                m.step(&[t]).unwrap();
            }
            m
        };
        let expect = brute_force_from(&feed(), &rules, 5, &forced);
        assert_eq!(expect.tokens[..2], forced);
        let mut m = feed();
        let f = m.first();
        let p = SearchParams {
            forced: &forced,
            ..params(&rules, 5)
        };
        let got = beam_search(&mut m, f, 1, 64, 100.0, &p).unwrap();
        assert_eq!(got[0].tokens, expect.tokens);
        assert!((got[0].score - expect.score).abs() < 1e-4);
        assert!((got[0].sum_logprob - expect.sum_logprob).abs() < 1e-4);
        let mut m = feed();
        let f = m.first();
        let greedy = greedy_search(&mut m, f, 1, &p, Sampler::Argmax).unwrap();
        assert_eq!(greedy[0].tokens[..2], forced);
        assert!(greedy[0].tokens.len() > 2);
        let short = SearchParams {
            forced: &forced,
            ..params(&rules, 1)
        };
        let mut m = feed();
        let f = m.first();
        let got = beam_search(&mut m, f, 1, 5, 1.0, &short).unwrap();
        assert_eq!(
            (got[0].tokens.as_slice(), got[0].sum_logprob),
            (&forced[..1], 0.0)
        );
    }

    #[test]
    fn wide_beam_finds_the_exhaustive_optimum() {
        // With beam >= V^(max_len-1) nothing is pruned before max_len.
        let rules = LogitRules::new(vec![], vec![], None);
        let m = TableModel::new(4, 1);
        let expect = brute_force(&m, &rules, 4);
        let mut m = TableModel::new(4, 1);
        let f = m.first();
        let got = beam_search(&mut m, f, 1, 64, 100.0, &params(&rules, 4)).unwrap();
        assert_eq!(got[0].tokens, expect.tokens);
        assert!((got[0].score - expect.score).abs() < 1e-4);
    }

    #[test]
    fn beam_one_equals_greedy_when_it_ends_naturally() {
        let rules = LogitRules::new(vec![3], vec![], None);
        let mut m = TableModel::new(12, 1);
        let f = m.first();
        let g = greedy_search(&mut m, f, 1, &params(&rules, 60), Sampler::Argmax).unwrap();
        let mut m = TableModel::new(12, 1);
        let f = m.first();
        let b = beam_search(&mut m, f, 1, 1, 1.0, &params(&rules, 60)).unwrap();
        assert_eq!(b[0].tokens, g[0].tokens);
        assert!((b[0].sum_logprob - g[0].sum_logprob).abs() < 1e-4);
    }

    #[test]
    fn beam_never_worse_than_greedy_and_batch_invariant() {
        let rules = LogitRules::new(vec![5], vec![], None);
        let starts = [vec![1u32], vec![2, 3], vec![4], vec![6, 6]];
        let mut m = TableModel::new(20, starts.len());
        m.histories = starts.to_vec();
        let f = m.first();
        let batched = beam_search(&mut m, f, starts.len(), 5, 1.0, &params(&rules, 40)).unwrap();
        for (i, s) in starts.iter().enumerate() {
            let mut m1 = TableModel::new(20, 1);
            m1.histories = vec![s.clone()];
            let f = m1.first();
            let alone = beam_search(&mut m1, f, 1, 5, 1.0, &params(&rules, 40)).unwrap();
            assert_eq!(alone[0], batched[i], "row {i}");
            let mut m1 = TableModel::new(20, 1);
            m1.histories = vec![s.clone()];
            let f = m1.first();
            let g = greedy_search(&mut m1, f, 1, &params(&rules, 40), Sampler::Argmax).unwrap();
            assert!(alone[0].score >= g[0].score - 1e-5);
            assert!(alone[0].tokens.iter().all(|&t| t != 5 && t != 0));
        }
    }

    /// The block-skipping top-k equals the plain scan on rows of ties, masked entries, NaN and
    /// infinities, with finite and infinite `lse`.
    #[test]
    fn top_k_skipping_blocks_equals_the_plain_scan() {
        fn plain(row: &[f32], lse: f32, k: usize) -> Vec<(u32, u32)> {
            let mut best: Vec<(f32, u32)> = Vec::new();
            for (i, &raw) in row.iter().enumerate() {
                let x = raw - lse;
                if x == f32::NEG_INFINITY || (best.len() == k && x <= best[k - 1].0) {
                    continue;
                }
                let at = best.partition_point(|&(b, _)| b >= x);
                best.insert(at, (x, i as u32));
                best.truncate(k);
            }
            best.into_iter().map(|(x, i)| (i, x.to_bits())).collect()
        }
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        for case in 0..300 {
            let n = 1 + (next() % 700) as usize;
            let row: Vec<f32> = (0..n)
                .map(|_| match next() % 20 {
                    0 => f32::NEG_INFINITY,
                    1 if case % 7 == 0 => f32::NAN,
                    2 if case % 11 == 0 => f32::INFINITY,
                    // Few distinct values: many ties.
                    3..=9 => (next() % 5) as f32 * 0.5,
                    _ => (next() % 20_000) as f32 / 1000.0 - 10.0,
                })
                .collect();
            let lse = match case % 5 {
                0 => f32::NEG_INFINITY,
                1 => 0.0,
                _ => (next() % 3000) as f32 / 100.0,
            };
            for k in [1, 3, 10] {
                let mut got = Vec::new();
                top_k_into(&row, lse, k, |t, x| got.push((t, x.to_bits())));
                assert_eq!(got, plain(&row, lse, k), "case {case}, k {k}");
            }
        }
    }

    #[test]
    fn top_k_orders_and_skips_masked() {
        let row = [0.5, f32::NEG_INFINITY, 2.0, 1.0, 2.0];
        let mut out = Vec::new();
        top_k_into(&row, 0.0, 3, |t, x| out.push((t, x)));
        assert_eq!(out, vec![(2, 2.0), (4, 2.0), (3, 1.0)]);
        // The same entries and values as a top-k over the stored log-softmax.
        let mut row = [0.3, -1.7, f32::NEG_INFINITY, 2.25, 0.3, 5.5, -0.2];
        let lse = log_sum_exp(&row);
        let mut fused = Vec::new();
        top_k_into(&row, lse, 4, |t, x| fused.push((t, x)));
        log_softmax_in_place(&mut row);
        let mut stored = Vec::new();
        top_k_into(&row, 0.0, 4, |t, x| stored.push((t, x)));
        assert_eq!(fused, stored);
    }
}
