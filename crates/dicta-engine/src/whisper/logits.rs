//! Logit filters applied before every decoding step: token suppression, blank suppression
//! at the first step, and Whisper's timestamp rules, as CTranslate2's `generate` applies
//! them for faster-whisper.

use super::final_window::FinalRest;

/// Log-softmax of `x` in place. `-inf` entries stay `-inf`.
pub fn log_softmax_in_place(x: &mut [f32]) {
    let lse = log_sum_exp(x);
    for v in x.iter_mut() {
        *v -= lse;
    }
}

/// `log(sum(exp(x)))`, stable; `-inf` for an empty or fully masked slice (the vectorised
/// kernel: see [`dicta_models::kernels::log_sum_exp`]).
pub fn log_sum_exp(x: &[f32]) -> f32 {
    dicta_models::kernels::log_sum_exp(x)
}

/// Probability of `id` under softmax of raw `logits`.
pub fn softmax_prob(logits: &[f32], id: u32) -> f32 {
    let lse = log_sum_exp(logits);
    logits.get(id as usize).map_or(0.0, |v| (v - lse).exp())
}

/// Index of the largest value (the first one on ties).
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in x.iter().enumerate() {
        if v > best_v {
            best_v = v;
            best = i;
        }
    }
    best
}

/// Token ids the timestamp rules need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampIds {
    /// `<|endoftext|>`.
    pub eot: u32,
    /// `<|notimestamps|>`; it is never sampled while timestamps are on.
    pub no_timestamps: u32,
    /// `<|0.00|>`, the first timestamp token.
    pub timestamp_begin: u32,
    /// The last timestamp token (vocabulary size - 1).
    pub timestamp_end: u32,
    /// The last timestamp token allowed first (`timestamp_begin + round(max_initial / 0.02)`).
    pub max_initial_timestamp: u32,
}

/// All filters of one request, applied to the raw logits of one row at every step.
#[derive(Debug, Clone, PartialEq)]
pub struct LogitRules {
    suppress: Vec<u32>,
    suppress_at_begin: Vec<u32>,
    timestamps: Option<TimestampIds>,
    /// Per search row: the sound of the row's window when it is the last of its recording and
    /// is finished in place ([`super::final_window`]); empty when no row is.
    finals: Vec<Option<std::sync::Arc<FinalRest>>>,
    /// faster-whisper's `repetition_penalty` (1: none).
    repetition_penalty: f32,
    /// faster-whisper's `no_repeat_ngram_size` (0: none).
    no_repeat_ngram_size: usize,
    /// Tokens every hypothesis starts with, forced rather than sampled (faster-whisper's
    /// `prefix`, see [`Self::with_forced`]).
    forced: usize,
}

impl LogitRules {
    /// `suppress`: never sampled. `suppress_at_begin`: not sampled as the first token
    /// (suppress_blank: space and EOT). `timestamps`: `None` when decoding without timestamps.
    pub fn new(
        suppress: Vec<u32>,
        suppress_at_begin: Vec<u32>,
        timestamps: Option<TimestampIds>,
    ) -> Self {
        Self {
            suppress,
            suppress_at_begin,
            timestamps,
            finals: Vec::new(),
            repetition_penalty: 1.0,
            no_repeat_ngram_size: 0,
            forced: 0,
        }
    }

    /// The same rules for hypotheses whose first `n` tokens are forced (CTranslate2's decoding
    /// prefix, `sample_begin = n`): blank suppression applies at the first sampled token, the
    /// timestamp rules only see the sampled tokens and apply none but the `<|notimestamps|>`
    /// ban at the first of them (no timestamp first), while the repetition rules see every
    /// token of the hypothesis.
    pub fn with_forced(mut self, n: usize) -> Self {
        self.forced = n;
        self
    }

    /// The same rules, with faster-whisper's `repetition_penalty` (each token already sampled
    /// in the window has its logit divided by it when positive, multiplied when negative) and
    /// `no_repeat_ngram_size` (a token that would repeat an n-gram of the window's sampled
    /// tokens is masked): CTranslate2's `RepetitionPenalty` and `NoRepeatNgram`, applied before
    /// the other rules, as there.
    pub fn with_repetition(mut self, penalty: f32, ngram_size: usize) -> Self {
        self.repetition_penalty = penalty;
        self.no_repeat_ngram_size = ngram_size;
        self
    }

    /// The same rules, with the last windows among the search rows (`finals[row]`) held to
    /// the rest of their audio (through [`Self::apply_row`]).
    pub fn with_finals(mut self, finals: Vec<Option<std::sync::Arc<FinalRest>>>) -> Self {
        self.finals = if finals.iter().any(Option::is_some) {
            finals
        } else {
            Vec::new()
        };
        self
    }

