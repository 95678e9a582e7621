//! `dicta transcribe`: one-shot transcription of files, no server needed.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use dicta_core::{format, Stats, Transcript};
use dicta_decode::{job::parse_hotword, BeamConfig, LmWeights};
use dicta_engine::whisper::{DecodeOptions, FinalWindow, LongFormMode, Task};
use dicta_engine::{CtcDecoderKind, CtcOptions, Engine, EngineConfig, Input};
use dicta_models::whisper::ComputeType;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{fetch, Globals};

/// Output formats of `dicta transcribe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// `{"results":[{id,audio,text,language,duration,segments:[{start,end,text}],error}],"stats":{…}}`
    Json,
    /// Like json, with every segment field (tokens, avg_logprob, compression_ratio, no_speech_prob, temperature).
    #[value(alias = "verbose_json")]
    VerboseJson,
    /// Plain text, one line per input.
    Text,
    /// SubRip subtitles.
    Srt,
    /// WebVTT subtitles.
    Vtt,
}

/// What is done with a recording's channels (`--channels`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ChannelsArg {
    /// Average the channels (after resampling), as faster-whisper does.
    Mix,
    /// Transcribe each channel on its own (one speaker per channel, e.g. call recordings) and
    /// merge the segments by start time, each with its `channel` (`[CH0]`, `[CH1]` in
    /// srt / vtt / text); with --diarize the speaker is the channel (`SPEAKER_00` = channel 0).
    Split,
}

/// What the model does with the speech (`--task`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TaskArg {
    /// Transcribe in the spoken language.
    Transcribe,
    /// Translate into English (multilingual Whisper models).
    Translate,
}

/// Long-form processing of recordings longer than 30 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LongForm {
    /// Seek through 30 s windows following predicted timestamps (as faster-whisper).
    Sequential,
    /// Recordings over 2 minutes cut at pauses into lanes of at least 60 s, each seeking as
    /// faster-whisper, all lanes decoded in batches.
    Batched,
    /// With previous-text conditioning (the default): sequential, except recordings of 12 minutes
    /// or more, cut into lanes of at least 6 minutes, batched. Without it: as batched.
    Auto,
}

/// How the last window of a recording ends when the model stops before the end of its audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FinalWindowArg {
    /// One more window for the rest, as faster-whisper.
    Seek,
    /// The rest decoded in the same window while it still sounds; a silent rest ends the
    /// recording (saves a whole encoder pass per recording and lane).
    Finish,
    /// finish with int8 weights, seek with float32 (the reference, token-identical to
    /// faster-whisper).
    Auto,
}

/// CTC decoders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CtcDecoder {
    /// Best path.
    Greedy,
    /// Prefix beam search (with `--lm` when given).
    Beam,
}

