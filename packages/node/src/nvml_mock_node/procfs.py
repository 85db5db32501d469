"""The driver's procfs surfaces, rendered from the board: what NVIDIA's kernel module shows.

A driver installation is more than its libraries: NVIDIA's node software reads the kernel
module's files. This module renders them as files, in the formats the driver writes and
NVIDIA's parsers read (go-nvlib, nvidia-container-toolkit's ``nvcaps`` and ``info/proc``,
the DRA driver's ``nvcaps.go``):

``proc/driver/nvidia/version``, ``params``
    the module's version line and parameters (``ImexChannelCount`` as staged);
``proc/driver/nvidia/gpus/<bus id>/information``
    one per GPU: model, UUID, VBIOS, bus location, device minor;
``proc/driver/nvidia/capabilities/``
    ``mig/config`` and ``mig/monitor``, ``fabric-imex-mgmt``, and per GPU
    ``gpu<minor>/mig/gi<G>/access`` and ``gi<G>/ci<C>/access`` for the GPU and compute
    instances that exist now (:func:`mig_capabilities`, kept true by
    :mod:`nvml_mock_node.driver_surfaces`);
``proc/driver/nvidia-caps/mig-minors``
    every MIG capability's device minor, as the driver lists them at load;
``proc/devices``, ``proc/modules``
    the node's own entries with the driver's added (``nvidia-frontend``, ``nvidia-uvm``,
    ``nvidia-caps``, ``nvidia-caps-imex-channels``; ``nvidia``, ``nvidia_uvm``, ...).

Capability files name the ``/dev/nvidia-caps/nvidia-cap<minor>`` node that grants them:
``DeviceFileMinor``, ``DeviceFileMode`` and ``DeviceFileModify``, three lines.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from nvml_mock_protocol.mig_caps import (
    CI_PER_GI,
    CONFIG_MINOR,
    GI_PER_GPU,
    MONITOR_MINOR,
    MigCap,
    minor_of,
)

from nvml_mock_node.file_tree import FileTree

__all__ = [
    "CAPS_DEVICE_NAME",
    "CONFIG_MINOR",
    "FABRIC_IMEX_MGMT_MINOR",
    "MIG_MAX_CI",
    "MIG_MAX_GI",
    "MONITOR_MINOR",
    "DriverMajors",
    "MigInstance",
    "ProcGpu",
    "ci_minor",
    "gi_minor",
    "mig_capabilities",
    "mig_minors",
    "proc_tree",
    "sysfs_bus_id",
]

CAPS_DEVICE_NAME: Final = "nvidia-caps"
MIG_MAX_GI: Final = GI_PER_GPU
"""GPU instance ids a GPU's capability minors are reserved for (``gi0..gi14``)."""
MIG_MAX_CI: Final = CI_PER_GI
"""Compute instance ids per GPU instance (``ci0..ci7``)."""
MINORS_GPUS: Final = 32
"""GPUs the driver reserves capability minors for at load, whether present or not."""
FABRIC_IMEX_MGMT_MINOR: Final = minor_of(MigCap(MINORS_GPUS, 0))
"""The first minor after the MIG range of :data:`MINORS_GPUS` GPUs."""
_MODE_ADMIN: Final = 0o400
_MODE_READ: Final = 0o444
_MODULES: Final = (
    ("nvidia_uvm", 2076672, 0, ""),
    ("nvidia_drm", 139264, 0, ""),
    ("nvidia_modeset", 1638400, 1, "nvidia_drm,"),
    ("nvidia", 104071168, 2, "nvidia_uvm,nvidia_modeset,"),
)
"""The modules a driver installation loads (``/proc/modules`` fields: name, size, users,
users' names); ``nvidia`` is what mig-parted and the GPU operator look for."""


@dataclass(frozen=True, slots=True)
class DriverMajors:
    """The character majors the staged device nodes use, as ``proc/devices`` lists them."""

    frontend: int
    uvm: int
    caps: int
    imex_channels: int | None


