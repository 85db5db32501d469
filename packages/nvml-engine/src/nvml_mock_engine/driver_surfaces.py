"""The driver root's kernel surfaces: rendered at staging, kept true to the live MIG layout.

``proc/`` (:mod:`nvml_mock_engine.procfs`) and ``sys/`` (:mod:`nvml_mock_engine.pci_sysfs`)
are real directories of the overlay, not links into a generation: containers
get them by a bind mount of the directory (``/proc/driver``, ``/sys/bus/pci/devices``),
and a bind holds the directory it was made on, so the directory must stay while its files
change. Staging renders them from the board and syncs them in place
(:func:`nvml_mock_engine.file_tree.sync_tree`).

The MIG capability files (``capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access``) follow the
live layer's MIG record: whoever changes the layout (``nvidia-smi mig``, mig-parted, the
DRA driver, all through the library) writes only the live record, and
:class:`MigFollower` in the node agent, which runs on every staged node, turns each change
into files within one of its ticks. :func:`sync_mig` does one pass for any caller
(staging, ``nvml-mock-engine surfaces``, tests).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from nvml_mock_live import _layout as layout

from nvml_mock_engine.file_tree import sync_tree
from nvml_mock_engine.procfs import MigInstance, mig_capabilities

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
_READ_TRIES: Final = 1000


def surfaces_root(live_file: Path) -> Path:
    """The overlay directory whose ``proc/`` and ``sys/`` follow *live_file*: the live layer
    really lives in the overlay's state root (``DIR/.nvml-mock/live.nvmlmock``)."""
    return Path(os.path.realpath(live_file)).parent.parent


def _record(data: mmap.mmap, gpu: int) -> bytes | None:
    """GPU *gpu*'s MIG record, read under its sequence lock (None: a writer died mid-write)."""
    start = layout.LIVE_MIG_OFFSET + gpu * layout.LIVE_MIG_BYTES_PER_GPU
    end = start + layout.LIVE_MIG_BYTES_PER_GPU
    seq_at = start + layout.LIVE_MIG_SEQ
    for _ in range(_READ_TRIES):
        (before,) = struct.unpack_from("<Q", data, seq_at)
        if before & 1:
            continue
        record = bytes(data[start:end])
        (after,) = struct.unpack_from("<Q", data, seq_at)
        if after == before:
            return record
    return None


def _instances(record: bytes) -> tuple[MigInstance, ...]:
    (current,) = struct.unpack_from("<I", record, layout.LIVE_MIG_CURRENT)
    if current != 1:
        return ()
    found = []
    for g in range(layout.LIVE_MIG_MAX_GI):
        gi_at = layout.LIVE_MIG_GI + g * layout.LIVE_MIG_GI_BYTES
        used, gi_id = struct.unpack_from("<II", record, gi_at + layout.LIVE_MIG_GI_USED)
        if not used:
            continue
        cis = []
        for c in range(layout.LIVE_MIG_MAX_CI):
            ci_at = gi_at + layout.LIVE_MIG_GI_CI + c * layout.LIVE_MIG_CI_BYTES
            ci_used, ci_id = struct.unpack_from("<II", record, ci_at + layout.LIVE_MIG_CI_USED)
            if ci_used:
                cis.append(ci_id)
        found.append(MigInstance(gi_id, tuple(sorted(cis))))
    return tuple(sorted(found, key=lambda i: i.gpu_instance))


def read_mig_layout(live_file: Path, gpus: int) -> dict[int, tuple[MigInstance, ...]]:
    """Each board GPU's GPU and compute instances now (empty without MIG mode or a live
    layer); a record caught mid-write by a dead writer reads as no instances, as the library
    reads it."""
    try:
        fd = os.open(live_file, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return {gpu: () for gpu in range(gpus)}
    try:
        size = os.fstat(fd).st_size
        if size < layout.LIVE_TOTAL_BYTES:
            return {gpu: () for gpu in range(gpus)}
        with mmap.mmap(fd, layout.LIVE_TOTAL_BYTES, prot=mmap.PROT_READ) as data:
            (count,) = struct.unpack_from("<I", data, layout.LIVE_HEADER_FIELDS["gpu_count"][1])
            result: dict[int, tuple[MigInstance, ...]] = {}
            for gpu in range(gpus):
                record = _record(data, gpu) if gpu < count else None
                result[gpu] = _instances(record) if record is not None else ()
            return result
    finally:
        os.close(fd)


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

    def _sequences(self) -> tuple[int, ...] | None:
        try:
            with open(self.live_file, "rb") as handle:
                st = os.fstat(handle.fileno())
                if st.st_size < layout.LIVE_TOTAL_BYTES:
                    return None
                with mmap.mmap(
                    handle.fileno(), layout.LIVE_TOTAL_BYTES, prot=mmap.PROT_READ
                ) as data:
                    (count,) = struct.unpack_from(
                        "<I", data, layout.LIVE_HEADER_FIELDS["gpu_count"][1]
                    )
                    seqs = [st.st_ino, count]
                    for gpu in range(min(count, layout.LIVE_GPU_SLOTS)):
                        at = layout.LIVE_MIG_OFFSET + gpu * layout.LIVE_MIG_BYTES_PER_GPU
                        seqs.append(struct.unpack_from("<Q", data, at + layout.LIVE_MIG_SEQ)[0])
                    return tuple(seqs)
        except OSError:
            return None

    def poll(self) -> bool:
        """One check; True when the files were brought up to date."""
        seqs = self._sequences()
        if seqs is None or seqs == self._seen:
            return False
        root = surfaces_root(self.live_file)
        if not (root / PROC_DIR).is_dir():
            return False
        sync_mig(root, read_mig_layout(self.live_file, seqs[1]))
        self._seen = seqs
        return True
