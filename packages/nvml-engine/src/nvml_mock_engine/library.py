"""Where the mock ``libnvidia-ml.so.1`` lives inside this package.

The build hook compiles ``native/`` into ``_lib/`` next to this module, so a wheel and an
editable install both carry the library at the same place. Callers need its path for
``LD_LIBRARY_PATH``, for staging the overlay and for loading it with ctypes.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from nvml_mock_protocol.names import LIBRARY_NAME

from nvml_mock_engine.errors import NvmlEngineError

__all__ = ["LibraryNotBuiltError", "library_path"]


class LibraryNotBuiltError(NvmlEngineError, FileNotFoundError):
    """The package was installed without its native library (run ``make -C native``)."""


def library_path() -> Path:
    """Return the absolute path of the packaged ``libnvidia-ml.so.1``.

    Raises :class:`LibraryNotBuiltError` when the file is missing, naming the expected
    path and how to build it.
    """
    path = Path(str(resources.files("nvml_mock_engine").joinpath("_lib", LIBRARY_NAME))).resolve()
    if not path.is_file():
        raise LibraryNotBuiltError(
            f"{path}: the mock NVML library is not built "
            "(reinstall nvml-mock-engine, or run `make -C packages/nvml-engine/native`)"
        )
    return path
