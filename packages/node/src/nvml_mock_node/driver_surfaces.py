"""The driver root's kernel surfaces: rendered at staging, kept true to the live MIG layout.

``proc/`` (:mod:`nvml_mock_node.procfs`) and ``sys/`` (:mod:`nvml_mock_node.pci_sysfs`)
are real directories of the overlay, not links into a generation: containers
get them by a bind mount of the directory (``/proc/driver``, ``/sys/bus/pci/devices``),
and a bind holds the directory it was made on, so the directory must stay while its files
change. Staging renders them from the board and syncs them in place
(:func:`nvml_mock_node.file_tree.sync_tree`).

The MIG capability files (``capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access``) follow the
live layer's MIG record: whoever changes the layout (``nvidia-smi mig``, mig-parted, the
DRA driver, all through the library) writes only the live record, and
:class:`MigFollower` in the node agent (``nvml-mock-engine agent``, which runs on every
staged node, with or without a topology service) turns each change into files within one of
its ticks. :func:`sync_mig` does one pass for any caller (staging, the follower, tests).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from nvml_mock_live import mig_records

from nvml_mock_node.file_tree import sync_tree
from nvml_mock_node.procfs import MigInstance, mig_capabilities

__all__ = [
    "CAPABILITIES_DIR",
    "PROC_DIR",
    "SYS_DIR",
    "MigFollower",
    "read_mig_layout",
    "surfaces_root",
    "sync_mig",
]

PROC_DIR: Final = "proc"
SYS_DIR: Final = "sys"
CAPABILITIES_DIR: Final = "driver/nvidia/capabilities"


def surfaces_root(live_file: Path) -> Path:
    """The overlay directory whose ``proc/`` and ``sys/`` follow *live_file*: the live layer
    really lives in the overlay's state root (``DIR/.nvml-mock/live.nvmlmock``)."""
    return Path(os.path.realpath(live_file)).parent.parent


def read_mig_layout(live_file: Path, gpus: int) -> dict[int, tuple[MigInstance, ...]]:
    """Each board GPU's GPU and compute instances now (empty without MIG mode or a live
    layer); a record caught mid-write by a dead writer reads as no instances, as the library
    reads it."""
    return {
        gpu: tuple(MigInstance(gi, cis) for gi, cis in instances)
        for gpu, instances in mig_records.read_instances(live_file, gpus).items()
    }


def sync_mig(root: Path, layout_now: Mapping[int, Sequence[MigInstance]]) -> None:
    """Make ``proc/driver/nvidia/capabilities/gpu<minor>/mig`` under *root* hold the
    capability files of *layout_now* (GPUs whose directory staging did not make are left
    alone: they are not on this node)."""
    caps = root / PROC_DIR / CAPABILITIES_DIR
    for gpu, instances in layout_now.items():
        directory = caps / f"gpu{gpu}" / "mig"
        if directory.is_dir():
            sync_tree(directory, mig_capabilities(gpu, instances))


class MigFollower:
    """Keeps the MIG capability files true to the live layer: :meth:`poll` reads the MIG
    records' sequence words (a few bytes of a shared mapping) and rewrites the files when
    one changed since the last poll, or the live file was replaced. Without a live file or
    without ``proc/`` (no driver root staged) a poll does nothing."""

    def __init__(self, live_file: Path) -> None:
        self.live_file = live_file
        self._seen: tuple[int, ...] | None = None

    def poll(self) -> bool:
        """One check; True when the files were brought up to date."""
        seqs = mig_records.sequences(self.live_file)
        if seqs is None or seqs == self._seen:
            return False
        root = surfaces_root(self.live_file)
        if not (root / PROC_DIR).is_dir():
            return False
        sync_mig(root, read_mig_layout(self.live_file, seqs[1]))
        self._seen = seqs
        return True
