"""Exceptions raised by :mod:`dicta`: one class per kind of the library's typed errors.

Every class derives from :class:`DictaError`; the message is the library's own (it names the
input, the limit or the value involved). ``kind`` is the stable name of the kind, the same
string as ``error.type`` in the JSON results and the server's error bodies.
"""

from __future__ import annotations


class DictaError(Exception):
    """Base class of every error Dicta raises."""

    kind = "internal"


class InvalidInput(DictaError, ValueError):
    """The caller supplied something invalid (an unknown option, a value out of range)."""

    kind = "invalid_input"


class EmptyInput(DictaError, ValueError):
    """The input holds no audio."""

    kind = "empty_input"


class UnsupportedFormat(DictaError, ValueError):
    """The input is in a format Dicta cannot decode."""

    kind = "unsupported_format"


class CorruptInput(DictaError, ValueError):
    """The input claims a supported format but is damaged."""

    kind = "corrupt_input"


class LimitExceeded(DictaError, ValueError):
    """A configured limit was exceeded."""

    kind = "limit_exceeded"


class ModelLoad(DictaError):
    """A model folder is missing, incomplete or cannot be run, or a model name is unknown."""

    kind = "model_load"


class FetchError(DictaError):
    """Fetching a model failed (network, pip, checksum)."""

    kind = "fetch"


class Overloaded(DictaError):
    """Too many streaming sessions are open."""

    kind = "overloaded"


class Timeout(DictaError, TimeoutError):
    """The work took longer than allowed."""

    kind = "timeout"


class IoError(DictaError, OSError):
    """A filesystem or OS error."""

    kind = "io"


class InternalError(DictaError, RuntimeError):
    """A bug or an unexpected failure inside Dicta."""

    kind = "internal"


__all__ = [
    "DictaError",
    "InvalidInput",
    "EmptyInput",
    "UnsupportedFormat",
    "CorruptInput",
    "LimitExceeded",
    "ModelLoad",
    "FetchError",
    "Overloaded",
    "Timeout",
    "IoError",
    "InternalError",
]
