//! Speaker diarization: who spoke when.
//!
//! 1. Speech regions from the voice activity detector ([`crate::vad`]).
//! 2. Windows of 1.5 s every 0.75 s inside each region (a shorter region is one window; regions
//!    under 0.4 s are not embedded and take the speaker nearest in time).
//! 3. One ECAPA-TDNN embedding per window ([`SpeakerEncoder`]); windows of equal length are
//!    batched.
//! 4. Average-linkage clustering on cosine distance ([`cluster`]). The number of speakers is
//!    `num_speakers` when given; otherwise the number of clusters left when merging stops at
//!    `threshold`, clamped to `min_speakers..=max_speakers`. Minor clusters (under 3 windows
//!    or 5% of them: a cough, a laugh, music) join their nearest cluster unless a count forces
//!    them to stay, or they are a voice of their own: far from every other cluster and heard
//!    again after someone else spoke.
//! 5. Each window owns the stretch of its region nearest its centre; neighbouring stretches of
//!    one speaker join into turns. Labels are `SPEAKER_00`, `SPEAKER_01`, … by first appearance.
//!
//! Overlapping speech is not detected: every instant has at most one speaker.

pub mod cluster;
mod embed;
pub mod rttm;

use std::path::Path;

use dicta_core::{Result, Segment, SpeakerTurn};
use serde::{Deserialize, Serialize};

use crate::engine::Input;
use crate::vad::{SpeechChunk, Vad, VadOptions};

pub use dicta_core::DiarizeOptions;
pub use embed::{cosine, SpeakerEncoder, MIN_CLIP};

const RATE: usize = dicta_audio::SAMPLE_RATE as usize;
/// Regions shorter than this (samples) are not embedded.
const MIN_REGION: usize = RATE * 2 / 5;

/// The speaker turns of one input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiarizeResult {
    /// Caller's id.
    pub id: String,
    /// Where the audio came from.
    pub audio: String,
    /// Duration in seconds.
    pub duration: f64,
    /// Number of speakers found.
    pub speakers: usize,
    /// Turns in time order.
    pub turns: Vec<SpeakerTurn>,
}

/// The speech detection diarization uses. Pauses under half a second stay inside a region, as
/// annotators keep them inside a turn; 100 ms of padding covers soft word edges; the
/// threshold sits a little under faster-whisper's 0.5 because a missed stretch costs as much
/// DER as a false one and soft speech is the commoner miss.
pub fn vad_options() -> VadOptions {
    VadOptions {
        threshold: 0.4,
        min_silence_duration_ms: 500,
        speech_pad_ms: 100,
        min_speech_duration_ms: 100,
        ..VadOptions::default()
    }
}

impl DiarizeResult {
    /// The result of `input` (`samples` long at 16 kHz) with these turns.
    pub fn new(input: &Input, samples: usize, turns: Vec<SpeakerTurn>) -> Self {
        let mut speakers: Vec<&str> = turns.iter().map(|t| t.speaker.as_str()).collect();
        speakers.sort_unstable();
        speakers.dedup();
        Self {
            id: input.id.clone(),
            audio: input.audio.clone(),
            duration: samples as f64 / RATE as f64,
            speakers: speakers.len(),
            turns,
        }
    }
}

/// A voice activity detector and a speaker encoder (shareable).
pub struct Diarizer {
    vad: Vad,
    encoder: std::sync::Arc<SpeakerEncoder>,
}

/// One embedded (or too short) stretch: samples `start..end`, owned span `own`.
struct Window {
    start: usize,
    end: usize,
    own: (usize, usize),
}

impl Window {
    /// Whether the window is long enough to embed ([`MIN_REGION`]).
    fn embedded(&self) -> bool {
        self.end - self.start >= MIN_REGION
    }
}

impl Diarizer {
    /// Loads the VAD (`silero_vad_v6.onnx` or its folder) and ECAPA (`embedding_model.ckpt` or
    /// its folder).
    pub fn load(vad: &Path, speaker: &Path) -> Result<Self> {
        Ok(Self::new(Vad::load(vad)?, SpeakerEncoder::load(speaker)?))
    }

    /// A diarizer over loaded models.
    pub fn new(vad: Vad, encoder: SpeakerEncoder) -> Self {
        Self {
            vad,
            encoder: std::sync::Arc::new(encoder),
        }
    }

