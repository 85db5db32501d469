"""The live layer's writer core: open, map, check and lock the file, and write through the
mock library's own sequence-lock primitives; plus the allocation records.

The live layer (``config/live.nvmlmock`` beside the board state; layout in the engine's
``native/STATE-FORMAT.md``) is mapped shared by every NVML client on the node. Writes go
through the C library's exported primitives (loaded through ctypes from a path the caller
gives), so readers and writers share one implementation of the protocol, with real atomics
on every CPU; writers serialise with an exclusive ``flock`` on the file.

The engine's :mod:`nvml_mock_engine.live` (per-GPU values, events) is built on this module;
the NRI plugin, which may not import the engine, uses it directly for allocations: which
container holds which GPUs, its PID, memory and utilization pattern. Typical use::

    with LiveFile.open(overlay / "config" / names.LIVE_FILE_NAME,
                       library=overlay / "lib" / "libnvidia-ml.so.1") as live:
        live.put(Allocation(container_id="4f…", pid=4242, gpus=(2,), used_memory_bytes=20 << 30))
        live.remove("4f…")
"""

from __future__ import annotations

import builtins
import ctypes
import errno
import fcntl
import functools
import itertools
import math
import mmap
import os
import stat
import struct
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

from nvml_mock_protocol import _live_layout as layout
from nvml_mock_protocol.errors import ProtocolPackageError

__all__ = [
    "MIG_HOLDINGS_MAX",
    "UTIL_PATTERNS",
    "Allocation",
    "AllocationError",
    "BoardSummary",
    "LiveFile",
    "LiveFileError",
    "header_bytes",
    "header_problem",
    "load_library",
    "parse_memory",
    "parse_utilization",
    "read_board_summary",
    "record_uuid",
    "resolve_gpus",
]

SIZE: Final = layout.LIVE_TOTAL_BYTES
_FIELD_FORMATS: Final = {"uint32_t": "<I", "uint64_t": "<Q"}
_DYNAMIC_HEADER_FIELDS: Final = frozenset(
    {"magic", "gpu_count", "generation", "event_head", "event_futex", "retired", "process_high"}
)
UTIL_PATTERNS: Final = {"none": 0, "steady": 1, "busy": 2, "burst": 3, "sine": 4}
"""Utilization patterns by name, as the ``util_pattern`` live key numbers them."""
_U32: Final = (1 << 32) - 1
_U64: Final = (1 << 64) - 1


class LiveFileError(ProtocolPackageError):
    """The live layer cannot be opened, checked or written; the message names the file."""


class AllocationError(LiveFileError):
    """An allocation record is refused (a bad field, or no free slot); nothing was written."""


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


def _pack(alloc: Allocation, gpu_count: int) -> bytes:
    """The record bytes of *alloc*, every field checked first (AllocationError names it)."""

    def bad(field: str, value: object, why: str) -> AllocationError:
        return AllocationError(f"allocation {alloc.container_id!r}: {field}={value!r}: {why}")

    data = bytearray(layout.LIVE_PROCESS_RECORD_BYTES)
    if not alloc.container_id:
        raise bad("container_id", alloc.container_id, "must not be empty")
    if not alloc.gpus:
        raise bad("gpus", alloc.gpus, "an allocation holds at least one GPU")
    mask = 0
    for gpu in alloc.gpus:
        if not isinstance(gpu, int) or not 0 <= gpu < gpu_count:
            raise bad("gpus", alloc.gpus, f"GPU {gpu} is not one of this node's 0..{gpu_count - 1}")
        mask |= 1 << gpu
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
    _, mig_at, _ = _field("mig_holdings")
    for i, word in enumerate(words):
        struct.pack_into("<I", data, mig_at + 4 * i, word)
    integers: dict[str, tuple[int, int]] = {
        "in_use": (1, 1),
        "pid": (alloc.pid, _U32),
        "gpu_mask": (mask, _U64),
        "used_memory_bytes": (alloc.used_memory_bytes, _U64),
        "start_time_ms": (alloc.start_time_ms, _U64),
        "util_pattern": (alloc.util_pattern, max(UTIL_PATTERNS.values())),
        "util_level": (alloc.util_level, 100),
        "util_period_ms": (alloc.util_period_ms, _U32),
        "util_seed": (alloc.util_seed, _U64),
    }
    for name, (value, top) in integers.items():
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= top:
            raise bad(name, value, f"must be an integer in 0..{top}")
        kind, offset, _ = _field(name)
        struct.pack_into("<I" if kind == "u32" else "<Q", data, offset, value)
    texts = {
        "container_id": alloc.container_id,
        "namespace": alloc.namespace,
        "container_name": alloc.container_name,
        "pod": alloc.pod,
    }
    for name, text in texts.items():
        _, offset, size = _field(name)
        raw = text.encode("utf-8")
        if b"\0" in raw or len(raw) > size - 1:
            raise bad(name, text, f"must be at most {size - 1} bytes of UTF-8 without NUL")
        data[offset : offset + len(raw)] = raw
    return bytes(data)


