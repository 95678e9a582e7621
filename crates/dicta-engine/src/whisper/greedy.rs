//! Greedy search and temperature sampling over a batch of rows, plus the small model
//! interface both searches drive.

use dicta_core::Result;
use rand::rngs::StdRng;
use rand::Rng;
use rayon::prelude::*;

use dicta_models::kernels::sampling_weights;

use super::logits::{argmax, log_softmax_in_place, LogitRules};

/// What a search needs from the model: one decoder step on the rows of a per-request cache.
/// The real implementation wraps `dicta_models::whisper::Whisper` and its `DecoderCache`;
/// keeping the search behind this trait lets it be tested on small synthetic models.
pub trait StepModel {
    /// Vocabulary size `V` (width of a logits row).
    fn vocab_size(&self) -> usize;
    /// Feeds one new token per row (`tokens.len()` = current number of rows) and returns
    /// the next-token logits, row-major `[rows, V]`.
    fn step(&mut self, tokens: &[u32]) -> Result<Vec<f32>>;
    /// [`Self::step`] into `logits`, whose allocation a model may reuse.
    fn step_into(&mut self, tokens: &[u32], logits: &mut Vec<f32>) -> Result<()> {
        *logits = self.step(tokens)?;
        Ok(())
    }
    /// Reorders or drops cache rows: new row `i` = old row `indices[i]` (rows may repeat).
    fn select_rows(&mut self, indices: &[u32]) -> Result<()>;
}

/// A finished hypothesis of one row.
#[derive(Debug, Clone, PartialEq)]
pub struct Hypothesis {
    /// Sampled tokens, without EOT.
    pub tokens: Vec<u32>,
    /// Sum of the token log-probabilities, EOT included.
    pub sum_logprob: f32,
    /// `sum_logprob / len^length_penalty` (what hypotheses are ranked by).
    pub score: f32,
}

impl Hypothesis {
    pub(crate) fn finalize(tokens: Vec<u32>, sum_logprob: f32, length_penalty: f32) -> Self {
        let score = sum_logprob / (tokens.len() as f32).powf(length_penalty);
        Self {
            tokens,
            sum_logprob,
            score,
        }
    }

    /// faster-whisper's average log-probability: `sum_logprob / (len + 1)` (EOT counts).
    pub fn avg_logprob(&self) -> f32 {
        self.sum_logprob / (self.tokens.len() as f32 + 1.0)
    }
}

/// Parameters shared by the searches.
#[derive(Debug, Clone, Copy)]
pub struct SearchParams<'a> {
    /// Filters applied to every row at every step.
    pub rules: &'a LogitRules,
    /// End-of-text token.
    pub eot: u32,
    /// Maximum number of tokens per row: forced and sampled, EOT included.
    pub max_len: usize,
    /// Exponent of the length normalisation.
    pub length_penalty: f32,
    /// Tokens every row's hypothesis starts with, already fed to the model (faster-whisper's
    /// `prefix`): part of the hypothesis and its length, with log-probability 0 (CTranslate2's
    /// forced decoding prefix). The rules must be built [`LogitRules::with_forced`] its length.
    pub forced: &'a [u32],
}

impl SearchParams<'_> {
    /// The hypotheses when the forced tokens fill `max_len` (CTranslate2 ends a hypothesis
    /// inside its prefix there): `rows` copies of them, cut to `max_len`; `None` otherwise.
    pub(crate) fn forced_only(&self, rows: usize) -> Option<Vec<Hypothesis>> {
        (self.forced.len() >= self.max_len).then(|| {
            let tokens = self.forced[..self.max_len].to_vec();
            vec![Hypothesis::finalize(tokens, 0.0, self.length_penalty); rows]
        })
    }
}

/// How a token is chosen from a row of log-probabilities.
pub enum Sampler<'a> {
    /// The most probable token (temperature 0).
    Argmax,
    /// Sampling from `softmax(logprobs / temperature)`; one generator per row so a row
    /// samples the same tokens whether it is decoded alone or batched.
    Temperature {
        /// Temperature > 0.
        temperature: f32,
        /// One generator per initial row.
        rngs: &'a mut [StdRng],
    },
}