    /// The timestamp rules' token ids (`None` without timestamps).
    pub fn timestamps(&self) -> Option<&TimestampIds> {
        self.timestamps.as_ref()
    }

    /// Whether timestamp rules are active.
    pub fn with_timestamps(&self) -> bool {
        self.timestamps.is_some()
    }

    /// Masks (sets to `-inf`) the tokens that may not follow `generated` (the hypothesis so
    /// far: the forced tokens, then those sampled in this window; never the prompt). `logits`
    /// is one row `[V]` of raw logits.
    pub fn apply(&self, logits: &mut [f32], generated: &[u32]) {
        let step = generated.len();
        if self.repetition_penalty != 1.0 && step > 0 {
            penalize_repeats(logits, generated, self.repetition_penalty);
        }
        let n = self.no_repeat_ngram_size;
        if n > 0 && step >= n {
            // Every earlier occurrence of the last n - 1 tokens bans the token that followed
            // it (with n = 1, every token sampled so far).
            let suffix = &generated[step + 1 - n..];
            for p in 0..=step - n {
                if generated[p..p + n - 1] == *suffix {
                    mask(logits, generated[p + n - 1] as usize);
                }
            }
        }
        for &id in &self.suppress {
            mask(logits, id as usize);
        }
        if step == self.forced {
            for &id in &self.suppress_at_begin {
                mask(logits, id as usize);
            }
        }
        if let Some(ts) = &self.timestamps {
            match generated.get(self.forced..) {
                Some(sampled) if self.forced == 0 || !sampled.is_empty() => {
                    apply_timestamp_rules(ts, logits, sampled)
                }
                // The first sampled token after forced ones.
                _ => mask(logits, ts.no_timestamps as usize),
            }
        }
    }

    /// [`Self::apply`], then the hold of search row `row`'s last window, if it is one: where
    /// the hypothesis `generated` would stop right after opening a segment while the audio
    /// from there on still sounds ([`FinalRest::at_hold_point`]), end-of-text is masked, once
    /// per hypothesis (`held` carries that through the search).
    pub fn apply_row(&self, logits: &mut [f32], generated: &[u32], row: usize, held: &mut bool) {
        self.apply(logits, generated);
        if *held {
            return;
        }
        if let (Some(Some(rest)), Some(ts)) = (self.finals.get(row), &self.timestamps) {
            if rest.at_hold_point(generated, ts) && argmax(logits) == ts.eot as usize {
                mask(logits, ts.eot as usize);
                *held = true;
            }
        }
    }
}

/// CTranslate2's `penalize_previous_tokens`: every logit of a token in `generated`, as it was
/// before any of them changed (a token sampled twice is penalized once), divided by `penalty`
/// when positive and multiplied by it otherwise.
fn penalize_repeats(logits: &mut [f32], generated: &[u32], penalty: f32) {
    let mut ids: Vec<u32> = generated.to_vec();
    ids.sort_unstable();
    ids.dedup();
    for id in ids {
        if let Some(v) = logits.get_mut(id as usize) {
            *v = if *v < 0.0 { *v * penalty } else { *v / penalty };
        }
    }
}

fn mask(logits: &mut [f32], id: usize) {
    if let Some(v) = logits.get_mut(id) {
        *v = f32::NEG_INFINITY;
    }
}

fn mask_range(logits: &mut [f32], from: usize, to: usize) {
    let to = to.min(logits.len());
    if from < to {
        logits[from..to].fill(f32::NEG_INFINITY);
    }
}

