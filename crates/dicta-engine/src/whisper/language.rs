//! Which languages and tasks a Whisper checkpoint can honour, and the language of each
//! recording: given, English, or detected as faster-whisper's `detect_language` does.

use dicta_audio::mel::MelSpectrogram;
use dicta_core::{Error, Result};
use dicta_models::whisper::{Whisper, WhisperConfig};

use super::options::{DecodeOptions, InputOptions, Task};
use super::segments::{FRAMES_PER_SECOND, WINDOW_FRAMES};
use super::transcriber::{decoder_batch, window};
use super::window::{ce, sot_index, WindowDecoder, WindowJob};

/// Every language's probability, most likely first (faster-whisper's `all_language_probs`).
pub(super) type Distribution = Vec<(String, f32)>;

/// Per recording: its language (or why none), the detected language's probability, and
/// every language's probability from the last window detection read (both `None` where the
/// language was given).
pub(super) struct Languages {
    pub codes: Vec<Result<String>>,
    pub probabilities: Vec<Option<f32>>,
    pub all: Vec<Option<Distribution>>,
}

/// Checks `language` (a code such as `"de"`, or none: detected) and `task` against the model:
/// English-only models take only `"en"` and cannot translate; multilingual ones take the codes
/// of their language tokens. The error lists what works.
pub fn check_language_task(cfg: &WhisperConfig, language: Option<&str>, task: Task) -> Result<()> {
    if !cfg.is_multilingual {
        return check_english_only(language, task);
    }
    if let Some(l) = language {
        if cfg.lang_id(l).is_none() {
            let known: Vec<&str> = cfg.lang_ids.iter().map(|(c, _)| c.as_str()).collect();
            return Err(Error::invalid_input(format!(
                "unknown language code {l:?}; this model knows: {}",
                known.join(", ")
            )));
        }
    }
    Ok(())
}

/// What an English-only model (Whisper `.en`, Moonshine) takes: language `"en"` or none, and
/// transcription only. Silently transcribing as English what the caller said is French (or
/// "english") would hide their mistake: refuse, naming what works.
pub fn check_english_only(language: Option<&str>, task: Task) -> Result<()> {
    if let Some(l) = language.filter(|l| *l != "en") {
        return Err(Error::invalid_input(format!(
            "this model is English-only: language must be \"en\" or left out, got {l:?}"
        )));
    }
    if task == Task::Translate {
        return Err(Error::invalid_input(
            "this model is English-only and cannot translate; task must be \"transcribe\" (translation needs a multilingual model)",
        ));
    }
    Ok(())
}

/// [`languages`] where inputs may name their own ([`InputOptions::language`], one entry per
/// input or none): such an input gets its language as given; the others follow `opts`,
/// detection batched among them only. An input whose model cannot honour its language or its
/// own task ([`InputOptions::task`]) gets that error, which fails it alone.
pub(super) fn languages_of_inputs(
    model: &Whisper,
    mels: &[MelSpectrogram],
    inputs: &[&InputOptions],
    opts: &DecodeOptions,
    decoder: &WindowDecoder<'_>,
    batch_sizes: &mut Vec<usize>,
) -> Result<Languages> {
    let own = |i: usize| inputs.get(i).and_then(|o| o.language.as_deref());
    let task = |i: usize| inputs.get(i).and_then(|o| o.task).unwrap_or(opts.task);
    let rest: Vec<&MelSpectrogram> = (0..mels.len())
        .filter(|&i| own(i).is_none())
        .map(|i| &mels[i])
        .collect();
    let detected = if rest.is_empty() {
        check_language_task(&model.config, opts.language.as_deref(), opts.task)?;
        Languages {
            codes: Vec::new(),
            probabilities: Vec::new(),
            all: Vec::new(),
        }
    } else {
        languages(model, &rest, opts, decoder, batch_sizes)?
    };
    if inputs.is_empty() {
        return Ok(detected);
    }
    let mut langs = detected.codes.into_iter();
    let mut probs = detected.probabilities.into_iter();
    let mut alls = detected.all.into_iter();
    let mut out = Languages {
        codes: Vec::with_capacity(mels.len()),
        probabilities: Vec::with_capacity(mels.len()),
        all: Vec::with_capacity(mels.len()),
    };
    for i in 0..mels.len() {
        let (lang, prob, all) = match own(i) {
            Some(l) => (Ok(l.to_string()), None, None),
            None => (
                langs.next().expect("a language per other input"),
                probs.next().expect("a probability per other input"),
                alls.next().expect("a distribution per other input"),
            ),
        };
        let fits = check_language_task(&model.config, own(i), task(i));
        out.codes.push(fits.and(lang));
        out.probabilities.push(prob);
        out.all.push(all);
    }
    Ok(out)
}

