"""Dicta: speech recognition (Whisper, Moonshine, CTC) on CPU, from Python.

>>> import dicta
>>> engine = dicta.Engine("tiny.en")                     # fetched on first use, like the CLI
>>> out = engine.transcribe(["talk.wav", "call.mp3"], beam_size=1)
>>> [r["text"] for r in out["results"]]

``transcribe`` returns the CLI's JSON (``dicta transcribe --format json``) as a dict:
``{"results": [{"id", "audio", "text", "language", "duration", "segments", "error"}], "stats": {…}}``,
results in input order; an input that cannot be read carries ``"error": {"type", "message"}`` and
the others are still transcribed. Options are the CLI's decoding flags with underscores.

Streaming: ``session = engine.open_session()``, then ``session.feed(block)`` (16 kHz mono float32,
any block size) returns the new ``partial`` / ``final`` events as the WebSocket sends them, and
``session.end()`` the last ones. Sessions opened from many threads share the engine's batching
worker. The GIL is released while the engine works.
"""

from __future__ import annotations

import array
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from . import errors
from ._dicta import DEFAULT_MODEL, SAMPLE_RATE, Cancel, __version__
from ._dicta import Engine as _NativeEngine
from ._dicta import decode_audio as _decode_audio
from ._dicta import fetch_model as _fetch_model
from ._dicta import known_models as _known_models
from .errors import (
    CorruptInput,
    DictaError,
    EmptyInput,
    FetchError,
    InternalError,
    InvalidInput,
    IoError,
    LimitExceeded,
    ModelLoad,
    Overloaded,
    Timeout,
    UnsupportedFormat,
)

__all__ = [
    "Engine",
    "Cancel",
    "Session",
    "decode_audio",
    "fetch_model",
    "known_models",
    "DEFAULT_MODEL",
    "SAMPLE_RATE",
    "__version__",
    "errors",
    *errors.__all__,
]

#: An input of :meth:`Engine.transcribe`: a path, the bytes of an audio file,
#: ``(id, samples, sample_rate)`` with mono float samples (a numpy array, ``array.array`` or list),
#: or a manifest entry ``{"id": …, "audio": path}``.
InputLike = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Tuple[str, Any, int], Dict[str, Any]]


def _home(home: Optional[Union[str, "os.PathLike[str]"]]) -> str:
    """The cache folder, as the CLI picks it: ``home``, else ``$DICTA_HOME``, else ~/.cache/dicta."""
    if home is not None:
        return os.fspath(home)
    env = os.environ.get("DICTA_HOME")
    if env:
        return env
    return str(Path.home() / ".cache" / "dicta")


def _python() -> str:
    """The interpreter whose pip fetches models: ``$DICTA_PYTHON``, else this one."""
    return os.environ.get("DICTA_PYTHON") or sys.executable or "python3"


def _float32_bytes(samples: Any, what: str) -> bytes:
    """Little-endian float32 bytes of a 1-D sequence of samples."""
    try:
        import numpy as np
    except ImportError:  # numpy is optional: array.array and lists work without it
        np = None
    if np is not None and not isinstance(samples, (array.array, list, tuple)):
        a = np.asarray(samples)
        if a.ndim != 1:
            raise InvalidInput(f"{what}: samples must be 1-D (mono), got shape {a.shape}")
        if not np.issubdtype(a.dtype, np.number):
            raise InvalidInput(f"{what}: samples must be numbers, got dtype {a.dtype}")
        return np.ascontiguousarray(a, dtype="<f4").tobytes()
    if isinstance(samples, array.array) and samples.typecode == "f":
        a = samples
    else:
        try:
            a = array.array("f", samples)
        except TypeError as e:
            raise InvalidInput(f"{what}: samples must be a 1-D sequence of numbers ({e})") from None
    if sys.byteorder == "big":
        a = array.array("f", a)
        a.byteswap()
    return a.tobytes()


def _raw_input(i: int, x: Any) -> Tuple[str, str, str, Any, int]:
    """``x`` as the native ``(kind, id, label, payload, sample_rate)``."""
    if isinstance(x, (str, os.PathLike)):
        p = os.fspath(x)
        return ("path", p, p, p, SAMPLE_RATE)
    if isinstance(x, (bytes, bytearray, memoryview)):
        name = f"input-{i}"
        return ("bytes", name, name, bytes(x), SAMPLE_RATE)
    if isinstance(x, dict):
        if "audio" not in x:
            raise InvalidInput(f"input {i}: a dict input needs \"audio\" (a path), got keys {sorted(x)}")
        p = os.fspath(x["audio"])
        return ("path", str(x.get("id", p)), p, p, SAMPLE_RATE)
    if isinstance(x, tuple) and len(x) == 3:
        ident, samples, rate = x
        if not isinstance(rate, int) or isinstance(rate, bool) or rate <= 0:
            raise InvalidInput(f"input {i} ({ident!r}): sample_rate must be a positive int, got {rate!r}")
        ident = str(ident)
        return ("samples", ident, ident, _float32_bytes(samples, ident), rate)
    raise InvalidInput(
        f"input {i}: expected a path, the bytes of an audio file, (id, samples, sample_rate) "
        f"or {{\"id\", \"audio\"}}, got {type(x).__name__}"
    )


