//! The transcriber: log-mel, prompts, sequential seeking and the batched long-form mode over
//! windows from many recordings.

use dicta_audio::mel::{LogMel, MelConfig, MelSpectrogram};
use dicta_core::{Error, ErrorKind, Result, Segment, Transcript};
use dicta_models::whisper::{Whisper, WhisperTokenizer};

use super::fallback::{is_silence, Attempt};
use super::logits::argmax;
use super::longform::{merge_windows, plan_windows, PlannedWindow, WindowSegment};
use super::options::{DecodeOptions, LongFormMode, Task};
use super::segments::{
    split_by_timestamps, RawSegment, FRAMES_PER_SECOND, TIME_PRECISION, WINDOW_FRAMES,
};
use super::window::{ce, WindowDecoder, WindowJob};

/// Samples of zero padding faster-whisper's feature extractor appends (one hop).
const FEATURE_PADDING: usize = 160;

/// Results of [`WhisperTranscriber::transcribe`].
#[derive(Debug)]
pub struct TranscribeOutput {
    /// One result per input, in input order.
    pub transcripts: Vec<Result<Transcript>>,
    /// The long-form mode used for recordings longer than one window.
    pub long_form_mode: LongFormMode,
    /// Windows decoded (first attempts; fallbacks not counted).
    pub windows: usize,
    /// Rows of each encoder batch, in order.
    pub batch_sizes: Vec<usize>,
}

/// Transcribes 16 kHz mono recordings with a borrowed Whisper model.
pub struct WhisperTranscriber<'m> {
    model: &'m Whisper,
    mel: LogMel,
    non_speech: Vec<u32>,
}

/// One decoded window of the batched mode.
#[derive(Debug, Clone)]
struct DecodedWindow {
    start: f64,
    end: f64,
    segments: Vec<WindowSegment>,
    attempt: Attempt,
}

/// Per-recording state of the sequential mode.
struct SeqState {
    input: usize,
    mel: MelSpectrogram,
    content_frames: usize,
    seek: usize,
    all_tokens: Vec<u32>,
    prompt_reset_since: usize,
    sot_seq: Vec<u32>,
    segments: Vec<Segment>,
}

impl<'m> WhisperTranscriber<'m> {
    /// Builds the log-mel front end the model expects.
    pub fn new(model: &'m Whisper) -> Result<Self> {
        let mel = LogMel::new(MelConfig::whisper(model.config.n_mels))?;
        let non_speech = non_speech_tokens(&model.tokenizer)?;
        Ok(Self {
            model,
            mel,
            non_speech,
        })
    }