/// CTranslate2's `ApplyTimestampRules`: no `<|notimestamps|>`; a timestamp first (not later
/// than the max initial one); timestamps in pairs except right before EOT; timestamps never
/// decrease; and a timestamp is forced when the summed probability of all timestamps beats
/// the most probable text token.
fn apply_timestamp_rules(ts: &TimestampIds, logits: &mut [f32], generated: &[u32]) {
    let begin = ts.timestamp_begin as usize;
    let end = ts.timestamp_end as usize;
    mask(logits, ts.no_timestamps as usize);
    let step = generated.len();
    if step == 0 {
        mask_range(logits, 0, begin);
        mask_range(logits, ts.max_initial_timestamp as usize + 1, end + 1);
        return;
    }
    let last = generated[step - 1];
    let check_prob = if last >= ts.timestamp_begin {
        // At the first step after one timestamp, CTranslate2 treats the missing penultimate
        // token as a timestamp, so the opening timestamp must be followed by text.
        let penultimate = if step >= 2 { generated[step - 2] } else { last };
        if penultimate >= ts.timestamp_begin {
            mask_range(logits, begin, end + 1);
            false
        } else {
            mask_range(logits, 0, ts.eot as usize);
            true
        }
    } else {
        true
    };
    if let Some(&last_ts) = generated.iter().rev().find(|&&t| t >= ts.timestamp_begin) {
        mask_range(logits, begin, last_ts as usize);
    }
    if check_prob {
        // log_softmax is monotone per row, so compare log-sum-exp over timestamps with the max
        // text logit directly (same normaliser on both sides).
        let text_max = logits[..begin.min(logits.len())]
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        let ts_lse = log_sum_exp(&logits[begin.min(logits.len())..(end + 1).min(logits.len())]);
        if ts_lse > text_max {
            mask_range(logits, 0, begin);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const V: usize = 40;
    /// Toy vocabulary: 0..20 text, 20 = EOT, 21 = notimestamps, 22..40 timestamps.
    pub(crate) const TS: TimestampIds = TimestampIds {
        eot: 20,
        no_timestamps: 21,
        timestamp_begin: 22,
        timestamp_end: 39,
        max_initial_timestamp: 24,
    };

    fn flat() -> Vec<f32> {
        vec![0.0; V]
    }

    fn allowed(l: &[f32]) -> Vec<usize> {
        (0..l.len()).filter(|&i| l[i].is_finite()).collect()
    }

    #[test]
    fn first_step_only_early_timestamps() {
        let rules = LogitRules::new(vec![3], vec![5, 20], Some(TS));
        let mut l = flat();
        rules.apply(&mut l, &[]);
        assert_eq!(allowed(&l), vec![22, 23, 24]);
    }

    /// After forced tokens (CTranslate2's `sample_begin`): the first free token only loses
    /// `<|notimestamps|>`, the suppressed ids and the blank ones (no timestamp first); later
    /// tokens follow the timestamp rules over the free tokens alone, while the n-gram ban
    /// reads the forced ones too.
    #[test]
    fn forced_tokens_move_the_begin_rules_and_hide_from_timestamp_rules() {
        let rules = LogitRules::new(vec![3], vec![5, 20], Some(TS)).with_forced(2);
        let mut l = flat();
        rules.apply(&mut l, &[22, 7]);
        let want: Vec<usize> = (0..V).filter(|i| ![3, 5, 20, 21].contains(i)).collect();
        assert_eq!(allowed(&l), want);
        // One free timestamp (30) after the forced `<|0.00|>` 22: text must follow, as after a
        // lone opening timestamp (the forced one is not its pair), and no timestamp before 30.
        let mut l = flat();
        rules.apply(&mut l, &[22, 7, 30]);
        let want: Vec<usize> = (0..=20).filter(|&i| i != 3).collect();
        assert_eq!(allowed(&l), want);
        // After free text, timestamps are bounded by the last free one only (none here): a
        // forced 25 does not bound them.
        let mut l = flat();
        rules.apply(&mut l, &[25, 7, 8]);
        assert!(l[22].is_finite());
        // The n-gram ban sees the forced tokens: 7 8 ... 7 bans 8.
        let rules = LogitRules::new(vec![], vec![], None)
            .with_repetition(1.0, 2)
            .with_forced(2);
        let mut l = flat();
        rules.apply(&mut l, &[7, 8, 9, 7]);
        assert!(l[8] == f32::NEG_INFINITY && l[9].is_finite());
    }

    #[test]
    fn repetition_penalty_and_no_repeat_ngrams_follow_ctranslate2() {
        let rules = LogitRules::new(vec![], vec![], None).with_repetition(2.0, 0);
        let mut l = vec![1.0f32, -1.0, 4.0, 3.0];
        rules.apply(&mut l, &[]);
        assert_eq!(l, [1.0, -1.0, 4.0, 3.0], "nothing sampled yet");
        // Token 1 twice: penalized once; positive logits halve, negative ones double.
        rules.apply(&mut l, &[1, 2, 1]);
        assert_eq!(l, [1.0, -2.0, 2.0, 3.0]);
        // n = 3 over [0, 1, 2, 0, 1]: the suffix [0, 1] came before, then 2: 2 is banned.
        let rules = LogitRules::new(vec![], vec![], None).with_repetition(1.0, 3);
        let mut l = vec![0.5f32; 4];
        rules.apply(&mut l, &[0, 1, 2, 0, 1]);
        assert_eq!(l, [0.5, 0.5, f32::NEG_INFINITY, 0.5]);
        let mut l = vec![0.5f32; 4];
        rules.apply(&mut l, &[0, 1]);
        assert_eq!(l, [0.5; 4], "shorter than n: nothing to repeat");
        // n = 1: no token twice.
        let rules = LogitRules::new(vec![], vec![], None).with_repetition(1.0, 1);
        let mut l = vec![0.5f32; 4];
        rules.apply(&mut l, &[3, 1]);
        assert_eq!(l, [0.5, f32::NEG_INFINITY, 0.5, f32::NEG_INFINITY]);
    }

    #[test]
    fn suppress_blank_only_at_first_step() {
        let rules = LogitRules::new(vec![3], vec![5, 20], None);
        let mut l = flat();
        rules.apply(&mut l, &[]);
        assert!(!l[3].is_finite() && !l[5].is_finite() && !l[20].is_finite());
        let mut l = flat();
        rules.apply(&mut l, &[7]);
        assert!(!l[3].is_finite() && l[5].is_finite() && l[20].is_finite());
    }

    #[test]
    fn after_opening_timestamp_text_must_follow() {
        let rules = LogitRules::new(vec![], vec![], Some(TS));
        let mut l = flat();
        rules.apply(&mut l, &[23]);
        // Every timestamp is masked (pair rule with the virtual penultimate timestamp).
        assert!(allowed(&l).iter().all(|&i| i < 22 && i != 21));
    }

    #[test]
    fn pairs_close_then_text_or_eot() {
        let rules = LogitRules::new(vec![], vec![], Some(TS));
        // ts, text, ts -> next may be a timestamp >= last or EOT, not text.
        let mut l = flat();
        l[20] = 5.0; // EOT likely enough that no timestamp is forced
        rules.apply(&mut l, &[22, 5, 27]);
        let a = allowed(&l);
        assert!(a.contains(&20));
        assert!(!a.iter().any(|&i| i < 20));
        assert!(!a.contains(&26) && a.contains(&27) && a.contains(&39));
        // ts, text, ts, ts -> must be text (or EOT).
        let mut l = flat();
        rules.apply(&mut l, &[22, 5, 27, 27]);
        assert!(allowed(&l).iter().all(|&i| i <= 20));
    }

    #[test]
    fn timestamps_never_decrease() {
        let rules = LogitRules::new(vec![], vec![], Some(TS));
        let mut l = flat();
        rules.apply(&mut l, &[22, 5, 30, 30, 6]);
        let a = allowed(&l);
        assert!(!a.contains(&29) && a.contains(&30) && a.contains(&31));
    }

    #[test]
    fn timestamp_forced_when_mass_beats_best_text() {
        let rules = LogitRules::new(vec![], vec![], Some(TS));
        // Best text token logit 2.0; 18 timestamps at 0.0 sum to ln(18) = 2.89 > 2.0.
        let mut l = flat();
        l[4] = 2.0;
        rules.apply(&mut l, &[22, 5]);
        assert!(allowed(&l).iter().all(|&i| i >= 22));
        // Best text at 3.0 > 2.89: text stays allowed.
        let mut l = flat();
        l[4] = 3.0;
        rules.apply(&mut l, &[22, 5]);
        assert!(l[4].is_finite());
    }

    #[test]
    fn softmax_helpers() {
        let mut x = vec![1.0f32, 2.0, 3.0, f32::NEG_INFINITY];
        let p = softmax_prob(&x, 2);
        log_softmax_in_place(&mut x);
        assert!((x[2].exp() - p).abs() < 1e-6);
        let s: f32 = x.iter().map(|v| v.exp()).sum();
        assert!((s - 1.0).abs() < 1e-6);
        assert_eq!(argmax(&x), 2);
        assert_eq!(log_sum_exp(&[f32::NEG_INFINITY]), f32::NEG_INFINITY);
    }

    #[test]
    fn a_last_window_is_held_once_where_the_model_would_stop() {
        use super::super::final_window::FinalRest;
        // Two bands; loud on frames 0..100 of 120: steps 0..50 sound.
        let mut mel = vec![-1.0f32; 2 * 3000];
        mel[3000..3100].fill(1.0);
        let rest = std::sync::Arc::new(FinalRest::of(&mel, 2, 120));
        let rules = LogitRules::new(vec![], vec![], Some(TS)).with_finals(vec![None, Some(rest)]);
        let g = [22, 5, 32, 32]; // a segment from step 0 to 10, one opened at step 10
        let wants_eot = || {
            let mut l = flat();
            l[TS.eot as usize] = 5.0;
            l
        };
        let mut held = false;
        let mut l = wants_eot();
        rules.apply_row(&mut l, &g, 1, &mut held);
        assert!(held && l[TS.eot as usize] == f32::NEG_INFINITY);
        // Once per hypothesis.
        let mut l = wants_eot();
        rules.apply_row(&mut l, &g, 1, &mut held);
        assert_eq!(l[TS.eot as usize], 5.0);
        // Not where the model goes on anyway, nor on a row that is not a last window.
        let mut held = false;
        let mut l = flat();
        l[3] = 9.0;
        rules.apply_row(&mut l, &g, 1, &mut held);
        assert!(!held && l[TS.eot as usize] == 0.0);
        let mut l = wants_eot();
        rules.apply_row(&mut l, &g, 0, &mut held);
        assert!(!held && l[TS.eot as usize] == 5.0);
    }
}
