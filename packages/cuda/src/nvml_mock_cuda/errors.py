"""The ways nvml-mock-cuda's Python side refuses something, as one tree::

    CudaMockError            anything this package names and refuses
     ├── DriverNotBuiltError  the package was installed without its native library
     └── RuntimeNotBuiltError the CUDA runtime work-alikes are missing beside it

The driver itself reports through CUDA error codes (README "What works, what fails and
why"); these errors are only for the code that finds and stages it.
"""

from __future__ import annotations


class CudaMockError(Exception):
    """Base of every failure nvml-mock-cuda's Python side names."""


class DriverNotBuiltError(CudaMockError, FileNotFoundError):
    """The package was installed without its native library (run ``make -C native``)."""


class RuntimeNotBuiltError(CudaMockError, FileNotFoundError):
    """The runtime work-alikes (``_lib/cuda-runtime/libcudart.so.*``) were not built."""
