"""The one writer of the live layer: the file's values, events, MIG resets and allocations.

The board layer (``config/state.nvmlmock``) is read once, at ``nvmlInit``. The live layer is
a fixed-layout binary file beside it (``config/live.nvmlmock``; layout generated from
``keys.toml`` into :mod:`._layout`, described in the engine's ``native/STATE-FORMAT.md``)
that the library maps shared and read-only, so a value written here reaches every process on
the node, and in every container through the overlay's read-only bind mount, on its next
call. Every writer (``nvml-mock-ctl``, the node agent, the work-alike's set commands, the NRI
plugin's allocation records) goes through :class:`LiveLayer`: it validates against the
bounds declared in ``keys.toml`` before anything is written, serialises writers with a
lock no reader of the file can take (:mod:`.writers_lock`: a file outside the overlay,
never the live file itself, which any container can open read-only), and writes with the
mock library's own sequence-lock primitives (:mod:`.library`, a versioned ABI), so readers
and writers share one implementation of the protocol, with real atomics on every CPU.

Typical use::

    with LiveLayer.open(overlay / "config" / LIVE_FILE_NAME) as live:
        live.set(0, {"temperature_c": 91, "clocks_event_reasons": 0x40})
        live.clear(0, ["temperature_c"])
        live.put(Allocation(container_id="4f…", pid=4242, gpus=(2,), used_memory_bytes=20 << 30))
"""

from __future__ import annotations

import builtins
import ctypes
import errno
import itertools
import logging
import mmap
import os
import stat
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

from nvml_mock_protocol import names

from nvml_mock_live import _layout as layout
from nvml_mock_live import library, lock_files
from nvml_mock_live.allocations import Allocation, pack, unpack
from nvml_mock_live.board import BoardGpu, read_board
from nvml_mock_live.errors import AllocationError, LiveLayerError, LiveValueError
from nvml_mock_live.files import write_atomic
from nvml_mock_live.header import (
    SIZE,
    header_bytes,
    header_problem,
    record_offset,
    record_uuid,
    torn_records,
)
from nvml_mock_live.keys import GPU_KEYS, LIVE_GPU_KEYS, check_integer
from nvml_mock_live.slots import MASK_WORDS, keys_in_mask, values_of
from nvml_mock_live.writers_lock import WritersLock, writers_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvml_mock_live.mig import MigDevice

__all__ = [
    "LIVE_FILE_NAME",
    "SIZE",
    "LiveEvent",
    "LiveLayer",
    "create",
    "damage",
    "ensure",
    "flock",
    "fresh_bytes",
    "header_bytes",
    "header_problem",
    "record_uuid",
    "repair_in_place",
]

LIVE_FILE_NAME: Final = names.LIVE_FILE_NAME
logger = logging.getLogger(__name__)
_U64: Final = (1 << 64) - 1
_EVENT_TYPES: Final = (1 << 32) - 1
"""The low half of a ring record's type word: the ``nvmlEventType*`` bits (the high half is an
armed event's tag)."""
_CLEAR, _SET, _ARMED = 0, 1, 2
"""The write primitive's operations per slot: unset it, set it, set it armed."""
_U32_AT: Final = struct.Struct("<I").unpack_from
_RETIRED_AT: Final = layout.LIVE_HEADER_FIELDS["retired"][1]
_ID_AT: Final = layout.LIVE_PROCESS_FIELDS["container_id"][1]
_ID_BYTES: Final = layout.LIVE_PROCESS_FIELDS["container_id"][2]
_FULL: Final = (
    "the live layer {path} has no free process record "
    f"({layout.LIVE_PROCESS_SLOTS} slots, all in use); nothing was written"
)


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
    arm: int | None = None
    """An armed event's tag (the GPU's ``fault_trigger_arm`` when it was sent): it reaches a
    process once the GPU's fault trigger fired there. None: delivered as it comes."""


def guarded_directory(path: Path) -> Path:
    """The directory whose writers' lock guards the live file at *path*: the one that holds
    the file itself, links followed (the state root of a staged overlay)."""
    return Path(lock_files.guarded_directory(path))


@contextmanager
def flock(path: Path) -> Iterator[None]:
    """Hold the writers' lock of the live file at *path* (see :mod:`.writers_lock`)."""
    with writers_of("live", guarded_directory(path)):
        yield