def _unpack(data: bytes) -> Allocation:
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


# --- the annotations' values -----------------------------------------------------------------

_MEMORY_UNITS: Final = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
}


def parse_memory(text: str) -> int:
    """A memory size as Kubernetes writes quantities: bytes, or a number with a decimal
    (``k``, ``M``, ``G``, ``T``) or binary (``Ki``, ``Mi``, ``Gi``, ``Ti``) suffix, e.g.
    ``20Gi``, ``512Mi``, ``1.5G``. Raises ValueError naming the value."""
    stripped = text.strip()
    number = stripped.rstrip("kMGTi")
    unit = stripped[len(number) :]
    if unit not in _MEMORY_UNITS or not number:
        raise ValueError(f"{text!r} is not a size such as 20Gi, 512Mi or 1073741824")
    try:
        value = float(number) if "." in number else int(number)
    except ValueError:
        raise ValueError(f"{text!r} is not a size such as 20Gi, 512Mi or 1073741824") from None
    size = int(value * _MEMORY_UNITS[unit])
    if not 0 <= size <= _U64 or math.isnan(value):
        raise ValueError(f"{text!r} is outside 0..{_U64} bytes")
    return size


def _duration_ms(text: str) -> int:
    units = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
    for suffix in ("ms", "s", "m", "h"):
        if text.endswith(suffix):
            number, scale = text[: -len(suffix)], units[suffix]
            break
    else:
        number, scale = text, 1000
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"period {text!r} is not a duration such as 500ms, 30s or 2m") from None
    if not 0 < value * scale <= _U32:
        raise ValueError(f"period {text!r} must be a positive duration")
    return max(1, round(value * scale))


def parse_utilization(text: str) -> tuple[int, int, int, int]:
    """A utilization pattern in the live layer's words, as ``nvml-mock-ctl util`` takes it:
    ``N`` (a steady N %), ``idle``, ``steady N``, ``busy``, ``burst [PEAK]``, ``sine [PEAK]``,
    optionally followed by ``period=30s`` and ``seed=N``. Returns (pattern, level, period_ms,
    seed) as the record stores them; raises ValueError naming what is wrong."""
    words = text.split()
    options = {w.partition("=")[0]: w.partition("=")[2] for w in words if "=" in w}
    words = [w for w in words if "=" not in w]
    unknown = set(options) - {"period", "seed"}
    if unknown:
        raise ValueError(f"unknown option {sorted(unknown)[0]}= (period=, seed=)")
    if not words or len(words) > 2:
        raise ValueError("a percentage, or idle | steady N | busy | burst [PEAK] | sine [PEAK]")
    first = words[0].lower()

    def percent(word: str) -> int:
        if not word.isdigit() or not 0 <= int(word) <= 100:
            raise ValueError(f"{word!r} is not a percentage 0..100")
        return int(word)

    if first not in ("idle", "steady", "busy", "burst", "sine"):
        if len(words) != 1:
            raise ValueError(f"unexpected {words[1]!r} after a percentage")
        pattern, level = UTIL_PATTERNS["steady"], percent(first)
    elif first in ("idle", "busy"):
        if len(words) != 1:
            raise ValueError(f"{first} takes no level")
        pattern, level = (
            UTIL_PATTERNS["steady" if first == "idle" else "busy"],
            0 if first == "idle" else 100,
        )
    elif first == "steady":
        if len(words) != 2:
            raise ValueError("steady needs a level, e.g. `steady 60`")
        pattern, level = UTIL_PATTERNS["steady"], percent(words[1])
    else:
        pattern, level = UTIL_PATTERNS[first], percent(words[1]) if len(words) == 2 else 100
    period = _duration_ms(options["period"]) if options.get("period") else 0
    seed_text = options.get("seed", "0") or "0"
    if not seed_text.isdigit() or int(seed_text) > _U64:
        raise ValueError(f"seed {seed_text!r} is not an unsigned 64-bit integer")
    return pattern, level, period, int(seed_text)