/// Runs greedy search (or sampling) on `rows` rows until each row emits EOT or reaches
/// `max_len` tokens. `logits` holds the first step's raw logits `[rows, V]` (computed from
/// the prompt and the forced tokens). Returns one hypothesis per row, in row order.
pub fn greedy_search<M: StepModel>(
    model: &mut M,
    mut logits: Vec<f32>,
    rows: usize,
    params: &SearchParams<'_>,
    sampler: Sampler<'_>,
) -> Result<Vec<Hypothesis>> {
    if let Some(done) = params.forced_only(rows) {
        return Ok(done);
    }
    let SearchParams {
        rules,
        eot,
        max_len,
        length_penalty,
        forced,
    } = *params;
    let v = model.vocab_size();
    // Sampling: the inverse temperature and each initial row's generator.
    let (inv_t, mut gens) = match sampler {
        Sampler::Argmax => (0.0, Vec::new().into_iter()),
        Sampler::Temperature { temperature, rngs } => (
            1.0 / temperature,
            rngs.iter_mut().collect::<Vec<_>>().into_iter(),
        ),
    };
    // Per original row; live rows are the cache's rows, in order (rows only ever leave).
    let mut states: Vec<RowState> = (0..rows)
        .map(|_| RowState {
            seq: forced.to_vec(),
            sum: 0.0,
            held: false,
            live: true,
            rng: gens.next(),
        })
        .collect();
    // `step`: the hypothesis' length so far.
    for step in forced.len()..max_len {
        let last_step = step + 1 == max_len;
        let mut live: Vec<(usize, &mut RowState)> = states
            .iter_mut()
            .enumerate()
            .filter(|(_, st)| st.live)
            .collect();
        // Each row's rules, log-softmax and draw are passes over the whole vocabulary; with
        // sampling (temperature fallback: `best_of` rows per window) they kept the other core
        // idle, so those rows go to every thread (a row's draw only reads its own generator).
        // Argmax rows stay on this one: no faster spread (mixed workload, session 31; the
        // 4-minute recording batched, session 32).
        let pick = |row: &mut [f32], (orig, st): &mut (usize, &mut RowState)| {
            rules.apply_row(row, &st.seq, *orig, &mut st.held);
            log_softmax_in_place(row);
            let token = if inv_t > 0.0 {
                let rng = st.rng.as_mut().expect("one generator per initial row");
                sample(row, inv_t, rng)
            } else {
                argmax(row)
            } as u32;
            st.sum += row[token as usize];
            if token != eot {
                st.seq.push(token);
            }
            token
        };
        let rows_now = live.len();
        let picked: Vec<u32> = if rows_now > 1 && inv_t > 0.0 {
            logits[..rows_now * v]
                .par_chunks_mut(v)
                .zip(live.par_iter_mut())
                .map(|(row, st)| pick(row, st))
                .collect()
        } else {
            logits[..rows_now * v]
                .chunks_mut(v)
                .zip(live.iter_mut())
                .map(|(row, st)| pick(row, st))
                .collect()
        };
        let mut keep = Vec::with_capacity(rows_now);
        let mut next = Vec::with_capacity(rows_now);
        for (pos, ((_, st), &token)) in live.iter_mut().zip(&picked).enumerate() {
            if token != eot && !last_step {
                keep.push(pos as u32);
                next.push(token);
            } else {
                st.live = false;
            }
        }
        if keep.is_empty() {
            break;
        }
        if keep.len() != rows_now {
            model.select_rows(&keep)?;
        }
        model.step_into(&next, &mut logits)?;
    }
    Ok(states
        .into_iter()
        .map(|st| Hypothesis::finalize(st.seq, st.sum, length_penalty))
        .collect())
}

/// One row of a greedy search or sampling pass.
struct RowState<'r> {
    /// Tokens chosen so far, without EOT.
    seq: Vec<u32>,
    /// Sum of their log-probabilities (EOT included once chosen).
    sum: f32,
    /// Whether the row's last-window hold was used ([`LogitRules::apply_row`]).
    held: bool,
    /// Whether the row is still in the cache (no EOT yet).
    live: bool,
    /// Its generator when sampling.
    rng: Option<&'r mut StdRng>,
}

