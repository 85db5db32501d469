"""Consistent copies of a GPU record and of a process record with plain ``mmap`` reads.

For short-lived readers that show what the live file holds (``nvml-mock-ctl status``):
loading the mock library through ``ctypes`` only to take these copies cost ``status`` some
4 ms, half of what it took beyond the interpreter's own start. The sequence-lock rule is the
library's (``live.c``): a copy counts when the counter read before it and after it is the
same even number; a counter that stays odd (a writer died mid-write) gives up after as many
tries as the library makes, and the record is then not taken.

The two counter reads and the copy between them are plain loads. On x86-64, loads are not
reordered with other loads, so they order as the library's acquire loads do; on a weaker
memory model a copy that the library would have retried could count. That is acceptable for
a display only: every NVML answer and every writer keeps reading through the library.
:mod:`nvml_mock_live.mig_records` reads the MIG records the same way, for the same reason.
"""

from __future__ import annotations

import struct

from nvml_mock_live import _layout as layout
from nvml_mock_live.header import MASK_WORDS, record_offset

TYPE_CHECKING = False
if TYPE_CHECKING:
    import mmap
    from typing import Final

__all__ = ["READ_TRIES", "gpu_snapshot", "process_record"]

READ_TRIES: Final = 64 * 16
"""Tries before a record whose counter stays odd is given up (the library's count)."""

_U64: Final = struct.Struct("<Q").unpack_from
_U32: Final = struct.Struct("<I").unpack_from
_MASK: Final = struct.Struct(f"<{MASK_WORDS}Q").unpack_from
_VALUES: Final = struct.Struct(f"<{layout.LIVE_KEY_SLOTS}Q").unpack_from
_IN_USE_AT: Final = layout.LIVE_PROCESS_FIELDS["in_use"][1]


def gpu_snapshot(data: mmap.mmap, gpu: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """GPU record *gpu*'s mask words and raw slots, one consistent copy; None when no copy
    could be taken (a writer died mid-write)."""
    start = record_offset(gpu)
    seq_at = start + layout.LIVE_RECORD_SEQ
    for _ in range(READ_TRIES):
        (before,) = _U64(data, seq_at)
        if before & 1:
            continue
        mask = _MASK(data, start + layout.LIVE_RECORD_MASK)
        values = _VALUES(data, start + layout.LIVE_RECORD_VALUES)
        (after,) = _U64(data, seq_at)
        if after == before:
            return mask, values
    return None


def process_record(data: mmap.mmap, slot: int) -> bytes | None:
    """Process record *slot*'s bytes when it holds a record (one consistent copy); None when
    the slot is free or no copy could be taken (as the library's reader leaves it out)."""
    start = layout.LIVE_PROCESSES_OFFSET + slot * layout.LIVE_PROCESS_RECORD_BYTES
    end = start + layout.LIVE_PROCESS_RECORD_BYTES
    for _ in range(READ_TRIES):
        (before,) = _U64(data, start)
        if before & 1:
            continue
        record = bytes(data[start:end])
        (after,) = _U64(data, start)
        if after == before:
            return record if _U32(record, _IN_USE_AT)[0] == 1 else None
    return None