@dataclass(frozen=True, slots=True)
class ProcGpu:
    """What the procfs and sysfs files say of one GPU."""

    minor: int
    bus_id: str
    """``DDDDDDDD:BB:DD.F`` as NVML reports it."""
    name: str
    uuid: str
    vbios: str


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One GPU instance of a GPU, with the compute instances it holds."""

    gpu_instance: int
    compute_instances: tuple[int, ...]


def sysfs_bus_id(bus_id: str) -> str:
    """The kernel's name of a PCI function: a 4-digit domain where it fits, lower case."""
    domain, rest = bus_id.split(":", 1)
    value = int(domain, 16)
    width = 4 if value <= 0xFFFF else 8
    return f"{value:0{width}x}:{rest.lower()}"


def gi_minor(gpu: int, gpu_instance: int) -> int:
    """The device minor of ``gpu<gpu>/gi<gpu_instance>/access`` (the protocol's table,
    which the NRI plugin reads the other way)."""
    return minor_of(MigCap(gpu, gpu_instance))


def ci_minor(gpu: int, gpu_instance: int, compute_instance: int) -> int:
    """The device minor of ``gpu<gpu>/gi<gpu_instance>/ci<compute_instance>/access``."""
    return minor_of(MigCap(gpu, gpu_instance, compute_instance))


def _capability(minor: int, mode: int) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


def mig_minors(gpus: int) -> str:
    """``/proc/driver/nvidia-caps/mig-minors`` for a node of *gpus* GPUs (at least the
    driver's :data:`MINORS_GPUS`)."""
    lines = [f"config {CONFIG_MINOR}", f"monitor {MONITOR_MINOR}"]
    for gpu in range(max(gpus, MINORS_GPUS)):
        for gi in range(MIG_MAX_GI):
            lines.append(f"gpu{gpu}/gi{gi}/access {gi_minor(gpu, gi)}")
            lines += [
                f"gpu{gpu}/gi{gi}/ci{ci}/access {ci_minor(gpu, gi, ci)}" for ci in range(MIG_MAX_CI)
            ]
    return "\n".join(lines) + "\n"


def mig_capabilities(gpu: int, instances: Iterable[MigInstance]) -> FileTree:
    """The files of ``capabilities/gpu<gpu>/mig/``: one ``gi<G>/access`` per GPU instance
    and one ``gi<G>/ci<C>/access`` per compute instance that exists."""
    tree = FileTree()
    for instance in instances:
        gi = instance.gpu_instance
        if not 0 <= gi < MIG_MAX_GI:
            continue
        tree.add(f"gi{gi}/access", _capability(gi_minor(gpu, gi), _MODE_READ))
        for ci in instance.compute_instances:
            if 0 <= ci < MIG_MAX_CI:
                tree.add(f"gi{gi}/ci{ci}/access", _capability(ci_minor(gpu, gi, ci), _MODE_READ))
    return tree


def version_text(driver_version: str) -> str:
    """``/proc/driver/nvidia/version``: the module's version line, as the open module writes it."""
    return (
        f"NVRM version: NVIDIA UNIX Open Kernel Module for {platform.machine()}  "
        f"{driver_version}  Release Build  (nvml-mock)\n"
        "GCC version:  (nvml-mock)\n"
    )


def params_text(imex_channels: int) -> str:
    """``/proc/driver/nvidia/params``: the module parameters NVIDIA's tools read."""
    params = (
        ("ModifyDeviceFiles", "1"),
        ("DeviceFileUID", "0"),
        ("DeviceFileGID", "0"),
        ("DeviceFileMode", "438"),
        ("EnableMSI", "1"),
        ("EnableUserNUMAManagement", "1"),
        ("NvLinkDisable", "0"),
        ("RmProfilingAdminOnly", "1"),
        ("EnableGpuFirmware", "18"),
        ("ImexChannelCount", str(imex_channels)),
        ("CreateImexChannel0", "0"),
        ("RegistryDwords", '""'),
        ("ExcludedGpus", '""'),
    )
    return "".join(f"{key}: {value}\n" for key, value in params)


