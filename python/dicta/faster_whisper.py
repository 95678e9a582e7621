"""faster-whisper's Python API over Dicta: replace ``from faster_whisper import WhisperModel``
with ``from dicta.faster_whisper import WhisperModel`` and keep the rest of the code.

>>> from dicta.faster_whisper import WhisperModel
>>> model = WhisperModel("tiny.en", compute_type="int8", cpu_threads=2)
>>> segments, info = model.transcribe("talk.wav", beam_size=5, vad_filter=True)
>>> for s in segments:
...     print(f"[{s.start:.2f} -> {s.end:.2f}] {s.text}")

``transcribe`` takes faster-whisper's arguments under their names and defaults (``beam_size=5``,
the temperature fallback, ``condition_on_previous_text=True``, …) and returns ``(segments,
info)``: an iterator of :class:`Segment` (with :class:`Word` lists when ``word_timestamps=True``)
and a :class:`TranscriptionInfo`, the same dataclasses and fields as faster-whisper's. With the
same weights and ``compute_type="float32"`` the transcripts are faster-whisper's token for token
(``crates/dicta-engine/tests/whisper_parity.rs``).

``transcribe`` returns once the language is known; the segments come as their windows are
decoded (all at once at the end with a VAD filter, as their times move back then); a caller that stops
reading them (``close()``, or dropping the iterator) stops the decoding. Differences a caller
can see: ``device`` is the
CPU; ``compute_type`` ``"default"`` is Dicta's fastest type that keeps faster-whisper's accuracy
(int8 where the CPU has the integer dot-product instructions); ``float16``/``bfloat16`` run as
float32 on the CPU, as CTranslate2 does there.
Errors are :mod:`dicta.errors` exceptions
(``InvalidInput`` is a ``ValueError``).
"""

from __future__ import annotations

import operator
import os
import queue
import sys
import threading
import types
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator, List, Optional, Tuple, Union

from . import Cancel, Engine, errors, fetch_model, known_models
from . import decode_audio as _decode_audio
from ._dicta import SAMPLE_RATE, __version__
from ._dicta import decode_audio_channels as _decode_audio_channels

__all__ = [
    "WhisperModel",
    "BatchedInferencePipeline",
    "Segment",
    "Word",
    "TranscriptionInfo",
    "available_models",
    "decode_audio",
    "download_model",
    "format_timestamp",
    "__version__",
]

# Languages whose words are not separated by spaces (faster-whisper splits them at unicode
# boundaries, and their words carry no leading space).
_NO_SPACES = {"zh", "ja", "th", "lo", "my", "yue"}

# faster-whisper's compute types → Dicta's (the CPU runs float16/bfloat16 as float32, as
# CTranslate2 does on the CPU; int16 keeps float32's accuracy).
_COMPUTE_TYPES = {
    "default": None,
    "auto": None,
    "int8": "int8",
    "int8_float32": "int8",
    "int8_float16": "int8",
    "int8_bfloat16": "int8",
    "int16": "float32",
    "float16": "float32",
    "bfloat16": "float32",
    "float32": "float32",
}


@dataclass
class Word:
    """One word (faster-whisper's ``Word``): seconds, the word with its leading space, and its
    probability."""

    start: float
    end: float
    word: str
    probability: float


@dataclass
class Segment:
    """One segment (faster-whisper's ``Segment``): ``id`` from 1, ``seek`` (the start of its 30 s
    window in 10 ms frames), seconds, text, token ids and the decoding scores; ``words`` with
    ``word_timestamps=True``."""

    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: List[int]
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: Optional[List[Word]]
    temperature: Optional[float]


@dataclass
class TranscriptionInfo:
    """What faster-whisper's ``TranscriptionInfo`` says of a transcription: the language and how
    sure its detection was (1 when it was given or the model is English-only), the duration
    (``duration_after_vad`` is the duration), the options used and the VAD's."""

    language: str
    language_probability: float
    duration: float
    duration_after_vad: float
    all_language_probs: Optional[List[Tuple[str, float]]]
    transcription_options: Any
    vad_options: Any