    /// Speaker turns of every input, in input order; a broken input fails alone.
    pub fn diarize(&self, inputs: &[Input], opts: &DiarizeOptions) -> Vec<Result<DiarizeResult>> {
        inputs
            .iter()
            .map(|input| self.diarize_windows(input, opts).map(|(r, _)| r))
            .collect()
    }

    /// [`Diarizer::diarize`] of one input, with the embedding windows its turns came from.
    pub fn diarize_windows(
        &self,
        input: &Input,
        opts: &DiarizeOptions,
    ) -> Result<(DiarizeResult, Vec<SpeakerWindow>)> {
        let audio = crate::engine::load_audio(input)?;
        // `embeddings` checks the options.
        let windows = self.embeddings(&audio, opts)?;
        let turns = turns_from_embeddings(&windows, opts);
        Ok((DiarizeResult::new(input, audio.len(), turns), windows))
    }

    /// Speaker turns of one decoded 16 kHz recording (none for silence).
    pub fn turns(&self, audio: &[f32], opts: &DiarizeOptions) -> Result<Vec<SpeakerTurn>> {
        let windows = self.embeddings(audio, opts)?;
        Ok(turns_from_embeddings(&windows, opts))
    }

    /// The embedding windows of one decoded 16 kHz recording, in time order: speech regions
    /// cut into `window_seconds` every `step_seconds`, each with its L2-normalised embedding
    /// (`None` under 0.4 s). Steps 1–3 of the pipeline; [`turns_from_embeddings`] does the rest.
    pub fn embeddings(&self, audio: &[f32], opts: &DiarizeOptions) -> Result<Vec<SpeakerWindow>> {
        opts.validate()?;
        let regions = self.vad.speech(audio, &vad_options())?;
        let win = (opts.window_seconds * RATE as f32) as usize;
        let step = ((opts.step_seconds * RATE as f32) as usize).max(1);
        let windows: Vec<Window> = regions.iter().flat_map(|r| plan(r, win, step)).collect();
        let embedded: Vec<usize> = (0..windows.len())
            .filter(|&i| windows[i].embedded())
            .collect();
        let clips: Vec<&[f32]> = embedded
            .iter()
            .map(|&i| &audio[windows[i].start..windows[i].end])
            .collect();
        let mut emb = self.encoder.embed(&clips)?.into_iter();
        let secs = |s: usize| s as f64 / RATE as f64;
        Ok(windows
            .iter()
            .map(|w| SpeakerWindow {
                start: secs(w.start),
                end: secs(w.end),
                own: (secs(w.own.0), secs(w.own.1)),
                embedding: w.embedded().then(|| {
                    let mut e = emb.next().expect("one embedding per embedded window");
                    let n = e.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                    e.iter_mut().for_each(|v| *v /= n);
                    e
                }),
            })
            .collect())
    }
}

/// One embedding window of a recording (times in seconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeakerWindow {
    /// Start of the embedded audio.
    pub start: f64,
    /// End of the embedded audio.
    pub end: f64,
    /// The stretch of its speech region this window labels (nearest its centre).
    pub own: (f64, f64),
    /// L2-normalised 192-d ECAPA embedding; `None` for a region under 0.4 s (it takes the
    /// speaker of the nearest embedded window).
    pub embedding: Option<Vec<f32>>,
}

/// Speaker turns from a recording's windows ([`Diarizer::embeddings`]): steps 4–5 of the
/// pipeline.
pub fn turns_from_embeddings(windows: &[SpeakerWindow], opts: &DiarizeOptions) -> Vec<SpeakerTurn> {
    let embedded: Vec<usize> = (0..windows.len())
        .filter(|&i| windows[i].embedding.is_some())
        .collect();
    let emb: Vec<Vec<f32>> = embedded
        .iter()
        .map(|&i| windows[i].embedding.clone().expect("embedded"))
        .collect();
    // Sample positions keep the clustering's overlap tests exact.
    let at = |t: f64| (t * RATE as f64).round() as usize;
    let spans: Vec<(usize, usize)> = embedded
        .iter()
        .map(|&i| (at(windows[i].start), at(windows[i].end)))
        .collect();
    let labels = assign(&emb, &spans, opts);
    // Windows not embedded take the label of the nearest embedded window.
    let mut label = vec![0usize; windows.len()];
    for (i, w) in windows.iter().enumerate() {
        label[i] = match embedded.binary_search(&i) {
            Ok(k) => labels[k],
            Err(_) => embedded
                .iter()
                .zip(&labels)
                .min_by(|(&a, _), (&b, _)| {
                    (windows[a].own.0 - w.own.0)
                        .abs()
                        .total_cmp(&(windows[b].own.0 - w.own.0).abs())
                })
                .map_or(0, |(_, &l)| l),
        };
    }
    turns_of(windows, &label)
}

