"""The one writer of the live layer: GPU values that change while processes run.

The board layer (``config/state.nvmlmock``) is read once, at ``nvmlInit``. The live layer
is a fixed-layout binary file beside it (``config/live.nvmlmock``, layout in
``native/STATE-FORMAT.md``) that the library maps shared and read-only, so a value written
here reaches every process on the node, and in every container through the overlay's
read-only bind mount, on its next call. Every command that changes a GPU at run time goes
through :class:`LiveLayer`: it validates against the bounds declared in ``keys.toml``
before anything is written, serialises writers with an exclusive ``flock``, and writes
with the library's own sequence-lock primitives (called through ctypes), so readers and
the writer share one implementation of the protocol, with real atomics on every CPU. The
file handling itself (open, map, check, lock, the ctypes binding) is the protocol package's
writer core (:mod:`nvml_mock_protocol.live`), which the NRI plugin uses for allocations;
:attr:`LiveLayer.allocations` gives the same API here.

Typical use::

    with LiveLayer.open(overlay / "config" / LIVE_FILE_NAME) as live:
        live.set(0, {"temperature_c": 91, "clocks_event_reasons": 0x40})
        live.clear(0, ["temperature_c"])
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

from nvml_mock_protocol import _live_layout, live_mig, names
from nvml_mock_protocol import live as core
from nvml_mock_protocol.live_mig import MigDevice

from nvml_mock_engine._files import gpu_sections, write_atomic
from nvml_mock_engine.errors import LiveLayerError, LiveValueError
from nvml_mock_engine.schema import GPU_KEYS, LIVE_GPU_KEYS, Kind, validate_value

__all__ = [
    "LIVE_FILE_NAME",
    "BoardGpu",
    "LiveEvent",
    "LiveLayer",
    "create",
    "ensure",
    "read_board",
]

LIVE_FILE_NAME: Final = names.LIVE_FILE_NAME
_SIZE: Final = _live_layout.LIVE_TOTAL_BYTES
_MASK_WORDS: Final = (_live_layout.LIVE_KEY_SLOTS + 63) // 64
_U64: Final = (1 << 64) - 1
_FIELD_FORMATS: Final = {"uint32_t": "<I", "uint64_t": "<Q"}
_CLEAR, _SET, _ARMED = 0, 1, 2
"""The write primitive's operations per slot: unset it, set it, set it armed."""


@dataclass(frozen=True, slots=True)
class BoardGpu:
    """What the writer needs of one board GPU: its UUID and the totals live values must fit."""

    index: int
    uuid: str
    values: Mapping[str, str]

    def number(self, key: str) -> int:
        """A board value as an integer (0 when the key is absent)."""
        text = self.values.get(key, "0")
        return int(text, 0) if text else 0


@dataclass(frozen=True, slots=True)
class LiveEvent:
    """One record of the event ring: its sequence number, GPU, ``nvmlEventType*`` bit and data
    (the Xid for ``nvmlEventTypeXidCriticalError``), and the MIG device it is on (GPU and
    compute instance ids; None for the whole GPU)."""

    seq: int
    gpu: int
    event_type: int
    data: int
    gpu_instance: int | None = None
    compute_instance: int | None = None


def read_board(state_path: Path) -> list[BoardGpu]:
    """The GPUs of a rendered state file (the library's parser is the strict one; this reads
    the files :mod:`nvml_mock_engine.render` writes)."""
    try:
        text = state_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LiveLayerError(f"cannot read the board state {state_path}: {exc}") from None
    gpus = gpu_sections(text)
    board = [BoardGpu(i, values.get("uuid", ""), values) for i, values in enumerate(gpus)]
    if len(board) > _live_layout.LIVE_GPU_SLOTS or any(not gpu.uuid for gpu in board):
        raise LiveLayerError(f"{state_path}: not a board state the live layer can follow")
    return board


def _header_bytes(gpu_count: int) -> bytearray:
    return core.header_bytes(gpu_count)


def _record_offset(gpu: int) -> int:
    return _live_layout.LIVE_RECORDS_OFFSET + gpu * _live_layout.LIVE_RECORD_BYTES