# faster-whisper's `transcribe` defaults, which Dicta's engine shares; passed through by name.
_DEFAULTS = dict(
    language=None,
    task="transcribe",
    beam_size=5,
    best_of=5,
    patience=1.0,
    length_penalty=1.0,
    repetition_penalty=1.0,
    no_repeat_ngram_size=0,
    temperature=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
    compression_ratio_threshold=2.4,
    log_prob_threshold=-1.0,
    no_speech_threshold=0.6,
    condition_on_previous_text=True,
    prompt_reset_on_temperature=0.5,
    initial_prompt=None,
    prefix=None,
    suppress_blank=True,
    suppress_tokens=[-1],
    without_timestamps=False,
    max_initial_timestamp=1.0,
    word_timestamps=False,
    prepend_punctuations="\"'“¿([{-",
    append_punctuations="\"'.。,，!！?？:：”)]}、",
    multilingual=False,
    vad_filter=False,
    vad_parameters=None,
    max_new_tokens=None,
    clip_timestamps="0",
    hallucination_silence_threshold=None,
    hotwords=None,
    language_detection_threshold=0.5,
    language_detection_segments=1,
)


class WhisperModel:
    """faster-whisper's ``WhisperModel`` on Dicta's engine.

    Args:
        model_size_or_path: a model name Dicta knows (``"tiny.en"``, ``"base"``; fetched on first
            use into ``download_root``) or a folder (CTranslate2 or Hugging Face Whisper).
        device: ``"cpu"`` or ``"auto"``.
        compute_type: faster-whisper's names (see the module's notes).
        cpu_threads: threads of the engine (0: every core).
        download_root: the model cache (default ``$DICTA_HOME`` or ~/.cache/dicta).
        device_index, num_workers, local_files_only, revision, use_auth_token: accepted for
            compatibility (one model serves every thread that calls it).
        files: not supported (a model from memory).

    Raises:
        ModelLoad / FetchError: the model cannot be loaded or fetched.
        InvalidInput: an unsupported device or compute type.
    """

    def __init__(
        self,
        model_size_or_path: Union[str, "os.PathLike[str]"],
        device: str = "auto",
        device_index: Union[int, List[int]] = 0,
        compute_type: str = "default",
        cpu_threads: int = 0,
        num_workers: int = 1,
        download_root: Optional[str] = None,
        local_files_only: bool = False,
        files: Optional[dict] = None,
        revision: Optional[str] = None,
        use_auth_token: Optional[Union[str, bool]] = None,
        **model_kwargs: Any,
    ) -> None:
        if device not in ("auto", "cpu"):
            raise errors.InvalidInput(f"device must be \"cpu\" or \"auto\" (Dicta runs on the CPU), got {device!r}")
        if compute_type not in _COMPUTE_TYPES:
            raise errors.InvalidInput(f"compute_type must be one of {', '.join(_COMPUTE_TYPES)}, got {compute_type!r}")
        if files:
            raise errors.InvalidInput("files (a model from memory) is not supported; give a folder or a model name")
        if not isinstance(cpu_threads, int) or cpu_threads < 0:
            raise errors.InvalidInput(f"cpu_threads must be an int >= 0, got {cpu_threads!r}")
        self._args = dict(
            model=model_size_or_path,
            compute_type=_COMPUTE_TYPES[compute_type],
            threads=cpu_threads or None,
            home=download_root,
            progress=False,
        )
        self._engine = Engine(**self._args)
        self._with_vad = False

    def _engine_for(self, vad_filter: bool) -> Engine:
        """The engine, loaded again with Silero VAD (fetched on first use) the first time a
        call asks for it, and kept so (one loaded model)."""
        if vad_filter and not self._with_vad:
            self._engine = Engine(vad_model="silero-vad", **self._args)
            self._with_vad = True
        return self._engine

    def transcribe(
        self,
        audio: Union[str, "os.PathLike[str]", BinaryIO, Any],
        language: Optional[str] = None,
        task: str = "transcribe",
        log_progress: bool = False,
        chunk_length: Optional[int] = None,
        **options: Any,
    ) -> Tuple[Iterator[Segment], TranscriptionInfo]:
        """Transcribes one recording with faster-whisper's arguments (``beam_size``, ``best_of``,
        ``temperature``, ``word_timestamps``, ``vad_filter``, ``vad_parameters``, ``prefix``,
        ``hotwords``, ``clip_timestamps``, …; the defaults are faster-whisper's).

        Args:
            audio: a path, a binary file object, or 16 kHz mono float samples (a numpy array).

        Returns:
            ``(segments, info)``: an iterator of :class:`Segment` and a :class:`TranscriptionInfo`.

        Raises:
            InvalidInput: an unknown argument or a value out of range. ``CorruptInput``,
            ``UnsupportedFormat``, ``EmptyInput``: the audio cannot be read.
        """
        return self._transcribe(audio, dict(language=language, task=task, **options), chunk_length, {},
                                log_progress)

    def detect_language(
        self,
        audio: Any = None,
        features: Any = None,
        vad_filter: bool = False,
        vad_parameters: Any = None,
        language_detection_segments: int = 1,
        language_detection_threshold: float = 0.5,
    ) -> Tuple[str, float, List[Tuple[str, float]]]:
        """faster-whisper's ``detect_language``: the language of the first
        ``language_detection_segments`` 30 s windows of ``audio`` (16 kHz mono float samples, a
        path or a binary file; of its speech with ``vad_filter``), stopping at the first window
        more probable than ``language_detection_threshold``, else the one most windows chose.
        Returns ``(language, probability, all_language_probs)``: every language's probability in
        the last window read, most likely first (on an English-only model ``[("en", 1.0)]``).
        ``features`` are not taken (Dicta computes its own).
        """
        if audio is None:
            raise errors.InvalidInput("audio is required (Dicta computes its own features from it)")
        if not isinstance(language_detection_segments, int) or language_detection_segments < 1:
            raise errors.InvalidInput(
                f"language_detection_segments must be an int >= 1, got {language_detection_segments!r}")
        if not vad_filter and not isinstance(audio, (str, os.PathLike)) and not hasattr(audio, "read"):
            # Only the windows detection reads are decoded afterwards (one token each).
            audio = audio[: language_detection_segments * 30 * SAMPLE_RATE]
        _, info = self.transcribe(
            audio, beam_size=1, temperature=0.0, max_new_tokens=1, condition_on_previous_text=False,
            without_timestamps=True, vad_filter=vad_filter, vad_parameters=vad_parameters,
            language_detection_segments=language_detection_segments,
            language_detection_threshold=language_detection_threshold,
        )
        probs = info.all_language_probs or [(info.language, info.language_probability)]
        return info.language, info.language_probability, probs

    def _transcribe(self, audio: Any, options: dict, chunk_length: Optional[int], engine_defaults: dict,
                    log_progress: bool = False):
        unknown = sorted(set(options) - set(_DEFAULTS))
        if unknown:
            raise errors.InvalidInput(f"transcribe() got unknown arguments: {', '.join(unknown)}")
        if chunk_length not in (None, 30):
            raise errors.InvalidInput(f"chunk_length must be None or 30 (Whisper's window), got {chunk_length!r}")
        opts = dict(_DEFAULTS)
        opts.update(engine_defaults)
        opts.update(options)
        if opts["task"] is None:
            opts["task"] = "transcribe"
        prompt = opts["initial_prompt"]
        if prompt is not None and not isinstance(prompt, str):
            # faster-whisper's `Iterable[int]`: token ids, taken as they are.
            try:
                opts["initial_prompt"] = [operator.index(t) for t in prompt]
            except (TypeError, ValueError):
                raise errors.InvalidInput(
                    f"initial_prompt must be a str or an iterable of token ids, got {prompt!r}") from None
        if isinstance(opts["temperature"], tuple):
            opts["temperature"] = list(opts["temperature"])
        if not opts["vad_filter"]:
            # faster-whisper ignores them without the filter.
            opts["vad_parameters"] = None
        engine = self._engine_for(bool(opts["vad_filter"]))
        native = dict(opts)
        if _is_whole(native["clip_timestamps"]):
            # faster-whisper's default "0": the whole recording, as without clips.
            del native["clip_timestamps"]
        # The transcription runs on a thread of its own; its progress events (the language,
        # then segments as their windows are decoded) come through a queue, so that `info` is
        # returned once the language is known and the segments are read while later windows are
        # still decoding, as faster-whisper's generator gives them.
        events: "queue.Queue[Tuple[str, Any]]" = queue.Queue()
        source = _input(audio)
        stop = Cancel()

        def work() -> None:
            try:
                out = engine.transcribe([source], verbose=True, on_event=lambda e: events.put(("event", e)),
                                        cancel=stop, **native)
                events.put(("done", out["results"][0]))
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                events.put(("raise", e))

        threading.Thread(target=work, name="dicta-transcribe", daemon=True).start()
        early: List[dict] = []
        duration = None
        language = None
        final = None
        done_seconds = 0.0
        while language is None and final is None:
            kind, value = _take(events)
            if kind == "done":
                final = value
            elif value["type"] == "started":
                duration = value["duration"]
            elif value["type"] == "audio":
                done_seconds = value["seconds"]
            elif value["type"] == "language":
                language = (value["language"], value["probability"], value.get("all_language_probs"))
            elif value["type"] == "segments":
                early.extend(value["segments"])
        if final is not None:
            language = (final.get("language") or "en", final.get("language_probability"),
                        final.get("all_language_probs"))
            duration = final["duration"]
        info = TranscriptionInfo(
            language=language[0],
            language_probability=1.0 if language[1] is None else language[1],
            duration=duration if duration is not None else 0.0,
            duration_after_vad=duration if duration is not None else 0.0,
            all_language_probs=[(c, p) for c, p in language[2]] if language[2] else None,
            transcription_options=types.SimpleNamespace(**{k: v for k, v in opts.items() if k in _DEFAULTS}),
            vad_options=opts["vad_parameters"] if opts["vad_filter"] else None,
        )
        space = "" if info.language in _NO_SPACES else " "
        progress = _Progress(info.duration, done_seconds, log_progress)
        segments = _Segments(_segments(events, early, final, opts["word_timestamps"], space, progress), stop)
        return segments, info