/// Windows of one speech region: `win` samples every `step`, the last one ending at the region's
/// end; each owns the part of the region nearest its centre.
fn plan(r: &SpeechChunk, win: usize, step: usize) -> Vec<Window> {
    let len = r.end - r.start;
    let mut starts = vec![r.start];
    if len > win {
        let mut s = r.start + step;
        while s + win < r.end {
            starts.push(s);
            s += step;
        }
        starts.push(r.end - win);
    }
    let centres: Vec<usize> = starts.iter().map(|&s| s + win.min(len) / 2).collect();
    starts
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let lo = if i == 0 {
                r.start
            } else {
                (centres[i - 1] + centres[i]) / 2
            };
            let hi = if i + 1 == starts.len() {
                r.end
            } else {
                (centres[i] + centres[i + 1]) / 2
            };
            Window {
                start: s,
                end: (s + win).min(r.end),
                own: (lo, hi),
            }
        })
        .collect()
}

/// Cosine distance between a minor cluster's mean embedding and the nearest other cluster's
/// above which, when it is heard in separate places, it stays a speaker of its own (and under
/// which a cluster heard in one stretch folds, see [`fold_single_stretches`]). In the dev
/// mixtures the short turns of a voice kept this way sit 0.78–0.93 from the nearest mean; a
/// 3-speaker TV interview's minor clusters of noisy windows of one voice 0.66 (folded).
/// 0.8 with the 0.73 threshold (session 37, `tools/diarization/replay.py`): from 0.77 to 0.82
/// the counts of 480 mixtures stay within 425–429, and both real recordings keep their counts
/// with int8 and with float32 embeddings (0.75 with 0.7 counted 3 and 4 speakers for the
/// float32 embeddings of the pyannote sample and the interview).
const FAR_VOICE: f32 = 0.8;
/// Cosine distance between two clusters' mean embeddings under which they are one voice.
const SAME_VOICE: f32 = 0.43;

