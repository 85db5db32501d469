"""The minor numbers of the MIG capability devices (``/dev/nvidia-caps/nvidia-cap<N>``).

A container given a MIG device opens three device nodes: its parent GPU's ``/dev/nvidia<P>``
and the two capabilities of its instances, the GPU instance's ``access`` and the compute
instance's ``access``. NVIDIA's driver numbers these capabilities in one fixed table, which it
publishes as ``/proc/driver/nvidia-caps/mig-minors`` (``config 1``, ``monitor 2``, then
``gpu<g>/gi<i>/access`` and ``gpu<g>/gi<i>/ci<c>/access`` for every GPU, GPU instance id and
compute instance id the driver can hold), and the DRA driver and the container toolkit read
the minor of a capability from ``/proc/driver/nvidia/capabilities/gpu<P>/mig/gi<i>[/ci<c>]/access``.
The table is dense and fixed, so a minor names one capability without reading any file:
each GPU has :data:`GI_PER_GPU` GPU instance ids, each with its own ``access`` and
:data:`CI_PER_GI` compute instance ``access`` entries. This module is that table, both ways;
whoever renders the proc files and whoever reads a container's device nodes share it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CAP_DEVICE_DIR",
    "CI_PER_GI",
    "CONFIG_MINOR",
    "GI_PER_GPU",
    "MONITOR_MINOR",
    "MigCap",
    "cap_of_minor",
    "cap_of_path",
    "minor_of",
]

CONFIG_MINOR: Final = 1
"""``config``: the capability to change the MIG layout."""
MONITOR_MINOR: Final = 2
"""``monitor``: the capability to read every instance's state."""
GI_PER_GPU: Final = 15
"""GPU instance ids per GPU in the table (0..14)."""
CI_PER_GI: Final = 8
"""Compute instance ids per GPU instance in the table (0..7)."""
_PER_GI: Final = 1 + CI_PER_GI
_PER_GPU: Final = GI_PER_GPU * _PER_GI
_FIRST: Final = 3
CAP_DEVICE_DIR: Final = "/dev/nvidia-caps"
"""Where a container sees the capability devices, as ``nvidia-cap<minor>``."""
_CAP_PATH: Final = re.compile(r"/dev/nvidia-caps/nvidia-cap([0-9]+)")


@dataclass(frozen=True, slots=True)
class MigCap:
    """One capability of the table: a GPU instance's ``access`` (``compute_instance`` None)
    or a compute instance's."""

    gpu: int
    gpu_instance: int
    compute_instance: int | None = None

    @property
    def name(self) -> str:
        """The table's name for it, ``gpu0/gi1/access`` or ``gpu0/gi1/ci0/access``."""
        ci = "" if self.compute_instance is None else f"/ci{self.compute_instance}"
        return f"gpu{self.gpu}/gi{self.gpu_instance}{ci}/access"


def minor_of(cap: MigCap) -> int:
    """The minor of *cap*. Raises ValueError for ids outside the table."""
    if cap.gpu < 0 or not 0 <= cap.gpu_instance < GI_PER_GPU:
        raise ValueError(f"{cap.name}: no such capability in the MIG minor table")
    offset = 0
    if cap.compute_instance is not None:
        if not 0 <= cap.compute_instance < CI_PER_GI:
            raise ValueError(f"{cap.name}: no such capability in the MIG minor table")
        offset = 1 + cap.compute_instance
    return _FIRST + cap.gpu * _PER_GPU + cap.gpu_instance * _PER_GI + offset


def cap_of_minor(minor: int) -> MigCap | None:
    """The instance capability of *minor*, or None for ``config``, ``monitor`` and numbers
    below the table."""
    if minor < _FIRST:
        return None
    gpu, rest = divmod(minor - _FIRST, _PER_GPU)
    gi, slot = divmod(rest, _PER_GI)
    return MigCap(gpu, gi, None if slot == 0 else slot - 1)


def cap_of_path(path: str) -> MigCap | None:
    """The instance capability a container device path ``/dev/nvidia-caps/nvidia-cap<N>``
    names, or None for any other path."""
    match = _CAP_PATH.fullmatch(path)
    return None if match is None else cap_of_minor(int(match.group(1)))