/// Draws from `softmax(logprobs · inv_temperature)` by inverse CDF; masked (`-inf`) tokens
/// never come out. The weights are the vectorised [`sampling_weights`]; the walk goes over
/// blocks of 64 first (their sums), then inside the block the draw falls in.
fn sample(logprobs: &[f32], inv_temperature: f32, rng: &mut StdRng) -> usize {
    const BLOCK: usize = 64;
    thread_local! {
        static WEIGHTS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    WEIGHTS.with_borrow_mut(|w| {
        let total = sampling_weights(logprobs, inv_temperature, w);
        let mut target = rng.random::<f32>() * total;
        for (b, block) in w.chunks(BLOCK).enumerate() {
            let sum: f32 = block.iter().sum();
            if target >= sum {
                target -= sum;
                continue;
            }
            for (i, &p) in block.iter().enumerate() {
                if p > 0.0 {
                    if target < p {
                        return b * BLOCK + i;
                    }
                    target -= p;
                }
            }
        }
        // Rounding left the draw past the end: the last token that can come out.
        w.iter()
            .rposition(|&p| p > 0.0)
            .unwrap_or_else(|| argmax(logprobs))
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rand::SeedableRng;

    /// A tiny deterministic "language model" whose logits depend on the row's whole history
    /// (so that a wrong cache reorder changes the output): logits[t] = table[hash(history)][t].
    pub(crate) struct TableModel {
        pub v: usize,
        pub histories: Vec<Vec<u32>>,
        pub calls: usize,
    }

    impl TableModel {
        pub fn new(v: usize, rows: usize) -> Self {
            Self {
                v,
                histories: vec![Vec::new(); rows],
                calls: 0,
            }
        }

        pub fn logits_for(&self, hist: &[u32]) -> Vec<f32> {
            let mut h: u64 = 1469598103934665603;
            for &t in hist {
                h = (h ^ t as u64).wrapping_mul(1099511628211);
            }
            (0..self.v)
                .map(|t| {
                    let x = (h ^ (t as u64).wrapping_mul(0x9E3779B97F4A7C15))
                        .wrapping_mul(0xBF58476D1CE4E5B9);
                    ((x >> 40) as f32 / (1u64 << 24) as f32) * 6.0
                        // EOT (token 0) grows likelier with length so searches end.
                        + if t == 0 { hist.len() as f32 * 0.8 - 3.0 } else { 0.0 }
                })
                .collect()
        }

        pub fn first(&self) -> Vec<f32> {
            self.histories
                .iter()
                .flat_map(|h| self.logits_for(h))
                .collect()
        }
    }

    impl StepModel for TableModel {
        fn vocab_size(&self) -> usize {
            self.v
        }
        fn step(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
            assert_eq!(tokens.len(), self.histories.len());
            self.calls += 1;
            for (h, &t) in self.histories.iter_mut().zip(tokens) {
                h.push(t);
            }
            Ok(self.first())
        }
        fn select_rows(&mut self, indices: &[u32]) -> Result<()> {
            self.histories = indices
                .iter()
                .map(|&i| self.histories[i as usize].clone())
                .collect();
            Ok(())
        }
    }

    pub(crate) fn params(rules: &LogitRules, max_len: usize) -> SearchParams<'_> {
        SearchParams {
            rules,
            eot: 0,
            max_len,
            length_penalty: 1.0,
            forced: &[],
        }
    }

    fn reference_greedy(m: &TableModel, max_len: usize) -> Vec<u32> {
        let mut hist = Vec::new();
        for _ in 0..max_len {
            let mut l = m.logits_for(&hist);
            l[3] = f32::NEG_INFINITY; // suppressed below
            let t = argmax(&l) as u32;
            if t == 0 {
                break;
            }
            hist.push(t);
        }
        hist
    }

    #[test]
    fn greedy_matches_step_by_step_argmax_and_sums_logprobs() {
        let mut m = TableModel::new(12, 1);
        let rules = LogitRules::new(vec![3], vec![], None);
        let first = m.first();
        let hyp = greedy_search(&mut m, first, 1, &params(&rules, 50), Sampler::Argmax).unwrap();
        let expect = reference_greedy(&TableModel::new(12, 1), 50);
        assert_eq!(hyp[0].tokens, expect);
        // Recompute the sum of log-probs independently, EOT included.
        let mut sum = 0.0;
        let mut hist: Vec<u32> = Vec::new();
        for t in expect.iter().copied().chain(std::iter::once(0)) {
            let mut l = TableModel::new(12, 1).logits_for(&hist);
            l[3] = f32::NEG_INFINITY;
            log_softmax_in_place(&mut l);
            sum += l[t as usize];
            hist.push(t);
        }
        assert!((hyp[0].sum_logprob - sum).abs() < 1e-4);
        assert!((hyp[0].avg_logprob() - sum / (expect.len() as f32 + 1.0)).abs() < 1e-4);
    }

    #[test]
    fn max_len_keeps_the_last_token() {
        let mut m = TableModel::new(12, 1);
        let rules = LogitRules::new(vec![0], vec![], None); // EOT suppressed: never ends
        let first = m.first();
        let hyp = greedy_search(&mut m, first, 1, &params(&rules, 7), Sampler::Argmax).unwrap();
        assert_eq!(hyp[0].tokens.len(), 7);
    }

    #[test]
    fn batched_rows_equal_single_rows() {
        let rules = LogitRules::new(vec![3], vec![], None);
        let mut m = TableModel::new(16, 3);
        m.histories = vec![vec![1], vec![2, 5], vec![7]];
        let first = m.first();
        let batched =
            greedy_search(&mut m, first, 3, &params(&rules, 40), Sampler::Argmax).unwrap();
        for (i, h) in [vec![1], vec![2, 5], vec![7]].into_iter().enumerate() {
            let mut m1 = TableModel::new(16, 1);
            m1.histories = vec![h];
            let f = m1.first();
            let alone = greedy_search(&mut m1, f, 1, &params(&rules, 40), Sampler::Argmax).unwrap();
            assert_eq!(alone[0], batched[i]);
        }
    }

    /// Draws land on each token as often as `softmax(logprobs / T)` says, across the blocks
    /// of the walk, and never on a masked one.
    #[test]
    fn sample_follows_the_softmax_at_its_temperature() {
        let v = 300;
        let mut logprobs: Vec<f32> = (0..v).map(|i| ((i as f32) * 0.7).sin() * 3.0).collect();
        for i in (5..v).step_by(7) {
            logprobs[i] = f32::NEG_INFINITY;
        }
        log_softmax_in_place(&mut logprobs);
        for temperature in [0.4f32, 1.0] {
            let mut rng = StdRng::seed_from_u64(11);
            let draws = 60_000;
            let mut counts = vec![0usize; v];
            for _ in 0..draws {
                counts[sample(&logprobs, 1.0 / temperature, &mut rng)] += 1;
            }
            let w: Vec<f64> = logprobs
                .iter()
                .map(|&l| (f64::from(l) / f64::from(temperature)).exp())
                .collect();
            let total: f64 = w.iter().sum();
            for i in 0..v {
                let expect = w[i] / total * draws as f64;
                if logprobs[i] == f32::NEG_INFINITY {
                    assert_eq!(counts[i], 0, "masked token {i} drawn");
                    continue;
                }
                // Five standard deviations of a binomial count.
                let sd = (expect * (1.0 - w[i] / total)).sqrt();
                assert!(
                    (counts[i] as f64 - expect).abs() <= 5.0 * sd + 1.0,
                    "T {temperature}, token {i}: {} draws, {expect:.1} expected",
                    counts[i]
                );
            }
        }
    }

    /// Sampled rows decoded together (spread over threads) draw what each draws alone.
    #[test]
    fn sampled_rows_batched_equal_alone() {
        let rules = LogitRules::new(vec![3], vec![], None);
        let histories = [vec![1], vec![2, 5], vec![7], vec![9, 9]];
        let seeds = [3u64, 5, 8, 13];
        let mut m = TableModel::new(150, histories.len());
        m.histories = histories.to_vec();
        let mut rngs: Vec<StdRng> = seeds.iter().map(|&s| StdRng::seed_from_u64(s)).collect();
        let first = m.first();
        let s = Sampler::Temperature {
            temperature: 0.8,
            rngs: &mut rngs,
        };
        let batched = greedy_search(&mut m, first, 4, &params(&rules, 40), s).unwrap();
        for (i, h) in histories.iter().enumerate() {
            let mut m1 = TableModel::new(150, 1);
            m1.histories = vec![h.clone()];
            let mut rng = [StdRng::seed_from_u64(seeds[i])];
            let f = m1.first();
            let s = Sampler::Temperature {
                temperature: 0.8,
                rngs: &mut rng,
            };
            let alone = greedy_search(&mut m1, f, 1, &params(&rules, 40), s).unwrap();
            assert_eq!(alone[0], batched[i], "row {i}");
        }
    }

    #[test]
    fn sampling_is_seeded_and_respects_masks() {
        let rules = LogitRules::new(vec![3, 4], vec![], None);
        let run = |seed: u64| {
            let mut m = TableModel::new(12, 2);
            let mut rngs: Vec<StdRng> =
                (0..2u64).map(|i| StdRng::seed_from_u64(seed + i)).collect();
            let f = m.first();
            let s = Sampler::Temperature {
                temperature: 1.0,
                rngs: &mut rngs,
            };
            greedy_search(&mut m, f, 2, &params(&rules, 30), s).unwrap()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        for h in &a {
            assert!(h.tokens.iter().all(|&t| t != 3 && t != 4));
        }
        // Different seeds explore: over a few seeds at least two differ from greedy-like output.
        let distinct: std::collections::HashSet<Vec<u32>> =
            (0..6).map(|s| run(s * 100)[0].tokens.clone()).collect();
        assert!(distinct.len() > 1);
    }
}
