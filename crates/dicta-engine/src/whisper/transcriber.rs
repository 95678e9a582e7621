//! The transcriber: log-mel, prompts, and faster-whisper's seek loop over windows of many
//! recordings (or of the lanes of long ones, in the batched long-form mode).

use dicta_audio::mel::{LogMel, MelConfig, MelSpectrogram};
use dicta_core::{Error, ErrorKind, Result, Segment, TokenLogprob, Transcript};
use dicta_models::whisper::{Whisper, WhisperTokenizer};

use super::fallback::{is_silence, Attempt};
use super::final_window::FinalRest;
use super::hallucination::{judge, Verdict, WindowPlace};
use super::options::{DecodeOptions, InputOptions, LongFormMode};
use super::seek_state::SeqState;
use super::segments::{
    frames_at, split_by_timestamps, RawSegment, FRAMES_PER_SECOND, INPUT_STRIDE, WINDOW_FRAMES,
};
use super::window::{AlignRequest, WindowDecoder, WindowJob};
use super::words::{last_end, place_words, splits_on_unicode, PlacedWord, SegmentSpan};

/// What inputs of one call bring apart from its audio (each empty, or one entry per input).
#[derive(Default, Clone, Copy)]
struct PerInput<'a> {
    /// Draft tokens ([`WhisperTranscriber::transcribe_with_drafts`]).
    drafts: Option<&'a [&'a [u32]]>,
    /// Options of the input's own ([`InputOptions`]).
    options: &'a [&'a InputOptions],
}

/// Samples of zero padding faster-whisper's feature extractor appends (one hop).
pub(super) const FEATURE_PADDING: usize = 160;

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
    /// Seconds spent computing log-mel features.
    pub features_seconds: f64,
    /// Encoder output frames of real audio over the windows counted in `windows` (50 per
    /// second of audio in each window).
    pub frames: usize,
    /// Encoder output frames including each window's padding to 30 s (1500 per window).
    pub padded_frames: usize,
}

impl TranscribeOutput {
    /// Counts the encoder frames of one batch of windows of `mel_frames` content frames each.
    pub(crate) fn count_frames(&mut self, mel_frames: impl IntoIterator<Item = usize>) {
        for n in mel_frames {
            self.frames += n.min(WINDOW_FRAMES).div_ceil(2);
            self.padded_frames += WINDOW_FRAMES / 2;
        }
    }
}