def _header_problem(data: bytes | mmap.mmap) -> str | None:
    """Why *data* is not a live file of this layout (None when it is)."""
    return core.header_problem(data)


def _record_uuid(data: bytes | mmap.mmap, gpu: int) -> str:
    return core.record_uuid(data, gpu)


def create(path: Path, board: Sequence[BoardGpu]) -> Path:
    """Write a fresh live layer for *board* at *path*, every value unset.

    The file is written beside *path* and renamed over it, so a process never maps a
    half-written file; a file it replaces is retired first (its values cleared, its header
    marked), so processes that mapped it fall back to the board values at once instead of
    reading values that no longer apply.
    """
    if len(board) > _live_layout.LIVE_GPU_SLOTS:
        raise LiveLayerError(
            f"{len(board)} GPUs, the live layer holds {_live_layout.LIVE_GPU_SLOTS}"
        )
    data = _header_bytes(len(board))
    for gpu in board:
        raw = gpu.uuid.encode()
        if len(raw) >= _live_layout.LIVE_RECORD_UUID_BYTES:
            raise LiveLayerError(f"GPU {gpu.index}: UUID {gpu.uuid!r} is too long")
        start = _record_offset(gpu.index) + _live_layout.LIVE_RECORD_UUID
        data[start : start + len(raw)] = raw
    write_atomic(path, bytes(data), before_replace=lambda: _retire(path))
    return path


def ensure(path: Path, board: Sequence[BoardGpu]) -> bool:
    """Keep the live layer at *path* when it fits *board* (same layout, same GPUs in the same
    order), so values survive a re-stage; otherwise :func:`create` a fresh one. Returns True
    when a new file was written."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(_SIZE + 1)
    except FileNotFoundError:
        data = b""
    except OSError as exc:
        raise LiveLayerError(f"cannot read the live layer {path}: {exc.strerror}") from None
    fits = (
        _header_problem(data) is None
        and struct.unpack_from("<I", data, _live_layout.LIVE_HEADER_FIELDS["retired"][1])[0] == 0
        and struct.unpack_from("<I", data, _live_layout.LIVE_HEADER_FIELDS["gpu_count"][1])[0]
        == len(board)
        and all(_record_uuid(data, gpu.index) == gpu.uuid for gpu in board)
    )
    if fits:
        return False
    create(path, board)
    return True


def _retire(path: Path) -> None:
    """Mark the live file at *path* (if it is one) replaced; see :func:`create`."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise LiveLayerError(f"cannot retire the live layer {path}: {exc.strerror}") from None
    try:
        if os.fstat(fd).st_size != _SIZE:
            return
        with _flock(fd), mmap.mmap(fd, _SIZE, mmap.MAP_SHARED) as mapped:
            if _header_problem(mapped) is not None:
                return
            buffer = ctypes.c_char.from_buffer(mapped)
            try:
                _library().nvml_mock_live_retire(ctypes.addressof(buffer), _SIZE)
            finally:
                del buffer
    finally:
        os.close(fd)


_flock = core.flock


@functools.cache
def _library() -> ctypes.CDLL:
    """The mock library, for its live-layer primitives (loaded once; no ``nvmlInit``)."""
    from nvml_mock_engine.library import library_path

    try:
        return core.load_library(library_path())
    except core.LiveFileError as exc:
        raise LiveLayerError(str(exc)) from None


def _library_path() -> Path:
    from nvml_mock_engine.library import library_path

    return Path(library_path())