/// Language per recording: the option, "en" for English-only models, or detected on
/// multilingual models as faster-whisper's `detect_language` does, from the first clip's start:
/// windows of 30 s, up to `language_detection_segments` of them, until one's most likely
/// language is above `language_detection_threshold`; when none is, the language most windows
/// chose (ties: the first chosen) with its highest probability. A probability is the softmax
/// over the language tokens' logits at `<|startoftranscript|>`. Each encoder batch's size is
/// pushed to `batch_sizes`. `mels`: each recording's features (with faster-whisper's padding),
/// computed once for detection and the seek loop.
pub(super) fn languages(
    model: &Whisper,
    mels: &[&MelSpectrogram],
    opts: &DecodeOptions,
    decoder: &WindowDecoder<'_>,
    batch_sizes: &mut Vec<usize>,
) -> Result<Languages> {
    let given = |codes: Vec<Result<String>>| {
        let n = codes.len();
        Ok(Languages {
            codes,
            probabilities: vec![None; n],
            all: vec![None; n],
        })
    };
    let cfg = &model.config;
    check_language_task(cfg, opts.language.as_deref(), opts.task)?;
    if !cfg.is_multilingual {
        return given(vec![Ok("en".to_string()); mels.len()]);
    }
    if let Some(l) = &opts.language {
        return given(vec![Ok(l.clone()); mels.len()]);
    }
    if cfg.lang_ids.is_empty() {
        // A Hugging Face folder without `lang_to_id` in generation_config.json.
        return Err(Error::model_load(
            "multilingual model lists no language tokens (lang_to_id); cannot detect the language",
        ));
    }
    let mut res = Vec::with_capacity(mels.len());
    let mut probs = Vec::with_capacity(mels.len());
    let mut alls = Vec::with_capacity(mels.len());
    // With clips, faster-whisper detects from the first clip's start (truncated to a frame),
    // or from the beginning when that is past the recording.
    let clip_start = opts
        .clip_timestamps
        .first()
        .map_or(0, |&s| (s * FRAMES_PER_SECOND as f64) as usize);
    let segments = opts.language_detection_segments.max(1);
    for chunk in mels.chunks(decoder_batch(mels.len())) {
        // Per recording, the windows detection reads: every feature frame from its start, the
        // padding's last one included (unlike the seek loop's content frames), up to
        // `segments` windows. Only those windows are kept (a long recording's whole features
        // are hundreds of MB).
        let mut windows: Vec<Vec<Vec<f32>>> = chunk
            .iter()
            .map(|mel| {
                let from = if clip_start < mel.n_frames.saturating_sub(1) {
                    clip_start
                } else {
                    0
                };
                let frames = (segments * WINDOW_FRAMES).min(mel.n_frames - from);
                (0..frames)
                    .step_by(WINDOW_FRAMES)
                    .map(|o| window(mel, from + o, WINDOW_FRAMES.min(frames - o)))
                    .collect()
            })
            .collect();
        let mut decided: Vec<Option<(String, f32)>> = vec![None; chunk.len()];
        // faster-whisper returns the distribution of the last window it read.
        let mut last: Vec<Distribution> = vec![Vec::new(); chunk.len()];
        let mut votes: Vec<Vec<(String, Vec<f32>)>> = vec![Vec::new(); chunk.len()];
        for s in 0..segments {
            let rows: Vec<usize> = (0..chunk.len())
                .filter(|&r| decided[r].is_none() && s < windows[r].len())
                .collect();
            if rows.is_empty() {
                break;
            }
            let jobs: Vec<WindowJob> = rows
                .iter()
                .map(|&r| WindowJob {
                    mel: std::mem::take(&mut windows[r][s]),
                    prompt: vec![cfg.special.sot],
                    forced: Vec::new(),
                    seed_key: 0,
                    draft: None,
                    final_rest: None,
                })
                .collect();
            for (&r, dist) in rows.iter().zip(detect(model, decoder, &jobs)?) {
                let (lang, p) = dist[0].clone();
                last[r] = dist;
                if p > opts.language_detection_threshold {
                    decided[r] = Some((lang, p));
                } else {
                    match votes[r].iter_mut().find(|(l, _)| *l == lang) {
                        Some((_, ps)) => ps.push(p),
                        None => votes[r].push((lang, vec![p])),
                    }
                }
            }
            batch_sizes.push(jobs.len());
        }
        for ((d, v), all) in decided.into_iter().zip(votes).zip(last) {
            let (lang, p) = d.unwrap_or_else(|| majority(v));
            res.push(Ok(lang));
            probs.push(Some(p));
            alls.push(Some(all));
        }
    }
    Ok(Languages {
        codes: res,
        probabilities: probs,
        all: alls,
    })
}

