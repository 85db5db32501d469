"""The writers' mutual exclusion, kept where no reader of the shared files can reach it.

Writers of a node's overlay (staging, ``nvml-mock-ctl``, the node agent, the work-alike's
set commands, the NRI plugin's allocation records) must not interleave. They once took an
exclusive ``flock`` on the shared files themselves (the live file, ``.nvml-mock/lock``).
But a lock is taken on a file *description*, and a descriptor opened read-only is enough
for ``flock``: any container that sees the overlay through its read-only bind mount,
as any user, could hold the lock and stop every writer on the node (``nvml-mock-ctl``
hung, the NRI plugin blocked in ``StartContainer``, ``stage`` hung).

So the lock files live in a directory of their own outside the overlay,
``/run/nvml-mock`` (``NVML_MOCK_LOCK_DIR``; for a writer that is not root, its own
``$TMPDIR/nvml-mock-locks-<uid>``), mode 0700, which no container is given. A
file is named for what it guards by the guarded directory's device and inode numbers,
which are the same through every bind mount of it, so the node, the staging pod and the
plugin, each seeing the overlay at its own path, take the same lock.

The rules are in :mod:`.lock_files` (on path strings, light enough for a command that
starts for one change); this module is their ``Path`` interface.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nvml_mock_live import lock_files
from nvml_mock_live.errors import LiveLayerError

__all__ = ["WritersLock", "lock_dir", "lock_path"]


def lock_dir() -> Path:
    """Where writers' lock files live (``NVML_MOCK_LOCK_DIR``, else the default)."""
    return Path(lock_files.lock_directory())


def lock_path(kind: str, guarded: Path) -> Path:
    """The lock file of *kind* (``live``, ``stage``) for the directory *guarded*."""
    return Path(lock_files.lock_file(kind, guarded))


class WritersLock:
    """One lock file, opened once; :meth:`held` takes it exclusively for one change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = lock_files.open_lock(path)

    @classmethod
    def for_directory(cls, kind: str, guarded: Path) -> WritersLock:
        return cls(lock_path(kind, guarded))

    @contextmanager
    def held(self) -> Iterator[None]:
        fd = self.acquire()
        try:
            yield
        finally:
            self.release(fd)

    def acquire(self) -> int:
        """Take the lock (waiting for the writer that holds it); the fd to :meth:`release`."""
        fd = self._fd
        if fd < 0:
            raise LiveLayerError(f"the writers' lock {self.path} is closed")
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def release(self, fd: int) -> None:
        """Give the lock back (*fd* from :meth:`acquire`)."""
        fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@contextmanager
def writers_of(kind: str, guarded: Path) -> Iterator[None]:
    """Hold the writers' lock of *kind* for *guarded* for the duration of the block."""
    lock = WritersLock.for_directory(kind, guarded)
    try:
        with lock.held():
            yield
    finally:
        lock.close()
