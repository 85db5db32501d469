"""``nvml-mock-surfaces-hook``: an OCI ``createContainer`` hook that shows a container the
driver root's kernel surfaces at the fixed paths their readers open.

Readers of ``/proc/driver/nvidia``, ``/proc/devices``, ``/proc/modules`` and
``/sys/bus/pci/devices`` take no root to look under. A runtime refuses mounts under
``/proc`` in a container's spec (runc does, NRI's mounts included), but a
``createContainer`` hook runs in the container's mount namespace after the runtime's
mounts and before the root switch, with full capabilities, on runc and crun alike. The NRI
plugin adds this hook to the containers that opt in; it reads the container's bundle from
the OCI state on stdin (runc runs a hook in the root file system, crun in the bundle, so
the bundle's ``config.json`` names the root either way) and makes, read-only:

``/proc/driver``
    a tmpfs holding the node's own entries (bound back) and the driver root's ``nvidia``
    and ``nvidia-caps`` directories, bound live: MIG capability files that change on the
    node change in the container; and ``nvml-mock-surfaces``, what the hook made and what
    it could not reach;
``/proc/devices``, ``/proc/modules``
    the driver root's files bound over the kernel's;
``/sys/bus/pci``
    the driver root's PCI bus (``devices`` and ``drivers``);
``/sys/devices``, ``/sys/module``, ``/sys/kernel/iommu_groups``
    grafted: the kernel's entries bound back, the driver root's added beside them.

Everything is mounted by file descriptor (:mod:`.fdmount`): each path of the container's is
opened once below its root, refusing symlinks, and only that descriptor is used, so a
racing process that swaps a directory for a symlink to a host path gets a refusal, never a
host path in the container; what shows at the path after mounting is compared with what was
checked, and a mismatch is taken down again. Every mount is read-only, no set-uid, no
devices, all the way down: a volume mounted below a bound directory turns read-only with it.

What cannot be reached is said on stderr and skipped: a kernel without ``/proc/modules``
or ``/proc/driver`` offers nothing to bind over, and nothing can be created inside
procfs. The hook never fails the container: an error is reported and the container starts
without the surfaces (a failing hook would abort it). Exit codes: 0 always; 2 for bad usage.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from nvml_mock_engine.errors import HookError

from nvml_mock_node.surfaces_hook import fdmount
from nvml_mock_node.surfaces_hook.fdmount import FdMountError, opened

__all__ = ["HookError", "Outcome", "apply", "main", "rootfs_of"]

PROG: Final = "nvml-mock-surfaces-hook"
GRAFTS: Final = ("sys/devices", "sys/module", "sys/kernel/iommu_groups")
"""Directories that get the driver root's entries beside the kernel's own (and, last,
``proc/driver``, which also gets :data:`STATUS_FILE`)."""
STATUS_FILE: Final = "nvml-mock-surfaces"
"""``/proc/driver/nvml-mock-surfaces`` in the container: what the hook made and what it could
not reach, one line each (a runtime shows a hook's stderr only when the hook fails)."""
REPLACED: Final = ("proc/devices", "proc/modules", "sys/bus/pci")
"""Files and directories the driver root's copy replaces."""
_PATH_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_MNT_DETACH: Final = 2


@dataclass(slots=True)
class Outcome:
    """What the hook made and what it could not reach."""

    made: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)