def _take(events: "queue.Queue[Tuple[str, Any]]") -> Tuple[str, Any]:
    """The next message of a running transcription: ``("event", e)`` or ``("done", result)``;
    raises what failed it (the call, or the input)."""
    kind, value = events.get()
    if kind == "raise":
        raise value
    if kind == "done" and value.get("error"):
        raise _error(value["error"])
    return kind, value


class _Segments:
    """The segments iterator ``transcribe`` returns: a caller that stops reading it (closes it,
    or lets it go) stops the decoding behind it, which would otherwise run to the end of the
    recording on the model everyone shares."""

    def __init__(self, inner: Iterator[Segment], stop: Cancel) -> None:
        self._inner = inner
        self._stop = stop
        self._done = False

    def __iter__(self) -> "_Segments":
        return self

    def __next__(self) -> Segment:
        try:
            return next(self._inner)
        except StopIteration:
            self._done = True
            raise
        except BaseException:
            self._done = True
            self._stop.cancel()
            raise

    def close(self) -> None:
        """Stops the decoding if it has not finished (as a generator's ``close``)."""
        if not self._done:
            self._done = True
            self._stop.cancel()
            self._inner.close()

    def __del__(self) -> None:
        if not self._done:
            self._stop.cancel()


def _segments(events: "queue.Queue[Tuple[str, Any]]", early: List[dict], final: Optional[dict],
              word_timestamps: bool, space: str, progress: "_Progress") -> Iterator[Segment]:
    """The segments of a running transcription: those already reported, then each as its
    event arrives; at the end any the events did not carry (the result's own segments)."""
    try:
        n = 0
        for s in early:
            n += 1
            yield _segment(n, s, word_timestamps, space)
        while final is None:
            kind, value = _take(events)
            if kind == "done":
                final = value
            elif value["type"] == "audio":
                progress.to(value["seconds"])
            elif value["type"] == "segments":
                for s in value["segments"]:
                    n += 1
                    yield _segment(n, s, word_timestamps, space)
        progress.to(final["duration"])
        for s in final["segments"][n:]:
            n += 1
            yield _segment(n, s, word_timestamps, space)
    finally:
        progress.close()