/// Cluster labels of the embeddings (`spans[i]`: the samples of embedding `i`, in time order)
/// under the options' count rules.
fn assign(emb: &[Vec<f32>], spans: &[(usize, usize)], opts: &DiarizeOptions) -> Vec<usize> {
    let n = emb.len();
    if n == 0 {
        return Vec::new();
    }
    let d = cluster::Dendrogram::build(emb);
    let lo = opts.min_speakers.unwrap_or(1);
    let hi = opts.max_speakers.unwrap_or(usize::MAX);
    if let Some(k) = opts.num_speakers {
        return d.labels(k);
    }
    tracing::debug!(top_merges = ?d.top_heights(8), windows = n, "speaker clustering");
    let k = d.clusters_below(opts.threshold).clamp(lo, hi);
    let mut labels = d.labels(k);
    // Minor clusters (a cough, a laugh, music) join their nearest cluster while the count stays
    // ≥ min_speakers — unless they are a voice: a few short turns of someone far from every
    // other cluster, heard again after someone else spoke (a cough or a change of style is one
    // stretch). `voices` holds one window of each such cluster (labels renumber).
    let mut voices: Vec<usize> = Vec::new();
    loop {
        let k_now = labels.iter().max().map_or(0, |m| m + 1);
        let counts = cluster_sizes(&labels, k_now);
        // The smallest cluster, when it is minor: under 3 windows (about 2 s of speech: too
        // little for short-window embeddings to tell a new voice from a change of style;
        // pyannote's clustering folds far larger ones) or 5% of them.
        let minor = n.div_ceil(20).max(3);
        let Some(small) = (0..k_now)
            .filter(|&c| counts[c] < minor && !voices.iter().any(|&w| labels[w] == c))
            .min_by_key(|&c| counts[c])
        else {
            break;
        };
        if k_now <= lo || k_now == 1 {
            break;
        }
        let centroids = cluster_sums(emb, &labels, k_now);
        let me = &centroids[small];
        let target = (0..k_now)
            .filter(|&c| c != small)
            .max_by(|&a, &b| cosine(me, &centroids[a]).total_cmp(&cosine(me, &centroids[b])))
            .expect("another cluster");
        if 1.0 - cosine(me, &centroids[target]) > FAR_VOICE && returns(&labels, spans, small) {
            voices.push(labels.iter().position(|&l| l == small).expect("a window"));
            continue;
        }
        for l in &mut labels {
            if *l == small {
                *l = target;
            }
        }
        // Renumber by first appearance.
        let mut ids = std::collections::HashMap::new();
        for l in &mut labels {
            let next = ids.len();
            *l = *ids.entry(*l).or_insert(next);
        }
    }
    merge_close_centroids(emb, &mut labels, lo);
    let max_windows = (ONE_STRETCH_SECONDS / opts.step_seconds).round() as usize;
    fold_single_stretches(emb, spans, &mut labels, lo, max_windows);
    if tracing::enabled!(tracing::Level::DEBUG) {
        let k_now = labels.iter().max().map_or(0, |m| m + 1);
        let centroids = cluster_sums(emb, &labels, k_now);
        let sizes = cluster_sizes(&labels, k_now);
        let mut pairs = Vec::new();
        for a in 0..k_now {
            for b in a + 1..k_now {
                pairs.push((a, b, 1.0 - cosine(&centroids[a], &centroids[b])));
            }
        }
        tracing::debug!(?sizes, ?pairs, "speaker clusters");
    }
    labels
}

/// Whether cluster `c` is heard again after someone else spoke: two of its windows that do not
/// overlap, with another cluster's window between them.
fn returns(labels: &[usize], spans: &[(usize, usize)], c: usize) -> bool {
    let mine: Vec<usize> = (0..labels.len()).filter(|&i| labels[i] == c).collect();
    mine.windows(2)
        .any(|p| p[1] > p[0] + 1 && spans[p[1]].0 >= spans[p[0]].1)
}

/// Seconds of windows (6 windows at the default 0.75 s step; a bound in seconds keeps its
/// meaning when `step_seconds` changes) up to which a cluster heard in one stretch only must be
/// far from every other voice to count as a speaker. In the dev mixtures (240, 20 seeds) the
/// count is the same for any bound from 6 to 20 windows: no cluster of one stretch is larger
/// there.
const ONE_STRETCH_SECONDS: f32 = 4.5;

/// Folds each cluster of at most `max_windows` ([`ONE_STRETCH_SECONDS`]) heard in one stretch (see
/// [`returns`]) into the cluster with the nearest mean, when that is under [`FAR_VOICE`] away,
/// smallest first, while more than `lo` clusters remain. A few seconds of one stretch are too
/// little to tell a new voice from a change of style, laughter, or windows straddling a change
/// of speaker without a pause; a voice also heard elsewhere, or far from every other, stays.
/// (pyannote's clustering folds every cluster under 12 embeddings into its nearest.) In the dev
/// mixtures it fixed 14 speaker counts and broke one where two errors had cancelled (one
/// recording split in two clusters, 0.65 apart, while a 1.3 s voice heard once had joined the
/// other half); the pyannote sample keeps its 2 speakers.
fn fold_single_stretches(
    emb: &[Vec<f32>],
    spans: &[(usize, usize)],
    labels: &mut [usize],
    lo: usize,
    max_windows: usize,
) {
    loop {
        let k = labels.iter().max().map_or(0, |m| m + 1);
        if k <= lo.max(1) {
            return;
        }
        let sums = cluster_sums(emb, labels, k);
        let counts = cluster_sizes(labels, k);
        // (windows, distance, cluster, nearest): the smallest, then the closest, first.
        let mut best: Option<(usize, f32, usize, usize)> = None;
        for c in 0..k {
            if counts[c] > max_windows || returns(labels, spans, c) {
                continue;
            }
            let (t, d) = (0..k)
                .filter(|&o| o != c)
                .map(|o| (o, 1.0 - cosine(&sums[c], &sums[o])))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .expect("another cluster");
            if d < FAR_VOICE && best.is_none_or(|b| (counts[c], d) < (b.0, b.1)) {
                best = Some((counts[c], d, c, t));
            }
        }
        let Some((_, _, c, t)) = best else {
            return;
        };
        merge_into(labels, c, t);
    }
}

