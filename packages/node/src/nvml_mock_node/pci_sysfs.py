"""The PCI sysfs tree of a node's GPUs: one function per GPU with a root port above it.

Tools that walk PCI rather than NVML read it: go-nvlib's ``nvpci`` (mig-parted, GPU feature
discovery's ``gpu.mode``) lists ``sys/bus/pci/devices`` for NVIDIA functions and reads their
``vendor``, ``class``, ``device``, ``numa_node``, ``resource``, ``driver`` and
``iommu_group``; Kubernetes' ``deviceattribute`` (the DRA driver's
``resource.kubernetes.io/pcieRoot``) resolves the ``bus/pci/devices/<bdf>`` link and takes
the ``devices/pci<domain>:<bus>`` directory it lands in. The tree is laid out as the kernel
lays it out::

    sys/devices/pci0000:50/0000:50:01.0/0000:53:00.0/{vendor,device,class,...}
    sys/bus/pci/devices/0000:53:00.0 -> ../../../devices/pci0000:50/0000:50:01.0/0000:53:00.0
    sys/bus/pci/drivers/nvidia/0000:53:00.0 -> ../../../../devices/pci0000:50/...
    sys/kernel/iommu_groups/<n>/devices/0000:53:00.0 -> ../../../../devices/pci0000:50/...
    sys/module/nvidia/version
    sys/class/dmi/id/product_name      (the machine, when the profile names one)

Each GPU's root port sits on the bus of its root complex, the highest bus number below the
GPU's (aligned down to a multiple of 16 where that is free) that no GPU of the same domain
uses; a GPU on bus 0 sits on the root complex itself, as in a virtual machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from nvml_mock_node.file_tree import FileTree
from nvml_mock_node.procfs import sysfs_bus_id

__all__ = ["DMI_PRODUCT_NAME", "PciGpu", "link_speed", "root_ports", "sys_tree"]

NVIDIA_VENDOR: Final = 0x10DE
ROOT_PORT_CLASS: Final = 0x060400
"""PCI-to-PCI bridge (a PCIe root port)."""
ROOT_PORT_VENDOR: Final = 0x8086
ROOT_PORT_DEVICE: Final = 0x352A
"""The root port: Intel's Sapphire Rapids PCIe root port, the CPU of the HGX reference nodes."""
_LINK_SPEEDS: Final = {1: "2.5", 2: "5.0", 3: "8.0", 4: "16.0", 5: "32.0", 6: "64.0", 7: "128.0"}
"""GT/s per PCIe generation, as the kernel prints ``current_link_speed``."""
_RESOURCE_LINES: Final = 13
_BAR0_BYTES: Final = 16 << 20
_BAR3_BYTES: Final = 32 << 20
_MEM_FLAGS: Final = 0x40200
_PREFETCH64_FLAGS: Final = 0x14220C


@dataclass(frozen=True, slots=True)
class PciGpu:
    """What the PCI function of one GPU shows."""

    bus_id: str
    """``DDDDDDDD:BB:DD.F`` as NVML reports it."""
    device_id: int
    """NVML's ``pciDeviceId``: the device id in the upper 16 bits, the vendor in the lower."""
    subsystem_id: int
    """NVML's ``pciSubSystemId``: subsystem device in the upper 16 bits, vendor in the lower."""
    pci_class: int
    numa_node: int
    cpu_list: str
    max_gen: int
    max_width: int
    cur_gen: int
    cur_width: int
    bar1_bytes: int


def link_speed(gen: int) -> str:
    """``current_link_speed`` / ``max_link_speed`` text of PCIe generation *gen*."""
    return f"{_LINK_SPEEDS.get(gen, '2.5')} GT/s PCIe"


def _parts(bus_id: str) -> tuple[int, int, int, int]:
    domain, bus, rest = bus_id.split(":")
    device, function = rest.split(".")
    return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)


def _name(domain: int, bus: int, device: int, function: int) -> str:
    width = 4 if domain <= 0xFFFF else 8
    return f"{domain:0{width}x}:{bus:02x}:{device:02x}.{function:x}"


def root_ports(gpus: Sequence[PciGpu]) -> list[tuple[str, str | None]]:
    """For each GPU: its root complex (``pci<domain>:<bus>``) and root port (None for a GPU on
    its root complex's bus)."""
    used: dict[int, set[int]] = {}
    for gpu in gpus:
        domain, bus, _, _ = _parts(gpu.bus_id)
        used.setdefault(domain, set()).add(bus)
    ports: dict[tuple[int, int], int] = {}
    placed: list[tuple[str, str | None]] = []
    for gpu in gpus:
        domain, bus, _, _ = _parts(gpu.bus_id)
        width = 4 if domain <= 0xFFFF else 8
        if bus == 0:
            placed.append((f"pci{domain:0{width}x}:00", None))
            continue
        root = bus & 0xF0
        while root >= 0 and (root in used[domain] or root == bus):
            root -= 1
        if root < 0:
            placed.append((f"pci{domain:0{width}x}:00", None))
            continue
        slot = ports.get((domain, root), 0) + 1
        ports[(domain, root)] = slot
        placed.append((f"pci{domain:0{width}x}:{root:02x}", _name(domain, root, slot, 0)))
    return placed


