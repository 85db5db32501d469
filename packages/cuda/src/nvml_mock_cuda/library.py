"""Where the mock ``libcuda.so.1`` lives inside this package.

The build hook compiles ``native/`` into ``_lib/`` next to this module, so a wheel and an
editable install both carry the library at the same place. Staging needs its path to copy
it into driver roots and the overlay; tests need it for ``LD_LIBRARY_PATH``.
"""

from __future__ import annotations

import os
from pathlib import Path

from nvml_mock_cuda.errors import DriverNotBuiltError

__all__ = ["DRIVER_NAME", "DriverNotBuiltError", "driver_file", "driver_path"]

DRIVER_NAME = "libcuda.so.1"
"""The driver's soname, as NVIDIA's runtimes and bindings dlopen it."""


def driver_file() -> str:
    """The absolute path the packaged ``libcuda.so.1`` has (links resolved), built or not."""
    return os.path.realpath(os.path.join(os.path.dirname(__file__), "_lib", DRIVER_NAME))


def driver_path() -> Path:
    """The packaged ``libcuda.so.1``; :class:`DriverNotBuiltError` names how to build it."""
    path = Path(driver_file())
    if not path.is_file():
        raise DriverNotBuiltError(
            f"{path}: the mock CUDA driver is not built "
            "(reinstall nvml-mock-cuda, or run `make -C packages/cuda/native`)"
        )
    return path
