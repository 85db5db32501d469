"""The live file's MIG records read with plain ``mmap``, without the library.

Watchers that only need to know which GPU and compute instances exist (the node agent's
driver surfaces follow them) read the records here: loading the library would map the
whole live layer into a long-lived daemon for a few words, and the record format belongs
to this package, not to each reader. A record caught mid-write by a dead writer reads as
no instances, as the library reads it.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Final, TypeAlias

from nvml_mock_live import _layout as layout

__all__ = ["Instances", "read_instances", "sequences"]

#: Per GPU instance: its id and the ids of the compute instances it holds, both sorted.
Instances: TypeAlias = tuple[tuple[int, tuple[int, ...]], ...]

_READ_TRIES: Final = 1000
_GPU_COUNT_AT: Final = layout.LIVE_HEADER_FIELDS["gpu_count"][1]


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


def _instances(record: bytes) -> Instances:
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
        found.append((gi_id, tuple(sorted(cis))))
    return tuple(sorted(found))


def read_instances(live_file: Path, gpus: int) -> dict[int, Instances]:
    """Each of the first *gpus* GPUs' instances now (empty without MIG mode, without a
    live file, or for a GPU the file does not hold)."""
    try:
        fd = os.open(live_file, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return {gpu: () for gpu in range(gpus)}
    try:
        if os.fstat(fd).st_size < layout.LIVE_TOTAL_BYTES:
            return {gpu: () for gpu in range(gpus)}
        with mmap.mmap(fd, layout.LIVE_TOTAL_BYTES, prot=mmap.PROT_READ) as data:
            (count,) = struct.unpack_from("<I", data, _GPU_COUNT_AT)
            result: dict[int, Instances] = {}
            for gpu in range(gpus):
                record = _record(data, gpu) if gpu < min(count, layout.LIVE_GPU_SLOTS) else None
                result[gpu] = _instances(record) if record is not None else ()
            return result
    finally:
        os.close(fd)


def sequences(live_file: Path) -> tuple[int, ...] | None:
    """What changes whenever a MIG layout does: the file's inode (a replaced file), its GPU
    count and each record's sequence word. None when there is no usable live file."""
    try:
        with open(live_file, "rb") as handle:
            st = os.fstat(handle.fileno())
            if st.st_size < layout.LIVE_TOTAL_BYTES:
                return None
            with mmap.mmap(handle.fileno(), layout.LIVE_TOTAL_BYTES, prot=mmap.PROT_READ) as data:
                (count,) = struct.unpack_from("<I", data, _GPU_COUNT_AT)
                seqs = [st.st_ino, count]
                for gpu in range(min(count, layout.LIVE_GPU_SLOTS)):
                    at = layout.LIVE_MIG_OFFSET + gpu * layout.LIVE_MIG_BYTES_PER_GPU
                    seqs.append(struct.unpack_from("<Q", data, at + layout.LIVE_MIG_SEQ)[0])
                return tuple(seqs)
    except OSError:
        return None
