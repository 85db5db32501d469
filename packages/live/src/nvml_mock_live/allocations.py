"""Allocation records: which container holds which GPUs, as the live layer stores them.

The NRI plugin writes one record per running container that was given GPUs (its PID, pod,
memory and utilization pattern); ``nvml-mock-ctl alloc`` writes hand-made ones. Every field is
checked before anything is written (:class:`AllocationError` names it), against the record's
generated layout (``keys.toml`` ``[layout] process_fields``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from nvml_mock_live import _layout as layout
from nvml_mock_live.errors import AllocationError
from nvml_mock_live.kinds import UTIL_PATTERNS

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["MIG_HOLDINGS_MAX", "Allocation", "pack", "unpack", "with_process"]

_U32: Final = (1 << 32) - 1
_U64: Final = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class Allocation:
    """One container holding GPUs, as the live layer records it.

    ``gpus`` are board indices (the node's GPU numbering, not a container's renumbered
    view); ``used_memory_bytes`` is used on each device held. ``mig`` names the MIG devices
    held, as ``(gpu, gpu instance id, compute instance id)``: a GPU of ``gpus`` that ``mig``
    names is held only through those MIG devices, one not named is held whole (the ids are
    kept as given, so a record outlives the instance it names). ``util_*`` is the process's
    utilization pattern (:data:`UTIL_PATTERNS`); its epoch is ``start_time_ms``.
    """

    container_id: str
    pid: int
    gpus: tuple[int, ...]
    used_memory_bytes: int = 0
    pod: str = ""
    namespace: str = ""
    container_name: str = ""
    util_pattern: int = 0
    util_level: int = 0
    util_period_ms: int = 0
    util_seed: int = 0
    start_time_ms: int = 0
    mig: tuple[tuple[int, int, int], ...] = ()


_MIG_HELD: Final = 1 << 31
MIG_HOLDINGS_MAX: Final = layout.LIVE_PROCESS_FIELDS["mig_holdings"][2] // 4
"""How many MIG devices one allocation record can hold."""


def _field(name: str) -> tuple[str, int, int]:
    kind, offset, size = layout.LIVE_PROCESS_FIELDS[name]
    return kind, offset, size


def _integer_fields() -> tuple[tuple[tuple[str, int], ...], struct.Struct, int]:
    """The record's integer fields after ``seq`` in offset order, each with its largest value,
    as one struct (pad bytes where the layout leaves a gap) and the offset it starts at."""
    fields = sorted(
        (offset, name, kind)
        for name, (kind, offset, _) in layout.LIVE_PROCESS_FIELDS.items()
        if kind in ("u32", "u64") and name != "seq"
    )
    first = at = fields[0][0]
    fmt = "<"
    checks: list[tuple[str, int]] = []
    for offset, name, kind in fields:
        fmt += f"{offset - at}x" if offset > at else ""
        fmt += "I" if kind == "u32" else "Q"
        at = offset + (4 if kind == "u32" else 8)
        top = {"in_use": 1, "util_level": 100, "util_pattern": max(UTIL_PATTERNS.values())}.get(
            name, _U32 if kind == "u32" else _U64
        )
        checks.append((name, top))
    return tuple(checks), struct.Struct(fmt), first


_INTEGERS, _INTEGER_STRUCT, _INTEGERS_AT = _integer_fields()
_TEXTS: Final = tuple(
    (name, layout.LIVE_PROCESS_FIELDS[name][1], layout.LIVE_PROCESS_FIELDS[name][2])
    for name in ("container_id", "namespace", "container_name", "pod")
)
_MIG_AT: Final = layout.LIVE_PROCESS_FIELDS["mig_holdings"][1]


def pack(alloc: Allocation, gpu_count: int) -> bytes:
    """The record bytes of *alloc*, every field checked first (AllocationError names it).

    The integers are packed in one struct call and the texts sliced in: the NRI plugin packs
    a record at every container start."""

    def bad(field: str, value: object, why: str) -> AllocationError:
        return AllocationError(f"allocation {alloc.container_id!r}: {field}={value!r}: {why}")

    if not alloc.container_id:
        raise bad("container_id", alloc.container_id, "must not be empty")
    if not alloc.gpus:
        raise bad("gpus", alloc.gpus, "an allocation holds at least one GPU")
    mask = 0
    for gpu in alloc.gpus:
        if not isinstance(gpu, int) or not 0 <= gpu < gpu_count:
            raise bad("gpus", alloc.gpus, f"GPU {gpu} is not one of this node's 0..{gpu_count - 1}")
        mask |= 1 << gpu
    words = _mig_words(alloc, bad) if alloc.mig else ()
    values = [
        1 if name == "in_use" else mask if name == "gpu_mask" else getattr(alloc, name)
        for name, _ in _INTEGERS
    ]
    for (name, top), value in zip(_INTEGERS, values, strict=True):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= top:
            raise bad(name, value, f"must be an integer in 0..{top}")
    data = bytearray(layout.LIVE_PROCESS_RECORD_BYTES)
    _INTEGER_STRUCT.pack_into(data, _INTEGERS_AT, *values)
    for i, word in enumerate(words):
        struct.pack_into("<I", data, _MIG_AT + 4 * i, word)
    for name, offset, size in _TEXTS:
        text = getattr(alloc, name)
        raw = text.encode("utf-8")
        if b"\0" in raw or len(raw) > size - 1:
            raise bad(name, text, f"must be at most {size - 1} bytes of UTF-8 without NUL")
        data[offset : offset + len(raw)] = raw
    return bytes(data)


def _mig_words(alloc: Allocation, bad: Callable[[str, object, str], AllocationError]) -> list[int]:
    """The record's words for the MIG devices *alloc* holds, each checked."""
    if len(alloc.mig) > MIG_HOLDINGS_MAX:
        raise bad("mig", alloc.mig, f"a record holds at most {MIG_HOLDINGS_MAX} MIG devices")
    words: list[int] = []
    for held in alloc.mig:
        if (
            not isinstance(held, tuple)
            or len(held) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in held)
        ):
            raise bad("mig", alloc.mig, "each MIG device is (gpu, gpu instance, compute instance)")
        gpu, gi, ci = held
        if gpu not in alloc.gpus:
            raise bad("mig", alloc.mig, f"MIG device {held} is on GPU {gpu}, not one of gpus")
        if not (0 <= gi <= 0xFF and 0 <= ci <= 0xFF):
            raise bad("mig", alloc.mig, f"MIG device {held}: instance ids are in 0..255")
        word = _MIG_HELD | gpu | gi << 8 | ci << 16
        if word in words:
            raise bad("mig", alloc.mig, f"MIG device {held} is named twice")
        words.append(word)
    return words