/// `dicta transcribe …`
#[derive(Debug, Args)]
pub struct TranscribeArgs {
    /// Audio files (WAV, FLAC, MP3, OGG/Vorbis).
    pub inputs: Vec<PathBuf>,
    /// JSON manifest of inputs: `[{"id": …, "audio": "path"}]` (or JSON lines); paths are relative to the manifest.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Model folder (CTranslate2 or Hugging Face Whisper) or a known name, fetched on first use.
    #[arg(long, env = "DICTA_MODEL", default_value = fetch::DEFAULT_MODEL)]
    pub model: String,
    /// Write the results here instead of standard output.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// For text/srt/vtt: write one file per input (`<stem>.<ext>`) into this folder; inputs
    /// sharing a stem keep their extension (`jfk.mp3.srt`), same names get the input's position.
    #[arg(long)]
    pub output_dir: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
    pub format: OutputFormat,
    /// Beam size (1 = greedy).
    #[arg(long, default_value_t = 5)]
    pub beam_size: usize,
    /// Candidates sampled at temperature > 0.
    #[arg(long, default_value_t = 5)]
    pub best_of: usize,
    /// Temperatures tried in order (fallback when a window looks wrong); e.g. `--temperature 0`.
    #[arg(long, value_delimiter = ',', default_values_t = vec![0.0f32, 0.2, 0.4, 0.6, 0.8, 1.0])]
    pub temperature: Vec<f32>,
    /// Windows decoded per model call.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// CPU threads for the model (default: all cores).
    #[arg(long, env = "DICTA_THREADS")]
    pub threads: Option<usize>,
    /// Numeric type: default (int8 on x86 CPUs with AVX512-VNNI, AVX-VNNI or AVX2, float32
    /// elsewhere), float32 (the reference, token-identical to faster-whisper float32), or int8
    /// (every linear layer int8; without those kernels float32 is used with a warning).
    #[arg(long, env = "DICTA_COMPUTE_TYPE", default_value = "default", value_parser = parse_compute_type)]
    pub compute_type: ComputeType,
    /// Speculative decoding (Whisper, greedy: with `--beam-size 1`): a smaller Whisper model
    /// (a known name such as tiny.en, fetched on first use, or a folder) drafts tokens that the
    /// main model checks in one decoder pass. The transcript is the main model's, token for
    /// token; only the speed changes (see README: when it pays).
    #[arg(long, env = "DICTA_ASSISTANT")]
    pub assistant: Option<String>,
    /// Tokens the assistant drafts per round.
    #[arg(long, default_value_t = dicta_engine::whisper::DEFAULT_DRAFT_TOKENS)]
    pub assistant_tokens: usize,
    /// Numeric type of the assistant model: default, float32 or int8.
    #[arg(long, default_value = "default", value_parser = parse_compute_type)]
    pub assistant_compute_type: ComputeType,
    /// Long-form mode for recordings over 30 s.
    #[arg(long, value_enum, default_value_t = LongForm::Auto)]
    pub long_form: LongForm,
    /// Whisper: the last window of a recording (or lane) when the model stops before its end.
    #[arg(long, value_enum, default_value_t = FinalWindowArg::Auto)]
    pub final_window: FinalWindowArg,
    /// CTC: overlap between windows (seconds).
    #[arg(long, default_value_t = 5.0)]
    pub overlap_seconds: f32,
    /// CTC: window length in seconds.
    #[arg(long, default_value_t = 30.0)]
    pub chunk_seconds: f32,
    /// CTC: most padded model frames per batch (default: batch-size full windows).
    #[arg(long)]
    pub max_batch_frames: Option<usize>,
    /// CTC: most padding per batch, as a fraction of its padded frames.
    #[arg(long, default_value_t = 0.15)]
    pub max_padding_fraction: f32,
    /// CTC: threads decoding recordings while the model runs.
    #[arg(long, default_value_t = 2)]
    pub decode_workers: usize,
    /// CTC: decoder.
    #[arg(long, value_enum, default_value_t = CtcDecoder::Greedy)]
    pub decoder: CtcDecoder,
    /// CTC: word n-gram LM (ARPA, .arpa.gz or Sphinx .lm.bin) for the beam decoder.
    #[arg(long)]
    pub lm: Option<PathBuf>,
    /// CTC: unigram list (one word a line) for partial-word scoring (default: the LM's words).
    #[arg(long)]
    pub unigrams: Option<PathBuf>,
    /// CTC: LM weight.
    #[arg(long, default_value_t = 0.5)]
    pub lm_alpha: f64,
    /// CTC: word insertion bonus.
    #[arg(long, default_value_t = 1.0)]
    pub lm_beta: f64,
    /// CTC: beams kept per frame.
    #[arg(long, default_value_t = 25)]
    pub beam_width: usize,
    /// CTC: boost a word or phrase, `WORD` or `WORD:WEIGHT` (repeatable).
    #[arg(long)]
    pub hotword: Vec<String>,
    /// CTC: a silence of this many seconds between words starts a new segment.
    #[arg(long, default_value_t = 1.0)]
    pub pause_seconds: f32,
    /// Language code (e.g. `en`); detected on multilingual models when absent. English-only
    /// models accept only `en`; an unknown code is refused with the list of valid ones.
    #[arg(long)]
    pub language: Option<String>,
    /// Transcribe in the spoken language, or translate into English (multilingual Whisper
    /// models; English-only ones refuse `translate`).
    #[arg(long, value_enum, default_value_t = TaskArg::Transcribe)]
    pub task: TaskArg,
    /// Same as `--task translate`.
    #[arg(long, conflicts_with = "task")]
    pub translate: bool,
    /// Text to condition the first window on (names, spellings).
    #[arg(long)]
    pub initial_prompt: Option<String>,
    /// Do not feed the previous window's text as a prompt.
    #[arg(long)]
    pub no_condition_on_previous_text: bool,
    /// Whisper: the initial prompt is every window's prompt, tokenized as given (faster-whisper's
    /// BatchedInferencePipeline); needs --no-condition-on-previous-text.
    #[arg(long, requires = "no_condition_on_previous_text")]
    pub prompt_every_window: bool,
    /// Decode without timestamps (one segment per window).
    #[arg(long)]
    pub without_timestamps: bool,
    /// Whisper: word-level timestamps (faster-whisper's `word_timestamps`); words appear in
    /// json / verbose_json output.
    #[arg(long)]
    pub word_timestamps: bool,
    /// Whisper: transcribe only these stretches of each input, as faster-whisper's
    /// `clip_timestamps`: seconds `start,end,start,end,…` (the last end defaults to the
    /// input's end); times stay those of the input. Not with --vad-filter.
    #[arg(long, value_parser = parse_seconds_list, conflicts_with = "vad_filter")]
    pub clip_timestamps: Option<SecondsList>,
    /// Whisper, with --word-timestamps: a segment whose words look made up, with silence
    /// longer than this (seconds) around it, is dropped and the silence skipped
    /// (faster-whisper's `hallucination_silence_threshold`).
    #[arg(long, requires = "word_timestamps")]
    pub hallucination_silence_threshold: Option<f64>,
    #[command(flatten)]
    pub decoding: crate::decoding_args::DecodingArgs,
    /// Transcribe only the speech Silero VAD finds (faster-whisper's `vad_filter`); times stay
    /// those of the original audio. Tuned with the --vad-* flags.
    #[arg(long)]
    pub vad_filter: bool,
    #[command(flatten)]
    pub vad: crate::vad_cmd::VadArgs,
    /// Who spoke: a `speaker` on every segment and word (JSON), `[SPEAKER_00]` prefixes in
    /// srt / vtt / text. Tuned with --num-speakers, --min-speakers, --max-speakers.
    #[arg(long)]
    pub diarize: bool,
    /// Stereo (or more channels): `mix` averages the channels; `split` transcribes each channel
    /// on its own and merges the segments by start time, labelled with their channel (with
    /// --diarize, the speaker of a segment is its channel instead of a clustering).
    #[arg(long, value_enum, default_value_t = ChannelsArg::Mix)]
    pub channels: ChannelsArg,
    #[command(flatten)]
    pub speaker: crate::diarize_cmd::SpeakerArgs,
    /// Hide the progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Print each segment on stdout as soon as it is final, one line each:
    /// `[0.00s -> 5.28s] text` (with several inputs after the input's id; inputs may
    /// interleave). The formatted results then go only to --output / --output-dir.
    #[arg(long)]
    pub print_segments: bool,
}

