"""``topo -m``, ``nvlink -s`` and ``nvlink -c``: how the GPUs connect.

The matrix cell between two GPUs is ``NV#`` when they share NVLinks (direct, or through
NVSwitches as on HGX boards, where every GPU reaches every other over all its links),
otherwise the PCIe path NVML reports (``nvmlDeviceGetTopologyCommonAncestor``). The header
row is underlined with ANSI escapes and cells are tab-separated, as parsers expect.
"""

from __future__ import annotations

from ctypes import byref, c_int, c_uint

from ._nvml import (
    ERROR_NOT_SUPPORTED,
    FI_NVLINK_GET_SPEED,
    FI_NVLINK_LINK_COUNT,
    Device,
    NvmlError,
)

MAX_LINKS = 18
P2P_CAPS_NVLINK = 2
TOPOLOGY_NAMES = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
LEGEND = "\n".join(
    [
        "",
        "Legend:",
        "",
        "  X    = Self",
        "  SYS  = Connection traversing PCIe as well as the SMP interconnect"
        " between NUMA nodes (e.g., QPI/UPI)",
        "  NODE = Connection traversing PCIe as well as the interconnect"
        " between PCIe Host Bridges within a NUMA node",
        "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
        "  PXB  = Connection traversing multiple PCIe bridges"
        " (without traversing the PCIe Host Bridge)",
        "  PIX  = Connection traversing at most a single PCIe bridge",
        "  NV#  = Connection traversing a bonded set of # NVLinks",
        "",
    ]
)
# GB/s per link by ``nvmlNvlinkVersion_t`` (1 = NVLink 1.0 ... 7 = 5.0, 8 = 6.0), for
# libraries that do not report the speed field.
LINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 26.562, 7: 50.0, 8: 100.0}


def link_count(device: Device) -> int:
    """The links the GPU has (active or not)."""
    try:
        return min(int(device.field_value(FI_NVLINK_LINK_COUNT)), 36)
    except NvmlError:
        pass
    count = 0
    for link in range(MAX_LINKS):
        try:
            device.nvlink_state(link)
        except NvmlError:
            break
        count += 1
    return count


def active_links(device: Device) -> list[int]:
    out = []
    for link in range(link_count(device)):
        try:
            if device.nvlink_state(link):
                out.append(link)
        except NvmlError:
            continue
    return out


def _remote_bus_ids(device: Device, links: list[int]) -> list[str]:
    out = []
    for link in links:
        try:
            out.append(device.nvlink_remote_pci(link).busId.decode().upper())
        except NvmlError:
            out.append("")
    return out


def _nvlink_peers(a: Device, b: Device, through_switches: int) -> bool:
    """Whether NVML says the two GPUs reach each other over NVLink (switched fabrics)."""
    status = c_int()
    try:
        a.nvml.call(
            "nvmlDeviceGetP2PStatus", a.handle, b.handle, c_int(P2P_CAPS_NVLINK), byref(status)
        )
    except NvmlError:
        return bool(through_switches)
    return status.value == 0


def cpu_list(mask_words: list[int]) -> str:
    cpus = [w * 64 + b for w, word in enumerate(mask_words) for b in range(64) if word >> b & 1]
    ranges: list[str] = []
    start = prev = None
    for cpu in [*cpus, None]:
        if cpu is not None and prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(ranges) if ranges else "N/A"


def matrix(devices: list[Device]) -> str:
    bus_ids = []
    for d in devices:
        try:
            bus_ids.append(d.pci_info().busId.decode().upper())
        except NvmlError:
            bus_ids.append("")
    links = [active_links(d) for d in devices]
    remotes = [_remote_bus_ids(d, ls) for d, ls in zip(devices, links, strict=True)]
    gpu_set = {b for b in bus_ids if b}
    switch_links = [sum(1 for r in rs if r and r not in gpu_set) for rs in remotes]

    head = "".join(f"GPU{i}\t" for i in range(len(devices)))
    out = [f"\t\x1b[4m{head}CPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"]
    for i, d in enumerate(devices):
        cells = []
        for j, other in enumerate(devices):
            if i == j:
                cells.append(" X ")
                continue
            direct = sum(1 for r in remotes[i] if r and r == bus_ids[j])
            if direct:
                cells.append(f"NV{direct}")
            elif (
                links[i]
                and links[j]
                and _nvlink_peers(d, other, switch_links[i] and switch_links[j])
            ):
                # Through NVSwitches every link of a GPU reaches every other GPU.
                cells.append(f"NV{min(len(links[i]), len(links[j]))}")
            else:
                try:
                    level = d.topology_common_ancestor(other)
                    cells.append(TOPOLOGY_NAMES.get(level, "SYS"))
                except NvmlError:
                    cells.append("N/A")
        try:
            affinity = cpu_list(d.cpu_affinity(16))
        except NvmlError:
            affinity = "N/A"
        try:
            numa = str(d.numa_node())
        except NvmlError:
            numa = "N/A"
        out.append(f"GPU{i}\t" + "\t".join(cells) + f"\t{affinity}\t{numa}\t\tN/A")
    return "\n".join(out) + "\n" + LEGEND


def _header(device: Device) -> str:
    try:
        name = device.name()
    except NvmlError as exc:
        name = exc.text
    try:
        uuid = device.uuid()
    except NvmlError as exc:
        uuid = exc.text
    return f"GPU {device.index}: {name} (UUID: {uuid})"


def _speed(device: Device, link: int) -> str:
    try:
        mbps = device.field_value(FI_NVLINK_GET_SPEED, link)
        if mbps:
            return f"{mbps / 1000:.3f} GB/s"
    except NvmlError:
        pass
    try:
        gbps = LINK_GBPS.get(device.nvlink_version(link))
    except NvmlError:
        gbps = None
    return f"{gbps:.3f} GB/s" if gbps else "N/A"


def nvlink_status(devices: list[Device]) -> str:
    out = []
    for d in devices:
        out.append(_header(d))
        for link in range(link_count(d)):
            try:
                state = d.nvlink_state(link)
            except NvmlError as exc:
                out.append(
                    f"\t Link {link}: {'N/A' if exc.code == ERROR_NOT_SUPPORTED else exc.text}"
                )
                continue
            out.append(f"\t Link {link}: {_speed(d, link) if state else '<inactive>'}")
    return "\n".join(out) + "\n"


CAPABILITIES = [
    (0, "P2P is supported"),
    (1, "Access to system memory supported"),
    (2, "P2P atomics supported"),
    (3, "System memory atomics supported"),
    (4, "SLI is supported"),
    (5, "Link is supported"),
]


def nvlink_capabilities(devices: list[Device]) -> str:
    out = []
    for d in devices:
        out.append(_header(d))
        for link in active_links(d):
            for cap, label in CAPABILITIES:
                result = c_uint()
                try:
                    d.nvml.call(
                        "nvmlDeviceGetNvLinkCapability",
                        d.handle,
                        c_uint(link),
                        c_uint(cap),
                        byref(result),
                    )
                    value = "true" if result.value else "false"
                except NvmlError as exc:
                    value = "N/A" if exc.code == ERROR_NOT_SUPPORTED else exc.text
                out.append(f"\t Link {link}, {label}: {value}")
    return "\n".join(out) + "\n"