def information_text(gpu: ProcGpu) -> str:
    """``gpus/<bus id>/information``, in the driver's tab-aligned layout."""
    rows = (
        ("Model", gpu.name),
        ("IRQ", "0"),
        ("GPU UUID", gpu.uuid),
        ("Video BIOS", gpu.vbios),
        ("Bus Type", "PCIe"),
        ("DMA Size", "52 bits"),
        ("DMA Mask", "0xfffffffffffff"),
        ("Bus Location", sysfs_bus_id(gpu.bus_id)),
        ("Device Minor", str(gpu.minor)),
        ("GPU Excluded", "No"),
    )
    return "".join(f"{key}:\t\t {value}\n" for key, value in rows)


def devices_text(majors: DriverMajors, host: Mapping[str, Sequence[tuple[int, str]]]) -> str:
    """``/proc/devices``: the node's character and block majors with the driver's added (a
    node entry with a major of the driver's is dropped: the driver's name wins)."""
    ours = [
        (majors.frontend, "nvidia-frontend"),
        (majors.uvm, "nvidia-uvm"),
        (majors.caps, CAPS_DEVICE_NAME),
    ]
    if majors.imex_channels is not None:
        ours.append((majors.imex_channels, "nvidia-caps-imex-channels"))
    taken = {major for major, _ in ours}
    character = [entry for entry in host.get("character", ()) if entry[0] not in taken]
    character = sorted([*character, *ours], key=lambda entry: entry[0])
    lines = ["Character devices:"]
    lines += [f"{major:3d} {name}" for major, name in character]
    lines += ["", "Block devices:"]
    lines += [f"{major:3d} {name}" for major, name in host.get("block", ())]
    return "\n".join(lines) + "\n"


def modules_text(host_lines: Sequence[str]) -> str:
    """``/proc/modules``: the driver's modules first (as the kernel lists the newest), then the
    node's own; a node line naming a driver module is dropped for ours."""
    ours = {name for name, *_ in _MODULES}
    lines = [
        f"{name} {size} {users} {by or '-'} Live 0x0000000000000000 (POE)"
        for name, size, users, by in _MODULES
    ]
    lines += [line for line in host_lines if line.split(" ", 1)[0] not in ours]
    return "\n".join(lines) + "\n"


def proc_tree(
    *,
    driver_version: str,
    gpus: Sequence[ProcGpu],
    majors: DriverMajors,
    imex_channels: int,
    mig: Mapping[int, Sequence[MigInstance]],
    host_devices: Mapping[str, Sequence[tuple[int, str]]],
    host_modules: Sequence[str],
) -> FileTree:
    """The whole ``proc/`` tree of the driver root, *mig* holding each GPU's instances now."""
    tree = FileTree()
    nvidia = "driver/nvidia"
    tree.add(f"{nvidia}/version", version_text(driver_version))
    tree.add(f"{nvidia}/params", params_text(imex_channels))
    caps = f"{nvidia}/capabilities"
    tree.add(f"{caps}/mig/config", _capability(CONFIG_MINOR, _MODE_ADMIN))
    tree.add(f"{caps}/mig/monitor", _capability(MONITOR_MINOR, _MODE_READ))
    tree.add(f"{caps}/fabric-imex-mgmt", _capability(FABRIC_IMEX_MGMT_MINOR, _MODE_ADMIN))
    for gpu in gpus:
        tree.add(f"{nvidia}/gpus/{sysfs_bus_id(gpu.bus_id)}/information", information_text(gpu))
        tree.mkdir(f"{caps}/gpu{gpu.minor}/mig")
        tree.merge(
            mig_capabilities(gpu.minor, mig.get(gpu.minor, ())), f"{caps}/gpu{gpu.minor}/mig"
        )
    tree.add("driver/nvidia-caps/mig-minors", mig_minors(len(gpus)))
    tree.add("devices", devices_text(majors, host_devices))
    tree.add("modules", modules_text(host_modules))
    return tree
