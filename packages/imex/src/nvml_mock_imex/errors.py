"""Errors of the IMEX work-alike, drawn in the package's tree (:mod:`nvml_mock_engine.errors`).

Both front doors print the message and exit 1, as NVIDIA's daemon does on a config it cannot
use; none is retried, since the same file fails the same way.
"""

from __future__ import annotations

from nvml_mock_engine.errors import NvmlEngineError

__all__ = ["FrameError", "ImexConfigError", "ImexError", "NodeListError"]


class ImexError(NvmlEngineError):
    """Bad input to the IMEX work-alike; the message names the file, line and value."""


class ImexConfigError(ImexError):
    """The IMEX config file cannot be used."""


class NodeListError(ImexError):
    """The IMEX node list cannot be used."""


class FrameError(ImexError):
    """A peer's or client's frame is not one JSON object of at most 64 KiB: that one
    connection is closed."""
