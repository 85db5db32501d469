"""What makes a file a live layer of this layout: its header, checked, and its GPU records' binding.

Split from :mod:`.layer` so that a reader that only maps the file (``nvml-mock-ctl status``
and ``xid`` start in a few milliseconds) checks it with exactly the writer's rules without
importing the writer. Offsets and sizes are the generated layout's (:mod:`._layout`). Words
are read with ``int.from_bytes``, not ``struct``: ``xid`` needs no other use of ``struct``,
whose extension module is one more shared object to load at its start.
"""

from __future__ import annotations

from nvml_mock_live import _layout as layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    import mmap
    from typing import Final

__all__ = [
    "FIELD_FORMATS",
    "MASK_WORDS",
    "SIZE",
    "header_bytes",
    "header_field",
    "header_problem",
    "record_offset",
    "record_uuid",
    "torn_records",
]

SIZE: Final = layout.LIVE_TOTAL_BYTES
MASK_WORDS: Final = (layout.LIVE_KEY_SLOTS + 63) // 64
"""64-bit words of a GPU record's set and armed masks."""
FIELD_FORMATS: Final = {"uint32_t": "<I", "uint64_t": "<Q"}
"""The struct format of each C type the header's fields are declared with."""
_FIELD_BYTES: Final = {"uint32_t": 4, "uint64_t": 8}
"""The size of each of those C types (little-endian, as :data:`FIELD_FORMATS` reads them)."""
_DYNAMIC_HEADER_FIELDS: Final = frozenset(
    {"magic", "gpu_count", "generation", "event_head", "event_futex", "retired", "process_high"}
)


def _header_values(gpu_count: int) -> dict[str, int]:
    """The header's numeric fields as this layout writes them for *gpu_count* GPUs."""
    return {
        "format": layout.LIVE_FORMAT,
        "header_bytes": layout.LIVE_HEADER_BYTES,
        "total_bytes": layout.LIVE_TOTAL_BYTES,
        "gpu_slots": layout.LIVE_GPU_SLOTS,
        "gpu_count": gpu_count,
        "key_slots": layout.LIVE_KEY_SLOTS,
        "record_bytes": layout.LIVE_RECORD_BYTES,
        "records_offset": layout.LIVE_RECORDS_OFFSET,
        "processes_offset": layout.LIVE_PROCESSES_OFFSET,
        "process_slots": layout.LIVE_PROCESS_SLOTS,
        "process_record_bytes": layout.LIVE_PROCESS_RECORD_BYTES,
        "mig_offset": layout.LIVE_MIG_OFFSET,
        "mig_bytes_per_gpu": layout.LIVE_MIG_BYTES_PER_GPU,
        "events_offset": layout.LIVE_EVENTS_OFFSET,
        "event_slots": layout.LIVE_EVENT_SLOTS,
        "event_record_bytes": layout.LIVE_EVENT_RECORD_BYTES,
    }


def header_bytes(gpu_count: int) -> bytearray:
    """A fresh live file (every value unset, no record) for *gpu_count* GPUs, less the
    records' UUIDs, which are the caller's."""
    data = bytearray(SIZE)
    data[0 : len(layout.LIVE_MAGIC)] = layout.LIVE_MAGIC
    for name, value in _header_values(gpu_count).items():
        ctype, offset = layout.LIVE_HEADER_FIELDS[name]
        size = _FIELD_BYTES[ctype]
        data[offset : offset + size] = value.to_bytes(size, "little")
    return data


def header_problem(data: bytes | mmap.mmap) -> str | None:
    """Why *data* is not a live file of this layout (None when it is)."""
    if len(data) != SIZE:
        return f"size {len(data)} bytes, the layout needs {SIZE}"
    if bytes(data[0:16]).rstrip(b"\0") != layout.LIVE_MAGIC:
        return "not a live layer file (bad magic)"
    want = _header_values(0)
    for name, (ctype, offset) in layout.LIVE_HEADER_FIELDS.items():
        if name in _DYNAMIC_HEADER_FIELDS:
            continue
        # a field this version leaves zero (none so far) must be zero too
        if _word(data, offset, _FIELD_BYTES[ctype]) != want.get(name, 0):
            return f"layout field {name} differs from this version's"
    return None


def header_field(data: bytes | mmap.mmap, name: str) -> int:
    """The header field *name* (a display read: one aligned word, whatever a writer does)."""
    ctype, offset = layout.LIVE_HEADER_FIELDS[name]
    return _word(data, offset, _FIELD_BYTES[ctype])


def _word(data: bytes | mmap.mmap, offset: int, size: int) -> int:
    """The little-endian unsigned word of *size* bytes at *offset*."""
    return int.from_bytes(data[offset : offset + size], "little")


def record_offset(gpu: int) -> int:
    """Where GPU record *gpu* starts in the file."""
    return layout.LIVE_RECORDS_OFFSET + gpu * layout.LIVE_RECORD_BYTES


def record_uuid(data: bytes | mmap.mmap, gpu: int) -> str:
    """The board UUID GPU record *gpu* is bound to."""
    start = record_offset(gpu) + layout.LIVE_RECORD_UUID
    raw = bytes(data[start : start + layout.LIVE_RECORD_UUID_BYTES])
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def torn_records(data: bytes | mmap.mmap, gpu_count: int) -> list[int]:
    """The GPU records whose sequence counter is odd: mid-write, or (read under the writers'
    lock, when no writer can be active) left so by a writer that died. Every writer asks it
    first."""
    count = min(gpu_count, layout.LIVE_GPU_SLOTS)
    return [gpu for gpu in range(count) if _word(data, _FIRST_SEQ + gpu * _RECORD, 8) & 1]


_FIRST_SEQ: Final = layout.LIVE_RECORDS_OFFSET + layout.LIVE_RECORD_SEQ
_RECORD: Final = layout.LIVE_RECORD_BYTES