/// Transcribes 16 kHz mono recordings with a borrowed Whisper model.
pub struct WhisperTranscriber<'m> {
    pub(super) model: &'m Whisper,
    mel: LogMel,
    /// faster-whisper's non-speech tokens (`suppress_tokens` -1), see [`super::prompt`].
    pub(super) non_speech: Vec<u32>,
    /// Speculative decoding's draft model ([`WhisperTranscriber::with_assistant`]).
    assistant: Option<super::speculative::Assistant<'m>>,
    /// Tokens drafted from the drafts of [`WhisperTranscriber::transcribe_with_drafts`], and
    /// accepted.
    lookup_stats: super::speculative::SpecCounters,
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
            assistant: None,
            lookup_stats: Default::default(),
        })
    }

    /// Speculative decoding: `assistant` (a smaller Whisper taking the same log-mel input)
    /// drafts `draft_tokens` tokens per round for every temperature-0 greedy pass
    /// (`beam_size` 1), and the main model verifies them in one decoder pass. The output is the
    /// main model's, token for token; beam search and sampling run as without it.
    pub fn with_assistant(mut self, assistant: &'m Whisper, draft_tokens: usize) -> Result<Self> {
        self.assistant = Some(super::speculative::Assistant::new(
            self.model,
            assistant,
            draft_tokens,
        )?);
        Ok(self)
    }

    /// Tokens drafted from the inputs' drafts ([`WhisperTranscriber::transcribe_with_drafts`])
    /// and accepted, over every call so far.
    pub fn draft_counts(&self) -> (usize, usize) {
        self.lookup_stats.get()
    }

    /// Tokens the assistant drafted and the main model accepted, over every call so far
    /// (`None` without an assistant).
    pub fn assistant_counts(&self) -> Option<(usize, usize)> {
        self.assistant.as_ref().map(|a| a.counts())
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
        self.transcribe_gated(audios, opts, mode, batch_size, None)
    }

    /// [`WhisperTranscriber::transcribe`] taking a turn of `gate` for each batch of model work
    /// (one pass of windows, a word alignment, a language detection): concurrent transcriptions
    /// on one model then alternate batch by batch, so a short one is not held behind every
    /// window of a long one (the engine's callers share the model this way).
    pub fn transcribe_gated(
        &self,
        audios: &[&[f32]],
        opts: &DecodeOptions,
        mode: LongFormMode,
        batch_size: usize,
        gate: Option<&crate::engine::Turns>,
    ) -> Result<TranscribeOutput> {
        self.run_all(audios, PerInput::default(), opts, mode, batch_size, gate)
    }

    /// [`WhisperTranscriber::transcribe`] with long-form [`LongFormMode::Sequential`] and a
    /// draft per input (`drafts[i]`, empty for none): the tokens its greedy search is likely to
    /// produce, e.g. a streaming buffer's previous hypothesis ([`Segment::tokens`] of its
    /// transcript, joined). Temperature-0 greedy passes draft from them and verify the drafts
    /// in one decoder pass per round; the transcripts are exactly `transcribe`'s, only faster
    /// when the drafts are right. `inputs` (empty, or one per input) set an input's own
    /// language, initial prompt and hotwords (a streaming session's): input `i` is transcribed
    /// exactly as `transcribe` with `inputs[i].apply(opts)` would, while sharing the batches.
    ///
    /// Errors: as `transcribe`; `InvalidInput` when `drafts` (or a non-empty `inputs`) and
    /// `audios` differ in length.
    pub fn transcribe_with_drafts(
        &self,
        audios: &[&[f32]],
        drafts: &[&[u32]],
        inputs: &[&InputOptions],
        opts: &DecodeOptions,
        batch_size: usize,
    ) -> Result<TranscribeOutput> {
        if drafts.len() != audios.len() || !(inputs.is_empty() || inputs.len() == audios.len()) {
            return Err(Error::invalid_input(format!(
                "{} drafts and {} input options for {} inputs",
                drafts.len(),
                inputs.len(),
                audios.len()
            )));
        }
        self.run_all(
            audios,
            PerInput {
                drafts: Some(drafts),
                options: inputs,
            },
            opts,
            LongFormMode::Sequential,
            batch_size,
            None,
        )
    }

    fn run_all(
        &self,
        audios: &[&[f32]],
        per_input: PerInput<'_>,
        opts: &DecodeOptions,
        mode: LongFormMode,
        batch_size: usize,
        gate: Option<&crate::engine::Turns>,
    ) -> Result<TranscribeOutput> {
        opts.validate()?;
        if batch_size == 0 {
            return Err(Error::invalid_input("batch_size must be >= 1, got 0"));
        }
        let vocab = self.model.config.n_vocab;
        if let Some(bad) = opts
            .initial_prompt_tokens
            .iter()
            .flatten()
            .find(|&&t| t as usize >= vocab)
        {
            return Err(Error::invalid_input(format!(
                "initial_prompt token id {bad} is past the model's vocabulary ({vocab} tokens)"
            )));
        }
        let decoder = WindowDecoder {
            model: self.model,
            opts,
            suppress: self.suppress_tokens(opts),
            gate,
            assistant: self.assistant.as_ref(),
            lookup_stats: &self.lookup_stats,
        };
        let mut out = TranscribeOutput {
            transcripts: Vec::with_capacity(audios.len()),
            // `Auto` reports the mode that ran (set to `Batched` below when it cuts lanes).
            // Clips run the sequential seek loop whatever the mode.
            long_form_mode: match mode {
                LongFormMode::Auto => LongFormMode::Sequential,
                _ if !opts.clip_timestamps.is_empty() => LongFormMode::Sequential,
                m => m,
            },
            windows: 0,
            batch_sizes: Vec::new(),
            features_seconds: 0.0,
            frames: 0,
            padded_frames: 0,
        };
        let mut results: Vec<Option<Result<Transcript>>> =
            (0..audios.len()).map(|_| None).collect();
        let mut seq: Vec<SeqState> = Vec::new();
        let PerInput {
            drafts,
            options: inputs,
        } = per_input;
        // Each recording's features, once: language detection reads its first windows, the seek
        // loop all of them.
        let started = std::time::Instant::now();
        let mels: Vec<MelSpectrogram> = audios
            .iter()
            .map(|a| self.mel.compute(a, FEATURE_PADDING))
            .collect();
        out.features_seconds += started.elapsed().as_secs_f64();
        let super::language::Languages {
            codes: languages,
            probabilities: language_probs,
            all: all_language_probs,
        } = super::language::languages_of_inputs(
            self.model,
            &mels,
            inputs,
            opts,
            &decoder,
            &mut out.batch_sizes,
        )?;
        for (i, l) in languages.iter().enumerate() {
            if let Ok(language) = l {
                opts.progress.language(
                    i,
                    language,
                    language_probs[i],
                    all_language_probs[i].as_deref(),
                );
            }
        }
        let hotwords = self.hotwords(opts.hotwords.as_deref())?;
        let prefix = self.prefix(opts.prefix.as_deref())?;
        for (i, (audio, mel)) in audios.iter().zip(mels).enumerate() {
            // An input's own task, prompt and hotwords (a streaming session's), else the call's:
            // what `InputOptions::apply` gives, without a copy of the options per input.
            let own = inputs.get(i);
            let task = own.and_then(|o| o.task).unwrap_or(opts.task);
            let own_prompt = own.and_then(|o| o.initial_prompt.as_deref());
            let initial_prompt = own_prompt.or(opts.initial_prompt.as_deref());
            // Token ids (faster-whisper's `Iterable[int]`) unless this input has its own text.
            let prompt_ids = opts
                .initial_prompt_tokens
                .as_deref()
                .filter(|_| own_prompt.is_none());
            let hotwords = match own.and_then(|o| o.hotwords.as_deref()) {
                Some(h) => self.hotwords(Some(h))?,
                None => hotwords.clone(),
            };
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
            let sot_seq = self.sot_sequence(&lang, task)?;
            // The batched mode cuts a long recording into lanes; otherwise the recording is one.
            let min_lane = match mode {
                LongFormMode::Batched => super::lanes::MIN_LANE_FRAMES,
                LongFormMode::Auto => super::lanes::auto_min_lane(opts.condition_on_previous_text),
                LongFormMode::Sequential => usize::MAX,
            };
            // Clips run one after another in one seek loop (the previous text carries over).
            let lanes = if opts.clip_timestamps.is_empty() {
                super::lanes::lanes(audio, content_frames, batch_size, min_lane)
            } else {
                vec![(0, content_frames)]
            };
            let span = lanes.len() > 1;
            if span && mode == LongFormMode::Auto {
                out.long_form_mode = LongFormMode::Batched;
            }
            let mel = std::sync::Arc::new(mel);
            let draft: Option<std::sync::Arc<[u32]>> = drafts
                .and_then(|d| d.get(i))
                .filter(|d| !d.is_empty())
                .map(|d| std::sync::Arc::from(*d));
            for (start, end) in lanes {
                let all_tokens = match prompt_ids {
                    Some(ids) => ids.to_vec(),
                    None if opts.prompt_every_window => self.every_window_prompt(initial_prompt)?,
                    None => self.initial_prompt(initial_prompt)?,
                };
                let mut st = SeqState {
                    input: i,
                    mel: mel.clone(),
                    content_frames: end,
                    seek: start,
                    prompt_len: all_tokens.len(),
                    all_tokens,
                    prompt_reset_since: 0,
                    sot_seq: sot_seq.clone(),
                    hotwords: hotwords.clone(),
                    prefix: prefix.clone(),
                    segments: Vec::new(),
                    duration: audio.len() as f64 / 16000.0,
                    last_speech: start as f64 / FRAMES_PER_SECOND as f64,
                    split_on_unicode: splits_on_unicode(&lang),
                    span,
                    draft: draft.clone(),
                    final_rest: None,
                    clips: Default::default(),
                    recording_frames: content_frames,
                    window_sot: None,
                };
                if !opts.clip_timestamps.is_empty() {
                    // Before the first clip: its start ends the (empty) stretch already done.
                    (st.seek, st.content_frames) = (0, 0);
                    st.clips = opts.clip_frames(content_frames).into();
                    st.next_clip();
                }
                seq.push(st);
            }
        }
        self.run_sequential(&mut seq, &decoder, batch_size, &mut out)?;
        // The lanes of a recording, in order: their segments join.
        let mut spans: Vec<(usize, Vec<Segment>)> = Vec::new();
        for st in seq {
            let dur = audios[st.input].len() as f64 / 16000.0;
            if st.span {
                match spans.last_mut() {
                    Some((i, segs)) if *i == st.input => segs.extend(st.segments),
                    _ => spans.push((st.input, st.segments)),
                }
                continue;
            }
            results[st.input] = Some(Ok(transcript(
                st.input,
                &languages[st.input],
                language_probs[st.input],
                all_language_probs[st.input].clone(),
                dur,
                st.segments,
            )));
        }
        for (i, segs) in spans {
            let dur = audios[i].len() as f64 / 16000.0;
            opts.progress.segments(i, &segs);
            opts.progress.audio(i, dur);
            results[i] = Some(Ok(transcript(
                i,
                &languages[i],
                language_probs[i],
                all_language_probs[i].clone(),
                dur,
                segs,
            )));
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
        loop {
            let active: Vec<usize> = (0..states.len())
                .filter(|&i| !states[i].finished())
                .take(batch_size)
                .collect();
            if active.is_empty() {
                return Ok(());
            }
            let mut jobs: Vec<WindowJob> = active
                .iter()
                .map(|&i| self.seq_job(&states[i], opts))
                .collect();
            for (&i, j) in active.iter().zip(&jobs) {
                states[i].final_rest = j.final_rest.clone();
            }
            out.windows += jobs.len();
            out.batch_sizes.push(jobs.len());
            out.count_frames(
                active
                    .iter()
                    .map(|&i| WINDOW_FRAMES.min(states[i].content_frames - states[i].seek)),
            );
            let (attempts, enc) = if opts.multilingual && self.model.config.is_multilingual {
                // faster-whisper's `multilingual`: each window in its own language.
                let enc = decoder.encode_jobs(&jobs.iter().collect::<Vec<_>>())?;
                let sots = super::language::per_window(self.model, decoder, &mut jobs, &enc)?;
                for (&i, sot) in active.iter().zip(sots) {
                    states[i].window_sot = Some(sot);
                }
                let refs: Vec<&WindowJob> = jobs.iter().collect();
                (decoder.decode_encoded(&refs, &enc)?, enc)
            } else {
                decoder.decode_keep(&jobs.iter().collect::<Vec<_>>())?
            };
            let rows: Vec<(usize, usize)> = active.iter().copied().zip(0..).collect();
            self.seq_apply(states, &rows, attempts, &enc, decoder)?;
        }
    }

    /// Whether last windows are finished in place ([`super::final_window`]): the option, with
    /// `Auto` resolved by the model's weights; never without timestamps (nothing seeks then).
    fn finishes_final_windows(&self, opts: &DecodeOptions) -> bool {
        let int8 = self.model.compute_type() == dicta_models::whisper::ComputeType::Int8;
        !opts.without_timestamps && opts.final_window.finishes(int8)
    }

    /// The next window of a recording in the seek loop.
    fn seq_job(&self, st: &SeqState, opts: &DecodeOptions) -> WindowJob {
        let size = WINDOW_FRAMES.min(st.content_frames - st.seek);
        let mel = window(&st.mel, st.seek, size);
        let final_rest = (self.finishes_final_windows(opts)
            && st.seek + size >= st.content_frames
            && size + super::final_window::MIN_PADDING_FRAMES <= WINDOW_FRAMES)
            .then(|| std::sync::Arc::new(FinalRest::of(&mel, st.mel.n_mels, size)));
        // faster-whisper forces the prefix where the seek is 0 (the recording's start, or a
        // clip starting there), and that window's prompt goes without the hotwords.
        let forced = if st.seek == 0 && !st.prefix.is_empty() {
            let ts =
                (!opts.without_timestamps).then_some(self.model.config.special.timestamp_begin);
            ts.into_iter().chain(st.prefix.iter().copied()).collect()
        } else {
            Vec::new()
        };
        let hotwords: &[u32] = if forced.is_empty() { &st.hotwords } else { &[] };
        let previous = if opts.prompt_every_window {
            &st.all_tokens[..st.prompt_len]
        } else {
            &st.all_tokens[st.prompt_reset_since..]
        };
        WindowJob {
            mel,
            prompt: self.prompt(hotwords, previous, &st.sot_seq, opts),
            forced,
            seed_key: st.seek as u64,
            draft: st.draft.clone(),
            final_rest,
        }
    }

    /// Advances the seek loop of the recordings in `rows` (state index, row of its window in
    /// `enc` `[N, 1500, d]`) with their decoded windows (`attempts`, same order).
    fn seq_apply(
        &self,
        states: &mut [SeqState],
        rows: &[(usize, usize)],
        attempts: Vec<Attempt>,
        enc: &candle_core::Tensor,
        decoder: &WindowDecoder<'_>,
    ) -> Result<()> {
        let opts = decoder.opts;
        let tb = self.model.config.special.timestamp_begin;
        let eot = self.model.config.special.eot;
        let before: Vec<usize> = rows
            .iter()
            .map(|&(i, _)| states[i].segments.len())
            .collect();
        let mut decoded = Vec::with_capacity(rows.len());
        let mut requests = Vec::new();
        for (&(i, row), a) in rows.iter().zip(attempts) {
            let st = &mut states[i];
            let size = WINDOW_FRAMES.min(st.content_frames - st.seek);
            if is_silence(&a, opts) {
                st.seek += size;
                st.next_clip();
                continue;
            }
            let split = split_by_timestamps(&a.tokens, tb, st.seek, size);
            if opts.word_timestamps || opts.token_logprobs {
                requests.push(AlignRequest {
                    row,
                    sot_sequence: st.window_sot.clone().unwrap_or_else(|| st.sot_seq.clone()),
                    text_tokens: split
                        .segments
                        .iter()
                        .flat_map(|s| s.tokens.iter().copied().filter(|&t| t < eot))
                        .collect(),
                    num_frames: size,
                    split_on_unicode: st.split_on_unicode,
                });
            }
            decoded.push((i, a, split));
        }
        // One batched alignment pass over this call's windows, on the same encoder states.
        let mut aligned = if opts.word_timestamps || opts.token_logprobs {
            decoder.align(enc, &requests)?.into_iter()
        } else {
            Vec::new().into_iter()
        };
        for (i, a, split) in decoded {
            let st = &mut states[i];
            // The window's start, before the seek moves on (each segment reports it).
            let window_seek = st.seek;
            let mut raws = split.segments;
            let mut words: Vec<Vec<PlacedWord>> = vec![Vec::new(); raws.len()];
            let mut seek = split.seek;
            let aligned_window = aligned.next();
            // Each segment's text tokens' probabilities, in order (empty unless asked for).
            let mut token_probs: Vec<Vec<f32>> = vec![Vec::new(); raws.len()];
            if let Some(w) = aligned_window.as_ref().filter(|_| opts.token_logprobs) {
                let mut probs = w.token_probs.iter().copied();
                for (r, p) in raws.iter().zip(&mut token_probs) {
                    let n = r.tokens.iter().filter(|&&t| t < eot).count();
                    p.extend(probs.by_ref().take(n));
                }
            }
            if let Some(window_words) = aligned_window.filter(|_| opts.word_timestamps) {
                let time_offset = st.seek as f64 / FRAMES_PER_SECOND as f64;
                let mut spans: Vec<SegmentSpan> = raws
                    .iter()
                    .map(|r| SegmentSpan {
                        start: r.start,
                        end: r.end,
                        text_tokens: r.tokens.iter().filter(|&&t| t < eot).count(),
                    })
                    .collect();
                words = place_words(&window_words, &mut spans, time_offset, st.last_speech);
                for (r, sp) in raws.iter_mut().zip(&spans) {
                    (r.start, r.end) = (sp.start, sp.end);
                }
                // faster-whisper: without a closing single timestamp, the next window
                // starts at the last word's end.
                if let Some(e) = last_end(&spans, &words).filter(|&e| e > time_offset) {
                    if !split.single_timestamp_ending {
                        seek = frames_at(e).max(st.seek + 1);
                    }
                }
                if let Some(threshold) = opts.hallucination_silence_threshold {
                    let fps = FRAMES_PER_SECOND as f64;
                    let size = WINDOW_FRAMES.min(st.content_frames - st.seek);
                    let at = WindowPlace {
                        time_offset,
                        seek: st.seek,
                        duration: size as f64 / fps,
                        window_end: (st.seek + WINDOW_FRAMES) as f64 / fps,
                        last_speech: st.last_speech,
                        content_duration: st.recording_frames as f64 / fps,
                        content_frames: st.recording_frames,
                    };
                    match judge(threshold, &spans, &words, &at) {
                        Verdict::Keep => {}
                        Verdict::SkipWindow { seek } => {
                            // Nothing of the window is kept, not even its previous text.
                            st.seek = seek;
                            st.next_clip();
                            continue;
                        }
                        Verdict::Truncate { from, seek: to } => {
                            raws.truncate(from);
                            spans.truncate(from);
                            words.truncate(from);
                            token_probs.truncate(from);
                            seek = to;
                        }
                    }
                }
                if let Some(e) = last_end(&spans, &words) {
                    st.last_speech = e;
                }
            }
            // A last window finished in place: a rest that no longer sounds ends the recording
            // (the model was held to any rest that does, see `final_window`).
            if let Some(rest) = &st.final_rest {
                if seek < st.content_frames && !rest.sounds_from((seek - st.seek) / INPUT_STRIDE) {
                    seek = st.content_frames;
                }
            }
            st.seek = seek;
            st.next_clip();
            for ((raw, w), probs) in raws.into_iter().zip(words).zip(token_probs) {
                let text = self.model.tokenizer.decode(&raw.tokens)?;
                if raw.start == raw.end || text.trim().is_empty() {
                    continue;
                }
                st.all_tokens.extend_from_slice(&raw.tokens);
                let mut seg = segment(&raw, text, &a);
                seg.seek = u32::try_from(window_seek).ok();
                seg.words = w.into_iter().map(core_word).collect();
                seg.token_logprobs = self.token_logprobs(&raw.tokens, &probs)?;
                st.segments.push(seg);
            }
            if !opts.condition_on_previous_text || a.temperature > opts.prompt_reset_on_temperature
            {
                st.prompt_reset_since = st.all_tokens.len();
            }
        }
        // Segments of the seek loop are final once decoded; the audio up to the seek is done.
        for (&(i, _), &n) in rows.iter().zip(&before) {
            let st = &states[i];
            if st.span {
                continue;
            }
            opts.progress.segments(st.input, &st.segments[n..]);
            let done = if st.finished() {
                st.duration
            } else {
                st.seek as f64 / FRAMES_PER_SECOND as f64
            };
            opts.progress.audio(st.input, done);
        }
        Ok(())
    }
}