#[derive(Debug, Deserialize)]
struct ManifestEntry {
    id: Option<String>,
    audio: String,
}

/// Runs `dicta transcribe`; returns the exit code (0 all ok, 1 any input failed, 2 usage).
pub fn run(args: &TranscribeArgs, g: &Globals) -> Result<u8> {
    let inputs = collect_inputs(args)?;
    if inputs.is_empty() {
        eprintln!("dicta transcribe: no inputs; give audio files or --manifest (see --help)");
        return Ok(2);
    }
    if args.output_dir.is_some()
        && matches!(args.format, OutputFormat::Json | OutputFormat::VerboseJson)
    {
        eprintln!("dicta transcribe: --output-dir is for text/srt/vtt; use --output for JSON");
        return Ok(2);
    }
    if args.print_segments && args.output.as_deref() == Some(Path::new("-")) {
        eprintln!(
            "dicta transcribe: --print-segments prints segments on standard output; write the \
             results to a file with --output FILE or --output-dir DIR, not --output -"
        );
        return Ok(2);
    }
    let mut decode = DecodeOptions {
        beam_size: args.beam_size,
        best_of: args.best_of,
        temperatures: args.temperature.clone(),
        condition_on_previous_text: !args.no_condition_on_previous_text,
        initial_prompt: args.initial_prompt.clone(),
        prompt_every_window: args.prompt_every_window,
        without_timestamps: args.without_timestamps,
        word_timestamps: args.word_timestamps,
        language: args.language.clone(),
        vad: args.vad_filter.then(|| args.vad.options()),
        clip_timestamps: args
            .clip_timestamps
            .as_ref()
            .map(|c| c.0.clone())
            .unwrap_or_default(),
        hallucination_silence_threshold: args.hallucination_silence_threshold,
        diarize: args.diarize.then(|| args.speaker.options()),
        channels: match args.channels {
            ChannelsArg::Mix => dicta_core::ChannelMode::Mix,
            ChannelsArg::Split => dicta_core::ChannelMode::Split,
        },
        final_window: match args.final_window {
            FinalWindowArg::Seek => FinalWindow::Seek,
            FinalWindowArg::Finish => FinalWindow::Finish,
            FinalWindowArg::Auto => FinalWindow::Auto,
        },
        task: if args.translate || args.task == TaskArg::Translate {
            Task::Translate
        } else {
            Task::Transcribe
        },
        ..DecodeOptions::default()
    };
    args.decoding.apply(&mut decode);
    let ctc = match ctc_options(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dicta transcribe: {}", e.message);
            return Ok(2);
        }
    };
    let config = EngineConfig {
        batch_size: args.batch_size,
        long_form: match args.long_form {
            LongForm::Sequential => LongFormMode::Sequential,
            LongForm::Batched => LongFormMode::Batched,
            LongForm::Auto => LongFormMode::Auto,
        },
        decode,
        chunk_seconds: args.chunk_seconds,
        overlap_seconds: args.overlap_seconds,
        max_batch_frames: args.max_batch_frames,
        max_padding_fraction: args.max_padding_fraction,
        decode_workers: args.decode_workers,
        // The engine's own pool is as large as main() made the global one (--threads).
        threads: None,
        ctc,
        stream: Default::default(),
        lookahead_windows: None,
        compute_type: args.compute_type,
        vad_model: None,
        speaker_model: None,
        assistant_model: None,
        assistant_compute_type: args.assistant_compute_type,
        assistant_tokens: args.assistant_tokens,
    };
    if let Err(e) = config.validate() {
        eprintln!("dicta transcribe: {}", e.message);
        return Ok(2);
    }
    let config = EngineConfig {
        // With --channels split, speakers are the channels: no detector or speaker model.
        vad_model: if args.vad_filter || (args.diarize && args.channels == ChannelsArg::Mix) {
            Some(args.vad.resolve_model(g, !args.quiet)?)
        } else {
            None
        },
        speaker_model: if args.diarize && args.channels == ChannelsArg::Mix {
            Some(args.speaker.resolve_model(g, !args.quiet)?)
        } else {
            None
        },
        assistant_model: match &args.assistant {
            Some(name) => {
                if args.beam_size > 1 && !args.quiet {
                    eprintln!(
                        "dicta transcribe: --assistant drafts for greedy decoding only; \
                         with --beam-size {} it is loaded but unused (add --beam-size 1)",
                        args.beam_size
                    );
                }
                Some(fetch::resolve_model(name, &g.home, &g.python, !args.quiet)?)
            }
            None => None,
        },
        ..config
    };
    let model_dir = fetch::resolve_model(&args.model, &g.home, &g.python, !args.quiet)?;
    let engine = Engine::load(&model_dir, config)
        .with_context(|| format!("cannot load the model in {}", model_dir.display()))?;
    if let Err(e) = engine.check_language_task(&engine.config().decode) {
        // `--language xx` / `--task translate` the model cannot honour: a usage error.
        eprintln!("dicta transcribe: {}", e.message);
        return Ok(2);
    }

    let (results, stats) = transcribe_live(&engine, &inputs, args);
    let failed = results.iter().filter(|r| r.is_err()).count();
    for (input, r) in inputs.iter().zip(&results) {
        if let Err(e) = r {
            // Decoder messages already start with the input's name; don't say it twice.
            let msg = e
                .message
                .strip_prefix(&format!("{}: ", input.audio))
                .unwrap_or(&e.message);
            eprintln!("dicta transcribe: {}: {}: {msg}", input.audio, e.kind);
        }
    }
    write_results(args, &inputs, &results, &stats)?;
    Ok(if failed > 0 { 1 } else { 0 })
}