/// Merges the two clusters whose mean embeddings are closest while they are under
/// [`SAME_VOICE`] apart and more than `lo` clusters remain. Average linkage judges clusters by
/// the mean distance between their windows, which noise, music or laughter under the speech
/// inflate: such windows of one voice can form clusters over 0.7 apart while their means
/// nearly coincide (a 3-speaker TV interview of the dev set: 6 clusters, three pairs of means
/// 0.35–0.40 apart). Different voices' means sit ≥ 0.47 apart: the pyannote sample's two
/// speakers, the closest of 878 pairs of different voices there and in 240 dev mixtures.
fn merge_close_centroids(emb: &[Vec<f32>], labels: &mut [usize], lo: usize) {
    loop {
        let k = labels.iter().max().map_or(0, |m| m + 1);
        if k <= lo.max(1) {
            return;
        }
        let sums = cluster_sums(emb, labels, k);
        let mut best = (f32::INFINITY, 0, 0);
        for a in 0..k {
            for b in a + 1..k {
                let d = 1.0 - cosine(&sums[a], &sums[b]);
                if d < best.0 {
                    best = (d, a, b);
                }
            }
        }
        let (d, a, b) = best;
        if d >= SAME_VOICE {
            return;
        }
        merge_into(labels, b, a);
    }
}

/// Relabels cluster `from` as `into` and closes the gap: labels above `from` move down one, so
/// they stay `0..k-1`.
fn merge_into(labels: &mut [usize], from: usize, into: usize) {
    for l in labels.iter_mut() {
        if *l == from {
            *l = into;
        }
        if *l > from {
            *l -= 1;
        }
    }
}

/// The number of windows in each of the `k` clusters.
fn cluster_sizes(labels: &[usize], k: usize) -> Vec<usize> {
    let mut sizes = vec![0usize; k];
    for &l in labels {
        sizes[l] += 1;
    }
    sizes
}

/// The sum of each of the `k` clusters' embeddings (cosine needs no division by the size).
fn cluster_sums(emb: &[Vec<f32>], labels: &[usize], k: usize) -> Vec<Vec<f32>> {
    let mut sums = vec![vec![0f32; emb[0].len()]; k];
    for (e, &l) in emb.iter().zip(labels) {
        sums[l].iter_mut().zip(e).for_each(|(a, b)| *a += b);
    }
    sums
}

/// Turns from the windows' owned spans: neighbouring spans of one speaker join.
fn turns_of(windows: &[SpeakerWindow], label: &[usize]) -> Vec<SpeakerTurn> {
    // Labels renumbered by first appearance in time.
    let mut ids = std::collections::HashMap::new();
    let mut turns: Vec<SpeakerTurn> = Vec::new();
    let mut last: Option<(usize, f64)> = None; // (label, end)
    for (w, &l) in windows.iter().zip(label) {
        let next = ids.len();
        let id = *ids.entry(l).or_insert(next);
        let (s, e) = w.own;
        match (last, turns.last_mut()) {
            (Some((pl, pe)), Some(t)) if pl == id && pe == s => t.end = e,
            _ => turns.push(SpeakerTurn {
                speaker: format!("SPEAKER_{id:02}"),
                start: s,
                end: e,
            }),
        }
        last = Some((id, e));
    }
    turns
}

/// Puts a speaker on every segment (the one with the most overlap) and word (the turn holding
/// its middle, else the nearest turn).
pub fn label_segments(segments: &mut [Segment], turns: &[SpeakerTurn]) {
    if turns.is_empty() {
        return;
    }
    let nearest = |t: f64| -> &str {
        turns
            .iter()
            .min_by(|a, b| gap(a, t).total_cmp(&gap(b, t)))
            .map(|x| x.speaker.as_str())
            .unwrap_or_default()
    };
    for seg in segments {
        let mut best: Option<(&str, f64)> = None;
        for t in turns {
            let o = (seg.end.min(t.end) - seg.start.max(t.start)).max(0.0);
            if o > 0.0 && best.is_none_or(|(_, b)| o > b) {
                best = Some((&t.speaker, o));
            }
        }
        let who = best.map_or_else(|| nearest((seg.start + seg.end) / 2.0), |(s, _)| s);
        seg.speaker = Some(who.to_string());
        for w in &mut seg.words {
            w.speaker = Some(nearest((w.start + w.end) / 2.0).to_string());
        }
    }
}