def heal_torn_records(mapped: mmap.mmap, gpu_count: int) -> builtins.list[int]:
    """Repair the GPU records a writer left mid-write (its sequence counter odd), which every
    reader then refuses; returns the GPUs repaired. Call it holding the writers' lock: no
    writer is active then, so an odd counter can only be a dead writer's.

    What the dead writer meant cannot be known, so the record's live values are cleared
    (readers fall back to the board's) before the counter is made even again, last.
    """
    healed = torn_records(mapped, gpu_count)
    for gpu in healed:
        at = record_offset(gpu)
        seq: int = struct.unpack_from("<Q", mapped, at + layout.LIVE_RECORD_SEQ)[0]
        start, end = at + layout.LIVE_RECORD_MASK, at + layout.LIVE_RECORD_BYTES
        mapped[start:end] = bytes(end - start)
        struct.pack_into("<Q", mapped, at + layout.LIVE_RECORD_SEQ, seq + 1)
    if healed:
        logger.warning(
            "GPU(s) %s: a writer died in the middle of writing their live values; they were "
            "reset to the board values",
            ", ".join(map(str, healed)),
        )
    return healed


def create(
    path: Path, board: Sequence[BoardGpu], *, library_path: Path | str | None = None
) -> Path:
    """Write a fresh live layer for *board* at *path*, every value unset.

    The file is written beside *path* and renamed over it, so a process never maps a
    half-written file; a file it replaces is retired first (its values cleared, its header
    marked, through the library at *library_path*, default :func:`library.default_library`),
    so processes that mapped it fall back to the board values at once instead of reading
    values that no longer apply.
    """
    data = fresh_bytes(board)
    write_atomic(path, data, before_replace=lambda: _retire(path, library_path))
    return path


def fresh_bytes(board: Sequence[BoardGpu]) -> bytes:
    """A whole fresh live file for *board*: the header, each record bound to its GPU's UUID,
    every value unset."""
    if len(board) > layout.LIVE_GPU_SLOTS:
        raise LiveLayerError(f"{len(board)} GPUs, the live layer holds {layout.LIVE_GPU_SLOTS}")
    data = header_bytes(len(board))
    for gpu in board:
        raw = gpu.uuid.encode()
        if len(raw) >= layout.LIVE_RECORD_UUID_BYTES:
            raise LiveLayerError(f"GPU {gpu.index}: UUID {gpu.uuid!r} is too long")
        start = record_offset(gpu.index) + layout.LIVE_RECORD_UUID
        data[start : start + len(raw)] = raw
    return bytes(data)


def damage(fd: int, mapped: mmap.mmap | None = None) -> str | None:
    """How the live file open as *fd* was damaged in place, or None: cut short (``truncate``,
    ``: >``, the first moment of ``cp``), or overwritten with what is not a live file (its
    magic gone). Another version's live file (right magic, other layout) is not damage: it
    is refused by the checks of :meth:`LiveLayer.open`. The size comes from ``fstat``, never
    from a mapping, which a file cut short answers with SIGBUS; once the size is whole, the
    magic is read from *mapped* when given (one system call per write instead of two)."""
    size = os.fstat(fd).st_size
    if size != SIZE:
        return f"was cut to {size} bytes (the layout needs {SIZE}: truncated in place)"
    magic = mapped[:16] if mapped is not None else os.pread(fd, 16, 0)
    if magic.rstrip(b"\0") != layout.LIVE_MAGIC:
        return "holds no live layer (its magic is gone: overwritten in place)"
    return None


def repair_in_place(fd: int, path: Path, board: Sequence[BoardGpu], problem: str) -> None:
    """Rewrite the damaged live file open as *fd* (read-write) in place, for *board*, every
    value unset; call it holding the writers' lock.

    In place, not by a rename: the file keeps its inode, so a process whose mapping was
    never touched while the file was short reads the repaired file at once, and one whose
    mapping the library's guard replaced maps it again by its path on its next call."""
    data = fresh_bytes(board)
    os.ftruncate(fd, SIZE)
    os.pwrite(fd, data, 0)
    os.fsync(fd)
    logger.warning(
        "the live layer %s %s; rewritten in place for its %d GPU(s) with every live value "
        "unset (NVML clients that mapped it pick it up on their next call)",
        path,
        problem,
        len(board),
    )