fn ctc_options(args: &TranscribeArgs) -> dicta_core::Result<CtcOptions> {
    let hotwords = args
        .hotword
        .iter()
        .map(|h| parse_hotword(h))
        .collect::<dicta_core::Result<Vec<_>>>()?;
    if !hotwords.is_empty() && args.decoder == CtcDecoder::Greedy {
        return Err(dicta_core::Error::invalid_input(
            "--hotword needs --decoder beam",
        ));
    }
    Ok(CtcOptions {
        decoder: match args.decoder {
            CtcDecoder::Greedy => CtcDecoderKind::Greedy,
            CtcDecoder::Beam => CtcDecoderKind::Beam,
        },
        lm: args.lm.clone(),
        unigrams: args.unigrams.clone(),
        lm_weights: LmWeights {
            alpha: args.lm_alpha,
            beta: args.lm_beta,
            ..LmWeights::default()
        },
        beam: BeamConfig {
            beam_width: args.beam_width,
            hotwords,
            ..BeamConfig::default()
        },
        pause_seconds: Some(args.pause_seconds),
    })
}

fn collect_inputs(args: &TranscribeArgs) -> Result<Vec<Input>> {
    let mut inputs: Vec<Input> = args.inputs.iter().map(Input::from_path).collect();
    if let Some(m) = &args.manifest {
        let text = fs::read_to_string(m)
            .with_context(|| format!("cannot read manifest {}", m.display()))?;
        let entries: Vec<ManifestEntry> = if text.trim_start().starts_with('[') {
            serde_json::from_str(&text).with_context(|| {
                format!(
                    "manifest {} is not a JSON array of {{id, audio}}",
                    m.display()
                )
            })?
        } else {
            text.lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(n, l)| {
                    serde_json::from_str(l).with_context(|| {
                        format!(
                            "manifest {} line {}: not a JSON object with \"audio\"",
                            m.display(),
                            n + 1
                        )
                    })
                })
                .collect::<Result<_>>()?
        };
        let base = m.parent().unwrap_or(Path::new("."));
        for e in entries {
            let path = base.join(&e.audio);
            let mut input = Input::from_path(path);
            input.audio = e.audio.clone();
            input.id = e.id.unwrap_or(e.audio);
            inputs.push(input);
        }
    }
    Ok(inputs)
}

