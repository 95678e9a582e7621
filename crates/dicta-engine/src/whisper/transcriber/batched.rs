//! The batched long-form mode: windows of all recordings share model calls (one scheduler),
//! long recordings are cut into fixed overlapping windows, repaired where two windows do not
//! agree, and merged.

use dicta_audio::mel::MelSpectrogram;
use dicta_core::{Result, Segment};

use super::{
    merged_words, segment, window, DecodedWindow, SeqState, TranscribeOutput, WhisperTranscriber,
};
use crate::offline::schedule::{schedule, ScheduleConfig};
use crate::whisper::fallback::Attempt;
use crate::whisper::longform::{
    merge_windows, plan_windows, repair_audio_start, repair_start, PlannedWindow, WindowText,
};
use crate::whisper::segments::{RawSegment, FRAMES_PER_SECOND, WINDOW_FRAMES};
use crate::whisper::window::{WindowDecoder, WindowJob};

impl WhisperTranscriber<'_> {
    /// The batched mode. Every model call takes windows of any recording, grouped by the
    /// shared scheduler ([`schedule`]: fixed 30 s input, sorted by content length, at most
    /// `batch_size` per call): the next seek window of each recording of at most 30 s (its
    /// seek loop advances as in the sequential mode, one window per pass) and the fixed
    /// overlapping windows of the longer ones. When two consecutive windows of a long
    /// recording share no words at consistent times in their overlap ([`repair_start`]), a
    /// repair window is decoded in the next pass from the earlier window's last complete
    /// timestamp (where the sequential mode would seek): it replaces the later window when it
    /// starts after it (the same view without the sentence cut at its head), else it goes
    /// between the two. Returns the merged segments of each long recording.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_batched(
        &self,
        seq: &mut [SeqState],
        long: &[(usize, MelSpectrogram, usize)],
        languages: &[Result<String>],
        overlap_seconds: f32,
        decoder: &WindowDecoder<'_>,
        batch_size: usize,
        out: &mut TranscribeOutput,
    ) -> Result<Vec<(usize, Vec<Segment>)>> {
        // Each pass may add repair windows that depend on the previous pass.
        const MAX_REPAIR_PASSES: usize = 4;
        let opts = decoder.opts;
        let sched = ScheduleConfig {
            batch_size,
            max_batch_frames: batch_size * WINDOW_FRAMES,
            max_padding_fraction: 0.0,
            fixed_input: true,
        };
        let initial = self.initial_prompt(opts)?;
        let mut prompts = Vec::with_capacity(long.len());
        for (i, _, _) in long {
            let lang = languages[*i].as_ref().map_err(|e| e.clone())?;
            prompts.push(self.prompt(&initial, &self.sot_sequence(lang, opts.task)?, opts));
        }
        let mut chains: Vec<Vec<ChainLink>> = vec![Vec::new(); long.len()];
        let mut pending: Vec<(usize, PlannedWindow, Place)> = long
            .iter()
            .enumerate()
            .flat_map(|(k, (_, _, content))| {
                plan_windows(*content, overlap_seconds)
                    .into_iter()
                    .map(move |w| (k, w, Place::Append))
            })
            .collect();
        // A repair is optional: one whose text loops (as a window starting at an odd point
        // sometimes does, with no temperature left to fall back to) is dropped, and the merge
        // cuts between the two windows it would have joined.
        let max_ratio = opts
            .compression_ratio_threshold
            .map_or(LOOP_COMPRESSION_RATIO, |t| t.max(LOOP_COMPRESSION_RATIO));
        // Progress of each long recording: its planned windows (end in s, decoded); the audio
        // up to the last of those decoded in a row from the start is done.
        let mut planned: Vec<Vec<(f64, bool)>> = vec![Vec::new(); long.len()];
        let mut plan_slot: Vec<Option<usize>> = Vec::with_capacity(pending.len());
        for (k, w, _) in &pending {
            planned[*k].push(((w.start + w.len) as f64 / FRAMES_PER_SECOND as f64, false));
            plan_slot.push(Some(planned[*k].len() - 1));
        }
        let mut repair_passes = 0;
        loop {
            let active: Vec<usize> = (0..seq.len())
                .filter(|&i| seq[i].seek < seq[i].content_frames)
                .collect();
            if active.is_empty() && pending.is_empty() {
                break;
            }
            let mut jobs = Vec::with_capacity(active.len() + pending.len());
            let mut lens = Vec::with_capacity(active.len() + pending.len());
            for &i in &active {
                jobs.push(self.seq_job(&seq[i], opts));
                lens.push(WINDOW_FRAMES.min(seq[i].content_frames - seq[i].seek));
            }
            for (k, w, _) in &pending {
                jobs.push(WindowJob {
                    mel: window(&long[*k].1, w.start, w.len),
                    prompt: prompts[*k].clone(),
                    seed_key: w.start as u64,
                });
                lens.push(w.len);
            }
            let mut decoded: Vec<Option<DecodedWindow>> = vec![None; pending.len()];
            for batch in schedule(&lens, &sched)? {
                let refs: Vec<&WindowJob> = batch.items.iter().map(|&n| &jobs[n]).collect();
                out.windows += refs.len();
                out.batch_sizes.push(refs.len());
                out.count_frames(batch.items.iter().map(|&n| lens[n]));
                let (attempts, enc) = decoder.decode_keep(&refs)?;
                let mut rows = Vec::new();
                let mut seq_attempts = Vec::new();
                for (row, (&n, a)) in batch.items.iter().zip(attempts).enumerate() {
                    if n < active.len() {
                        rows.push((active[n], row));
                        seq_attempts.push(a);
                    } else {
                        let (k, w, _) = pending[n - active.len()];
                        let d = self.window_segments(w, a, &enc, row, &jobs[n].prompt, decoder)?;
                        decoded[n - active.len()] = Some(d);
                        if let Some(p) = plan_slot.get(n - active.len()).copied().flatten() {
                            planned[k][p].1 = true;
                            let done = planned[k].iter().take_while(|w| w.1).last();
                            if let Some(&(end, _)) = done.filter(|_| opts.progress.is_active()) {
                                opts.progress.audio(long[k].0, end);
                            }
                        }
                    }
                }
                if !rows.is_empty() {
                    self.seq_apply(seq, &rows, seq_attempts, &enc, decoder)?;
                }
            }
            place_windows(&mut chains, pending.drain(..).zip(decoded), max_ratio);
            if repair_passes < MAX_REPAIR_PASSES {
                pending = repairs(&mut chains, long);
                repair_passes += usize::from(!pending.is_empty());
            }
            // Repair windows do not move the progress.
            plan_slot = vec![None; pending.len()];
        }
        let mut res = Vec::new();
        for (k, chain) in chains.into_iter().enumerate() {
            let (texts, attempts): (Vec<WindowText>, Vec<Attempt>) =
                chain.into_iter().map(|l| (l.text, l.attempt)).unzip();
            for t in &texts {
                tracing::debug!(
                    start = t.start,
                    end = t.end,
                    repairs_from = ?t.repairs_from,
                    segments = ?t
                        .segments
                        .iter()
                        .map(|s| (s.start, s.end, s.text.as_str()))
                        .collect::<Vec<_>>(),
                    "long-form window"
                );
            }
            let mut segs = Vec::new();
            for m in merge_windows(&texts) {
                let tokens = match m.tokens {
                    Some(t) => t,
                    None => self.model.tokenizer.encode(&m.text)?,
                };
                let raw = RawSegment {
                    start: m.start,
                    end: m.end,
                    tokens,
                };
                let words = merged_words(&texts[m.window].segments, &m.text, m.start, m.end);
                let mut seg = segment(&raw, m.text, &attempts[m.window]);
                seg.words = words;
                segs.push(seg);
            }
            res.push((long[k].0, segs));
        }
        Ok(res)
    }
}