def rootfs_of(state: dict[str, object]) -> Path:
    """The container's root file system, from the OCI state's bundle and its config."""
    bundle = state.get("bundle")
    if not isinstance(bundle, str) or not bundle:
        raise HookError("the OCI state on stdin names no bundle")
    try:
        config = json.loads((Path(bundle) / "config.json").read_text(encoding="utf-8"))
        root = config["root"]["path"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise HookError(f"cannot read the root from {bundle}/config.json: {exc}") from None
    path = Path(root)
    return path if path.is_absolute() else Path(bundle) / path


def _detach(tree: int) -> None:
    """Take the attached mount *tree* down again (lazily: nothing in it is in use yet)."""
    ctypes.CDLL(None, use_errno=True).umount2(fdmount.fd_path(tree).encode(), _MNT_DETACH)


def _why(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "refused: a symlink on the way"
    return f"refused: {exc.strerror or exc}"


def _target(root: int, relative: str, outcome: Outcome, missing: str, *, directory: bool) -> int:
    """The descriptor of the container's */relative*, or -1 with the reason recorded."""
    try:
        return fdmount.resolve(root, relative, directory=directory)
    except OSError as exc:
        why = missing if exc.errno == errno.ENOENT else _why(exc)
        outcome.unreachable.append(f"/{relative} ({why})")
        return -1


def _bind(source: int, target: int) -> int:
    """A read-only copy of the tree at *source* attached onto *target*; its descriptor."""
    tree = fdmount.clone_tree(source)
    try:
        fdmount.set_read_only(tree)
        fdmount.attach(tree, target)
    except BaseException:
        os.close(tree)
        raise
    return tree


def _entry(directory: int, name: str, tmpfs: int) -> int | None:
    """Make *name* of *directory* in *tmpfs*: a copy of a symlink (None), else an empty
    directory or file to bind onto; then the descriptor of the source to bind."""
    source = os.open(name, _PATH_FLAGS, dir_fd=directory)
    mode = os.fstat(source).st_mode
    if stat.S_ISLNK(mode):
        os.close(source)
        os.symlink(os.readlink(name, dir_fd=directory), name, dir_fd=tmpfs)
        return None
    if stat.S_ISDIR(mode):
        os.mkdir(name, 0o755, dir_fd=tmpfs)
    else:
        os.close(
            os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o444, dir_fd=tmpfs)
        )
    return source


def _fill(tmpfs: int, sources: list[tuple[str, int]], relative: str, outcome: Outcome) -> None:
    """Bind each source onto its place in the attached *tmpfs*, checking what shows there."""
    for name, source in sources:
        try:
            place = os.open(name, _PATH_FLAGS, dir_fd=tmpfs)
            with opened(place), opened(_bind(source, place)) as tree:
                shown = os.open(name, _PATH_FLAGS, dir_fd=tmpfs)
                with opened(shown):
                    if not fdmount.same_object(shown, source):
                        _detach(tree)
                        raise FdMountError(errno.EXDEV, "not what was checked")
        except OSError as exc:
            outcome.unreachable.append(f"/{relative}/{name} ({_why(exc)})")


def _graft(
    root: int, relative: str, source: Path, outcome: Outcome, *, status: bool = False
) -> None:
    """A tmpfs at *relative* holding the kernel's entries (bound back) and *source*'s; with
    *status*, also the :data:`STATUS_FILE` of *outcome*."""
    target = _target(
        root, relative, outcome, "the container has none to graft onto", directory=True
    )
    if target < 0:
        return
    sources: list[tuple[str, int]] = []
    with opened(target), opened(fdmount.new_tmpfs()) as tmpfs:
        try:
            ours = os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            theirs = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=target)
            with opened(ours), opened(theirs):
                names = sorted(os.listdir(ours))
                for directory, listed in (
                    (theirs, [n for n in sorted(os.listdir(theirs)) if n not in names]),
                    (ours, names),
                ):
                    for name in listed:
                        try:
                            made = _entry(directory, name, tmpfs)
                        except OSError as exc:
                            outcome.unreachable.append(f"/{relative}/{name} ({_why(exc)})")
                            continue
                        if made is not None:
                            sources.append((name, made))
            outcome.made.append(f"/{relative}")
            fdmount.attach(tmpfs, target)
            _fill(tmpfs, sources, relative, outcome)
            if status:  # by descriptor too, before the tree turns read-only
                _write_status(tmpfs, outcome)
            fdmount.set_read_only(tmpfs)
            again = fdmount.resolve(root, relative, directory=True)
            with opened(again):
                if not fdmount.same_object(again, tmpfs):
                    _detach(tmpfs)
                    raise FdMountError(errno.EXDEV, "not what was checked")
        except OSError as exc:
            if outcome.made and outcome.made[-1] == f"/{relative}":
                outcome.made.pop()
            outcome.unreachable.append(f"/{relative} ({_why(exc)})")
        finally:
            for _, fd in sources:
                os.close(fd)


def _write_status(tmpfs: int, outcome: Outcome) -> None:
    lines = [f"made {path}" for path in outcome.made]
    lines += [f"not reached {path}" for path in outcome.unreachable]
    fd = os.open(
        STATUS_FILE, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o444, dir_fd=tmpfs
    )
    with open(fd, "w", encoding="utf-8") as file:
        file.write("".join(f"{line}\n" for line in lines))


def _replace(root: int, relative: str, source: Path, outcome: Outcome) -> None:
    """The driver root's *source* bound over the container's */relative*."""
    target = _target(
        root, relative, outcome, "this kernel offers none to bind over", directory=False
    )
    if target < 0:
        return
    try:
        with (
            opened(target),
            opened(os.open(source, _PATH_FLAGS)) as ours,
            opened(_bind(ours, target)) as tree,
            opened(fdmount.resolve(root, relative)) as again,
        ):
            if not fdmount.same_object(again, ours):
                _detach(tree)
                raise FdMountError(errno.EXDEV, "not what was checked")
        outcome.made.append(f"/{relative}")
    except OSError as exc:
        outcome.unreachable.append(f"/{relative} ({_why(exc)})")


def apply(rootfs: Path, driver_root: Path) -> Outcome:
    """Show *rootfs* the kernel surfaces of *driver_root*; see the module's docstring."""
    if not fdmount.available():
        raise HookError("this kernel has no mount_setattr (Linux 5.12 or later): nothing mounted")
    outcome = Outcome()
    with opened(os.open(rootfs, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)) as root:
        for relative in GRAFTS:
            source = driver_root / relative
            if source.is_dir():
                _graft(root, relative, source, outcome)
        for relative in REPLACED:
            source = driver_root / relative
            if source.exists():
                _replace(root, relative, source, outcome)
        if (driver_root / "proc" / "driver").is_dir():
            _graft(root, "proc/driver", driver_root / "proc" / "driver", outcome, status=True)
    return outcome


def main(argv: Sequence[str] | None = None) -> int:
    """Run the hook: ``--root`` is the staged driver root on the host."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--root", required=True, help="the staged driver root (overlay) on the host"
    )
    args = parser.parse_args(argv)
    try:
        driver_root = Path(os.path.realpath(args.root))
        if not (driver_root / "proc").is_dir():
            raise HookError(f"{driver_root} holds no staged proc/ (is it a driver root?)")
        state = json.load(sys.stdin)
        if not isinstance(state, dict):
            raise HookError("the OCI state on stdin is not an object")
        outcome = apply(rootfs_of(state), driver_root)
    except (HookError, OSError, ValueError) as exc:
        print(f"{PROG}: the container starts without the driver surfaces: {exc}", file=sys.stderr)
        return 0
    for path in outcome.unreachable:
        print(f"{PROG}: not reached: {path}", file=sys.stderr)
    return 0