class _Progress:
    """faster-whisper's ``log_progress``: the seconds of audio decoded out of the recording's,
    on standard error as the segments are read (tqdm's bar, as faster-whisper draws it, when tqdm
    is installed; a line of text otherwise). Does nothing when not enabled."""

    def __init__(self, total: float, done: float, enabled: bool) -> None:
        self._total = round(total, 3)
        self._done = 0.0
        self._bar = None
        self._enabled = enabled
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(total=self._total, unit="seconds")
            self.to(done)

    def to(self, seconds: float) -> None:
        """Moves the bar to ``seconds`` decoded (never back, never past the end)."""
        if not self._enabled:
            return
        seconds = min(max(round(seconds, 3), self._done), self._total)
        if self._bar is not None:
            self._bar.update(seconds - self._done)
        else:
            sys.stderr.write(f"\r{seconds:.2f}/{self._total:.2f} seconds")
            sys.stderr.flush()
        self._done = seconds

    def close(self) -> None:
        if not self._enabled:
            return
        self._enabled = False
        if self._bar is not None:
            self._bar.close()
        else:
            sys.stderr.write("\n")
            sys.stderr.flush()


class BatchedInferencePipeline:
    """faster-whisper's ``BatchedInferencePipeline`` over a :class:`WhisperModel`, with its
    defaults (``vad_filter=True``, ``without_timestamps=True``; ``vad_parameters`` default to
    ``min_silence_duration_ms=160`` and ``max_speech_duration_s=30``, and a dict of them gets
    ``max_speech_duration_s=30``) and the settings it imposes whatever is passed: no
    previous-text prompt, the ``initial_prompt`` (tokenized as given) the prompt of every
    window, the first ``temperature`` only (no fallback), ``max_initial_timestamp=0``, no
    ``hallucination_silence_threshold``. Dicta batches the windows of a recording, and of calls
    made at the same time, in its own engine; ``batch_size`` is checked and otherwise left to
    it."""

    def __init__(self, model: WhisperModel) -> None:
        self.model = model

    def transcribe(
        self,
        audio: Union[str, "os.PathLike[str]", BinaryIO, Any],
        language: Optional[str] = None,
        task: Optional[str] = None,
        log_progress: bool = False,
        chunk_length: Optional[int] = None,
        batch_size: int = 8,
        **options: Any,
    ) -> Tuple[Iterator[Segment], TranscriptionInfo]:
        """As :meth:`WhisperModel.transcribe`, with the batched pipeline's defaults."""
        if not isinstance(batch_size, int) or batch_size < 1:
            raise errors.InvalidInput(f"batch_size must be an int >= 1, got {batch_size!r}")
        batched = dict(vad_filter=True, without_timestamps=True, prompt_every_window=True)
        options = dict(language=language, task=task, **options)
        # What faster-whisper's batched pipeline sets whatever it is given.
        temperature = options.get("temperature", _DEFAULTS["temperature"])
        if isinstance(temperature, (list, tuple)):
            options["temperature"] = list(temperature[:1])
        options.update(condition_on_previous_text=False, prompt_reset_on_temperature=0.5,
                       max_initial_timestamp=0.0, hallucination_silence_threshold=None)
        chunk = chunk_length or 30
        vad = options.get("vad_parameters")
        if vad is None:
            options["vad_parameters"] = dict(max_speech_duration_s=chunk, min_silence_duration_ms=160)
        elif isinstance(vad, dict):
            options["vad_parameters"] = dict(vad, max_speech_duration_s=chunk)
        return self.model._transcribe(audio, options, chunk_length, batched, log_progress)


