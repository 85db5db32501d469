"""The ways the exporter refuses something, as one tree::

    ExporterError             anything the exporter names and refuses
     ├── ArgumentsError       the command line does not parse (exit 2)
     ├── ConfigError          a flag or env value is invalid (names the key and value; exit 3)
     ├── CountersFileError    a counters file line names an unknown field or a bad type
     │                        (names the file and the line; the last good set keeps serving)
     └── GpuLost              a GPU answered NVML_ERROR_GPU_IS_LOST: not a failure of the
                              exporter, the signal that drops that GPU's series

A GPU that stops answering is not an error of the exporter: its series go, as
dcgm-exporter's do, and the others keep serving.
"""

from __future__ import annotations


class ExporterError(Exception):
    """Base of every failure the exporter names."""


class ArgumentsError(ExporterError):
    """argparse refused the command line; its message, and the exit status to use."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ConfigError(ExporterError):
    """A flag or env value is invalid."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        self.key = key
        self.value = value
        self.reason = reason
        super().__init__(f"{key}={value!r}: {reason}")


class CountersFileError(ExporterError):
    """A counters file cannot be used; the message names the file and the line."""


class GpuLost(ExporterError):  # noqa: N818 - a GPU's condition, named as NVML names it
    """The GPU answered ``NVML_ERROR_GPU_IS_LOST``: its series are dropped."""
