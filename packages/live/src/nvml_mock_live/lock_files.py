"""The writers' lock files themselves, on plain path strings: where they are, and taking one.

:mod:`.writers_lock` says why the lock lives outside the overlay and gives the ``Path``
interface every writer uses; this module holds its rules (the directory, the file's name,
the checks before it is opened) without importing ``pathlib`` or ``contextlib``, so a command
that starts for one change (``nvml-mock-ctl xid``) takes the very same lock in a few
hundred microseconds.
"""

from __future__ import annotations

import fcntl
import os
import stat

from nvml_mock_protocol import names

from nvml_mock_live.errors import LiveLayerError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["HeldLock", "guarded_directory", "lock_directory", "lock_file", "open_lock"]


def lock_directory() -> str:
    """Where writers' lock files live (``NVML_MOCK_LOCK_DIR``, else the default)."""
    given = os.environ.get(names.ENV_LOCK_DIR, "").strip()
    if given:
        return given
    if os.geteuid() == 0:
        return names.DEFAULT_LOCK_DIR
    # As the mock library's MIG writers name it (native/src/mig.c, writers_lock): one rule.
    temporary = os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(temporary, f"nvml-mock-locks-{os.geteuid()}")


def guarded_directory(path: str | os.PathLike[str]) -> str:
    """The directory whose writers' lock guards the live file at *path*: the one that holds
    the file itself, links followed (the state root of a staged overlay)."""
    return os.path.dirname(os.path.realpath(path))


def lock_file(kind: str, guarded: str | os.PathLike[str]) -> str:
    """The lock file of *kind* (``live``, ``stage``) for the directory *guarded*."""
    try:
        info = os.stat(guarded)
    except OSError as exc:
        raise LiveLayerError(f"cannot find {guarded} to lock it: {exc.strerror}") from None
    return os.path.join(lock_directory(), f"{kind}-{info.st_dev:x}-{info.st_ino:x}.lock")


def _private_dir(directory: str) -> None:
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
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


def open_lock(path: str | os.PathLike[str]) -> int:
    """The lock file at *path* opened (made, mode 0600, in a private directory), not taken."""
    _private_dir(os.path.dirname(path))
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise LiveLayerError(f"cannot open the writers' lock {path}: {exc.strerror}") from None


class HeldLock:
    """``with HeldLock(fd):`` holds the lock file *fd* exclusively for the block (waiting for
    the writer that holds it now)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def __enter__(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