/// Runs the engine over all inputs in one call, showing its progress as it goes (a bar on
/// stderr driven by audio seconds; with `--print-segments`, segments on stdout as they are
/// final: see [`crate::transcribe_live`]).
fn transcribe_live(
    engine: &Engine,
    inputs: &[Input],
    args: &TranscribeArgs,
) -> (Vec<dicta_core::Result<Transcript>>, Stats) {
    let ids: Vec<String> = inputs.iter().map(|i| i.id.clone()).collect();
    let live = crate::transcribe_live::Live::new(&ids, args.quiet, args.print_segments);
    let opts = DecodeOptions {
        progress: live.progress(),
        ..engine.config().decode.clone()
    };
    let out = engine.transcribe_with(inputs, &opts);
    live.finish();
    (out.results, out.stats)
}

fn render_one(format: OutputFormat, t: &Transcript) -> String {
    match format {
        OutputFormat::Srt => format::to_srt(&t.segments),
        OutputFormat::Vtt => format::to_vtt(&t.segments),
        _ => format::to_text(&t.text, &t.segments),
    }
}

/// One file name per input for `--output-dir`, never the same twice: `<stem>.<ext>`; inputs
/// sharing a stem keep their own extension (`jfk.mp3.srt`, `jfk.wav.srt`); names still equal
/// (the same file name in different folders) get the input's position (`jfk.wav-2.srt`).
pub(crate) fn output_names(inputs: &[Input], ext: &str) -> Vec<String> {
    use std::collections::HashMap;
    let path = |i: &Input| Path::new(&i.audio).to_path_buf();
    let stem = |i: &Input| {
        path(i)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| i.id.clone())
    };
    let mut stems: HashMap<String, usize> = HashMap::new();
    for i in inputs {
        *stems.entry(stem(i)).or_default() += 1;
    }
    let bases: Vec<String> = inputs
        .iter()
        .map(|i| {
            let st = stem(i);
            if stems[&st] == 1 {
                return st;
            }
            path(i)
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or(st)
        })
        .collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for b in &bases {
        *seen.entry(b.as_str()).or_default() += 1;
    }
    bases
        .iter()
        .enumerate()
        .map(|(k, b)| {
            if seen[b.as_str()] == 1 {
                format!("{b}.{ext}")
            } else {
                format!("{b}-{}.{ext}", k + 1)
            }
        })
        .collect()
}

