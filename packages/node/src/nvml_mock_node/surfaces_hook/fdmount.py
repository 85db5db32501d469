"""Mounting by file descriptor: the system calls the surfaces hook needs so that no path of the
container's is ever resolved twice.

A path inside a container's root is the container's to change while the hook runs: a sibling
sharing a volume can swap a directory for a symlink to ``/etc`` between any check by path and
any mount by path (``renameat2(RENAME_EXCHANGE)``). So every path of the container's is
opened once, component by component below the container's root and refusing symlinks
(:func:`resolve`: ``openat2`` with ``RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS |
RESOLVE_NO_MAGICLINKS``, else a walk with ``O_PATH | O_NOFOLLOW``), and from then on only
the descriptor is used: a mount source is cloned from it (``open_tree``), a mount is attached
onto it (``move_mount``), and what shows there afterwards is compared with what was checked
(device and inode). Read-only is set on a whole tree before it is attached
(``mount_setattr`` with ``AT_RECURSIVE``), so no mount below a read-only one is ever writable,
not even for a moment.

These calls exist since Linux 5.12 (``mount_setattr``; the others are older).
:func:`available` says whether this kernel has them; without them the hook mounts nothing.
The numbers are the same on every architecture (the generic table from 424 on).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

__all__ = [
    "ATTR_RDONLY_ALL",
    "FdMountError",
    "attach",
    "available",
    "clone_tree",
    "fd_path",
    "new_tmpfs",
    "opened",
    "resolve",
    "same_object",
    "set_read_only",
]

_SYS_OPEN_TREE: Final = 428
_SYS_MOVE_MOUNT: Final = 429
_SYS_FSOPEN: Final = 430
_SYS_FSCONFIG: Final = 431
_SYS_FSMOUNT: Final = 432
_SYS_OPENAT2: Final = 437
_SYS_MOUNT_SETATTR: Final = 442

_AT_EMPTY_PATH: Final = 0x1000
_AT_RECURSIVE: Final = 0x8000
_OPEN_TREE_CLONE: Final = 1
_MOVE_MOUNT_F_EMPTY_PATH: Final = 0x04
_MOVE_MOUNT_T_EMPTY_PATH: Final = 0x40
_FSOPEN_CLOEXEC: Final = 1
_FSCONFIG_SET_STRING: Final = 1
_FSCONFIG_CMD_CREATE: Final = 6
_FSMOUNT_CLOEXEC: Final = 1
_RESOLVE_NO_MAGICLINKS: Final = 0x02
_RESOLVE_NO_SYMLINKS: Final = 0x04
_RESOLVE_IN_ROOT: Final = 0x10

MOUNT_ATTR_RDONLY: Final = 0x1
MOUNT_ATTR_NOSUID: Final = 0x2
MOUNT_ATTR_NODEV: Final = 0x4
MOUNT_ATTR_NOEXEC: Final = 0x8
ATTR_RDONLY_ALL: Final = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
"""What every mount of the hook carries: read-only, no set-uid, no device nodes."""

_PATH_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class FdMountError(OSError):
    """A step of mounting by descriptor failed, or what it mounted is not what was checked."""


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


class _MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


def _call(what: str, number: int, *args: object) -> int:
    result = int(_syscall(ctypes.c_long(number), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise FdMountError(code, f"{what}: {os.strerror(code)}")
    return result


def fd_path(fd: int) -> str:
    """The descriptor as a path, for messages and for ``os`` calls that take none."""
    return f"/proc/self/fd/{fd}"


def available() -> bool:
    """Whether this kernel has ``mount_setattr`` (and with it the other calls used here)."""
    attr = _MountAttr(0, 0, 0, 0)
    result = int(
        _syscall(
            ctypes.c_long(_SYS_MOUNT_SETATTR),
            ctypes.c_int(-1),
            b"",
            ctypes.c_uint(_AT_EMPTY_PATH),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        )
    )
    return not (result < 0 and ctypes.get_errno() == errno.ENOSYS)


@contextmanager
def opened(fd: int) -> Iterator[int]:
    """Close *fd* on leaving."""
    try:
        yield fd
    finally:
        os.close(fd)


def _openat2(root: int, relative: str, flags: int) -> int | None:
    """``openat2`` below *root*, or None where the kernel has no ``openat2``."""
    how = _OpenHow(flags, 0, _RESOLVE_IN_ROOT | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    result = int(
        _syscall(
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(root),
            relative.encode(),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
    )
    if result >= 0:
        return result
    code = ctypes.get_errno()
    if code == errno.ENOSYS:
        return None
    raise FdMountError(code, f"{relative}: {os.strerror(code)}")


def _walk(root: int, relative: str, flags: int) -> int:
    """The same without ``openat2``: one component at a time, each opened ``O_NOFOLLOW``,
    a symlink anywhere refused, ``..`` refused."""
    fd = os.dup(root)
    try:
        for name in relative.split("/"):
            if name in ("", "."):
                continue
            if name == "..":
                raise FdMountError(errno.EXDEV, f"{relative}: '..' is not followed")
            step = os.open(name, _PATH_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = step
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise FdMountError(errno.ELOOP, f"{relative}: {name} is a symlink")
        if flags & os.O_DIRECTORY and not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise FdMountError(errno.ENOTDIR, f"{relative}: not a directory")
        return fd
    except BaseException:
        os.close(fd)
        raise


def resolve(root: int, relative: str, *, directory: bool = False, openat2: bool = True) -> int:
    """An ``O_PATH`` descriptor of *relative* below the directory *root*, never outside it:
    no symlink is followed (one anywhere on the way is refused with ``ELOOP``) and ``..``
    cannot climb above *root*. *openat2* False takes the walk even where the kernel has
    ``openat2`` (tests). Raises :class:`FdMountError` (an ``OSError``)."""
    flags = os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_DIRECTORY if directory else 0)
    fd = _openat2(root, relative, flags) if openat2 else None
    if fd is None:
        return _walk(root, relative, flags)
    if stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH | O_NOFOLLOW opens a last symlink
        os.close(fd)
        raise FdMountError(errno.ELOOP, f"{relative}: a symlink")
    return fd


def same_object(fd: int, other: int) -> bool:
    """Whether two descriptors show one file (device and inode)."""
    a, b = os.fstat(fd), os.fstat(other)
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def clone_tree(source: int) -> int:
    """A detached copy of the mount tree at *source* (an ``O_PATH`` descriptor of a file or
    directory, never a symlink), submounts included."""
    return _call(
        "open_tree",
        _SYS_OPEN_TREE,
        ctypes.c_int(source),
        b"",
        ctypes.c_uint(_OPEN_TREE_CLONE | os.O_CLOEXEC | _AT_EMPTY_PATH | _AT_RECURSIVE),
    )


def set_read_only(tree: int, extra: int = 0) -> None:
    """Read-only, no set-uid, no device nodes (and *extra*) on the mount at *tree* and every
    mount below it."""
    attr = _MountAttr(ATTR_RDONLY_ALL | extra, 0, 0, 0)
    _call(
        "mount_setattr",
        _SYS_MOUNT_SETATTR,
        ctypes.c_int(tree),
        b"",
        ctypes.c_uint(_AT_EMPTY_PATH | _AT_RECURSIVE),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )


def new_tmpfs() -> int:
    """A detached, empty tmpfs (mode 0755, no set-uid, devices or executables) to fill by
    descriptor before it is attached."""
    fs = _call("fsopen tmpfs", _SYS_FSOPEN, b"tmpfs", ctypes.c_uint(_FSOPEN_CLOEXEC))
    with opened(fs):
        _call(
            "fsconfig mode",
            _SYS_FSCONFIG,
            ctypes.c_int(fs),
            ctypes.c_uint(_FSCONFIG_SET_STRING),
            b"mode",
            b"0755",
            ctypes.c_int(0),
        )
        _call(
            "fsconfig create",
            _SYS_FSCONFIG,
            ctypes.c_int(fs),
            ctypes.c_uint(_FSCONFIG_CMD_CREATE),
            None,
            None,
            ctypes.c_int(0),
        )
        return _call(
            "fsmount",
            _SYS_FSMOUNT,
            ctypes.c_int(fs),
            ctypes.c_uint(_FSMOUNT_CLOEXEC),
            ctypes.c_uint(MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC),
        )


def attach(tree: int, target: int) -> None:
    """Attach the detached mount *tree* onto the very file or directory *target* is a
    descriptor of (on top of whatever is mounted there now), not onto a path."""
    _call(
        "move_mount",
        _SYS_MOVE_MOUNT,
        ctypes.c_int(tree),
        b"",
        ctypes.c_int(target),
        b"",
        ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH | _MOVE_MOUNT_T_EMPTY_PATH),
    )