def _is_one_input(x: Any) -> bool:
    if isinstance(x, (str, os.PathLike, bytes, bytearray, memoryview, dict)):
        return True
    return isinstance(x, tuple) and len(x) == 3 and isinstance(x[2], int) and not isinstance(x[1], (str, os.PathLike))


class Session:
    """A streaming session of an :class:`Engine`: its own state, its model calls batched with
    every other session's. Feed 16 kHz mono float32 blocks of any size. Usable as a context
    manager (closed on exit)."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def feed(self, samples: Any) -> List[Dict[str, Any]]:
        """Feeds a block of samples; returns the new events, each
        ``{"type": "partial"|"final", "text", "start", "end", "words"}`` (seconds from the start
        of the stream). A partial replaces the previous partial; a final does not change."""
        return json.loads(self._native.feed(_float32_bytes(samples, "feed")))

    def end(self) -> List[Dict[str, Any]]:
        """Ends the stream (the tail is flushed) and returns the last events. The session can
        then be fed a new stream, with times from zero again."""
        return json.loads(self._native.end())

    def close(self) -> None:
        """Frees the session's slot; later calls raise :class:`InvalidInput`."""
        self._native.close()

    @property
    def buffered_samples(self) -> int:
        """Samples fed and not yet processed."""
        return self._native.buffered_samples

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Engine:
    """One loaded model; share it between threads (calls are batched and take turns on the model).

    Args:
        model: a model folder (Whisper from CTranslate2 or Hugging Face, Moonshine ``.ort``, a
            wav2vec2 CTC folder) or a known name (:func:`known_models`), fetched on first use into
            ``home`` like ``dicta models fetch``.
        compute_type: ``"default"`` (the model's own), ``"float32"`` or ``"int8"``.
        threads: CPU threads of this engine (default: all cores).
        batch_size: windows per model call.
        long_form: ``"auto"`` (with ``condition_on_previous_text``, ``"sequential"`` except
            lanes of at least 6 minutes, batched, in recordings of 12 minutes or more; without it,
            ``"batched"``), ``"sequential"`` (seek like faster-whisper) or ``"batched"`` (lanes of
            at least 60 s in recordings over 2 minutes).
        overlap_seconds: window overlap of CTC windows.
        vad_model: a VAD model (``"silero-vad"`` or a folder), needed by ``vad_filter=True``.
        speaker_model: a speaker model (``"ecapa-voxceleb"`` or a folder), needed with
            ``vad_model`` by ``diarize=True``.
        decoder, lm, lm_alpha, lm_beta, beam_width: CTC decoding (``"greedy"`` or ``"beam"``,
            an ARPA / Sphinx LM path, its weights, the beam width).
        home: the model cache (default ``$DICTA_HOME`` or ~/.cache/dicta).
        progress: show fetch progress on stderr.
        assistant: speculative decoding for Whisper: a smaller Whisper model (``"tiny.en"`` or a
            folder) drafting ``assistant_tokens`` tokens per round for greedy calls
            (``beam_size=1``); the transcripts are the main model's, token for token.

    Raises:
        ModelLoad: the folder cannot be loaded or the name is unknown.
        FetchError: the model could not be downloaded.
        InvalidInput: a setting is out of range.
    """

    def __init__(
        self,
        model: Union[str, "os.PathLike[str]"] = DEFAULT_MODEL,
        compute_type: Optional[str] = None,
        threads: Optional[int] = None,
        batch_size: int = 8,
        *,
        long_form: str = "auto",
        overlap_seconds: float = 5.0,
        vad_model: Optional[str] = None,
        speaker_model: Optional[str] = None,
        decoder: str = "greedy",
        lm: Optional[Union[str, "os.PathLike[str]"]] = None,
        lm_alpha: float = 0.5,
        lm_beta: float = 1.0,
        beam_width: int = 25,
        home: Optional[Union[str, "os.PathLike[str]"]] = None,
        progress: bool = True,
        assistant: Optional[Union[str, "os.PathLike[str]"]] = None,
        assistant_tokens: int = 5,
    ) -> None:
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise InvalidInput(f"threads must be an int >= 1, got {threads!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInput(f"batch_size must be an int >= 1, got {batch_size!r}")
        self._native = _NativeEngine(
            os.fspath(model),
            home=_home(home),
            python=_python(),
            compute_type=compute_type,
            threads=threads,
            batch_size=batch_size,
            long_form=long_form,
            overlap_seconds=float(overlap_seconds),
            vad_model=vad_model,
            speaker_model=speaker_model,
            decoder=decoder,
            lm=None if lm is None else os.fspath(lm),
            lm_alpha=float(lm_alpha),
            lm_beta=float(lm_beta),
            beam_width=beam_width,
            progress=progress,
            assistant=None if assistant is None else os.fspath(assistant),
            assistant_tokens=assistant_tokens,
        )

    @property
    def model_dir(self) -> str:
        """The folder the model was loaded from."""
        return self._native.model_dir

    @property
    def family(self) -> str:
        """``"whisper"``, ``"moonshine"`` or ``"ctc"``."""
        return self._native.family

    def transcribe(
        self,
        inputs: Union[InputLike, Iterable[InputLike]],
        *,
        verbose: bool = False,
        on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
        cancel: Optional[Cancel] = None,
        **options: Any,
    ) -> Dict[str, Any]:
        """Transcribes ``inputs`` (one input or an iterable of them) in shared batches.

        Args:
            inputs: paths, bytes of audio files, ``(id, samples, sample_rate)`` tuples (resampled
                to 16 kHz), or ``{"id", "audio"}`` manifest entries.
            verbose: segments with every field, as ``--format verbose_json``.
            on_event: called from the engine's threads, as the work goes, with each progress
                event as a dict: ``{"type": "started", "input": i, "duration": s}`` once input
                ``i`` is decoded, ``{"type": "audio", "input": i, "seconds": s}`` as its audio is
                finished, ``{"type": "language", "input": i, "language": code, "probability":
                p}`` (Whisper) and ``{"type": "segments", "input": i, "segments": [...]}`` with
                its segments as they become final (verbose; all of them over the call, in
                order). Keep it short; what it raises is printed and ignored.
            cancel: a :class:`Cancel`; once another thread calls its ``cancel()``, the work stops
                at the next model pass and the unfinished inputs' results carry a ``timeout``
                error.
            **options: the CLI's decoding flags with underscores: ``beam_size``, ``best_of``,
                ``temperature`` (a float or a list), ``language``, ``task``
                (``"transcribe"``/``"translate"``), ``initial_prompt`` (text, or a list of token
                ids taken as they are), ``hotwords``, ``prefix``,
                ``condition_on_previous_text``, ``without_timestamps``, ``word_timestamps``,
                ``vad_filter``, ``vad_parameters`` (a dict of faster-whisper's names),
                ``diarize``, ``num_speakers``, ``min_speakers``, ``max_speakers``, ``final_window``
                (``"auto"``/``"finish"``/``"seek"``), and the rest of faster-whisper's
                (``patience``, ``length_penalty``, ``no_speech_threshold``, …).

        Returns:
            ``{"results": [...], "stats": {...}}`` in the CLI's JSON shape, results in input order.

        Raises:
            InvalidInput: an unknown option, a value of the wrong type or out of range, or an
                input of an unknown kind. An input that cannot be decoded does not raise: its
                result carries ``"error"``.
        """
        if _is_one_input(inputs):
            inputs = [inputs]
        raw = [_raw_input(i, x) for i, x in enumerate(inputs)]
        hook = None if on_event is None else (lambda text: on_event(json.loads(text)))
        return json.loads(self._native.transcribe(raw, options or None, verbose, hook, cancel))

    def open_session(self, **options: Any) -> Session:
        """Opens a streaming session. CTC models take ``min_trailing_silence`` and
        ``max_utterance`` (seconds, or None for never) for endpointing; Whisper and Moonshine
        finalise text once successive steps agree. A Whisper session may set its own
        ``language``, ``initial_prompt`` and ``hotwords`` (its decodes still share the
        engine's batches); Moonshine takes ``language="en"`` only.

        ``vad=True`` (Whisper and Moonshine; the engine needs ``vad_model``) ends utterances where
        the voice activity detector hears silence: the words so far become final at once, and
        quiet stretches cost no model call. ``vad_parameters`` takes faster-whisper's VAD option
        names over the endpointing defaults (``min_silence_duration_ms`` 600,
        ``speech_pad_ms`` 300).

        Raises:
            Overloaded: the engine's session limit is reached.
        """
        return Session(self._native.open_session(options or None))

    @staticmethod
    def transcribe_options() -> List[str]:
        """The option names :meth:`transcribe` accepts."""
        return list(_NativeEngine.transcribe_options())


def decode_audio(source: Union[str, "os.PathLike[str]", bytes], sampling_rate: int = SAMPLE_RATE) -> Any:
    """Decodes an audio file (a path or its bytes) to 16 kHz mono float32 exactly as the engine
    does (or to ``sampling_rate`` Hz, converted the same way); a numpy array when numpy is
    installed, else an ``array.array('f')``."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        raw = _decode_audio(bytes(source), sampling_rate)
    else:
        raw = _decode_audio(os.fspath(source), sampling_rate)
    try:
        import numpy as np

        return np.frombuffer(raw, dtype="<f4").copy()
    except ImportError:
        a = array.array("f")
        a.frombytes(raw)
        if sys.byteorder == "big":
            a.byteswap()
        return a


def fetch_model(name: str, home: Optional[Union[str, "os.PathLike[str]"]] = None, progress: bool = True) -> str:
    """Fetches a known model (a no-op when fetched) and returns its folder, as
    ``dicta models fetch NAME``."""
    return _fetch_model(name, home=_home(home), python=_python(), progress=progress)


def known_models() -> Dict[str, str]:
    """The names :class:`Engine` and :func:`fetch_model` fetch, with what each is."""
    return dict(_known_models())

