"""The exceptions of nvml-mock-engine.

One base class, so a caller can catch everything this package raises on purpose::

    NvmlEngineError
    ├── ConfigError        bad profile name, config file or override (exit 3); names the key
    │   └── ProfileError   an unknown profile name, or a profile file that does not validate
    ├── StageError         the overlay could not be laid out (exit 1); names the path
    ├── CtlUsageError      nvml-mock-ctl: a verb was given arguments it cannot use (exit 2)
    ├── ImexError          (in ``nvml_mock_imex.errors``) bad input to the IMEX work-alike (exit 1)
    │   ├── ImexConfigError  its config file: unreadable, a bad key or value
    │   ├── NodeListError    its node list: unreadable, malformed, duplicate entries
    │   └── FrameError       a peer's frame is not one JSON object (that connection closes)
    ├── KernelLogError     the kernel-log sink cannot be opened or written, or is refused on
    │                      a node with a real NVIDIA driver (exit 1); names the sink
    ├── AnswerTooLargeError  (also a ValueError) the topology service sent more than the
    │                      agent or ``nvml-mock-ctl scenario`` reads; nothing of it is used
    ├── HookError          nvml-mock-surfaces-hook cannot show a container the surfaces;
    │                      reported on stderr, never fatal (the container starts without them)
    └── LibraryNotBuiltError  (in ``library``) the package has no built mock library

The live layer's errors are the live package's (:mod:`nvml_mock_live.errors`, re-exported
here): ``LiveLayerError`` (the live layer cannot be opened or written, exit 1; names the file)
and its ``LiveValueError`` (a live value is refused before anything is written, exit 3; names
the key and the value). The front doors catch them beside :class:`NvmlEngineError`.

The ``nvidia-smi`` work-alike (``nvml_mock_smi``, a package of its own) draws its own small
tree in ``nvml_mock_smi._errors`` (its errors end in the real tool's exit codes, not these).
``StageError`` and ``HookError`` are raised by nvml-mock-node, whose commands this package's
command line runs and reports.

Config errors are fatal and never retried: the same input fails the same way. Stage errors
may be transient (a full disk, a permission) and are worth a retry once the cause is fixed.
"""

from __future__ import annotations

from nvml_mock_live.errors import LiveLayerError, LiveValueError

__all__ = [
    "AnswerTooLargeError",
    "ConfigError",
    "CtlUsageError",
    "HookError",
    "KernelLogError",
    "LiveLayerError",
    "LiveValueError",
    "NvmlEngineError",
    "ProfileError",
    "StageError",
]


class NvmlEngineError(Exception):
    """Base class of every error nvml-mock-engine raises on purpose."""


class ConfigError(NvmlEngineError):
    """A setting, config file key or override is invalid.

    ``key`` is the dotted path of what is wrong (``gpus[3].memory_total_bytes``) and
    ``str(error)`` reads ``<key>: <what is wrong>``.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key
        self.message = message


class ProfileError(ConfigError):
    """A profile name is unknown, or a profile file (packaged or given) does not validate."""


class StageError(NvmlEngineError):
    """Laying out the overlay failed; the message names the path and the cause."""


class CtlUsageError(NvmlEngineError):
    """``nvml-mock-ctl``: a verb was given arguments it cannot use (exit 2)."""


class KernelLogError(NvmlEngineError):
    """The kernel-log sink cannot be used (or may not be, on a real driver's node)."""


class AnswerTooLargeError(NvmlEngineError, ValueError):
    """The topology service sent an answer past the limit read; nothing of it is used."""


class HookError(NvmlEngineError):
    """``nvml-mock-surfaces-hook``: the OCI state or the driver root cannot be used; the
    hook reports it and exits 0, so the container starts without the surfaces."""
