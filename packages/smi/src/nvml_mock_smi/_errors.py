"""Exit codes and the exceptions of the work-alike, one tree::

    WorkAlikeError
    ├── SmiError              a user-facing failure: its message and the real tool's exit code
    ├── NvmlError             (_nvml) an NVML call returned an error code; has the library's
    │                         own nvmlErrorString text
    ├── LibraryNotFoundError  (_nvml) no libnvidia-ml.so.1 could be loaded
    ├── NotAvailableError     (_fields) a property with no value here, printed ``[N/A]``
    └── DeprecatedError       (_fields) a property the emulated driver's tool no longer
                              reports, printed ``[Requested functionality has been deprecated]``

The real ``nvidia-smi`` documents its exit codes in its manual page; scripts test them
(``nvidia-smi -i 3 ... || ...``), so the work-alike returns the same numbers. Everything that
ends the run early is an :class:`SmiError` carrying the message and the code; only ``main``
prints it (on stdout, where the real tool prints its errors too) and returns the code. The
others are caught inside the tool and turned into output or an :class:`SmiError`.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INVALID_ARGUMENT = 2
EXIT_NO_PERMISSION = 4
EXIT_NOT_FOUND = 6
EXIT_DRIVER_NOT_LOADED = 9
EXIT_LIBRARY_NOT_FOUND = 12
EXIT_GPU_LOST = 15
EXIT_VERSION_MISMATCH = 18
EXIT_OTHER = 255

INVALID_ARGS_MESSAGE = (
    "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
)
DRIVER_MESSAGE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)
LIBRARY_MESSAGE = (
    "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the "
    "NVIDIA Display Driver is properly installed and present in your system.\n"
    "Please also try adding directory that contains libnvidia-ml.so to your system PATH."
)
NO_DEVICES_MESSAGE = "No devices were found"


class WorkAlikeError(Exception):
    """Base class of every exception the work-alike raises on purpose."""


class SmiError(WorkAlikeError):
    """A failure to report: ``message`` goes to the output stream, ``exit_code`` is returned."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