def ensure(
    path: Path, board: Sequence[BoardGpu], *, library_path: Path | str | None = None
) -> bool:
    """Keep the live layer at *path* when it fits *board* (same layout, same GPUs in the same
    order), so values survive a re-stage; otherwise :func:`create` a fresh one. Returns True
    when a new file was written."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(SIZE + 1)
    except FileNotFoundError:
        data = b""
    except OSError as exc:
        raise LiveLayerError(f"cannot read the live layer {path}: {exc.strerror}") from None
    fits = (
        header_problem(data) is None
        and struct.unpack_from("<I", data, layout.LIVE_HEADER_FIELDS["retired"][1])[0] == 0
        and struct.unpack_from("<I", data, layout.LIVE_HEADER_FIELDS["gpu_count"][1])[0]
        == len(board)
        and all(record_uuid(data, gpu.index) == gpu.uuid for gpu in board)
    )
    if fits:
        _heal_file(path, len(board))
        return False
    if data and (len(data) != SIZE or data[:16].rstrip(b"\0") != layout.LIVE_MAGIC):
        logger.warning(
            "the live layer %s %s; replaced with a fresh one (every live value unset)",
            path,
            f"was cut to {len(data)} bytes (truncated in place)"
            if len(data) < SIZE
            else "holds no live layer (overwritten in place)",
        )
    create(path, board, library_path=library_path)
    return True


def _heal_file(path: Path, gpu_count: int) -> None:
    """Repair, under the writers' lock, the records of a kept live file that a writer killed
    mid-write left (a re-stage recovers a wedged GPU)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise LiveLayerError(f"cannot repair the live layer {path}: {exc.strerror}") from None
    try:
        with flock(path), mmap.mmap(fd, SIZE, mmap.MAP_SHARED) as mapped:
            heal_torn_records(mapped, gpu_count)
    finally:
        os.close(fd)


def _library(path: Path | str | None) -> ctypes.CDLL:
    return library.load(library.default_library() if path is None else path)


def _retire(path: Path, library_path: Path | str | None) -> None:
    """Mark the live file at *path* (if it is one) replaced; see :func:`create`."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise LiveLayerError(f"cannot retire the live layer {path}: {exc.strerror}") from None
    try:
        if os.fstat(fd).st_size != SIZE:
            return
        with flock(path), mmap.mmap(fd, SIZE, mmap.MAP_SHARED) as mapped:
            if header_problem(mapped) is not None:
                return
            buffer = ctypes.c_char.from_buffer(mapped)
            try:
                _library(library_path).nvml_mock_live_retire(ctypes.addressof(buffer), SIZE)
            finally:
                del buffer
    finally:
        os.close(fd)


class _WriteSection:
    """One change under the writers' lock (a class, not a generator: a put is the NRI
    plugin's work at every container start, and each layer of context manager cost)."""

    __slots__ = ("_fd", "_layer", "_lock")

    def __init__(self, layer: LiveLayer, lock: WritersLock) -> None:
        self._layer = layer
        self._lock = lock
        self._fd = -1

    def __enter__(self) -> None:
        self._fd = self._lock.acquire()
        try:
            self._layer._prepare_write()
        except BaseException:
            self._lock.release(self._fd)
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.release(self._fd)


