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
invalid, or vanished, the last good document keeps serving and the failure is
recorded once per distinct file state (not once per poll).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from nvml_mock_protocol.topology import TopologyError, read_topology_file

from nvml_mock_topology.store import TopologyStore

__all__ = [
    "DirectoryNotifier",
    "FileSignature",
    "TopologyFile",
    "describe_os_error",
    "signature_of",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FileSignature:
    """What identifies one version of the file: where it resolves and its stat fields."""

    realpath: str
    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int


def signature_of(path: Path) -> FileSignature | None:
    """The file's signature, or None when it does not exist (or is a dangling link)."""
    try:
        stat = os.stat(path)
        real = os.path.realpath(path)
    except FileNotFoundError:
        return None
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


class TopologyFile:
    """Follows one topology file and publishes each valid new version to a store.

    ``loaded`` is the signature of the file as the store already serves it (taken
    before it was read, so a change during the read is seen by the first check),
    or None when nothing was loaded from it.
    """

    def __init__(
        self,
        path: Path,
        store: TopologyStore,
        *,
        loaded: FileSignature | None,
        poll_interval: float = 1.0,
    ) -> None:
        self.path = path
        self.store = store
        self.poll_interval = poll_interval
        self._seen = loaded
        self.reloads = 0
        """Successful reloads that changed the served document."""
        self.failures = 0
        """Reload attempts that were refused (each distinct bad file state counts once)."""

    async def check(self) -> bool:
        """Look at the file once and reload it if it changed; True when a change was published."""
        current = signature_of(self.path)
        if current == self._seen:
            return False
        self._seen = current
        if current is None:
            self._refuse(describe_os_error(self.path, FileNotFoundError()), missing=True)
            return False
        try:
            document = await asyncio.to_thread(read_topology_file, self.path)
        except TopologyError as exc:
            self._refuse(str(exc))
            return False
        except OSError as exc:
            self._refuse(describe_os_error(self.path, exc))
            return False
        # Answers are built off the loop too; lookups keep being served meanwhile.
        # The file may change again while this runs; the next check sees that.
        prepared = await asyncio.to_thread(self.store.prepare, document, str(self.path))
        changed = self.store.commit(prepared)
        if not changed:
            logger.info(
                "topology file changed but its document did not", extra={"path": str(self.path)}
            )
            return False
        self.reloads += 1
        return True

    def _refuse(self, message: str, *, missing: bool = False) -> None:
        self.failures += 1
        self.store.fail(message)
        logger.error(
            "topology reload refused; still serving revision %d: %s",
            self.store.snapshot.revision,
            message,
            extra={"path": str(self.path), "missing": missing},
        )

    async def run(self) -> None:
        """Follow the file until cancelled. Errors in one check are logged, never fatal."""
        loop = asyncio.get_running_loop()
        nudged = asyncio.Event()
        notifier = DirectoryNotifier.open(self.path.parent)
        if notifier is not None:

            def on_event() -> None:
                notifier.drain()
                nudged.set()

            loop.add_reader(notifier.fd, on_event)
        try:
            while True:
                try:
                    await asyncio.wait_for(nudged.wait(), self.poll_interval)
                    # A burst of events (a symlink swap is several) settles first.
                    await asyncio.sleep(_SETTLE_SECONDS)
                except TimeoutError:
                    pass
                nudged.clear()
                try:
                    await self.check()
                except Exception:  # a bug in one check must not stop reloads for good
                    logger.exception("unexpected error while checking the topology file")
        finally:
            if notifier is not None:
                loop.remove_reader(notifier.fd)
                notifier.close()


_SETTLE_SECONDS = 0.02
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
