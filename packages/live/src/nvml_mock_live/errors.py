"""The exceptions of nvml-mock-live: one tree, so a caller can catch all of them::

    LiveError
    ├── LiveLayerError          the live layer cannot be opened, checked or written, or the
    │   │                       mock library's primitives cannot be used; names the file
    │   ├── LiveValueError      a value is refused before anything is written (an unknown
    │   │                       key, out of its declared bounds, beyond the board, a word of
    │   │                       the live vocabulary that does not parse); also a ValueError;
    │   │                       ``<key>=<value>: <why>``
    │   └── AllocationError     an allocation record is refused (a bad field, no free slot);
    │                           nothing was written
    └── ScenarioError           (scenarios) an invalid scenario document, every problem
                                listed (also a ValueError)

The front doors map them to their exit codes: ``nvml-mock-ctl`` exits 3 for a
:class:`LiveValueError` and 1 for the rest, the NRI plugin logs and counts them and never
fails a container.
"""

from __future__ import annotations

__all__ = ["AllocationError", "LiveError", "LiveLayerError", "LiveValueError"]


class LiveError(Exception):
    """Base class of every error nvml-mock-live raises on purpose."""


class LiveLayerError(LiveError):
    """The live layer cannot be opened, checked or written; the message names the file.

    ``errno`` is the operating system's error code when one caused it (``EACCES``, ``EROFS``:
    the caller may not write the file), so callers decide by the code, not the message."""

    def __init__(self, message: str, *, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class LiveValueError(LiveLayerError, ValueError):
    """A live value is refused (unknown key, out of its declared bounds, beyond the board, a
    pattern, duration or fault that does not parse). Nothing is written when it is raised.
    ``str(error)`` reads ``<key>=<value>: <why>``."""

    def __init__(self, key: str, value: object, message: str) -> None:
        super().__init__(f"{key}={value!r}: {message}")
        self.key = key
        self.value = value
        self.message = message


class AllocationError(LiveLayerError):
    """An allocation record is refused (a bad field, or no free slot); nothing was written."""