def _resource(gpu: PciGpu, index: int) -> str:
    _, bus, device, _ = _parts(gpu.bus_id)
    base = 0x20000000000 + ((index * 256 + bus) << 36) + (device << 32)
    bars = {
        0: (_BAR0_BYTES, _MEM_FLAGS),
        1: (gpu.bar1_bytes, _PREFETCH64_FLAGS),
        3: (_BAR3_BYTES, _PREFETCH64_FLAGS),
    }
    lines = []
    offset = 0
    for bar in range(_RESOURCE_LINES):
        size, flags = bars.get(bar, (0, 0))
        if size:
            start = base + offset
            lines.append(f"0x{start:016x} 0x{start + size - 1:016x} 0x{flags:016x}")
            offset += size
        else:
            lines.append(f"0x{0:016x} 0x{0:016x} 0x{0:016x}")
    return "\n".join(lines) + "\n"


def _config_space(vendor: int, device: int, pci_class: int, subsystem: int, header: int) -> bytes:
    """The first 256 bytes of a function's PCI configuration space (``config``): ids,
    class, header type and, for an endpoint, the subsystem ids; no capability list (a
    reader looking for the vGPU capability finds none, as on a bare-metal GPU)."""
    space = bytearray(256)
    space[0:4] = (vendor | device << 16).to_bytes(4, "little")
    space[4:6] = (0x0006).to_bytes(2, "little")  # memory and bus-master enabled
    space[8] = 0xA1  # revision
    space[9:12] = pci_class.to_bytes(3, "little")
    space[14] = header
    if header == 0:
        space[0x2C:0x30] = subsystem.to_bytes(4, "little")
    return bytes(space)


def _function(tree: FileTree, path: str, depth: int, values: dict[str, str]) -> None:
    for name, text in values.items():
        tree.add(f"{path}/{name}", f"{text}\n")
    up = "../" * depth
    tree.link(f"{path}/subsystem", f"{up}bus/pci")


DMI_PRODUCT_NAME: Final = "class/dmi/id/product_name"
"""Where the firmware's system product name is, under ``sys/``: GPU feature discovery reads
it (``--machine-type-file``, default ``/sys/class/dmi/id/product_name``) for
``nvidia.com/gpu.machine``."""


def sys_tree(gpus: Sequence[PciGpu], driver_version: str, machine: str = "") -> FileTree:
    """The ``sys/`` tree for *gpus* (in minor-number order) and a driver of *driver_version*,
    on a node whose DMI product name is *machine* (none when empty)."""
    tree = FileTree()
    tree.add("module/nvidia/version", f"{driver_version}\n")
    if machine:
        tree.add(DMI_PRODUCT_NAME, f"{machine}\n")
    tree.mkdir("bus/pci/drivers/nvidia")
    for index, (gpu, (root, port)) in enumerate(zip(gpus, root_ports(gpus), strict=True)):
        name = sysfs_bus_id(gpu.bus_id)
        parent = f"devices/{root}"
        if port is not None:
            port_path = f"{parent}/{port}"
            _function(
                tree,
                port_path,
                3,
                {
                    "vendor": f"0x{ROOT_PORT_VENDOR:04x}",
                    "device": f"0x{ROOT_PORT_DEVICE:04x}",
                    "class": f"0x{ROOT_PORT_CLASS:06x}",
                    "numa_node": str(gpu.numa_node),
                    "local_cpulist": gpu.cpu_list,
                    "current_link_speed": link_speed(gpu.max_gen),
                    "current_link_width": str(gpu.max_width),
                    "max_link_speed": link_speed(gpu.max_gen),
                    "max_link_width": str(gpu.max_width),
                },
            )
            tree.add(
                f"{port_path}/config",
                _config_space(ROOT_PORT_VENDOR, ROOT_PORT_DEVICE, ROOT_PORT_CLASS, 0, 1),
                mode=0o644,
            )
            tree.link(f"bus/pci/devices/{port}", f"../../../{port_path}")
            parent = port_path
        path = f"{parent}/{name}"
        depth = path.count("/") + 1
        _function(
            tree,
            path,
            depth,
            {
                "vendor": f"0x{gpu.device_id & 0xFFFF:04x}",
                "device": f"0x{gpu.device_id >> 16:04x}",
                "subsystem_vendor": f"0x{gpu.subsystem_id & 0xFFFF:04x}",
                "subsystem_device": f"0x{gpu.subsystem_id >> 16:04x}",
                "class": f"0x{gpu.pci_class:06x}",
                "numa_node": str(gpu.numa_node),
                "local_cpulist": gpu.cpu_list,
                "current_link_speed": link_speed(gpu.cur_gen),
                "current_link_width": str(gpu.cur_width),
                "max_link_speed": link_speed(gpu.max_gen),
                "max_link_width": str(gpu.max_width),
                "enable": "1",
                "irq": "0",
            },
        )
        tree.add(f"{path}/resource", _resource(gpu, index))
        config = _config_space(
            gpu.device_id & 0xFFFF, gpu.device_id >> 16, gpu.pci_class, gpu.subsystem_id, 0
        )
        tree.add(f"{path}/config", config, mode=0o644)
        up = "../" * depth
        tree.link(f"{path}/driver", f"{up}bus/pci/drivers/nvidia")
        tree.link(f"{path}/iommu_group", f"{up}kernel/iommu_groups/{index}")
        tree.link(f"bus/pci/devices/{name}", f"../../../{path}")
        tree.link(f"bus/pci/drivers/nvidia/{name}", f"../../../../{path}")
        tree.link(f"kernel/iommu_groups/{index}/devices/{name}", f"../../../../{path}")
    return tree