_PID_AT: Final = layout.LIVE_PROCESS_FIELDS["pid"][1]
_START_AT: Final = layout.LIVE_PROCESS_FIELDS["start_time_ms"][1]
_PID: Final = struct.Struct("<I")
_START: Final = struct.Struct("<Q")


def with_process(record: bytes, pid: int, start_time_ms: int) -> bytes:
    """*record* (from :func:`pack`) for the process *pid* started at *start_time_ms*: what a
    container's start adds to the record derived before its task ran, without packing and
    checking the rest again. Raises :class:`AllocationError` for a value out of its field."""
    if not 0 <= pid <= _U32:
        raise AllocationError(f"pid={pid!r}: must be an integer in 0..{_U32}")
    if not 0 <= start_time_ms <= _U64:
        raise AllocationError(f"start_time_ms={start_time_ms!r}: must be an integer in 0..{_U64}")
    data = bytearray(record)
    _PID.pack_into(data, _PID_AT, pid)
    _START.pack_into(data, _START_AT, start_time_ms)
    return bytes(data)


def unpack(data: bytes) -> Allocation:
    def number(name: str) -> int:
        kind, offset, _ = _field(name)
        value: int = struct.unpack_from("<I" if kind == "u32" else "<Q", data, offset)[0]
        return value

    def text(name: str) -> str:
        _, offset, size = _field(name)
        return data[offset : offset + size].split(b"\0", 1)[0].decode("utf-8", "replace")

    mask = number("gpu_mask")
    _, mig_at, mig_size = _field("mig_holdings")
    mig = tuple(
        (word & 0xFF, word >> 8 & 0xFF, word >> 16 & 0xFF)
        for (word,) in struct.iter_unpack("<I", data[mig_at : mig_at + mig_size])
        if word & _MIG_HELD
    )
    return Allocation(
        container_id=text("container_id"),
        pid=number("pid"),
        gpus=tuple(i for i in range(64) if mask >> i & 1),
        used_memory_bytes=number("used_memory_bytes"),
        pod=text("pod"),
        namespace=text("namespace"),
        container_name=text("container_name"),
        util_pattern=number("util_pattern"),
        util_level=number("util_level"),
        util_period_ms=number("util_period_ms"),
        util_seed=number("util_seed"),
        start_time_ms=number("start_time_ms"),
        mig=mig,
    )
