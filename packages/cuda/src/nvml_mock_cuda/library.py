"""Where the mock ``libcuda.so.1`` and the CUDA runtime work-alikes live inside this package.

The build hook compiles ``native/`` into ``_lib/`` next to this module, so a wheel and an
editable install both carry the library at the same place. Staging needs its path to copy
it into driver roots and the overlay; tests need it for ``LD_LIBRARY_PATH``.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from nvml_mock_protocol import names

from nvml_mock_cuda.errors import DriverNotBuiltError, RuntimeNotBuiltError

__all__ = [
    "DRIVER_NAME",
    "RUNTIME_DIR",
    "RUNTIME_NAMES",
    "DriverNotBuiltError",
    "RuntimeNotBuiltError",
    "driver_file",
    "driver_path",
    "runtime_paths",
]

DRIVER_NAME = "libcuda.so.1"
"""The driver's soname, as NVIDIA's runtimes and bindings dlopen it."""


def _runtime_layout(preloads: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """The work-alikes' directory below ``lib/`` and their sonames, read from the overlay
    paths the NRI plugin preloads (the one declaration of where they are)."""
    paths = [PurePosixPath(p) for p in preloads]
    parents = {p.parent for p in paths}
    if len(parents) != 1:
        raise ValueError(f"CUDA runtime preloads in several directories: {sorted(preloads)}")
    directory = parents.pop().relative_to(names.OVERLAY_LIB_DIR)
    if len(directory.parts) != 1:
        raise ValueError(f"CUDA runtime preloads not one level below lib/: {preloads}")
    return str(directory), tuple(p.name for p in paths)


RUNTIME_DIR, RUNTIME_NAMES = _runtime_layout(names.CUDA_RUNTIME_PRELOADS)
"""The directory of the runtime work-alikes (``cuda-runtime``), one level below
``libcuda.so.1`` in the package and in the overlay's ``lib/`` (a work-alike that finds no
driver on the library path loads ``../libcuda.so.1`` from its own directory); and their
sonames (``libcudart.so.13``, ``libcudart.so.12``), one per CUDA major PyTorch wheels load, in
the order the NRI plugin preloads them. Both come from
:data:`nvml_mock_protocol.names.CUDA_RUNTIME_PRELOADS`."""


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


def runtime_paths() -> tuple[Path, ...]:
    """The packaged runtime work-alikes (:data:`RUNTIME_NAMES`); :class:`RuntimeNotBuiltError`
    names how to build them."""
    directory = Path(driver_file()).parent / RUNTIME_DIR
    paths = tuple(directory / name for name in RUNTIME_NAMES)
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise RuntimeNotBuiltError(
            f"{directory}: the CUDA runtime work-alikes {', '.join(missing)} are not built "
            "(reinstall nvml-mock-cuda, or run `make -C packages/cuda/native`)"
        )
    return paths