/// Distance from `t` to a turn (0 inside it).
fn gap(turn: &SpeakerTurn, t: f64) -> f64 {
    if t < turn.start {
        turn.start - t
    } else if t > turn.end {
        t - turn.end
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_each_region_exactly_once() {
        let r = SpeechChunk {
            start: 1000,
            end: 1000 + 5 * RATE,
        };
        let ws = plan(&r, 24_000, 12_000);
        assert_eq!(ws[0].own.0, r.start);
        assert_eq!(ws.last().unwrap().own.1, r.end);
        assert_eq!(ws.last().unwrap().end, r.end);
        for p in ws.windows(2) {
            assert_eq!(p[0].own.1, p[1].own.0);
        }
        assert!(ws.iter().all(|w| w.end - w.start == 24_000));
        let short = plan(
            &SpeechChunk {
                start: 0,
                end: 9000,
            },
            24_000,
            12_000,
        );
        assert_eq!(short.len(), 1);
        assert_eq!(
            (short[0].start, short[0].end, short[0].own),
            (0, 9000, (0, 9000))
        );
    }

    #[test]
    fn clusters_of_two_windows_fold_into_their_nearest_unless_counted() {
        // Two voices of 19 windows each, and 2 windows of a third direction leaning to the
        // first voice: too little speech for a speaker of its own (2 windows are 5% of 40, so
        // the size rule, not the share, folds them).
        let mut emb = Vec::new();
        for i in 0..19 {
            let j = i as f32 * 0.01;
            emb.push(unit([1.0, j, 0.0]));
            emb.push(unit([j, 1.0, 0.0]));
        }
        emb.push(unit([0.3, 0.0, 1.0]));
        emb.push(unit([0.3, 0.01, 1.0]));
        let spans = steps(emb.len());
        let labels = assign(&emb, &spans, &DiarizeOptions::default());
        assert_eq!(labels.iter().max(), Some(&1), "{labels:?}");
        assert_eq!(labels[38], labels[0]);
        assert_eq!(labels[39], labels[0]);
        // A count (or a minimum) that needs them keeps them apart.
        let three = DiarizeOptions {
            min_speakers: Some(3),
            ..DiarizeOptions::default()
        };
        let labels = assign(&emb, &spans, &three);
        assert_eq!(labels.iter().max(), Some(&2), "{labels:?}");
        assert_ne!(labels[38], labels[0]);
    }

    /// Spans of `n` windows of 1.5 s every 0.75 s.
    fn steps(n: usize) -> Vec<(usize, usize)> {
        (0..n).map(|i| (i * 12_000, i * 12_000 + 24_000)).collect()
    }

    /// `v` scaled to unit length.
    fn unit(v: [f32; 3]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    /// Window `i` of two voices of 19 windows each that alternate in runs of 4.
    fn alternating(i: usize) -> Vec<f32> {
        let j = (i % 19) as f32 * 0.01;
        if (i / 4).is_multiple_of(2) {
            unit([1.0, j, 0.0])
        } else {
            unit([j, 1.0, 0.0])
        }
    }

    #[test]
    fn a_far_voice_heard_twice_stays_and_one_stretch_folds() {
        // Two voices of 19 windows each, alternating in runs of 4, and 2 windows of a third
        // voice orthogonal to both (distance 1).
        let third = [unit([0.0, 0.01, 1.0]), unit([0.01, 0.0, 1.0])];
        let count = |at: [usize; 2]| {
            let mut emb: Vec<Vec<f32>> = (0..38).map(alternating).collect();
            emb.insert(at[0], third[0].clone());
            emb.insert(at[1], third[1].clone());
            let labels = assign(&emb, &steps(emb.len()), &DiarizeOptions::default());
            (
                labels.iter().max().map_or(0, |m| m + 1),
                labels[at[0]] == labels[at[1]],
            )
        };
        // Heard at 10 and again at 30, others speaking between: a speaker of its own.
        assert_eq!(count([10, 30]), (3, true));
        // One stretch (two overlapping windows): a cough, a laugh, a change of style.
        assert_eq!(count([20, 21]).0, 2);
        // Two windows that do not overlap but with nobody between them: still one stretch.
        let mut emb: Vec<Vec<f32>> = (0..38).map(alternating).collect();
        emb.extend(third.iter().cloned());
        let mut spans = steps(38);
        spans.push((38 * 12_000, 38 * 12_000 + 24_000));
        spans.push((40 * 12_000, 40 * 12_000 + 24_000));
        let labels = assign(&emb, &spans, &DiarizeOptions::default());
        assert_eq!(labels.iter().max(), Some(&1), "{labels:?}");
    }

    #[test]
    fn a_short_single_stretch_near_a_voice_joins_it() {
        // Two voices of 19 windows each, alternating in runs of 4, and 5 windows of a third
        // direction 0.76 from the first voice (above the clustering threshold, under
        // FAR_VOICE) and ≈ 1 from the second.
        let near = |i: usize| unit([0.24, i as f32 * 0.002, 0.97]);
        let far = |i: usize| unit([0.0, i as f32 * 0.002, 1.0]);
        let run = |at: &[usize], third: &dyn Fn(usize) -> Vec<f32>, opts: &DiarizeOptions| {
            let mut emb: Vec<Vec<f32>> = (0..38).map(alternating).collect();
            for (i, &a) in at.iter().enumerate() {
                emb.insert(a, third(i));
            }
            let labels = assign(&emb, &steps(emb.len()), opts);
            let k = labels.iter().max().map_or(0, |m| m + 1);
            (k, labels[at[0]] == labels[0])
        };
        let one_stretch = [20, 21, 22, 23, 24];
        let default = DiarizeOptions::default();
        // One stretch, near the first voice: joins it.
        assert_eq!(run(&one_stretch, &near, &default), (2, true));
        // One stretch, far from every voice: a speaker of its own.
        assert_eq!(run(&one_stretch, &far, &default), (3, false));
        // Near, but heard twice with others speaking between: a speaker of its own.
        assert_eq!(run(&[8, 9, 10, 30, 31], &near, &default), (3, false));
        // A minimum of three speakers keeps the stretch apart.
        let three = DiarizeOptions {
            min_speakers: Some(3),
            ..DiarizeOptions::default()
        };
        assert_eq!(run(&one_stretch, &near, &three), (3, false));
    }

    #[test]
    fn options_are_checked() {
        DiarizeOptions::default().validate().unwrap();
        for bad in [
            DiarizeOptions {
                num_speakers: Some(0),
                ..Default::default()
            },
            DiarizeOptions {
                min_speakers: Some(3),
                max_speakers: Some(2),
                ..Default::default()
            },
            DiarizeOptions {
                num_speakers: Some(5),
                max_speakers: Some(2),
                ..Default::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn segments_and_words_get_the_overlapping_speaker() {
        let turns = vec![
            SpeakerTurn {
                speaker: "SPEAKER_00".into(),
                start: 0.0,
                end: 4.0,
            },
            SpeakerTurn {
                speaker: "SPEAKER_01".into(),
                start: 4.2,
                end: 9.0,
            },
        ];
        let mut segs = vec![
            Segment::new(0.5, 4.5, "a"),
            Segment::new(5.0, 8.0, "b"),
            Segment::new(9.5, 10.0, "c"),
        ];
        segs[0].words = vec![
            dicta_core::Word {
                word: "x".into(),
                start: 0.5,
                end: 1.0,
                probability: None,
                speaker: None,
            },
            dicta_core::Word {
                word: "y".into(),
                start: 4.1,
                end: 4.5,
                probability: None,
                speaker: None,
            },
        ];
        label_segments(&mut segs, &turns);
        let who: Vec<_> = segs.iter().map(|s| s.speaker.clone().unwrap()).collect();
        assert_eq!(who, ["SPEAKER_00", "SPEAKER_01", "SPEAKER_01"]);
        assert_eq!(segs[0].words[1].speaker.as_deref(), Some("SPEAKER_01"));
    }
}