class LiveLayer:
    """An open live layer file: read its values, and (when opened writable) change them.

    Open it with :meth:`open`; close it (or use it as a context manager) when done. Every
    change is validated completely before anything is written, and written in one
    sequence-locked step per GPU, so a reader sees all of a change or none of it.
    """

    def __init__(
        self, path: Path, opened: core.LiveFile, board: Sequence[BoardGpu], writable: bool
    ) -> None:
        self.path = path
        self._file = opened
        """The protocol's open file: it owns the descriptor and the mapping."""
        self._fd = opened.fd
        self._map = opened.mapping
        self._buffer: ctypes.Array[ctypes.c_char] | None = None
        self._board = list(board)
        self.writable = writable

    @classmethod
    def open(
        cls, path: Path | str, *, state: Path | str | None = None, writable: bool = True
    ) -> LiveLayer:
        """Open the live file at *path*, checking it against the board *state* (default: the
        ``state.nvmlmock`` beside it). Raises :class:`LiveLayerError` naming the file and why."""
        path = Path(path)
        state_path = Path(state) if state is not None else path.parent / names.STATE_FILE_NAME
        board = read_board(state_path)
        try:
            opened = core.LiveFile.open(path, library=_library_path(), writable=writable)
        except core.LiveFileError as exc:
            raise LiveLayerError(str(exc)) from None
        layer = cls(path, opened, board, writable)
        try:
            layer._check()
        except BaseException:
            layer.close()
            raise
        return layer

    def _check(self) -> None:
        problem = _header_problem(self._map)
        if problem is None and self._u32("retired"):
            problem = "it was retired (replaced by a re-stage); open the current one"
        if problem is None:
            for gpu in self._board:
                if _record_uuid(self._map, gpu.index) != gpu.uuid:
                    problem = (
                        f"record {gpu.index} belongs to another GPU than the state's {gpu.uuid}"
                    )
                    break
        if problem is not None:
            raise LiveLayerError(f"the live layer {self.path} cannot be used: {problem}")

    def _u32(self, field: str) -> int:
        offset = _live_layout.LIVE_HEADER_FIELDS[field][1]
        value: int = struct.unpack_from("<I", self._map, offset)[0]
        return value

    def _address(self) -> int:
        if self._buffer is None:
            if self.writable:
                self._buffer = (ctypes.c_char * _SIZE).from_buffer(self._map)
            else:
                # a read-only mapping cannot export a writable buffer: copy-free access through
                # its address is not offered by mmap, so snapshots read a private copy instead
                raise LiveLayerError("internal: no address for a read-only mapping")
        return ctypes.addressof(self._buffer)

    @property
    def allocations(self) -> core.LiveFile:
        """The file's allocation records (put, remove, replace_all, list)."""
        return self._file

    @property
    def gpu_count(self) -> int:
        """GPUs of the board this layer follows."""
        return len(self._board)

    @property
    def board(self) -> Sequence[BoardGpu]:
        """The board GPUs, in index order."""
        return tuple(self._board)

    @property
    def generation(self) -> int:
        """Writes to this file so far (any GPU); a change means something changed."""
        value: int = struct.unpack_from(
            "<Q", self._map, _live_layout.LIVE_HEADER_FIELDS["generation"][1]
        )[0]
        return value

    def validate(self, gpu: int, values: Mapping[str, object]) -> dict[str, int]:
        """Check *values* for *gpu* against the declared bounds and the board; returns them as
        integers. Raises :class:`LiveValueError` naming the first bad key and value."""
        self._gpu(gpu)
        board = self._board[gpu]
        checked: dict[str, int] = {}
        for key, raw in values.items():
            spec = LIVE_GPU_KEYS.get(key)
            if spec is None:
                why = "a board-only key" if key in GPU_KEYS else "not a key of the device model"
                raise LiveValueError(
                    key, raw, f"is {why}; live keys: {', '.join(sorted(LIVE_GPU_KEYS))}"
                )
            try:
                value = validate_value(spec, raw)
            except ValueError as exc:
                raise LiveValueError(key, raw, str(exc)) from None
            assert isinstance(value, int)
            checked[key] = int(value)
        limits = {
            "memory_used_bytes": board.number("memory_total_bytes")
            - board.number("memory_reserved_bytes"),
            "bar1_used_bytes": board.number("bar1_total_bytes"),
        }
        for key, limit in limits.items():
            if key in checked and checked[key] > limit:
                raise LiveValueError(
                    key, checked[key], f"must not exceed {limit} on GPU {gpu} (the board's room)"
                )
        return checked

    def set(self, gpu: int, values: Mapping[str, object], *, armed: bool = False) -> None:
        """Set live *values* on *gpu* (validated first: a bad value writes nothing).

        *armed* values apply only once the GPU's fault trigger fires (the ``fault_trigger*``
        keys); unarmed ones apply on the next call."""
        checked = self.validate(gpu, values)
        op = _ARMED if armed else _SET
        self._write(
            gpu, [(LIVE_GPU_KEYS[k].live_slot or 0, v & _U64, op) for k, v in checked.items()]
        )

    def event(
        self,
        gpu: int,
        event_type: int,
        data: int = 0,
        *,
        gpu_instance: int | None = None,
        compute_instance: int | None = None,
    ) -> int:
        """Append an NVML event (``nvmlEventType*`` bit, e.g. Xid 0x8 with the Xid as *data*)
        for *gpu* to the event ring and wake every waiter on the node; returns its sequence
        number. Only event sets that registered before it receive it. *gpu_instance* and
        *compute_instance* (both or neither) put it on that MIG device of the GPU: waiters get
        its ids in ``gpuInstanceId`` / ``computeInstanceId``, and a container that was not
        given that MIG device does not get it. The instance must exist now."""
        self._gpu(gpu)
        if (gpu_instance is None) != (compute_instance is None):
            raise LiveValueError(
                "compute_instance" if compute_instance is None else "gpu_instance",
                None,
                "must be given with the other instance id (a MIG device is both)",
            )
        if (
            not isinstance(event_type, int)
            or event_type <= 0
            or event_type & (event_type - 1)
            or event_type > _U64
        ):
            raise LiveValueError("event_type", event_type, "must be one nvmlEventType* bit")
        if not isinstance(data, int) or not 0 <= data <= _U64:
            raise LiveValueError("data", data, "must be an unsigned 64-bit integer")
        if not self.writable:
            raise LiveLayerError(f"the live layer {self.path} was opened read-only")
        none = 0xFFFFFFFF
        with _flock(self._fd):
            if gpu_instance is not None and compute_instance is not None:
                ids = (gpu_instance, compute_instance)
                have = {(d.gpu_instance, d.compute_instance) for d in self.mig_devices(gpu)}
                if ids not in have:
                    listed = ", ".join(f"{g}/{c}" for g, c in sorted(have)) or "none"
                    raise LiveValueError(
                        "gpu_instance/compute_instance",
                        f"{ids[0]}/{ids[1]}",
                        f"is not a MIG device of GPU {gpu} now (GI/CI there: {listed})",
                    )
            else:
                ids = (none, none)
            seq = int(
                _library().nvml_mock_live_event_on(
                    self._address(), _SIZE, gpu, ids[0], ids[1], event_type, data
                )
            )
        if seq == 0:
            raise LiveLayerError(f"GPU {gpu}: the library refused the event for {self.path}")
        return seq

    def clear(self, gpu: int, keys: Iterable[str] | None = None) -> None:
        """Unset *keys* on *gpu* (all live keys when None): the board values answer again."""
        self._gpu(gpu)
        names = list(LIVE_GPU_KEYS) if keys is None else list(keys)
        for key in names:
            if key not in LIVE_GPU_KEYS:
                raise LiveValueError(key, None, "is not a live key")
        self._write(gpu, [(LIVE_GPU_KEYS[k].live_slot or 0, 0, _CLEAR) for k in names])

    def reset_mig(self, gpu: int) -> None:
        """What a GPU reset does to *gpu*'s MIG record: the pending mode becomes current and
        every GPU and compute instance is gone (the library's own primitive, under the flock)."""
        self._gpu(gpu)
        if not self.writable:
            raise LiveLayerError(f"the live layer {self.path} was opened read-only")
        with _flock(self._fd):
            rc = _library().nvml_mock_live_mig_reset(self._address(), _SIZE, gpu)
        if rc != 0:
            raise LiveLayerError(f"GPU {gpu}: the library refused the MIG reset of {self.path}")

    def values(self, gpu: int) -> dict[str, int]:
        """The live values set on *gpu* (keys that are not set are left out)."""
        self._gpu(gpu)
        mask = (ctypes.c_uint64 * _MASK_WORDS)()
        slots = (ctypes.c_uint64 * _live_layout.LIVE_KEY_SLOTS)()
        writes = ctypes.c_uint64()
        if self.writable:
            rc = _library().nvml_mock_live_snapshot(
                self._address(), _SIZE, gpu, mask, slots, ctypes.byref(writes)
            )
        else:
            copy = (ctypes.c_char * _SIZE).from_buffer_copy(self._map)
            rc = _library().nvml_mock_live_snapshot(
                ctypes.addressof(copy), _SIZE, gpu, mask, slots, ctypes.byref(writes)
            )
        if rc != 0:
            raise LiveLayerError(
                f"GPU {gpu}: no consistent read of {self.path} (a writer died mid-write?)"
            )
        result: dict[str, int] = {}
        for key, spec in LIVE_GPU_KEYS.items():
            slot = spec.live_slot or 0
            if mask[slot // 64] >> (slot % 64) & 1:
                raw = int(slots[slot])
                result[key] = raw - (1 << 64) if spec.kind is Kind.INT32 and raw >= 1 << 63 else raw
        return result

    def armed(self, gpu: int) -> frozenset[str]:
        """The set keys of *gpu* that wait for its fault trigger (a display read: a write under
        way may show the mask before or after it)."""
        self._gpu(gpu)
        start = _record_offset(gpu) + _live_layout.LIVE_RECORD_ARMED
        words = struct.unpack_from(f"<{_MASK_WORDS}Q", self._map, start)
        return frozenset(
            key
            for key, spec in LIVE_GPU_KEYS.items()
            if words[(spec.live_slot or 0) // 64] >> ((spec.live_slot or 0) % 64) & 1
        )

    def events(self, after: int = 0) -> list[LiveEvent]:
        """The events of the ring with a sequence number above *after*, oldest first (at most
        the ring's size; records a writer is overwriting are left out)."""
        head_at = _live_layout.LIVE_HEADER_FIELDS["event_head"][1]
        head: int = struct.unpack_from("<Q", self._map, head_at)[0]
        first = max(after + 1, head - _live_layout.LIVE_EVENT_SLOTS + 1, 1)
        found: list[LiveEvent] = []
        for seq in range(first, head + 1):
            slot = seq % _live_layout.LIVE_EVENT_SLOTS
            at = _live_layout.LIVE_EVENTS_OFFSET + slot * _live_layout.LIVE_EVENT_RECORD_BYTES
            rec_seq, word, event_type, data = struct.unpack_from("<4Q", self._map, at)
            if rec_seq == seq:
                # the GPU word: board GPU, then GI + 1 and CI + 1 (0: the whole GPU)
                gi, ci = (word >> 32) & 0xFFFF, (word >> 48) & 0xFFFF
                mig = gi != 0 and ci != 0
                found.append(
                    LiveEvent(
                        seq,
                        word & 0xFFFFFFFF,
                        event_type,
                        data,
                        gi - 1 if mig else None,
                        ci - 1 if mig else None,
                    )
                )
        return found

    def mig_devices(self, gpu: int) -> list[MigDevice]:
        """The MIG devices of *gpu* in its live MIG layout now (none with MIG off)."""
        self._gpu(gpu)
        board = self._board[gpu]
        summary = core.BoardSummary(board.index, board.uuid, board.values.get("pci_bus_id", ""), 0)
        return live_mig.mig_devices(self._file, [summary])

    def _gpu(self, gpu: int) -> None:
        if not isinstance(gpu, int) or not 0 <= gpu < len(self._board):
            raise LiveValueError(
                "gpu", gpu, f"is not a GPU of this node (0..{len(self._board) - 1})"
            )

    def _write(self, gpu: int, changes: Sequence[tuple[int, int, int]]) -> None:
        if not self.writable:
            raise LiveLayerError(f"the live layer {self.path} was opened read-only")
        if not changes:
            return
        count = len(changes)
        slots = (ctypes.c_uint * count)(*(c[0] for c in changes))
        values = (ctypes.c_uint64 * count)(*(c[1] for c in changes))
        flags = (ctypes.c_ubyte * count)(*(c[2] for c in changes))
        with _flock(self._fd):
            rc = _library().nvml_mock_live_write(
                self._address(), _SIZE, gpu, count, slots, values, flags
            )
        if rc != 0:
            raise LiveLayerError(f"GPU {gpu}: the library refused the write to {self.path}")

    def close(self) -> None:
        """Unmap and close the file (idempotent)."""
        if self._buffer is not None:
            del self._buffer
            self._buffer = None
        self._file.close()
        self._fd = -1

    def __enter__(self) -> LiveLayer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