@dataclass(frozen=True, slots=True)
class BoardSummary:
    """What an allocation writer needs of one board GPU: to resolve a device name to it and
    to size a default share of its memory."""

    index: int
    uuid: str
    bus_id: str
    memory_total_bytes: int


def read_board_summary(state_path: Path | str) -> list[BoardSummary]:
    """The GPUs of a rendered state file, leniently (the library's parser is the strict one).
    Raises :class:`LiveFileError` naming the file when it cannot be read."""
    try:
        text = Path(state_path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LiveFileError(f"cannot read the board state {state_path}: {exc}") from None
    gpus: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in text.splitlines():
        if line.startswith("[gpu "):
            current = {}
            gpus.append(current)
        elif line.startswith("["):
            current = None
        elif current is not None and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            current[key.strip()] = value.strip()
    board: list[BoardSummary] = []
    for index, values in enumerate(gpus):
        try:
            total = int(values.get("memory_total_bytes", "0"), 0)
        except ValueError:
            total = 0
        board.append(
            BoardSummary(index, values.get("uuid", ""), values.get("pci_bus_id", ""), total)
        )
    return board


def _bus_key(bus_id: str) -> str:
    """A PCI bus id without its domain's width: ``0000:3b:00.0`` = ``00000000:3B:00.0``."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    if domain and all(c in "0123456789abcdef" for c in domain):
        domain = str(int(domain, 16))
    return f"{domain}:{rest}"


def resolve_gpus(
    tokens: Iterable[str], board: Sequence[BoardSummary]
) -> tuple[tuple[int, ...], list[str]]:
    """The board indices *tokens* name (indices, ``GPU-`` UUIDs in full or a unique prefix,
    case-insensitive, or PCI bus ids), in order and without repeats, and the tokens that name
    no GPU of *board* (the caller reports them)."""
    found: list[int] = []
    unknown: list[str] = []
    for token in tokens:
        text = token.strip()
        match: list[int] = []
        if text.isdigit():
            match = [int(text)] if int(text) < len(board) else []
        elif text.lower().startswith("gpu-"):
            match = [g.index for g in board if g.uuid.lower().startswith(text.lower())]
        elif ":" in text:
            match = [g.index for g in board if g.bus_id and _bus_key(g.bus_id) == _bus_key(text)]
        if len(match) != 1:
            unknown.append(text)
        elif match[0] not in found:
            found.append(match[0])
    return tuple(found), unknown


def header_bytes(gpu_count: int) -> bytearray:
    """A fresh live file (every value unset, no record) for *gpu_count* GPUs, less the
    records' UUIDs, which are the caller's."""
    data = bytearray(SIZE)
    data[0 : len(layout.LIVE_MAGIC)] = layout.LIVE_MAGIC
    values = {
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
    for name, value in values.items():
        ctype, offset = layout.LIVE_HEADER_FIELDS[name]
        struct.pack_into(_FIELD_FORMATS[ctype], data, offset, value)
    return data


def header_problem(data: bytes | mmap.mmap) -> str | None:
    """Why *data* is not a live file of this layout (None when it is)."""
    if len(data) != SIZE:
        return f"size {len(data)} bytes, the layout needs {SIZE}"
    if bytes(data[0:16]).rstrip(b"\0") != layout.LIVE_MAGIC:
        return "not a live layer file (bad magic)"
    want = header_bytes(0)
    for name, (ctype, offset) in layout.LIVE_HEADER_FIELDS.items():
        if name in _DYNAMIC_HEADER_FIELDS:
            continue
        size = struct.calcsize(_FIELD_FORMATS[ctype])
        if bytes(data[offset : offset + size]) != bytes(want[offset : offset + size]):
            return f"layout field {name} differs from this version's"
    return None


def record_uuid(data: bytes | mmap.mmap, gpu: int) -> str:
    """The board UUID GPU record *gpu* is bound to."""
    start = layout.LIVE_RECORDS_OFFSET + gpu * layout.LIVE_RECORD_BYTES + layout.LIVE_RECORD_UUID
    raw = bytes(data[start : start + layout.LIVE_RECORD_UUID_BYTES])
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


@contextmanager
def flock(fd: int) -> Iterator[None]:
    """Hold the writers' exclusive lock on the live file *fd*."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


@functools.cache
def _load(path: str) -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise LiveFileError(f"cannot load the mock library {path}: {exc}") from None
    c_void, c_size, c_uint, c_u64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_uint64
    signatures: dict[str, tuple[list[type], type]] = {
        "nvml_mock_live_write": (
            [
                c_void,
                c_size,
                c_uint,
                c_uint,
                ctypes.POINTER(ctypes.c_uint),
                ctypes.POINTER(c_u64),
                ctypes.POINTER(ctypes.c_ubyte),
            ],
            ctypes.c_int,
        ),
        "nvml_mock_live_snapshot": (
            [
                c_void,
                c_size,
                c_uint,
                ctypes.POINTER(c_u64),
                ctypes.POINTER(c_u64),
                ctypes.POINTER(c_u64),
            ],
            ctypes.c_int,
        ),
        "nvml_mock_live_retire": ([c_void, c_size], ctypes.c_int),
        "nvml_mock_live_event": ([c_void, c_size, c_uint, c_u64, c_u64], c_u64),
        "nvml_mock_live_event_on": ([c_void, c_size, c_uint, c_uint, c_uint, c_u64, c_u64], c_u64),
        "nvml_mock_live_proc_write": (
            [c_void, c_size, c_uint, ctypes.c_char_p, c_size],
            ctypes.c_int,
        ),
        "nvml_mock_live_proc_read": ([c_void, c_size, c_uint, c_void, c_size], ctypes.c_int),
        "nvml_mock_live_mig_reset": ([c_void, c_size, c_uint], ctypes.c_int),
        "nvml_mock_live_layout_bytes": ([], ctypes.c_ulonglong),
    }
    for name, (argtypes, restype) in signatures.items():
        try:
            function = getattr(lib, name)
        except AttributeError:
            raise LiveFileError(
                f"the library {path} has no {name}: not a mock library of this version"
            ) from None
        function.argtypes = argtypes
        function.restype = restype
    if lib.nvml_mock_live_layout_bytes() != SIZE:
        raise LiveFileError(
            f"the mock library {path} was built from another key declaration than this package "
            f"(live layout {lib.nvml_mock_live_layout_bytes()} bytes, expected {SIZE}); rebuild it"
        )
    return lib


def load_library(path: Path | str) -> ctypes.CDLL:
    """The mock library at *path*, for its live-layer primitives (loaded once per path; no
    ``nvmlInit``). Raises :class:`LiveFileError` when it is missing or of another layout."""
    return _load(str(path))


class LiveFile:
    """An open live layer file, checked against this layout, with the allocation API.

    Open it with :meth:`open`; close it (or use it as a context manager) when done. Every
    allocation is checked completely before anything is written; each record is written in
    one sequence-locked step, so a reader sees a whole record or none.
    """

    def __init__(self, path: Path, fd: int, mapped: mmap.mmap, lib: ctypes.CDLL, writable: bool):
        self.path = path
        self.writable = writable
        self.lib = lib
        self._fd = fd
        self._map = mapped
        self._buffer: ctypes.Array[ctypes.c_char] | None = None

    @classmethod
    def open(cls, path: Path | str, *, library: Path | str, writable: bool = True) -> LiveFile:
        """Open the live file at *path* through the mock library at *library*. Raises
        :class:`LiveFileError` naming the file and why it cannot be used."""
        path = Path(path)
        lib = load_library(library)
        flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            hint = ""
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                hint = (
                    " (the live layer is written on the node, as root: inside a container the"
                    " overlay is read-only)"
                )
            elif exc.errno == errno.ENOENT:
                hint = " (stage the overlay with this version of nvml-mock-engine to create it)"
            raise LiveFileError(
                f"cannot open the live layer {path}: {exc.strerror}{hint}"
            ) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise LiveFileError(f"the live layer {path} is not a regular file")
            if info.st_size != SIZE:
                raise LiveFileError(
                    f"the live layer {path} is {info.st_size} bytes, the layout needs {SIZE}"
                )
            # a private mapping of a read-only file still follows the file (no page of it is
            # ever written here) and gives the primitives an address to read through
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_COPY
            mapped = mmap.mmap(fd, SIZE, access=access)
        except BaseException:
            os.close(fd)
            raise
        live = cls(path, fd, mapped, lib, writable)
        problem = header_problem(mapped)
        if problem is None and live.u32("retired"):
            problem = "it was retired (replaced by a re-stage); open the current one"
        if problem is not None:
            live.close()
            raise LiveFileError(f"the live layer {path} cannot be used: {problem}")
        return live

    # --- the raw file, for the engine's per-GPU writer ------------------------------------

    @property
    def mapping(self) -> mmap.mmap:
        """The file's mapping (shared when writable)."""
        return self._map

    @property
    def fd(self) -> int:
        """The open file (for :func:`flock`)."""
        return self._fd

    def u32(self, field: str) -> int:
        """A 32-bit header field."""
        value: int = struct.unpack_from("<I", self._map, layout.LIVE_HEADER_FIELDS[field][1])[0]
        return value

    def address(self) -> int:
        """The mapping's address, for the library's primitives."""
        if self._buffer is None:
            self._buffer = (ctypes.c_char * SIZE).from_buffer(self._map)
        return ctypes.addressof(self._buffer)

    @property
    def gpu_count(self) -> int:
        """GPUs of the board the file was created for."""
        return self.u32("gpu_count")

    def _require_writable(self) -> None:
        if not self.writable:
            raise LiveFileError(f"the live layer {self.path} was opened read-only")

    # --- allocations ----------------------------------------------------------------------

    def _read_slot(self, slot: int, out: ctypes.Array[ctypes.c_char]) -> Allocation | None:
        """Record *slot*, or None when it is free or no consistent copy could be taken."""
        rc = self.lib.nvml_mock_live_proc_read(
            self.address(), SIZE, slot, ctypes.addressof(out), layout.LIVE_PROCESS_RECORD_BYTES
        )
        return _unpack(out.raw) if rc == 1 else None

    def _slots(self, *, locked: bool = False) -> dict[int, Allocation]:
        """The records in use, by slot. A record whose sequence counter stays odd was left by a
        writer that died mid-write: it is not listed (NVML does not show it either), and
        under the writers' lock (*locked*: no writer can be active) it is not even waited for,
        so its slot counts as free and the next put rewrites it whole."""
        out = ctypes.create_string_buffer(layout.LIVE_PROCESS_RECORD_BYTES)
        high = min(self.u32("process_high"), layout.LIVE_PROCESS_SLOTS)
        found: dict[int, Allocation] = {}
        for slot in range(high):
            if locked and self._seq(slot) & 1:
                continue
            alloc = self._read_slot(slot, out)
            if alloc is not None:
                found[slot] = alloc
        return found

    def _seq(self, slot: int) -> int:
        at = layout.LIVE_PROCESSES_OFFSET + slot * layout.LIVE_PROCESS_RECORD_BYTES
        value: int = struct.unpack_from("<Q", self._map, at)[0]
        return value

    def _write_slot(self, slot: int, record: bytes) -> None:
        rc = self.lib.nvml_mock_live_proc_write(
            self.address(), SIZE, slot, record, layout.LIVE_PROCESS_RECORD_BYTES
        )
        if rc != 0:
            raise LiveFileError(
                f"process record {slot}: the library refused the write to {self.path}"
            )

    def list(self) -> list[Allocation]:
        """Every allocation recorded, in slot order."""
        return list(self._slots().values())

    def put(self, alloc: Allocation) -> None:
        """Record *alloc*, replacing the record of the same container id if there is one.
        Raises :class:`AllocationError` for a bad field or when every slot is taken."""
        self.replace(alloc.container_id, [alloc])

    def replace(self, container_id: str, allocs: Sequence[Allocation]) -> None:
        """Replace what *container_id* holds by *allocs* (usually one; none removes it)."""
        self._require_writable()
        records = [(a.container_id, _pack(a, self.gpu_count)) for a in allocs]
        with flock(self._fd):
            slots = self._slots(locked=True)
            mine = [s for s, a in slots.items() if a.container_id == container_id]
            self._apply(slots, mine, records)

    def remove(self, container_id: str) -> bool:
        """Remove the record of *container_id*; True when there was one."""
        self._require_writable()
        with flock(self._fd):
            slots = self._slots(locked=True)
            mine = [s for s, a in slots.items() if a.container_id == container_id]
            self._apply(slots, mine, [])
        return bool(mine)

    def replace_all(self, allocs: Iterable[Allocation]) -> None:
        """Make the records exactly *allocs* (a runtime's full view, e.g. after a restart):
        records of containers not among them go, the others are rewritten in place."""
        self._require_writable()
        wanted = list(allocs)
        ids = [a.container_id for a in wanted]
        if len(set(ids)) != len(ids):
            raise AllocationError("replace_all: a container id appears twice")
        records = [(a.container_id, _pack(a, self.gpu_count)) for a in wanted]
        with flock(self._fd):
            slots = self._slots(locked=True)
            self._apply(slots, list(slots), records)

    def _apply(
        self,
        slots: dict[int, Allocation],
        old: builtins.list[int],
        records: builtins.list[tuple[str, bytes]],
    ) -> None:
        """Write *records*: a container's own slot in *old* is rewritten in place, the others
        take the rest of *old*, then free slots; what is left of *old* is freed. Capacity is
        checked before anything is written."""
        by_id = {slots[s].container_id: s for s in old}
        plan = [(by_id.pop(cid, None), record) for cid, record in records]
        needed = sum(1 for slot, _ in plan if slot is None)
        pool = sorted(by_id.values())
        if needed > len(pool):
            # the lowest free slots, only as many as needed: a walk of all 1024 slots on every
            # put was most of a life-cycle event's cost
            free = (s for s in range(layout.LIVE_PROCESS_SLOTS) if s not in slots)
            pool.extend(itertools.islice(free, needed - len(pool)))
        if needed > len(pool):
            raise AllocationError(
                f"the live layer {self.path} has no free process record "
                f"({layout.LIVE_PROCESS_SLOTS} slots, all in use); nothing was written"
            )
        spare = iter(pool)
        written: set[int] = set()
        for slot, record in plan:
            target = slot if slot is not None else next(spare)
            written.add(target)
            self._write_slot(target, record)
        empty = bytes(layout.LIVE_PROCESS_RECORD_BYTES)
        for slot in old:
            if slot not in written:
                self._write_slot(slot, empty)

    # --- life cycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Unmap and close the file (idempotent)."""
        if self._buffer is not None:
            del self._buffer
            self._buffer = None
        if not self._map.closed:
            self._map.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> LiveFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
