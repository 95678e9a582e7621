"""Type stubs of the native module (see ``dicta/__init__.py`` for the public API)."""

from typing import Any, Callable, Dict, List, Optional, Tuple

DEFAULT_MODEL: str
SAMPLE_RATE: int
__version__: str

class Cancel:
    def __init__(self) -> None: ...
    def cancel(self) -> None: ...
    @property
    def cancelled(self) -> bool: ...

class Engine:
    def __init__(
        self,
        model: str,
        *,
        home: str,
        python: str,
        compute_type: Optional[str] = ...,
        threads: Optional[int] = ...,
        batch_size: int = ...,
        long_form: str = ...,
        overlap_seconds: float = ...,
        vad_model: Optional[str] = ...,
        speaker_model: Optional[str] = ...,
        decoder: str = ...,
        lm: Optional[str] = ...,
        lm_alpha: float = ...,
        lm_beta: float = ...,
        beam_width: int = ...,
        progress: bool = ...,
        assistant: Optional[str] = ...,
        assistant_tokens: int = ...,
    ) -> None: ...
    def transcribe(
        self,
        inputs: List[Tuple[str, str, str, Any, int]],
        options: Optional[Dict[str, Any]] = ...,
        verbose: bool = ...,
        on_event: Optional[Callable[[str], None]] = ...,
        cancel: Optional[Cancel] = ...,
    ) -> str: ...
    def open_session(self, options: Optional[Dict[str, Any]] = ...) -> Session: ...
    @property
    def model_dir(self) -> str: ...
    @property
    def family(self) -> str: ...
    @staticmethod
    def transcribe_options() -> List[str]: ...

class Session:
    def feed(self, samples: bytes) -> str: ...
    def end(self) -> str: ...
    def close(self) -> None: ...
    @property
    def buffered_samples(self) -> int: ...

def decode_audio(source: Any, sampling_rate: int = ...) -> bytes: ...
def known_models() -> List[Tuple[str, str]]: ...
def fetch_model(name: str, *, home: str, python: str, progress: bool = ...) -> str: ...

def decode_audio_channels(source: Any, sampling_rate: int = ...) -> List[bytes]: ...
