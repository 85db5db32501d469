"""Whether a real NVIDIA driver is loaded on this node: the device trust boundary.

The mock device nodes carry NVIDIA's real major numbers (195 for ``nvidia<N>`` and
``nvidiactl``, the UVM major for ``nvidia-uvm``). On a node where the real driver is
loaded, a "mock" node with those numbers *is* the real GPU: a container that gets it
reaches the hardware, outside ``nvidia.com/gpu`` accounting. So the stager refuses to
create device nodes and the NRI plugin refuses to inject them when this module finds a
driver. Any one of these is evidence:

* ``<proc>/driver/nvidia/version`` exists: the driver's kernel module is loaded;
* ``<sys>/module/nvidia`` exists: the same, seen through sysfs;
* ``<proc>/devices`` lists a character device ``nvidia`` or ``nvidia-*``: the kernel has
  a driver for those majors (creating mock nodes with ``mknod`` adds no such line).

Detection fails closed: if ``<proc>/devices`` cannot be read as a regular file (the
one file every Linux kernel has), nobody can tell, and :attr:`HostDriver.present`
says so, so callers refuse as for a driver. Nothing here blocks: files are opened
non-blocking, only regular files are read, and reads are bounded.

The roots default to ``/proc`` and ``/sys`` (inside a container both show the host
kernel's view of these entries) and can be moved with ``NVML_MOCK_HOST_PROC_ROOT`` /
``NVML_MOCK_HOST_SYS_ROOT``, for a host tree mounted elsewhere or a test's fake tree.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_PROC_ROOT",
    "DEFAULT_SYS_ROOT",
    "ENV_HOST_PROC_ROOT",
    "ENV_HOST_SYS_ROOT",
    "HostDriver",
    "detect",
    "detect_from_environ",
]

ENV_HOST_PROC_ROOT: Final = "NVML_MOCK_HOST_PROC_ROOT"
ENV_HOST_SYS_ROOT: Final = "NVML_MOCK_HOST_SYS_ROOT"
DEFAULT_PROC_ROOT: Final = "/proc"
DEFAULT_SYS_ROOT: Final = "/sys"

READ_LIMIT: Final = 64 * 1024
"""Bytes read from one file at most (``/proc/devices`` is about 1 KiB)."""
DRIVER_NAME: Final = "nvidia"


@dataclass(frozen=True, slots=True)
class HostDriver:
    """What was found; ``present`` decides, ``reason`` says why in one line."""

    evidence: tuple[str, ...] = ()
    """One entry per sign of a real driver, each naming the path it was seen at."""
    undetermined: str | None = None
    """Set when detection itself failed (then the driver is treated as present)."""

    @property
    def present(self) -> bool:
        """True when a real driver is loaded, or when that cannot be ruled out."""
        return bool(self.evidence) or self.undetermined is not None

    @property
    def reason(self) -> str:
        """One line for logs and probes."""
        if self.evidence:
            return "a real NVIDIA driver is loaded on this node (" + "; ".join(self.evidence) + ")"
        if self.undetermined is not None:
            return f"cannot tell whether a real NVIDIA driver is loaded ({self.undetermined})"
        return "no real NVIDIA driver on this node"


def _read_regular(path: str) -> str:
    """The start of a regular file, without blocking; OSError/ValueError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        return os.read(fd, READ_LIMIT).decode("utf-8", "replace")
    finally:
        os.close(fd)


def _driver_devices(text: str) -> list[str]:
    """Names of NVIDIA character-device drivers in ``/proc/devices`` text."""
    found: list[str] = []
    in_character = False
    for line in text.splitlines():
        if line.endswith(":"):
            in_character = line.strip().lower() == "character devices:"
            continue
        parts = line.split()
        if in_character and len(parts) == 2:
            name = parts[1]
            if name == DRIVER_NAME or name.startswith(DRIVER_NAME + "-"):
                found.append(f"{name} (major {parts[0]})")
    return found


def detect(proc_root: str = DEFAULT_PROC_ROOT, sys_root: str = DEFAULT_SYS_ROOT) -> HostDriver:
    """Look for a real NVIDIA driver under the given roots."""
    evidence: list[str] = []
    version_path = os.path.join(proc_root, "driver", DRIVER_NAME, "version")
    if os.path.lexists(version_path):
        try:
            first = _read_regular(version_path).strip().splitlines()
            detail = first[0][:120] if first else "empty"
        except (OSError, ValueError) as exc:
            detail = f"unreadable: {exc}"
        evidence.append(f"{version_path}: {detail}")
    module_path = os.path.join(sys_root, "module", DRIVER_NAME)
    if os.path.lexists(module_path):
        evidence.append(f"{module_path} exists")
    devices_path = os.path.join(proc_root, "devices")
    undetermined = None
    try:
        drivers = _driver_devices(_read_regular(devices_path))
    except (OSError, ValueError) as exc:
        undetermined = f"cannot read {devices_path}: {getattr(exc, 'strerror', None) or exc}"
    else:
        if drivers:
            evidence.append(f"{devices_path} lists " + ", ".join(drivers))
    return HostDriver(tuple(evidence), None if evidence else undetermined)


def detect_from_environ(environ: Mapping[str, str] | None = None) -> HostDriver:
    """:func:`detect` under the roots named by the env (empty values mean the defaults)."""
    env = os.environ if environ is None else environ
    return detect(
        env.get(ENV_HOST_PROC_ROOT) or DEFAULT_PROC_ROOT,
        env.get(ENV_HOST_SYS_ROOT) or DEFAULT_SYS_ROOT,
    )