pub(super) fn decoder_batch(n: usize) -> usize {
    n.clamp(1, 16)
}

/// Frames `[start, start + size)` of `mel` zero padded to a `[n_mels, 3000]` window
/// (faster-whisper slices the content, then `pad_or_trim`s it).
pub(super) fn window(mel: &MelSpectrogram, start: usize, size: usize) -> Vec<f32> {
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

/// A placed word as the transcript carries it (surrounding whitespace trimmed).
fn core_word(w: PlacedWord) -> dicta_core::Word {
    dicta_core::Word {
        speaker: None,
        word: w.word.trim().to_string(),
        start: w.start,
        end: w.end,
        probability: Some(w.probability),
    }
}

impl WhisperTranscriber<'_> {
    /// The text tokens of `tokens` (ids below `<|endoftext|>`) with their probabilities
    /// `probs` (one per text token, in order; empty: none asked for) as log-probabilities.
    fn token_logprobs(&self, tokens: &[u32], probs: &[f32]) -> Result<Vec<TokenLogprob>> {
        let eot = self.model.config.special.eot;
        let tok = &self.model.tokenizer;
        tokens
            .iter()
            .filter(|&&t| t < eot)
            .zip(probs)
            .map(|(&t, &p)| {
                Ok(TokenLogprob {
                    token: tok.decode(&[t])?,
                    // A probability that underflowed to 0 is still a number in JSON.
                    logprob: p.max(f32::MIN_POSITIVE).ln(),
                    bytes: tok.token_bytes(t).unwrap_or_default(),
                })
            })
            .collect()
    }
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
    language_probability: Option<f32>,
    all_language_probs: Option<Vec<(String, f32)>>,
    duration: f64,
    segments: Vec<Segment>,
) -> Transcript {
    let text: String = segments.iter().map(|s| s.text.as_str()).collect();
    Transcript {
        id: i.to_string(),
        audio: String::new(),
        text: text.trim().to_string(),
        language: language.as_ref().ok().cloned(),
        language_probability,
        all_language_probs,
        duration,
        segments,
        warnings: Vec::new(),
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