class LiveLayer:
    """An open live layer file, checked against this layout and its board: read its values,
    and (when opened writable) change them, raise events and record allocations.

    Open it with :meth:`open`; close it (or use it as a context manager) when done. Every
    change is validated completely before anything is written, and written in one
    sequence-locked step per GPU (per record, for allocations), so a reader sees all of a
    change or none of it.
    """

    def __init__(
        self,
        path: Path,
        *,
        fd: int,
        mapped: mmap.mmap,
        lib: ctypes.CDLL,
        board: Sequence[BoardGpu],
        writable: bool,
    ) -> None:
        self.path = path
        self.lib = lib
        """The mock library whose primitives this file is written with."""
        self.writable = writable
        self._fd = fd
        self._map = mapped
        self._buffer: ctypes.Array[ctypes.c_char] | None = None
        self._board = list(board)
        self._lock: WritersLock | None = None

    def _writers(self) -> _WriteSection:
        """The writers' lock, opened on first use and kept until :meth:`close`, held for one
        change (``with self._writers():``)."""
        if self._lock is None:
            self._lock = WritersLock.for_directory("live", guarded_directory(self.path))
        return _WriteSection(self, self._lock)

    def _prepare_write(self) -> None:
        """Under the writers' lock, before a change: repair the file if it was cut short or
        overwritten in place since it was opened (else the write would die of SIGBUS, and
        every reader would answer errors until a re-stage), then what a writer killed
        mid-write left (else that GPU refuses every later read and write)."""
        if self.writable:
            problem = damage(self._fd, self._map)
            if problem is not None:
                repair_in_place(self._fd, self.path, self._board, problem)
        heal_torn_records(self._map, self.gpu_count)

    @classmethod
    def open(
        cls,
        path: Path | str,
        *,
        state: Path | str | None = None,
        library: Path | str | None = None,
        writable: bool = True,
    ) -> LiveLayer:
        """Open the live file at *path*, checking it against the board *state* (default: the
        ``state.nvmlmock`` beside it), writing through the mock library at *library* (default:
        the installed provider's, :func:`nvml_mock_live.library.default_library`). Raises
        :class:`LiveLayerError` naming the file and why it cannot be used."""
        path = Path(path)
        state_path = Path(state) if state is not None else path.parent / names.STATE_FILE_NAME
        board = read_board(state_path)
        lib = _library(library)
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
            raise LiveLayerError(
                f"cannot open the live layer {path}: {exc.strerror}{hint}", errno=exc.errno
            ) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise LiveLayerError(f"the live layer {path} is not a regular file")
            problem = damage(fd)
            if problem is not None and writable:
                with flock(path):
                    problem = damage(fd)
                    if problem is not None:
                        repair_in_place(fd, path, board, problem)
            elif problem is not None:
                raise LiveLayerError(
                    f"the live layer {path} {problem}; a writer (nvml-mock-ctl, a re-stage) "
                    "repairs it"
                )
            # a private mapping of a read-only file still follows the file (no page of it is
            # ever written here) and gives the primitives an address to read through
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_COPY
            mapped = mmap.mmap(fd, SIZE, access=access)
        except BaseException:
            os.close(fd)
            raise
        live = cls(path, fd=fd, mapped=mapped, lib=lib, board=board, writable=writable)
        try:
            live._check()
        except BaseException:
            live.close()
            raise
        return live

    def _check(self) -> None:
        problem = header_problem(self._map)
        if problem is None and self._u32("retired"):
            problem = "it was retired (replaced by a re-stage); open the current one"
        if problem is None:
            for gpu in self._board:
                if record_uuid(self._map, gpu.index) != gpu.uuid:
                    problem = (
                        f"record {gpu.index} belongs to another GPU than the state's {gpu.uuid}"
                    )
                    break
        if problem is not None:
            raise LiveLayerError(f"the live layer {self.path} cannot be used: {problem}")

    # --- the file -------------------------------------------------------------------------

    def _u32(self, field: str) -> int:
        value: int = struct.unpack_from("<I", self._map, layout.LIVE_HEADER_FIELDS[field][1])[0]
        return value

    @property
    def retired(self) -> bool:
        """Whether a re-stage replaced this file since it was opened (reopen the current one).
        Asked per container by the NRI plugin, so it is one read of the mapped word."""
        retired: int = _U32_AT(self._map, _RETIRED_AT)[0]
        return retired != 0

    def address(self) -> int:
        """The mapping's address, for the library's primitives (a read-only mapping is a
        private copy-on-write one, so it has an address too; no page of it is written)."""
        if self._buffer is None:
            self._buffer = (ctypes.c_char * SIZE).from_buffer(self._map)
        return ctypes.addressof(self._buffer)

    def _writable(self) -> None:
        if not self.writable:
            raise LiveLayerError(f"the live layer {self.path} was opened read-only")

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
            "<Q", self._map, layout.LIVE_HEADER_FIELDS["generation"][1]
        )[0]
        return value

    # --- per-GPU values -------------------------------------------------------------------

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
                checked[key] = check_integer(spec, raw)
            except ValueError as exc:
                raise LiveValueError(key, raw, str(exc)) from None
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
        armed: bool = False,
    ) -> int:
        """Append an NVML event (``nvmlEventType*`` bit, e.g. Xid 0x8 with the Xid as *data*)
        for *gpu* to the event ring and wake every waiter on the node; returns its sequence
        number. Only event sets that registered before it receive it. *gpu_instance* and
        *compute_instance* (both or neither) put it on that MIG device of the GPU: waiters get
        its ids in ``gpuInstanceId`` / ``computeInstanceId``, and a container that was not
        given that MIG device does not get it. The instance must exist now.

        *armed*: the event waits for the GPU's fault trigger, as armed values do. Each process
        receives it once the trigger has fired there (after its own N calls, its own draw, or
        at the time), and none does once the GPU is reset or armed for another fault; the
        GPU's ``fault_trigger_arm`` must be set (the trigger's values are written first)."""
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
            or event_type > _EVENT_TYPES
        ):
            raise LiveValueError(
                "event_type", event_type, "must be one nvmlEventType* bit (bits 0..31)"
            )
        if not isinstance(data, int) or not 0 <= data <= _U64:
            raise LiveValueError("data", data, "must be an unsigned 64-bit integer")
        self._writable()
        none = 0xFFFFFFFF
        with self._writers():
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
            word = event_type
            if armed:
                arm = self.values(gpu).get("fault_trigger_arm", 0)
                if not arm:
                    raise LiveValueError(
                        "armed",
                        True,
                        f"GPU {gpu} has no fault trigger (fault_trigger_arm unset): write the "
                        "trigger's values before an armed event",
                    )
                word |= arm << 32
            seq = int(
                self.lib.nvml_mock_live_event_on(
                    self.address(), SIZE, gpu, ids[0], ids[1], word, data
                )
            )
        if seq == 0:
            raise LiveLayerError(f"GPU {gpu}: the library refused the event for {self.path}")
        return seq

    def clear(self, gpu: int, keys: Iterable[str] | None = None) -> None:
        """Unset *keys* on *gpu* (all live keys when None): the board values answer again."""
        self._gpu(gpu)
        chosen = list(LIVE_GPU_KEYS) if keys is None else list(keys)
        for key in chosen:
            if key not in LIVE_GPU_KEYS:
                raise LiveValueError(key, None, "is not a live key")
        self._write(gpu, [(LIVE_GPU_KEYS[k].live_slot or 0, 0, _CLEAR) for k in chosen])

    def reset_mig(self, gpu: int) -> None:
        """What a GPU reset does to *gpu*'s MIG record: the pending mode becomes current and
        every GPU and compute instance is gone (the library's own primitive, under the flock)."""
        self._gpu(gpu)
        self._writable()
        with self._writers():
            rc = self.lib.nvml_mock_live_mig_reset(self.address(), SIZE, gpu)
        if rc != 0:
            raise LiveLayerError(f"GPU {gpu}: the library refused the MIG reset of {self.path}")

    def values(self, gpu: int) -> dict[str, int]:
        """The live values set on *gpu* (keys that are not set are left out)."""
        self._gpu(gpu)
        rc, mask, slots = library.snapshot(self.lib, self.address(), gpu)
        if rc != 0 and self.writable:
            with self._writers():  # repairs a record a dead writer left, then read again
                pass
            rc, mask, slots = library.snapshot(self.lib, self.address(), gpu)
        if rc != 0:
            raise LiveLayerError(
                f"GPU {gpu}: no consistent read of {self.path}: a writer died in the middle of "
                f"writing it; any change (`nvml-mock-ctl reset -i {gpu}`) or a re-stage repairs "
                "it, resetting that GPU's live values"
            )
        return values_of(mask, slots)

    def armed(self, gpu: int) -> frozenset[str]:
        """The set keys of *gpu* that wait for its fault trigger (a display read: a write under
        way may show the mask before or after it)."""
        self._gpu(gpu)
        start = record_offset(gpu) + layout.LIVE_RECORD_ARMED
        return frozenset(keys_in_mask(struct.unpack_from(f"<{MASK_WORDS}Q", self._map, start)))

    def events(self, after: int = 0) -> builtins.list[LiveEvent]:
        """The events of the ring with a sequence number above *after*, oldest first (at most
        the ring's size; records a writer is overwriting are left out)."""
        head_at = layout.LIVE_HEADER_FIELDS["event_head"][1]
        head: int = struct.unpack_from("<Q", self._map, head_at)[0]
        first = max(after + 1, head - layout.LIVE_EVENT_SLOTS + 1, 1)
        found: builtins.list[LiveEvent] = []
        for seq in range(first, head + 1):
            slot = seq % layout.LIVE_EVENT_SLOTS
            at = layout.LIVE_EVENTS_OFFSET + slot * layout.LIVE_EVENT_RECORD_BYTES
            rec_seq, word, event_type, data = struct.unpack_from("<4Q", self._map, at)
            if rec_seq == seq:
                # the GPU word: board GPU, then GI + 1 and CI + 1 (0: the whole GPU)
                gi, ci = (word >> 32) & 0xFFFF, (word >> 48) & 0xFFFF
                mig = gi != 0 and ci != 0
                # the type word: the event bit, and an armed event's tag in the high half
                arm = event_type >> 32
                found.append(
                    LiveEvent(
                        seq,
                        word & 0xFFFFFFFF,
                        event_type & _EVENT_TYPES,
                        data,
                        gi - 1 if mig else None,
                        ci - 1 if mig else None,
                        arm or None,
                    )
                )
        return found

    def mig_devices(self, gpu: int) -> builtins.list[MigDevice]:
        """The MIG devices of *gpu* in its live MIG layout now (none with MIG off)."""
        from nvml_mock_live import mig  # mig reads through this class

        self._gpu(gpu)
        return mig.mig_devices(self, [self._board[gpu]])

    def _gpu(self, gpu: int) -> None:
        if not isinstance(gpu, int) or not 0 <= gpu < len(self._board):
            raise LiveValueError(
                "gpu", gpu, f"is not a GPU of this node (0..{len(self._board) - 1})"
            )

    def _write(self, gpu: int, changes: Sequence[tuple[int, int, int]]) -> None:
        self._writable()
        if not changes:
            return
        count = len(changes)
        slots = (ctypes.c_uint * count)(*(c[0] for c in changes))
        values = (ctypes.c_uint64 * count)(*(c[1] for c in changes))
        flags = (ctypes.c_ubyte * count)(*(c[2] for c in changes))
        with self._writers():
            rc = self.lib.nvml_mock_live_write(
                self.address(), SIZE, gpu, count, slots, values, flags
            )
        if rc != 0:
            raise LiveLayerError(f"GPU {gpu}: the library refused the write to {self.path}")

    # --- allocations ----------------------------------------------------------------------

    def _read_slot(self, slot: int, out: ctypes.Array[ctypes.c_char]) -> Allocation | None:
        """Record *slot*, or None when it is free or no consistent copy could be taken."""
        rc = self.lib.nvml_mock_live_proc_read(
            self.address(), SIZE, slot, ctypes.addressof(out), layout.LIVE_PROCESS_RECORD_BYTES
        )
        return unpack(out.raw) if rc == 1 else None

    def _slots(self, *, locked: bool = False) -> dict[int, Allocation]:
        """The records in use, by slot. A record whose sequence counter stays odd was left by a
        writer that died mid-write: it is not listed (NVML does not show it either), and
        under the writers' lock (*locked*: no writer can be active) it is not even waited for,
        so its slot counts as free and the next put rewrites it whole."""
        out = ctypes.create_string_buffer(layout.LIVE_PROCESS_RECORD_BYTES)
        high = min(self._u32("process_high"), layout.LIVE_PROCESS_SLOTS)
        found: dict[int, Allocation] = {}
        for slot in range(high):
            if locked and self._seq(slot) & 1:
                continue
            alloc = self._read_slot(slot, out)
            if alloc is not None:
                found[slot] = alloc
        return found

    def _slot_ids(self) -> dict[int, str]:
        """The container id of each record in use, by slot, read straight from the mapping:
        only under the writers' lock (no writer can be active, so no record is half-written
        but one whose writer died, whose odd counter leaves its slot free, as in
        :meth:`_slots`). What a write needs to place its records, without decoding every
        record: a put or removal costs a pass over the ids, not over whole records."""
        high = min(self._u32("process_high"), layout.LIVE_PROCESS_SLOTS)
        _, in_use_at, _ = layout.LIVE_PROCESS_FIELDS["in_use"]
        _, id_at, id_size = layout.LIVE_PROCESS_FIELDS["container_id"]
        data = self._map
        found: dict[int, str] = {}
        for slot in range(high):
            at = layout.LIVE_PROCESSES_OFFSET + slot * layout.LIVE_PROCESS_RECORD_BYTES
            if struct.unpack_from("<Q", data, at)[0] & 1:
                continue
            if struct.unpack_from("<I", data, at + in_use_at)[0] != 1:
                continue
            raw = data[at + id_at : at + id_at + id_size]
            found[slot] = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
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
            raise LiveLayerError(
                f"process record {slot}: the library refused the write to {self.path}"
            )

    def list(self) -> builtins.list[Allocation]:
        """Every allocation recorded, in slot order."""
        return list(self._slots().values())

    def put(self, alloc: Allocation) -> None:
        """Record *alloc*, replacing the record of the same container id if there is one.
        Raises :class:`AllocationError` for a bad field or when every slot is taken.

        One call of the library (:c:func:`nvml_mock_live_proc_put`) finds the container's
        slot, or the lowest free one, and writes it: a put is the NRI plugin's work at every
        container start, and the pass over the slots in Python was most of it."""
        self.put_record(pack(alloc, self.gpu_count))

    def put_record(self, record: bytes) -> None:
        """:meth:`put` of a record already packed (:func:`~nvml_mock_live.allocations.pack`,
        perhaps given its process by :func:`~nvml_mock_live.allocations.with_process`) for
        this layer's GPUs."""
        self._writable()
        with self._writers():
            slot: int = self.lib.nvml_mock_live_proc_put(self.address(), SIZE, record, len(record))
        if slot == -2:
            raise AllocationError(_FULL.format(path=self.path))
        if slot < 0:
            container_id = record[_ID_AT : _ID_AT + _ID_BYTES].split(b"\0", 1)[0]
            raise LiveLayerError(
                f"process record of {container_id.decode('utf-8', 'replace')!r}: "
                f"the library refused the write to {self.path}"
            )

    def replace(self, container_id: str, allocs: Sequence[Allocation]) -> None:
        """Replace what *container_id* holds by *allocs* (usually one; none removes it)."""
        self._writable()
        records = [(a.container_id, pack(a, self.gpu_count)) for a in allocs]
        with self._writers():
            slots = self._slot_ids()
            mine = [s for s, cid in slots.items() if cid == container_id]
            self._apply_records(slots, mine, records)

    def remove(self, container_id: str) -> bool:
        """Remove the record of *container_id*; True when there was one (one call of the
        library, :c:func:`nvml_mock_live_proc_remove`, as for :meth:`put`)."""
        self._writable()
        raw = container_id.encode("utf-8")
        if not raw or len(raw) >= _ID_BYTES or b"\0" in raw:
            return False  # no record can hold such an id (pack refuses it)
        with self._writers():
            removed: int = self.lib.nvml_mock_live_proc_remove(self.address(), SIZE, raw, len(raw))
        if removed < 0:
            raise LiveLayerError(f"removing {container_id!r}: the library refused it ({self.path})")
        return removed > 0

    def replace_all(self, allocs: Iterable[Allocation]) -> None:
        """Make the records exactly *allocs* (a runtime's full view, e.g. after a restart):
        records of containers not among them go, the others are rewritten in place."""
        self._writable()
        wanted = list(allocs)
        ids = [a.container_id for a in wanted]
        if len(set(ids)) != len(ids):
            raise AllocationError("replace_all: a container id appears twice")
        records = [(a.container_id, pack(a, self.gpu_count)) for a in wanted]
        with self._writers():
            slots = self._slot_ids()
            self._apply_records(slots, list(slots), records)

    def _apply_records(
        self,
        slots: dict[int, str],
        old: builtins.list[int],
        records: builtins.list[tuple[str, bytes]],
    ) -> None:
        """Write *records*: a container's own slot in *old* is rewritten in place, the others
        take the rest of *old*, then free slots; what is left of *old* is freed. Capacity is
        checked before anything is written."""
        by_id = {slots[s]: s for s in old}
        plan = [(by_id.pop(cid, None), record) for cid, record in records]
        needed = sum(1 for slot, _ in plan if slot is None)
        pool = sorted(by_id.values())
        if needed > len(pool):
            # the lowest free slots, only as many as needed: a walk of all 1024 slots on every
            # put was most of a life-cycle event's cost
            free = (s for s in range(layout.LIVE_PROCESS_SLOTS) if s not in slots)
            pool.extend(itertools.islice(free, needed - len(pool)))
        if needed > len(pool):
            raise AllocationError(_FULL.format(path=self.path))
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
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> LiveLayer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
