"""The overlay as a driver root: the files a driver installation puts under ``/``.

NVIDIA's node software finds a driver by its files, searched below a *driver root*: the
DRA driver's ``nvidiaDriverRoot`` looks for ``libnvidia-ml.so.1`` in ``usr/lib64``,
``usr/lib/<triplet>``, ``lib64``, ``lib/<triplet>`` and for ``nvidia-smi`` in ``opt/bin``,
``usr/bin``, ``usr/sbin``, ``bin``, ``sbin``; nvidia-container-toolkit's ``nvidia-ctk cdi
generate --driver-root`` searches the same library directories and ``dev/`` for the device
nodes. So the overlay directory itself is laid out as one (``/var/lib/nvml-mock`` is the
root to give them)::

    usr/lib64/libnvidia-ml.so.<driver version>    the mock library, a regular file
    usr/lib64/libnvidia-ml.so.1 -> libnvidia-ml.so.<driver version>
    usr/lib64/libnvidia-ml.so   -> libnvidia-ml.so.1
    usr/lib64/libcuda.so.<driver version>         the mock CUDA driver (nvml-mock-cuda)
    usr/lib64/libcuda.so.1 -> libcuda.so.<driver version>
    usr/lib64/libcuda.so   -> libcuda.so.1
    usr/bin/nvidia-smi, and every tool of DRIVER_TOOLS
    dev/                                          the device nodes
    proc/, sys/                                   the kernel surfaces (driver_surfaces)

The version in the library's name is the one NVML reports: the DRA driver compares the two
and refuses a mismatch; nvidia-container-toolkit's legacy mode looks for
``libcuda.so.<version>`` by the same version. Tools under ``usr/bin`` are launchers of the
overlay's Python runtime, found from the launcher's own place, so they work wherever the
root is mounted. ``usr/`` is a real directory of DIR (not a link into a generation), its files
replaced one by one: a tool that resolves links names ``usr/lib64/...`` in what it gives containers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from nvml_mock_engine.errors import StageError

from nvml_mock_node.file_tree import FileTree

__all__ = [
    "CUDA_STEM",
    "DRIVER_BIN_DIR",
    "DRIVER_LIB_DIR",
    "DRIVER_TOOLS",
    "DRIVER_USR_DIR",
    "library_file_name",
    "usr_tree",
]

DRIVER_USR_DIR: Final = "usr"
DRIVER_LIB_DIR: Final = "usr/lib64"
DRIVER_BIN_DIR: Final = "usr/bin"
DRIVER_TOOLS: Final[dict[str, str]] = {
    "nvidia-smi": "nvml_mock_smi",
    "nvidia-imex": "nvml_mock_imex.imexd",
    "nvidia-imex-ctl": "nvml_mock_imex.imexctl",
}
"""The driver root's ``usr/bin`` tools and the module each runs on the overlay's runtime.

This is the place to add a work-alike of a tool a driver installation ships (a daemon and
its control tool, as ``nvidia-imex`` and ``nvidia-imex-ctl``): one entry, and every staging
installs its launcher where NVIDIA's images look for the real one. The module must be in a
distribution the runtime carries (:data:`nvml_mock_node.runtime.ROOT_DISTRIBUTIONS`)."""
_VERSION_FILE_RE: Final = re.compile(r"[0-9]{1,4}(\.[0-9]{1,4}){1,3}")
LIBRARY_STEM: Final = "libnvidia-ml.so"
CUDA_STEM: Final = "libcuda.so"


def library_file_name(driver_version: str) -> str:
    """``libnvidia-ml.so.<driver version>``; a version that cannot name the file is a
    :class:`StageError` naming the ``driver_version`` key."""
    if not _VERSION_FILE_RE.fullmatch(driver_version):
        raise StageError(
            f"driver_version: {driver_version!r} cannot name the driver library "
            f"{LIBRARY_STEM}.<version> (digits and dots, such as 580.105.08)"
        )
    return f"{LIBRARY_STEM}.{driver_version}"


def usr_tree(
    library: bytes, name: str, launchers: Mapping[str, str], cuda: bytes | None = None
) -> FileTree:
    """``usr/``: *library* as ``lib64/<name>`` (:func:`library_file_name`) with its two links,
    the CUDA driver *cuda* beside it under the same version with its two links, and each
    launcher script of *launchers* (tool -> text) in ``bin/``."""
    tree = FileTree()
    tree.add(f"lib64/{name}", library, mode=0o755)
    tree.link(f"lib64/{LIBRARY_STEM}.1", name)
    tree.link(f"lib64/{LIBRARY_STEM}", f"{LIBRARY_STEM}.1")
    if cuda is not None:
        cuda_name = CUDA_STEM + name.removeprefix(LIBRARY_STEM)
        tree.add(f"lib64/{cuda_name}", cuda, mode=0o755)
        tree.link(f"lib64/{CUDA_STEM}.1", cuda_name)
        tree.link(f"lib64/{CUDA_STEM}", f"{CUDA_STEM}.1")
    tree.mkdir("bin")
    for tool, script in launchers.items():
        tree.add(f"bin/{tool}", script, mode=0o755)
    return tree
