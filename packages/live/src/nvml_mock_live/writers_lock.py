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
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nvml_mock_protocol import names

from nvml_mock_live.errors import LiveLayerError

__all__ = ["WritersLock", "lock_dir", "lock_path"]


def lock_dir() -> Path:
    """Where writers' lock files live (``NVML_MOCK_LOCK_DIR``, else the default)."""
    given = os.environ.get(names.ENV_LOCK_DIR, "").strip()
    if given:
        return Path(given)
    if os.geteuid() == 0:
        return Path(names.DEFAULT_LOCK_DIR)
    # As the mock library's MIG writers name it (native/src/mig.c, writers_lock): one rule.
    temporary = os.environ.get("TMPDIR") or "/tmp"
    return Path(temporary) / f"nvml-mock-locks-{os.geteuid()}"


def lock_path(kind: str, guarded: Path) -> Path:
    """The lock file of *kind* (``live``, ``stage``) for the directory *guarded*."""
    try:
        info = os.stat(guarded)
    except OSError as exc:
        raise LiveLayerError(f"cannot find {guarded} to lock it: {exc.strerror}") from None
    return lock_dir() / f"{kind}-{info.st_dev:x}-{info.st_ino:x}.lock"


def _private_dir(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(directory)
    except OSError as exc:
        raise LiveLayerError(
            f"cannot use the writers' lock directory {directory}: {exc.strerror} "
            f"(set {names.ENV_LOCK_DIR} to a directory only writers can reach)"
        ) from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise LiveLayerError(
            f"the writers' lock directory {directory} is not a directory of this user; "
            f"set {names.ENV_LOCK_DIR}"
        )
    if info.st_mode & 0o077:
        os.chmod(directory, 0o700)


class WritersLock:
    """One lock file, opened once; :meth:`held` takes it exclusively for one change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        _private_dir(path.parent)
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise LiveLayerError(f"cannot open the writers' lock {path}: {exc.strerror}") from None

    @classmethod
    def for_directory(cls, kind: str, guarded: Path) -> WritersLock:
        return cls(lock_path(kind, guarded))

    @contextmanager
    def held(self) -> Iterator[None]:
        if self._fd < 0:
            raise LiveLayerError(f"the writers' lock {self.path} is closed")
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

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
