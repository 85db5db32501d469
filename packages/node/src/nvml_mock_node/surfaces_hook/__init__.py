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

What cannot be reached is said on stderr and skipped: a kernel without ``/proc/modules``
or ``/proc/driver`` offers nothing to bind over, and nothing can be created inside
procfs. The hook never fails the container: an error is reported and the container starts
without the surfaces (a failing hook would abort it). Exit codes: 0 always; 2 for bad usage.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from nvml_mock_engine.errors import HookError

__all__ = ["HookError", "Outcome", "apply", "main", "rootfs_of"]

MS_RDONLY: Final = 0x1
MS_NOSUID: Final = 0x2
MS_NODEV: Final = 0x4
MS_NOEXEC: Final = 0x8
MS_REMOUNT: Final = 0x20
MS_BIND: Final = 0x1000
MS_REC: Final = 0x4000
_RO_BIND: Final = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
PROG: Final = "nvml-mock-surfaces-hook"
GRAFTS: Final = ("sys/devices", "sys/module", "sys/kernel/iommu_groups")
"""Directories that get the driver root's entries beside the kernel's own (and, last,
``proc/driver``, which also gets :data:`STATUS_FILE`)."""
STATUS_FILE: Final = "nvml-mock-surfaces"
"""``/proc/driver/nvml-mock-surfaces`` in the container: what the hook made and what it could
not reach, one line each (a runtime shows a hook's stderr only when the hook fails)."""
REPLACED: Final = ("proc/devices", "proc/modules", "sys/bus/pci")
"""Files and directories the driver root's copy replaces."""


@dataclass(slots=True)
class Outcome:
    """What the hook made and what it could not reach."""

    made: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount(
    source: str, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    rc = _libc().mount(
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if rc != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def _bind_ro(source: str, target: str) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    _mount("none", target, None, _RO_BIND)


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


def _graft(
    rootfs: Path, relative: str, source: Path, outcome: Outcome, *, status: bool = False
) -> None:
    """A tmpfs at *relative* holding the kernel's entries (bound back) and *source*'s; with
    *status*, also the :data:`STATUS_FILE` of *outcome*."""
    target = rootfs / relative
    if not target.is_dir():
        outcome.unreachable.append(f"/{relative} (the container has none to graft onto)")
        return
    ours = sorted(os.listdir(source))
    original = os.open(target, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        theirs = [n for n in sorted(os.listdir(f"/proc/self/fd/{original}")) if n not in ours]
        _mount("tmpfs", str(target), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755")
        for name in theirs:
            _place(f"/proc/self/fd/{original}/{name}", target / name)
        for name in ours:
            _place(str(source / name), target / name)
        outcome.made.append(f"/{relative}")
        if status:
            (target / STATUS_FILE).write_text(_status(outcome), encoding="utf-8")
        _mount("none", str(target), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    finally:
        os.close(original)


def _status(outcome: Outcome) -> str:
    lines = [f"made {path}" for path in outcome.made]
    lines += [f"not reached {path}" for path in outcome.unreachable]
    return "".join(f"{line}\n" for line in lines)


def _place(source: str, target: Path) -> None:
    """Bind *source* at *target* (made first: a directory, a file, or a copy of a link)."""
    if os.path.islink(source):
        target.symlink_to(os.readlink(source))
        return
    if os.path.isdir(source):
        target.mkdir()
    else:
        target.touch()
    _bind_ro(source, str(target))


def apply(rootfs: Path, driver_root: Path) -> Outcome:
    """Show *rootfs* the kernel surfaces of *driver_root*; see the module's docstring."""
    outcome = Outcome()
    for relative in GRAFTS:
        source = driver_root / relative
        if source.is_dir():
            _graft(rootfs, relative, source, outcome)
    for relative in REPLACED:
        source, target = driver_root / relative, rootfs / relative
        if not source.exists():
            continue
        if not target.exists():
            outcome.unreachable.append(f"/{relative} (this kernel offers none to bind over)")
            continue
        _bind_ro(str(source), str(target))
        outcome.made.append(f"/{relative}")
    if (driver_root / "proc" / "driver").is_dir():
        _graft(rootfs, "proc/driver", driver_root / "proc" / "driver", outcome, status=True)
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