def decode_audio(input_file: Union[str, "os.PathLike[str]", BinaryIO], sampling_rate: int = 16000,
                 split_stereo: bool = False) -> Any:
    """faster-whisper's ``decode_audio``: a path or a binary file object as mono float32 at
    ``sampling_rate`` (16 kHz: the samples Dicta's engine hears), the samples faster-whisper's
    PyAV resampler returns (libswresample's filter, 16-bit rounding); with ``split_stereo``,
    ``(left, right)``, each channel on its own (a mono file gives its samples twice, as
    faster-whisper's stereo resampling does; a file of more than two channels is refused)."""
    if isinstance(sampling_rate, bool) or not isinstance(sampling_rate, int) or sampling_rate < 1:
        raise errors.InvalidInput(f"sampling_rate must be a positive int, got {sampling_rate!r}")
    source = input_file.read() if hasattr(input_file, "read") else input_file
    if not split_stereo:
        return _decode_audio(source, sampling_rate)
    if not isinstance(source, (bytes, bytearray, memoryview)):
        source = os.fspath(source)
    else:
        source = bytes(source)
    import numpy as np

    channels = [np.frombuffer(c, dtype="<f4").copy() for c in _decode_audio_channels(source, sampling_rate)]
    if len(channels) == 1:
        return channels[0], channels[0].copy()
    if len(channels) != 2:
        raise errors.InvalidInput(f"split_stereo takes a mono or stereo file, this one has {len(channels)} channels")
    return channels[0], channels[1]