/// The language chosen by most windows (the first chosen on ties: Python's `max` over an
/// insertion-ordered dict) and its highest probability.
fn majority(votes: Vec<(String, Vec<f32>)>) -> (String, f32) {
    let mut best: Option<(String, Vec<f32>)> = None;
    for (lang, ps) in votes {
        if best.as_ref().is_none_or(|(_, b)| ps.len() > b.len()) {
            best = Some((lang, ps));
        }
    }
    let (lang, ps) = best.expect("every recording has at least one window");
    let p = ps.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    (lang, p)
}

/// Every language's probability in each window, most likely first.
fn detect(
    model: &Whisper,
    decoder: &WindowDecoder<'_>,
    jobs: &[WindowJob],
) -> Result<Vec<Distribution>> {
    let refs: Vec<&WindowJob> = jobs.iter().collect();
    let _turn = decoder.hold();
    let enc = decoder.encode(&refs)?;
    detect_encoded(model, &enc)
}

/// Every language's probability in each window of encoder states `enc` `[N, 1500, d]`, most
/// likely first (CTranslate2's `detect_language`: the language tokens' softmax after
/// `<|startoftranscript|>`, sorted; equal scores keep the tokens' order). The caller
/// holds the model's turn.
fn detect_encoded(model: &Whisper, enc: &candle_core::Tensor) -> Result<Vec<Distribution>> {
    let cfg = &model.config;
    let n = enc.dim(0).map_err(ce)?;
    let mut cache = model.new_cache(enc)?;
    let sot = candle_core::Tensor::from_vec(vec![cfg.special.sot; n], (n, 1), model.device())
        .map_err(ce)?;
    let logits = model.decode_last(&sot, &mut cache)?;
    let logits: Vec<f32> = logits.flatten_all().and_then(|l| l.to_vec1()).map_err(ce)?;
    Ok(logits
        .chunks(cfg.n_vocab)
        .map(|row| {
            let scores: Vec<f32> = cfg
                .lang_ids
                .iter()
                .map(|(_, id)| row[*id as usize])
                .collect();
            let probs = softmax(&scores);
            // The most likely first, by score (a stable sort: equal scores keep the tokens'
            // order, so the first is the first maximum, as `argmax` picks).
            let mut order: Vec<usize> = (0..scores.len()).collect();
            order.sort_by(|&a, &b| {
                scores[b]
                    .partial_cmp(&scores[a])
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            order
                .into_iter()
                .map(|i| (cfg.lang_ids[i].0.clone(), probs[i]))
                .collect()
        })
        .collect())
}

/// faster-whisper's `multilingual`: the language of each window, detected from its own encoder
/// states `enc` (row `i` = job `i`), put in the job's prompt in place of the recording's
/// (the token after `<|startoftranscript|>`). Returns each window's SOT sequence (SOT,
/// language, task), which word alignment of the window uses.
pub(super) fn per_window(
    model: &Whisper,
    decoder: &WindowDecoder<'_>,
    jobs: &mut [WindowJob],
    enc: &candle_core::Tensor,
) -> Result<Vec<Vec<u32>>> {
    let sot = model.config.special.sot;
    let detected = {
        let _turn = decoder.hold();
        detect_encoded(model, enc)?
    };
    let mut sequences = Vec::with_capacity(jobs.len());
    for (job, dist) in jobs.iter_mut().zip(detected) {
        let code = &dist[0].0;
        let lang = model
            .config
            .lang_id(code)
            .ok_or_else(|| Error::internal(format!("detected language {code:?} has no token")))?;
        let at = sot_index(&job.prompt, sot);
        if let Some(t) = job.prompt.get_mut(at + 1) {
            *t = lang;
        }
        sequences.push(job.prompt[at..(at + 3).min(job.prompt.len())].to_vec());
    }
    Ok(sequences)
}

/// `softmax(scores)`, computed in f64.
fn softmax(scores: &[f32]) -> Vec<f32> {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = scores.iter().map(|&x| (x as f64 - max).exp()).sum();
    scores
        .iter()
        .map(|&x| ((x as f64 - max).exp() / sum) as f32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_majority_takes_the_first_chosen_on_ties_and_its_highest_probability() {
        let v = |l: &str, ps: &[f32]| (l.to_string(), ps.to_vec());
        assert_eq!(
            majority(vec![v("fr", &[0.2]), v("de", &[0.5]), v("pl", &[0.3])]),
            ("fr".to_string(), 0.2)
        );
        assert_eq!(
            majority(vec![v("pl", &[0.2, 0.9]), v("fr", &[0.1])]),
            ("pl".to_string(), 0.9)
        );
    }
}
