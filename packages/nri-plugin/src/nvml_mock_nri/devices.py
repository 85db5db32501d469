"""The staged mock device nodes, read from the node's file system.

A container that opts in to devices in raw mode gets exactly what is staged under
the overlay's ``dev/``: every entry whose name starts with ``nvidia`` and that is
a character device, with the major, minor, permission bits and owner it has on the
host (the runtime creates the node in the container from these numbers).
Directories (such as ``nvidia-caps-imex-channels``) are not devices and are passed
over in silence; anything else that is not a character device (a regular file, a
node that vanished between listing and stat) is reported and skipped, and the
others are kept. A missing or empty tree is reported and yields no devices: the
overlay and env are still injected (fail open), because failing the call would
fail the user's container.

IMEX channels (:func:`scan_imex_channels`) follow the same rules in their own
directory: every ``channel*`` character device, to appear at
``/dev/nvidia-caps-imex-channels/<name>``, in channel order.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Final

from nvml_mock_protocol import names as shared_names

DEVICE_NAME_PREFIX: Final = "nvidia"
CONTAINER_DEV_DIR: Final = "/dev"
CHANNEL_NAME_PREFIX: Final = "channel"
CONTAINER_CHANNEL_DIR: Final = f"{CONTAINER_DEV_DIR}/{shared_names.IMEX_CHANNELS_DIR}"


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """One character device as NRI's LinuxDevice describes it."""

    path: str
    major: int
    minor: int
    file_mode: int
    uid: int
    gid: int
    type: str = "c"


@dataclass(slots=True)
class DeviceScan:
    """The device nodes found, and what was wrong with the rest."""

    nodes: list[DeviceNode] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def device_node(host_path: str, container_path: str) -> DeviceNode:
    """The device at ``host_path``, to appear at ``container_path``.

    Raises ValueError when the path is not a character device and OSError when
    it cannot be stat'd.
    """
    info = os.stat(host_path)
    if not stat.S_ISCHR(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a character device"
        raise ValueError(f"{host_path} is {kind}")
    return DeviceNode(
        path=container_path,
        major=os.major(info.st_rdev),
        minor=os.minor(info.st_rdev),
        file_mode=stat.S_IMODE(info.st_mode),
        uid=info.st_uid,
        gid=info.st_gid,
    )


def scan_device_nodes(host_dir: str) -> DeviceScan:
    """Every staged ``nvidia*`` character device under ``host_dir``, sorted by name."""
    scan = DeviceScan()
    try:
        entries = sorted(
            (entry.name, entry.is_dir())
            for entry in os.scandir(host_dir)
            if entry.name.startswith(DEVICE_NAME_PREFIX)
        )
    except OSError as exc:
        scan.problems.append(
            f"cannot read the mock device directory {host_dir} ({exc.strerror}); "
            "injecting the overlay without device nodes"
        )
        return scan
    names = [name for name, is_dir in entries if not is_dir]
    if not names:
        scan.problems.append(
            f"the mock device directory {host_dir} holds no device nodes; injecting the "
            "overlay only (has the overlay been staged on this node?)"
        )
        return scan
    for name in names:
        host_path = os.path.join(host_dir, name)
        try:
            scan.nodes.append(device_node(host_path, f"{CONTAINER_DEV_DIR}/{name}"))
        except ValueError as exc:
            scan.problems.append(f"skipping device {name}: {exc}")
        except OSError as exc:
            scan.problems.append(f"skipping device {name}: cannot stat {host_path}: {exc.strerror}")
    return scan


def _channel_order(name: str) -> tuple[int, str]:
    # channel2 before channel10; a name without a number after the prefix sorts last.
    suffix = name[len(CHANNEL_NAME_PREFIX) :]
    return (int(suffix), name) if suffix.isdigit() else (1 << 62, name)


def scan_imex_channels(host_dir: str) -> DeviceScan:
    """Every staged ``channel*`` character device under ``host_dir``, in channel order.

    Anything else named ``channel*`` (a directory, a regular file, a node that vanished)
    is reported and skipped. A directory that cannot be read is one problem and no
    channels: the stage may not have made any (``--imex-channels 0``, or refused on a
    node with a real driver), and the container still gets the overlay.
    """
    scan = DeviceScan()
    try:
        found = [e.name for e in os.scandir(host_dir) if e.name.startswith(CHANNEL_NAME_PREFIX)]
    except OSError as exc:
        scan.problems.append(
            f"cannot read the IMEX channel directory {host_dir} ({exc.strerror}); "
            "injecting the overlay without IMEX channels"
        )
        return scan
    if not found:
        scan.problems.append(
            f"the IMEX channel directory {host_dir} holds no channel devices; injecting the "
            "overlay without IMEX channels"
        )
        return scan
    for name in sorted(found, key=_channel_order):
        host_path = os.path.join(host_dir, name)
        try:
            scan.nodes.append(device_node(host_path, f"{CONTAINER_CHANNEL_DIR}/{name}"))
        except ValueError as exc:
            scan.problems.append(f"skipping IMEX channel {name}: {exc}")
        except OSError as exc:
            scan.problems.append(
                f"skipping IMEX channel {name}: cannot stat {host_path}: {exc.strerror}"
            )
    return scan


def cdi_spec_exists(path: str) -> bool:
    """Whether the CDI spec file is there (checked per container, so late staging works)."""
    return os.path.isfile(path)
