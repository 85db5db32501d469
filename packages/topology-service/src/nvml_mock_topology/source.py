"""Following the topology file: a cheap poll of its identity, and whole-document reloads.

In Kubernetes the file is a ConfigMap key, mounted as ``topology.yaml ->
..data/topology.yaml`` with ``..data -> ..2026_11_30_04_31_00.123`` (a
timestamped directory). An update writes a new directory and swaps the
``..data`` symlink, so the file's path never changes but what it resolves to
does; inotify on the path sees nothing. Polling ``stat`` (following links) and
the resolved path once a second catches both a swap and an in-place edit, costs
two system calls, and needs no extra dependency.

On Linux an inotify watch on the file's directory (through libc, no extra
dependency) wakes the poll at once when an entry there is written, renamed,
created or removed, so a change is usually served within tens of milliseconds;
the poll stays as the backstop (other filesystems, links into other
directories, or no inotify at all).

A changed file is read and validated whole off the event loop. If it is
invalid, vanished, unreadable (a symlink loop, no permission), a special file
(a FIFO, a link to ``/dev/zero``: refused without reading), too large, or fails
in a way nobody foresaw, it is refused all the same: the last good document
keeps serving, and the failure is counted, reported by ``/readyz`` and logged
once per distinct file state (not once per poll).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, ParamSpec, TypeVar

from nvml_mock_protocol.topology import (
    DOCUMENT_MAX_BYTES,
    DOCUMENT_MAX_ITEMS,
    REPORT_MAX_BYTES,
    TopologyError,
    read_topology_file,
)

from nvml_mock_topology import allocator
from nvml_mock_topology.store import TopologyStore

__all__ = [
    "DirectoryNotifier",
    "FileSignature",
    "FollowedFile",
    "StatFailure",
    "TopologyFile",
    "describe_failure",
    "describe_os_error",
    "follow",
    "off_loop",
    "signature_of",
]

logger = logging.getLogger(__name__)


_P = ParamSpec("_P")
_R = TypeVar("_R")


async def off_loop(function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
    """Run ``function`` in a daemon thread of its own and await its result.

    A document is read, validated and turned into answers off the event loop. This is
    not ``asyncio.to_thread``: its pool's threads are joined when the interpreter exits,
    so a load still running at SIGTERM would hold the process past its grace time. A
    daemon thread is abandoned at exit; a load that was cancelled (the service stopping)
    finishes into nothing.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[_R] = loop.create_future()

    def settle(result: _R | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def work() -> None:
        try:
            result, error = function(*args, **kwargs), None
        except BaseException as exc:  # handed to the awaiting task, which decides
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # a closed loop: the service stopped meanwhile
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name=f"load-{function.__name__}", daemon=True).start()
    return await done


@dataclass(frozen=True, slots=True)
class FileSignature:
    """What identifies one version of the file: where it resolves and its stat fields."""

    realpath: str
    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int


@dataclass(frozen=True, slots=True)
class StatFailure:
    """A file state that cannot be looked at (a symlink loop, a directory without access).

    It stands in for a signature, so that the failure is reported once and again
    only when the reason changes.
    """

    realpath: str
    errno: int | None
    message: str


