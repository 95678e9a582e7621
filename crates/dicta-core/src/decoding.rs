//! Rules on Whisper decoding options that hold wherever the options come from: the engine's
//! `DecodeOptions::validate` and the server's request checks both call these, so a request is
//! refused with the same words at the door as the engine would refuse it.

use crate::{Error, Result};

/// faster-whisper's `language_detection_segments` (windows read, ≥ 1) and
/// `language_detection_threshold` (a number).
pub fn language_detection(segments: Option<usize>, threshold: Option<f32>) -> Result<()> {
    if segments == Some(0) {
        return Err(Error::invalid_input(
            "language_detection_segments must be >= 1, got 0",
        ));
    }
    if let Some(t) = threshold.filter(|t| !t.is_finite()) {
        return Err(Error::invalid_input(format!(
            "language_detection_threshold must be a number, got {t}"
        )));
    }
    Ok(())
}

/// faster-whisper's `hallucination_silence_threshold`: seconds ≥ 0, and only with word
/// timestamps (it judges words; faster-whisper ignores it without them, and a setting that
/// does nothing is refused). `how` says how the caller turns word timestamps on.
pub fn hallucination_silence(
    threshold: Option<f64>,
    word_timestamps: bool,
    how: &str,
) -> Result<()> {
    let Some(t) = threshold else {
        return Ok(());
    };
    if !(t.is_finite() && t >= 0.0) {
        return Err(Error::invalid_input(format!(
            "hallucination_silence_threshold must be seconds >= 0, got {t}"
        )));
    }
    if !word_timestamps {
        return Err(Error::invalid_input(format!(
            "hallucination_silence_threshold needs word timestamps ({how})"
        )));
    }
    Ok(())
}

/// `clip_timestamps` and `vad_filter` exclude each other: the clips already say which audio to
/// transcribe (faster-whisper silently ignores the VAD then).
pub fn clips_without_vad(clips: bool, vad_filter: bool) -> Result<()> {
    if clips && vad_filter {
        return Err(Error::invalid_input(
            "clip_timestamps and vad_filter cannot be combined: the clips already say which \
             audio to transcribe (faster-whisper ignores vad_filter then)",
        ));
    }
    Ok(())
}

/// `repetition_penalty`: a number > 0 (CTranslate2 divides positive logits by it).
pub fn repetition_penalty(p: Option<f32>) -> Result<()> {
    match p {
        Some(p) if !(p > 0.0 && p.is_finite()) => Err(Error::invalid_input(format!(
            "repetition_penalty must be a number > 0, got {p}"
        ))),
        _ => Ok(()),
    }
}

/// `suppress_tokens`: token ids, and -1 for the tokenizer's non-speech symbols.
pub fn suppress_tokens(ids: &[i64]) -> Result<()> {
    match ids.iter().find(|&&t| t < -1 || t > i64::from(u32::MAX)) {
        Some(bad) => Err(Error::invalid_input(format!(
            "suppress_tokens may hold token ids and -1 only, got {bad}"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_refuses_by_name_and_passes_what_is_fine() {
        let refused = |r: Result<()>, needle: &str| {
            let e = r.unwrap_err();
            assert!(e.message.contains(needle), "{}", e.message);
        };
        refused(
            language_detection(Some(0), None),
            "language_detection_segments",
        );
        refused(
            language_detection(None, Some(f32::NAN)),
            "language_detection_threshold",
        );
        language_detection(Some(1), Some(0.5)).unwrap();
        refused(hallucination_silence(Some(-1.0), true, "x"), "seconds >= 0");
        refused(
            hallucination_silence(Some(2.0), false, "word_timestamps=true"),
            "word_timestamps=true",
        );
        hallucination_silence(Some(2.0), true, "x").unwrap();
        hallucination_silence(None, false, "x").unwrap();
        refused(clips_without_vad(true, true), "vad_filter");
        clips_without_vad(true, false).unwrap();
        refused(repetition_penalty(Some(0.0)), "repetition_penalty");
        repetition_penalty(Some(1.5)).unwrap();
        refused(suppress_tokens(&[-2]), "-2");
        suppress_tokens(&[-1, 50257]).unwrap();
    }
}