/// Compression ratio above which a repair window's text counts as a loop. Speech that really
/// repeats itself ("montreal forced aligner" said ten times) compresses to 2.4–2.6, above
/// faster-whisper's fallback threshold (2.4); decoding loops ("late late late …") to 10 and more.
const LOOP_COMPRESSION_RATIO: f32 = 4.0;

/// A decoded window in the merge chain of a long recording.
#[derive(Debug, Clone)]
struct ChainLink {
    text: WindowText,
    attempt: Attempt,
    /// The hand-over to the next link was checked for a repair.
    checked: bool,
}

/// Where a decoded long-recording window goes in its chain.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// A planned window, in plan order.
    Append,
    /// A repair window between links `i` and `i + 1`, with its hand-over time.
    After(usize, f64),
    /// A repair window that takes the place of link `i`, with its hand-over time.
    Replace(usize, f64),
}

/// Puts decoded windows (recording, window, place) into the chains: planned windows in
/// order, then repairs from the back so that earlier positions stay valid. Repairs whose
/// text compresses beyond `max_ratio` (a repetition loop) are left out.
fn place_windows(
    chains: &mut [Vec<ChainLink>],
    decoded: impl Iterator<Item = ((usize, PlannedWindow, Place), Option<DecodedWindow>)>,
    max_ratio: f32,
) {
    let mut repairs = Vec::new();
    for ((k, _, place), d) in decoded {
        let Some(d) = d else { continue };
        if !matches!(place, Place::Append) && d.attempt.compression_ratio > max_ratio {
            tracing::debug!(
                start = d.start,
                ratio = d.attempt.compression_ratio,
                "repair window dropped: its text loops"
            );
            continue;
        }
        let repairs_from = match place {
            Place::Append => None,
            Place::After(_, h) | Place::Replace(_, h) => Some(h),
        };
        let link = ChainLink {
            text: WindowText {
                start: d.start,
                end: d.end,
                segments: d.segments,
                repairs_from,
            },
            attempt: d.attempt,
            checked: false,
        };
        match place {
            Place::Append => chains[k].push(link),
            Place::After(i, _) => repairs.push((k, i + 1, false, link)),
            Place::Replace(i, _) => repairs.push((k, i, true, link)),
        }
    }
    repairs.sort_by_key(|r| std::cmp::Reverse((r.0, r.1)));
    for (k, i, replace, link) in repairs {
        if replace {
            chains[k][i] = link;
            // A repair of the replaced window is not a repair of this one.
            if let Some(next) = chains[k].get_mut(i + 1) {
                next.text.repairs_from = None;
            }
        } else {
            chains[k].insert(i, link);
        }
    }
}