def signature_of(path: Path) -> FileSignature | StatFailure | None:
    """The file's signature, None when it does not exist (or is a dangling link), or why not."""
    try:
        stat = os.stat(path)
        real = os.path.realpath(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # ELOOP, EACCES, ENAMETOOLONG, an embedded NUL
        error = exc.errno if isinstance(exc, OSError) else None
        message = (
            describe_os_error(path, exc)
            if isinstance(exc, OSError)
            else f"topology file {path} cannot be looked at: {exc}"
        )
        return StatFailure(os.path.abspath(path), error, message)
    return FileSignature(
        real, stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns
    )


def describe_os_error(path: Path, exc: OSError) -> str:
    """One sentence saying why the file cannot be read."""
    if isinstance(exc, FileNotFoundError):
        return f"topology file {path} does not exist"
    if isinstance(exc, IsADirectoryError):
        return f"topology file {path} is a directory"
    if isinstance(exc, PermissionError):
        return f"topology file {path} is not readable: permission denied"
    return f"topology file {path} cannot be read: {exc.strerror or exc}"


def describe_failure(path: Path, exc: BaseException) -> str:
    """One bounded sentence for a failure nobody foresaw while loading the file."""
    text = str(exc)
    if len(text) > 300:
        text = text[:300] + "..."
    return f"topology file {path} could not be loaded: {type(exc).__name__}: {text}"


StoreT = TypeVar("StoreT")


class FollowedFile(Generic[StoreT]):
    """A file followed for a store: what the topology and the scenario followers share.

    ``loaded`` is the signature of the file as the store already serves it (taken
    before it was read, so a change during the read is seen by the first check),
    or None when nothing was loaded from it. A subclass says how one check goes
    (:meth:`check`) and how a failing check is logged (:meth:`_unexpected`).
    """

    def __init__(
        self,
        path: Path,
        store: StoreT,
        *,
        loaded: FileSignature | StatFailure | None,
        poll_interval: float = 1.0,
        max_bytes: int = DOCUMENT_MAX_BYTES,
        max_items: int = DOCUMENT_MAX_ITEMS,
    ) -> None:
        self.path = path
        self.store = store
        self.poll_interval = poll_interval
        self.max_bytes = max_bytes
        self.max_items = max_items
        self._seen = loaded
        self.reloads = 0
        """Successful reloads that changed the served document."""
        self.failures = 0
        """Reload attempts that were refused (each distinct bad file state counts once)."""
        self.loading_since: float | None = None
        """``time.monotonic()`` when the load now running began (None when none runs)."""

    @property
    def loading_seconds(self) -> float | None:
        """How long the load now running has taken so far (``/readyz`` says so)."""
        since = self.loading_since
        return None if since is None else time.monotonic() - since

    async def _load(self, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Run one step of a load off the loop, timed for ``/readyz``."""
        self.loading_since = time.monotonic()
        try:
            return await off_loop(function, *args, **kwargs)
        finally:
            self.loading_since = None

    async def check(self) -> bool:
        """Look at the file once and publish what changed; True when a change was published."""
        raise NotImplementedError

    def _unexpected(self, exc: Exception) -> None:
        """Log a failure of the follower itself (called while ``exc`` is being handled)."""
        raise NotImplementedError

    async def _check_once(self) -> None:
        await self.check()

    async def run(self) -> None:
        """Follow the file until cancelled. Errors in one check are logged, never fatal."""
        await follow(self.path, self.poll_interval, self._check_once, self._unexpected)


class TopologyFile(FollowedFile[TopologyStore]):
    """Follows one topology file and publishes each valid new version to a store."""

    _last_unexpected: str | None = None
    """The last failure of the follower itself, logged with its traceback once."""

    async def check(self) -> bool:
        """Look at the file once and reload it if it changed; True when a change was published."""
        current = signature_of(self.path)
        if current == self._seen:
            return False
        self._seen = current
        if current is None:
            self._refuse(describe_os_error(self.path, FileNotFoundError()), missing=True)
            return False
        if isinstance(current, StatFailure):
            self._refuse(current.message)
            return False
        try:
            document = await self._load(
                read_topology_file, self.path, max_bytes=self.max_bytes, max_items=self.max_items
            )
            # Answers are built off the loop too; lookups keep being served meanwhile.
            # The file may change again while this runs; the next check sees that.
            prepared = await self._load(self.store.prepare, document, str(self.path))
        except TopologyError as exc:
            self._refuse(str(exc))
            return False
        except OSError as exc:
            self._refuse(describe_os_error(self.path, exc))
            return False
        except Exception as exc:
            logger.debug("loading the topology file failed", exc_info=True)
            self._refuse(describe_failure(self.path, exc))
            return False
        changed = self.store.commit(prepared)
        del prepared  # the snapshot served before goes with it: give its memory back
        allocator.give_back()
        if not changed:
            logger.info(
                "topology file changed but its document did not", extra={"path": str(self.path)}
            )
            return False
        self.reloads += 1
        return True

    def _refuse(self, message: str, *, missing: bool = False) -> None:
        if len(message) > _MESSAGE_MAX:  # the loader's reports are bounded; this is the backstop
            message = message[:_MESSAGE_MAX] + "... (cut)"
        self.failures += 1
        self.store.fail(message)
        logger.error(
            "topology reload refused; still serving revision %d: %s",
            self.store.snapshot.revision,
            message,
            extra={"path": str(self.path), "missing": missing},
        )

    async def _check_once(self) -> None:
        await self.check()
        self._last_unexpected = None

    def _unexpected(self, exc: Exception) -> None:
        """Log a failure of the follower itself, with its traceback once per distinct error."""
        text = f"{type(exc).__name__}: {exc}"[:_MESSAGE_MAX]
        if text == self._last_unexpected:
            logger.debug("unexpected error while checking the topology file again: %s", text)
            return
        self._last_unexpected = text
        logger.exception("unexpected error while checking the topology file")


async def follow(
    path: Path,
    poll_interval: float,
    check: Callable[[], Awaitable[object]],
    unexpected: Callable[[Exception], None],
) -> None:
    """Run ``check`` when ``path``'s directory changes, and every ``poll_interval`` anyway.

    Runs until cancelled. A failing check is handed to ``unexpected`` and the following
    goes on: a bug in one check must not stop reloads for good. The topology file and
    the scenario file are followed by this one loop.
    """
    loop = asyncio.get_running_loop()
    nudged = False
    waiter: asyncio.Future[None] | None = None

    def nudge() -> None:
        nonlocal nudged
        nudged = True
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    notifier = DirectoryNotifier.open(path.parent)
    if notifier is not None:

        def on_event() -> None:
            notifier.drain()
            nudge()

        loop.add_reader(notifier.fd, on_event)
    try:
        while True:
            # A plain future and a timer, not ``asyncio.wait_for(event.wait(), ...)``: on
            # Python 3.11 wait_for drops a cancellation that lands as the wait completes,
            # and the follower then outlived the service's shutdown.
            if not nudged:
                waiter = loop.create_future()
                timer = loop.call_later(poll_interval, _resolve, waiter)
                try:
                    await waiter
                finally:
                    timer.cancel()
                    waiter = None
            if nudged:
                # A burst of events (a symlink swap is several) settles first.
                await asyncio.sleep(_SETTLE_SECONDS)
            nudged = False
            try:
                await check()
            except Exception as exc:
                unexpected(exc)
    finally:
        if notifier is not None:
            loop.remove_reader(notifier.fd)
            notifier.close()


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


_SETTLE_SECONDS = 0.02
_MESSAGE_MAX = REPORT_MAX_BYTES + 1024
# inotify(7) event bits: an entry written and closed, its metadata changed, moved in
# or out, created, deleted; and the watched directory itself going away.
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_MASK = (
    _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
)


class DirectoryNotifier:
    """An inotify watch on one directory; readable when something in it changed (Linux)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def open(cls, directory: Path) -> DirectoryNotifier | None:
        """Watch ``directory``, or return None where inotify is not available."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return None
            if libc.inotify_add_watch(fd, os.fsencode(directory), _IN_MASK) < 0:
                os.close(fd)
                return None
        except (OSError, AttributeError):
            return None
        return cls(fd)

    def drain(self) -> None:
        """Read and discard pending events: what changed is learnt from ``stat``."""
        try:
            while os.read(self.fd, 65536):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def close(self) -> None:
        os.close(self.fd)