def available_models() -> List[str]:
    """The model names :class:`WhisperModel` fetches by name (Whisper models Dicta knows)."""
    return [name for name, what in known_models().items() if what.startswith("Whisper ")]


def download_model(size_or_id: str, output_dir: Optional[str] = None, local_files_only: bool = False,
                   cache_dir: Optional[str] = None, revision: Optional[str] = None,
                   use_auth_token: Optional[Union[str, bool]] = None) -> str:
    """faster-whisper's ``download_model``: fetches a model Dicta knows by name into ``cache_dir``
    (or ``output_dir``; default ``$DICTA_HOME`` or ~/.cache/dicta) and returns its folder."""
    return fetch_model(size_or_id, home=output_dir or cache_dir, progress=False)


def format_timestamp(seconds: float, always_include_hours: bool = False, decimal_marker: str = ".") -> str:
    """faster-whisper's ``format_timestamp``: ``[HH:]MM:SS.mmm``."""
    if seconds < 0:
        raise errors.InvalidInput(f"non-negative timestamp expected, got {seconds!r}")
    ms = round(seconds * 1000.0)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1_000)
    hours_marker = f"{hours:02d}:" if always_include_hours or hours > 0 else ""
    return f"{hours_marker}{minutes:02d}:{secs:02d}{decimal_marker}{ms:03d}"


def _is_whole(clips: Any) -> bool:
    """Whether ``clip_timestamps`` is faster-whisper's default: from 0 to the end."""
    if isinstance(clips, str):
        return clips.strip() in ("", "0")
    if isinstance(clips, (int, float)):
        return clips == 0
    return clips is None or list(clips) in ([], [0])


def _input(audio: Any) -> Any:
    """faster-whisper's ``audio`` as an input of :meth:`dicta.Engine.transcribe`."""
    if isinstance(audio, (str, os.PathLike)):
        return os.fspath(audio)
    if hasattr(audio, "read"):
        return audio.read()
    if isinstance(audio, (bytes, bytearray, memoryview)):
        return bytes(audio)
    # Samples: faster-whisper takes 16 kHz mono float arrays.
    return ("audio", audio, SAMPLE_RATE)


def _error(e: dict) -> errors.DictaError:
    """The exception of a result's ``{"type", "message"}``."""
    for name in errors.__all__:
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, errors.DictaError) and cls.kind == e.get("type"):
            return cls(e.get("message", ""))
    return errors.InternalError(str(e))


def _segment(i: int, s: dict, word_timestamps: bool, space: str) -> Segment:
    words = None
    if word_timestamps:
        words = [Word(w["start"], w["end"], space + w["word"], w.get("probability", 0.0)) for w in s.get("words", [])]
    return Segment(
        id=i,
        seek=s.get("seek", round(s["start"] * 100)),
        start=s["start"],
        end=s["end"],
        text=s["text"],
        tokens=s.get("tokens", []),
        avg_logprob=s.get("avg_logprob", 0.0),
        compression_ratio=s.get("compression_ratio", 0.0),
        no_speech_prob=s.get("no_speech_prob", 0.0),
        words=words,
        temperature=s.get("temperature"),
    )
