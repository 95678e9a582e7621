//! The token sequences a window's decode starts from, as faster-whisper builds them: the
//! start-of-transcript sequence, the initial prompt, hotwords and prefix, the whole prompt
//! (`get_prompt`) and the suppressed tokens (`get_suppressed_tokens`).

use dicta_core::{Error, Result};

use super::options::{DecodeOptions, Task};
use super::transcriber::WhisperTranscriber;

impl WhisperTranscriber<'_> {
    pub(super) fn sot_sequence(&self, language: &str, task: Task) -> Result<Vec<u32>> {
        let cfg = &self.model.config;
        let sp = &cfg.special;
        if !cfg.is_multilingual {
            return Ok(vec![sp.sot]);
        }
        let lang = cfg
            .lang_id(language)
            .ok_or_else(|| Error::invalid_input(format!("unknown language code '{language}'")))?;
        let task = match task {
            Task::Transcribe => sp.transcribe,
            Task::Translate => sp.translate,
        };
        Ok(vec![sp.sot, lang, task])
    }

    pub(super) fn initial_prompt(&self, prompt: Option<&str>) -> Result<Vec<u32>> {
        match prompt {
            // Only the last 223 tokens are used: tokenize a tail that surely holds them, so a
            // huge prompt costs no tokenizer time (see `prompt_tail`).
            Some(p) => self.model.tokenizer.encode(&format!(
                " {}",
                dicta_core::text::prompt_tail(p.trim(), dicta_core::text::PROMPT_TAIL_BYTES)
            )),
            None => Ok(Vec::new()),
        }
    }

    /// `DecodeOptions::initial_prompt` with `prompt_every_window`: tokenized as given, as
    /// faster-whisper's batched pipeline does (`tokenizer.encode(initial_prompt)`).
    pub(super) fn every_window_prompt(&self, prompt: Option<&str>) -> Result<Vec<u32>> {
        match prompt {
            Some(p) => self.model.tokenizer.encode(dicta_core::text::prompt_tail(
                p,
                dicta_core::text::PROMPT_TAIL_BYTES,
            )),
            None => Ok(Vec::new()),
        }
    }

    /// `DecodeOptions::hotwords` as tokens (faster-whisper's `get_prompt`; blank words are
    /// none).
    pub(super) fn hotwords(&self, hotwords: Option<&str>) -> Result<std::sync::Arc<[u32]>> {
        match hotwords.map(str::trim) {
            Some(h) if !h.is_empty() => self.head_tokens(h),
            _ => Ok(std::sync::Arc::from([])),
        }
    }

    /// `DecodeOptions::prefix` as tokens (faster-whisper's `get_prompt`; an empty prefix is
    /// none, as there, while a blank one is a space).
    pub(super) fn prefix(&self, prefix: Option<&str>) -> Result<std::sync::Arc<[u32]>> {
        match prefix {
            Some(p) if !p.is_empty() => self.head_tokens(p),
            _ => Ok(std::sync::Arc::from([])),
        }
    }

    /// `" " + text.trim()` as tokens, at most 223 (how faster-whisper's `get_prompt` reads the
    /// hotwords and the prefix). Only a head of the text that surely holds them is tokenized.
    pub(super) fn head_tokens(&self, text: &str) -> Result<std::sync::Arc<[u32]>> {
        let keep = self.model.config.n_text_ctx / 2 - 1;
        let head = dicta_core::text::prompt_head(text.trim(), dicta_core::text::PROMPT_TAIL_BYTES);
        let mut t = self.model.tokenizer.encode(&format!(" {head}"))?;
        t.truncate(keep);
        Ok(t.into())
    }

    /// faster-whisper's `get_prompt`: `<|startofprev|>` + the hotwords + the last 223 previous
    /// tokens (fewer when hotwords and previous text together would not leave the window room
    /// in the model's context, where faster-whisper would fail), the SOT sequence, and
    /// `<|notimestamps|>` when decoding without timestamps.
    pub(super) fn prompt(
        &self,
        hotwords: &[u32],
        previous: &[u32],
        sot_seq: &[u32],
        opts: &DecodeOptions,
    ) -> Vec<u32> {
        let sp = &self.model.config.special;
        let ctx = self.model.config.n_text_ctx;
        // faster-whisper keeps 223 tokens of each, which with a multilingual model's SOT
        // sequence can pass the 448-token context (and CTranslate2 then fails); the previous
        // text gives way just enough for the prompt to fit, so nothing that fits changes.
        let fixed = 1 + hotwords.len() + sot_seq.len() + usize::from(opts.without_timestamps);
        let keep = (ctx / 2 - 1).min(ctx.saturating_sub(fixed));
        let mut p =
            Vec::with_capacity(hotwords.len() + previous.len().min(keep) + sot_seq.len() + 2);
        if !previous.is_empty() || !hotwords.is_empty() {
            p.push(sp.sot_prev);
            p.extend_from_slice(hotwords);
            p.extend_from_slice(&previous[previous.len().saturating_sub(keep)..]);
        }
        p.extend_from_slice(sot_seq);
        if opts.without_timestamps {
            p.push(sp.no_timestamps);
        }
        p
    }

    /// faster-whisper's `get_suppressed_tokens`.
    pub(super) fn suppress_tokens(&self, opts: &DecodeOptions) -> Vec<u32> {
        if opts.suppress_tokens.is_empty() {
            return Vec::new();
        }
        let sp = &self.model.config.special;
        let mut ids: Vec<u32> = opts
            .suppress_tokens
            .iter()
            .filter(|&&t| t >= 0)
            .map(|&t| t as u32)
            .collect();
        if opts.suppress_tokens.contains(&-1) {
            ids.extend_from_slice(&self.non_speech);
        }
        ids.extend([
            sp.transcribe,
            sp.translate,
            sp.sot,
            sp.sot_prev,
            sp.sot_lm,
            sp.no_speech,
        ]);
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}