/// Repair windows for the unchecked hand-overs of every chain (see [`repair_start`]).
fn repairs(
    chains: &mut [Vec<ChainLink>],
    long: &[(usize, MelSpectrogram, usize)],
) -> Vec<(usize, PlannedWindow, Place)> {
    let mut out = Vec::new();
    for (k, chain) in chains.iter_mut().enumerate() {
        let content = long[k].2;
        let mut p = 0;
        while p + 1 < chain.len() {
            if chain[p].checked || chain[p + 1].text.repairs_from.is_some() {
                chain[p].checked = true;
                p += 1;
                continue;
            }
            chain[p].checked = true;
            let Some(handover) = repair_start(&chain[p].text, &chain[p + 1].text) else {
                p += 1;
                continue;
            };
            let at = ((handover * FRAMES_PER_SECOND as f64).round() as usize).min(content);
            let start = repair_audio_start(&long[k].1, at).min(content);
            let len = WINDOW_FRAMES.min(content - start);
            let next_start = (chain[p + 1].text.start * FRAMES_PER_SECOND as f64).round() as usize;
            if len == 0 {
                p += 1;
            } else if start == next_start {
                // The later window already starts there: it is the repair.
                chain[p + 1].text.repairs_from = Some(handover);
                p += 1;
            } else if start > next_start {
                out.push((
                    k,
                    PlannedWindow { start, len },
                    Place::Replace(p + 1, handover),
                ));
                // The next hand-over starts from the repair window, checked next pass.
                p += 2;
            } else {
                out.push((k, PlannedWindow { start, len }, Place::After(p, handover)));
                p += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(start: f64, text: &str, compression_ratio: f32) -> DecodedWindow {
        DecodedWindow {
            start,
            end: start + 30.0,
            segments: vec![crate::whisper::longform::WindowSegment {
                start,
                end: start + 5.0,
                text: text.to_string(),
                tokens: vec![],
                words: vec![],
            }],
            attempt: Attempt {
                temperature: 0.0,
                tokens: vec![],
                avg_logprob: -0.2,
                compression_ratio,
                no_speech_prob: 0.0,
            },
        }
    }

    fn planned(start: usize) -> PlannedWindow {
        PlannedWindow { start, len: 3000 }
    }

    #[test]
    fn a_looping_repair_window_is_left_out_of_the_chain() {
        let mut chains = vec![Vec::new()];
        place_windows(
            &mut chains,
            [
                (
                    (0, planned(0), Place::Append),
                    Some(decoded(0.0, " one", 1.2)),
                ),
                (
                    (0, planned(2500), Place::Append),
                    Some(decoded(25.0, " two", 1.2)),
                ),
            ]
            .into_iter(),
            2.4,
        );
        let looped = " late late late late late late late late late late late late";
        place_windows(
            &mut chains,
            [
                (
                    (0, planned(2300), Place::After(0, 23.0)),
                    Some(decoded(23.0, looped, 9.0)),
                ),
                (
                    (0, planned(2600), Place::Replace(1, 26.0)),
                    Some(decoded(26.0, " three", 1.3)),
                ),
            ]
            .into_iter(),
            2.4,
        );
        let texts: Vec<(&str, Option<f64>)> = chains[0]
            .iter()
            .map(|l| (l.text.segments[0].text.as_str(), l.text.repairs_from))
            .collect();
        // The loop is dropped; the sound repair replaces window 1 and hands over at 26 s.
        assert_eq!(texts, vec![(" one", None), (" three", Some(26.0))]);
    }
}