fn write_results(
    args: &TranscribeArgs,
    inputs: &[Input],
    results: &[dicta_core::Result<Transcript>],
    stats: &Stats,
) -> Result<()> {
    if let Some(dir) = &args.output_dir {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let ext = match args.format {
            OutputFormat::Srt => "srt",
            OutputFormat::Vtt => "vtt",
            _ => "txt",
        };
        let names = output_names(inputs, ext);
        for (r, name) in results.iter().zip(&names) {
            if let Ok(t) = r {
                let path = dir.join(name);
                fs::write(&path, render_one(args.format, t))
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
        }
        return Ok(());
    }
    let body = match args.format {
        OutputFormat::Json | OutputFormat::VerboseJson => {
            let verbose = args.format == OutputFormat::VerboseJson;
            let results: Vec<Value> = inputs
                .iter()
                .zip(results)
                .map(|(i, r)| format::result_json(&i.id, &i.audio, r, verbose))
                .collect();
            let mut s = serde_json::to_string_pretty(&json!({"results": results, "stats": stats}))?;
            s.push('\n');
            s
        }
        f => {
            let many = inputs.len() > 1;
            let mut s = String::new();
            for (input, r) in inputs.iter().zip(results) {
                let Ok(t) = r else { continue };
                if many && f == OutputFormat::Text {
                    s.push_str(&format!("{}\t", input.id));
                } else if many {
                    s.push_str(&format!("==> {} <==\n", input.id));
                }
                s.push_str(&render_one(f, t));
            }
            s
        }
    };
    if args.output.is_none() && args.print_segments {
        // Standard output carries the printed segments only.
        return Ok(());
    }
    crate::write_output(args.output.as_deref(), &body)
}

/// Parses `--compute-type` (default | float32 | int8).
pub(crate) fn parse_compute_type(s: &str) -> std::result::Result<ComputeType, String> {
    s.parse::<ComputeType>().map_err(|e| e.message)
}

/// Seconds given as one comma-separated value (`--clip-timestamps 0,10.5,20`).
#[derive(Debug, Clone, PartialEq)]
pub struct SecondsList(pub Vec<f64>);

fn parse_seconds_list(s: &str) -> Result<SecondsList, String> {
    dicta_core::ClipTimestamps::Text(s.to_string())
        .seconds()
        .map(SecondsList)
        .map_err(|e| e.message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dicta_engine::AudioSource;

    fn input(audio: &str) -> Input {
        Input {
            id: audio.to_string(),
            audio: audio.to_string(),
            source: AudioSource::Path(audio.into()),
        }
    }

    #[test]
    fn output_names_never_collide() {
        let inputs: Vec<Input> = [
            "a/jfk.mp3",
            "a/jfk.ogg",
            "a/jfk.wav",
            "b/jfk.wav",
            "talk.flac",
        ]
        .iter()
        .map(|p| input(p))
        .collect();
        let names = output_names(&inputs, "srt");
        assert_eq!(
            names,
            [
                "jfk.mp3.srt",
                "jfk.ogg.srt",
                "jfk.wav-3.srt",
                "jfk.wav-4.srt",
                "talk.srt"
            ]
        );
    }
}
