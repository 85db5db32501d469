"""Where the mock ``libnvidia-ml.so.1`` lives inside this package.

The build hook compiles ``native/`` into ``_lib/`` next to this module, so a wheel and an
editable install both carry the library at the same place. Callers need its path for
``LD_LIBRARY_PATH``, for staging the overlay and for loading it with ctypes.
"""

from __future__ import annotations

import os

from nvml_mock_protocol.names import LIBRARY_NAME

from nvml_mock_engine.errors import NvmlEngineError

# No pathlib or importlib.resources at import time: ``nvml-mock-ctl xid`` finds the library
# here in a command that must start about as fast as Python itself.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["LibraryNotBuiltError", "library_file", "library_path"]


class LibraryNotBuiltError(NvmlEngineError, FileNotFoundError):
    """The package was installed without its native library (run ``make -C native``)."""


def library_file() -> str:
    """The absolute path the packaged ``libnvidia-ml.so.1`` has (links resolved), built or not.

    The build hook puts it in ``_lib/`` beside this module; a wheel and an editable install
    alike are plain directories (a package holding a shared library is never run zipped)."""
    return os.path.realpath(os.path.join(os.path.dirname(__file__), "_lib", LIBRARY_NAME))


def library_path() -> Path:
    """Return the absolute path of the packaged ``libnvidia-ml.so.1``.

    Raises :class:`LibraryNotBuiltError` when the file is missing, naming the expected
    path and how to build it.
    """
    from pathlib import Path

    path = Path(library_file())
    if not path.is_file():
        raise LibraryNotBuiltError(
            f"{path}: the mock NVML library is not built "
            "(reinstall nvml-mock-engine, or run `make -C packages/nvml-engine/native`)"
        )
    return path