    /// Transcribes many recordings (16 kHz mono samples); windows of all recordings are decoded
    /// in batches of up to `batch_size`. Recordings of at most 30 s are decoded the same way in
    /// both modes (faster-whisper's seek loop); `mode` decides how longer ones are handled.
    /// Returns one result per input, in input order.
    pub fn transcribe(
        &self,
        audios: &[&[f32]],
        opts: &DecodeOptions,
        mode: LongFormMode,
        batch_size: usize,
    ) -> Result<TranscribeOutput> {
        opts.validate()?;
        if batch_size == 0 {
            return Err(Error::invalid_input("batch_size must be >= 1, got 0"));
        }
        if let LongFormMode::Batched { overlap_seconds } = mode {
            if !(0.0..15.0).contains(&overlap_seconds) {
                return Err(Error::invalid_input(format!(
                    "overlap_seconds must be in [0, 15), got {overlap_seconds}"
                )));
            }
        }
        let decoder = WindowDecoder {
            model: self.model,
            opts,
            suppress: self.suppress_tokens(opts),
        };
        let mut out = TranscribeOutput {
            transcripts: Vec::with_capacity(audios.len()),
            long_form_mode: mode,
            windows: 0,
            batch_sizes: Vec::new(),
        };
        let mut results: Vec<Option<Result<Transcript>>> =
            (0..audios.len()).map(|_| None).collect();
        let mut seq: Vec<SeqState> = Vec::new();
        let mut long: Vec<(usize, MelSpectrogram, usize)> = Vec::new();
        let languages = self.languages(audios, opts, &decoder, &mut out)?;
        for (i, audio) in audios.iter().enumerate() {
            let mel = self.mel.compute(audio, FEATURE_PADDING);
            if audio.is_empty() || mel.n_frames < 2 {
                results[i] = Some(Err(Error::new(
                    ErrorKind::EmptyInput,
                    format!("input {i} holds no audio (0 frames)"),
                )));
                continue;
            }
            let content_frames = mel.n_frames - 1;
            let lang = match &languages[i] {
                Ok(l) => l.clone(),
                Err(e) => {
                    results[i] = Some(Err(e.clone()));
                    continue;
                }
            };
            let sot_seq = self.sot_sequence(&lang, opts.task)?;
            let batched_long =
                matches!(mode, LongFormMode::Batched { .. }) && content_frames > WINDOW_FRAMES;
            if batched_long {
                long.push((i, mel, content_frames));
            } else {
                seq.push(SeqState {
                    input: i,
                    mel,
                    content_frames,
                    seek: 0,
                    all_tokens: self.initial_prompt(opts)?,
                    prompt_reset_since: 0,
                    sot_seq,
                    segments: Vec::new(),
                });
            }
        }
        self.run_sequential(&mut seq, &decoder, batch_size, &mut out)?;
        for st in seq {
            let dur = audios[st.input].len() as f64 / 16000.0;
            results[st.input] = Some(Ok(transcript(
                st.input,
                &languages[st.input],
                dur,
                st.segments,
            )));
        }
        if let LongFormMode::Batched { overlap_seconds } = mode {
            for (i, segs) in self.run_batched(
                &long,
                &languages,
                overlap_seconds,
                &decoder,
                batch_size,
                &mut out,
            )? {
                let dur = audios[i].len() as f64 / 16000.0;
                results[i] = Some(Ok(transcript(i, &languages[i], dur, segs)));
            }
        }
        out.transcripts = results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::internal("recording was not decoded"))))
            .collect();
        Ok(out)
    }

    /// faster-whisper's seek loop, one window per recording per model call.
    fn run_sequential(
        &self,
        states: &mut [SeqState],
        decoder: &WindowDecoder<'_>,
        batch_size: usize,
        out: &mut TranscribeOutput,
    ) -> Result<()> {
        let opts = decoder.opts;
        let tb = self.model.config.special.timestamp_begin;
        loop {
            let active: Vec<usize> = (0..states.len())
                .filter(|&i| states[i].seek < states[i].content_frames)
                .take(batch_size)
                .collect();
            if active.is_empty() {
                return Ok(());
            }
            let jobs: Vec<WindowJob> = active
                .iter()
                .map(|&i| {
                    let st = &states[i];
                    let size = WINDOW_FRAMES.min(st.content_frames - st.seek);
                    WindowJob {
                        mel: window(&st.mel, st.seek, size),
                        prompt: self.prompt(
                            &st.all_tokens[st.prompt_reset_since..],
                            &st.sot_seq,
                            opts,
                        ),
                        seed_key: st.seek as u64,
                    }
                })
                .collect();
            out.windows += jobs.len();
            out.batch_sizes.push(jobs.len());
            let refs: Vec<&WindowJob> = jobs.iter().collect();
            let attempts = decoder.decode(&refs)?;
            for (&i, a) in active.iter().zip(attempts) {
                let st = &mut states[i];
                let size = WINDOW_FRAMES.min(st.content_frames - st.seek);
                if is_silence(&a, opts) {
                    st.seek += size;
                    continue;
                }
                let split = split_by_timestamps(&a.tokens, tb, st.seek, size);
                st.seek = split.seek;
                for raw in split.segments {
                    let text = self.model.tokenizer.decode(&raw.tokens)?;
                    if raw.start == raw.end || text.trim().is_empty() {
                        continue;
                    }
                    st.all_tokens.extend_from_slice(&raw.tokens);
                    st.segments.push(segment(&raw, text, &a));
                }
                if !opts.condition_on_previous_text
                    || a.temperature > opts.prompt_reset_on_temperature
                {
                    st.prompt_reset_since = st.all_tokens.len();
                }
            }
        }
    }

    /// Fixed overlapping windows of all long recordings, decoded in batches, merged. Where
    /// the earlier window's last segment ends less than 3 s after the later window starts
    /// (Whisper skips speech cut by a window edge), a repair window starting at
    /// the earlier window's last timestamp (where the sequential mode would seek) is decoded
    /// in a second batched pass and merged in between.
    fn run_batched(
        &self,
        long: &[(usize, MelSpectrogram, usize)],
        languages: &[Result<String>],
        overlap_seconds: f32,
        decoder: &WindowDecoder<'_>,
        batch_size: usize,
        out: &mut TranscribeOutput,
    ) -> Result<Vec<(usize, Vec<Segment>)>> {
        const TRUSTED_AFTER_CUT_SECONDS: f64 = 3.0;
        let opts = decoder.opts;
        let initial = self.initial_prompt(opts)?;
        let mut prompts = Vec::with_capacity(long.len());
        for (i, _, _) in long {
            let lang = languages[*i].as_ref().map_err(|e| e.clone())?;
            prompts.push(self.prompt(&initial, &self.sot_sequence(lang, opts.task)?, opts));
        }
        let plans: Vec<(usize, PlannedWindow)> = long
            .iter()
            .enumerate()
            .flat_map(|(k, (_, _, content))| {
                plan_windows(*content, overlap_seconds)
                    .into_iter()
                    .map(move |w| (k, w))
            })
            .collect();
        let mut per_rec: Vec<Vec<DecodedWindow>> = vec![Vec::new(); long.len()];
        for (k, d) in self.decode_planned(long, &prompts, &plans, decoder, batch_size, out)? {
            per_rec[k].push(d);
        }
        let mut repairs = Vec::new();
        for (k, wins) in per_rec.iter().enumerate() {
            for pair in wins.windows(2) {
                let a_end = pair[0].segments.last().map_or(pair[0].start, |s| s.end);
                // The first seconds of a window cut into speech are unreliable (Whisper skips
                // the partial sentence yet still stamps its first segment near 0 s), so the
                // earlier window must reach well into the overlap.
                if a_end < pair[1].start + TRUSTED_AFTER_CUT_SECONDS {
                    let start =
                        ((a_end * FRAMES_PER_SECOND as f64).round() as usize).min(long[k].2);
                    let len = WINDOW_FRAMES.min(long[k].2 - start);
                    if len > 0 {
                        repairs.push((k, PlannedWindow { start, len }));
                    }
                }
            }
        }
        for (k, d) in self.decode_planned(long, &prompts, &repairs, decoder, batch_size, out)? {
            per_rec[k].push(d);
        }
        let mut res = Vec::new();
        for (k, mut wins) in per_rec.into_iter().enumerate() {
            wins.sort_by(|a, b| a.start.total_cmp(&b.start));
            let input: Vec<(f64, f64, Vec<WindowSegment>)> = wins
                .iter()
                .map(|w| (w.start, w.end, w.segments.clone()))
                .collect();
            let mut segs = Vec::new();
            for m in merge_windows(&input) {
                let tokens = match m.tokens {
                    Some(t) => t,
                    None => self.model.tokenizer.encode(&m.text)?,
                };
                let raw = RawSegment {
                    start: m.start,
                    end: m.end,
                    tokens,
                };
                segs.push(segment(&raw, m.text, &wins[m.window].attempt));
            }
            res.push((long[k].0, segs));
        }
        Ok(res)
    }

    /// Decodes planned windows (recording index, window) in batches of `batch_size`.
    fn decode_planned(
        &self,
        long: &[(usize, MelSpectrogram, usize)],
        prompts: &[Vec<u32>],
        plans: &[(usize, PlannedWindow)],
        decoder: &WindowDecoder<'_>,
        batch_size: usize,
        out: &mut TranscribeOutput,
    ) -> Result<Vec<(usize, DecodedWindow)>> {
        let mut res = Vec::with_capacity(plans.len());
        for chunk in plans.chunks(batch_size) {
            let jobs: Vec<WindowJob> = chunk
                .iter()
                .map(|(k, w)| WindowJob {
                    mel: window(&long[*k].1, w.start, w.len),
                    prompt: prompts[*k].clone(),
                    seed_key: w.start as u64,
                })
                .collect();
            out.windows += jobs.len();
            out.batch_sizes.push(jobs.len());
            let refs: Vec<&WindowJob> = jobs.iter().collect();
            for ((k, w), a) in chunk.iter().zip(decoder.decode(&refs)?) {
                res.push((*k, self.window_segments(*w, a, decoder.opts)?));
            }
        }
        Ok(res)
    }

    /// All segments of one fixed window, including the unfinished text after the last
    /// timestamp pair (the sequential mode would decode it again from the next seek; here the
    /// next window or a repair window covers it and the merge resolves the overlap).
    fn window_segments(
        &self,
        w: PlannedWindow,
        a: Attempt,
        opts: &DecodeOptions,
    ) -> Result<DecodedWindow> {
        let tb = self.model.config.special.timestamp_begin;
        let start = w.start as f64 / FRAMES_PER_SECOND as f64;
        let end = (w.start + w.len) as f64 / FRAMES_PER_SECOND as f64;
        let mut segments = Vec::new();
        if !is_silence(&a, opts) {
            let split = split_by_timestamps(&a.tokens, tb, w.start, w.len);
            let used: usize = split.segments.iter().map(|s| s.tokens.len()).sum();
            let mut raws = split.segments;
            if used < a.tokens.len() && used > 0 {
                let tail = a.tokens[used..].to_vec();
                let ts = tail[0].saturating_sub(tb) as f64 * TIME_PRECISION;
                raws.push(RawSegment {
                    start: start + ts,
                    end,
                    tokens: tail,
                });
            }
            for raw in raws {
                let text = self.model.tokenizer.decode(&raw.tokens)?;
                if text.trim().is_empty() {
                    continue;
                }
                segments.push(WindowSegment {
                    start: raw.start,
                    end: raw.end.max(raw.start),
                    text,
                    tokens: raw.tokens,
                });
            }
        }
        Ok(DecodedWindow {
            start,
            end,
            segments,
            attempt: a,
        })
    }

    /// Language per recording: the option, "en" for English-only models, or detected from the
    /// first window on multilingual models.
    fn languages(
        &self,
        audios: &[&[f32]],
        opts: &DecodeOptions,
        decoder: &WindowDecoder<'_>,
        out: &mut TranscribeOutput,
    ) -> Result<Vec<Result<String>>> {
        let cfg = &self.model.config;
        if !cfg.is_multilingual {
            if let Some(l) = opts.language.as_deref().filter(|l| *l != "en") {
                tracing::warn!(language = l, "English-only model: using 'en'");
            }
            return Ok(vec![Ok("en".to_string()); audios.len()]);
        }
        if let Some(l) = &opts.language {
            if cfg.lang_id(l).is_none() {
                return Err(Error::invalid_input(format!("unknown language code '{l}'")));
            }
            return Ok(vec![Ok(l.clone()); audios.len()]);
        }
        let mut res = Vec::with_capacity(audios.len());
        for chunk in audios.chunks(decoder_batch(audios.len())) {
            let jobs: Vec<WindowJob> = chunk
                .iter()
                .map(|a| {
                    let mel = self.mel.compute(a, FEATURE_PADDING);
                    let size = WINDOW_FRAMES.min(mel.n_frames.saturating_sub(1));
                    WindowJob {
                        mel: window(&mel, 0, size),
                        prompt: vec![cfg.special.sot],
                        seed_key: 0,
                    }
                })
                .collect();
            out.batch_sizes.push(jobs.len());
            let refs: Vec<&WindowJob> = jobs.iter().collect();
            let enc = decoder.encode(&refs)?;
            let mut cache = self.model.new_cache(&enc)?;
            let sot = candle_core::Tensor::from_vec(
                vec![cfg.special.sot; jobs.len()],
                (jobs.len(), 1),
                self.model.device(),
            )
            .map_err(ce)?;
            let logits = self.model.decode_last(&sot, &mut cache)?;
            let logits: Vec<f32> = logits.flatten_all().and_then(|l| l.to_vec1()).map_err(ce)?;
            for row in logits.chunks(cfg.n_vocab) {
                let scores: Vec<f32> = cfg
                    .lang_ids
                    .iter()
                    .map(|(_, id)| row[*id as usize])
                    .collect();
                res.push(Ok(cfg.lang_ids[argmax(&scores)].0.clone()));
            }
        }
        Ok(res)
    }

    fn sot_sequence(&self, language: &str, task: Task) -> Result<Vec<u32>> {
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

    fn initial_prompt(&self, opts: &DecodeOptions) -> Result<Vec<u32>> {
        match &opts.initial_prompt {
            Some(p) => self.model.tokenizer.encode(&format!(" {}", p.trim())),
            None => Ok(Vec::new()),
        }
    }

    /// faster-whisper's `get_prompt`: `<|startofprev|>` + the last 223 previous tokens, the SOT
    /// sequence, and `<|notimestamps|>` when decoding without timestamps.
    fn prompt(&self, previous: &[u32], sot_seq: &[u32], opts: &DecodeOptions) -> Vec<u32> {
        let sp = &self.model.config.special;
        let keep = self.model.config.n_text_ctx / 2 - 1;
        let mut p = Vec::with_capacity(previous.len().min(keep) + sot_seq.len() + 2);
        if !previous.is_empty() {
            p.push(sp.sot_prev);
            p.extend_from_slice(&previous[previous.len().saturating_sub(keep)..]);
        }
        p.extend_from_slice(sot_seq);
        if opts.without_timestamps {
            p.push(sp.no_timestamps);
        }
        p
    }

    /// faster-whisper's `get_suppressed_tokens`.
    fn suppress_tokens(&self, opts: &DecodeOptions) -> Vec<u32> {
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

fn decoder_batch(n: usize) -> usize {
    n.clamp(1, 16)
}

/// Frames `[start, start + size)` of `mel` zero padded to a `[n_mels, 3000]` window
/// (faster-whisper slices the content, then `pad_or_trim`s it).
fn window(mel: &MelSpectrogram, start: usize, size: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; mel.n_mels * WINDOW_FRAMES];
    let size = size
        .min(WINDOW_FRAMES)
        .min(mel.n_frames.saturating_sub(start));
    for m in 0..mel.n_mels {
        let src = &mel.data[m * mel.n_frames + start..m * mel.n_frames + start + size];
        out[m * WINDOW_FRAMES..m * WINDOW_FRAMES + size].copy_from_slice(src);
    }
    out
}

fn segment(raw: &RawSegment, text: String, a: &Attempt) -> Segment {
    let mut s = Segment::new(raw.start, raw.end, text);
    s.tokens = raw.tokens.clone();
    s.avg_logprob = Some(a.avg_logprob);
    s.compression_ratio = Some(a.compression_ratio);
    s.no_speech_prob = Some(a.no_speech_prob);
    s.temperature = Some(a.temperature);
    s
}

fn transcript(
    i: usize,
    language: &Result<String>,
    duration: f64,
    segments: Vec<Segment>,
) -> Transcript {
    let text: String = segments.iter().map(|s| s.text.as_str()).collect();
    Transcript {
        id: i.to_string(),
        audio: String::new(),
        text: text.trim().to_string(),
        language: language.as_ref().ok().cloned(),
        duration,
        segments,
    }
}

/// faster-whisper's `Tokenizer.non_speech_tokens`: symbols that are not speech (brackets,
/// music notes, speaker-tag punctuation), keeping basic punctuation.
pub(crate) fn non_speech_tokens(tok: &WhisperTokenizer) -> Result<Vec<u32>> {
    let mut symbols: Vec<String> = "\"#()*+/:;<=>@[\\]^_`{|}~「」『』"
        .chars()
        .map(String::from)
        .collect();
    symbols.extend(
        "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪"
            .split_whitespace()
            .map(String::from),
    );
    let misc: Vec<String> = "♩♪♫♬♭♮♯".chars().map(String::from).collect();
    let mut out = Vec::new();
    for s in [" -", " '"] {
        if let Some(&t) = tok.encode(s)?.first() {
            out.push(t);
        }
    }
    for (sym, is_misc) in symbols
        .iter()
        .map(|s| (s, false))
        .chain(misc.iter().map(|s| (s, true)))
    {
        for text in [sym.clone(), format!(" {sym}")] {
            let ids = tok.encode(&text)?;
            if ids.len() == 1 || (is_misc && !ids.is_empty()) {
                out.push(ids[0]);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}
