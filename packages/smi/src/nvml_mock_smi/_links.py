"""``nvlink -e``, ``-R``, ``-gt d|r`` and ``topo -p2p r|w|n|a|p``; and the real tool's line for a
GPU without NVLink, which every ``nvlink`` view prints in its place.

The per-link views print one block per GPU (``GPU 0: NAME (UUID: ...)``) and tab-indented
``Link N: ...`` lines, as ``nvlink -s`` does; the error counters come from
``nvmlDeviceGetNvLinkErrorCounter``, the throughput counters from the NVLink throughput field
values scoped to the link. The P2P matrix asks ``nvmlDeviceGetP2PStatus`` for every ordered
pair, with the matrix header of ``topo -m`` and the status legend.
"""

from __future__ import annotations

from ctypes import byref, c_int, c_uint, c_ulonglong

from ._generation import parse_driver_version
from ._nvml import ERROR_NOT_SUPPORTED, FI_NVLINK_REMOTE_NVLINK_ID, Device, NvmlError
from ._topology import _header, link_count

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

NO_NVLINK = "Device does not have or support Nvlink"
IN_MIG_MODE = "Nvlink queries are not supported for Devices in MIG mode"
"""What the real tool prints for a GPU in MIG mode instead of its links."""
ERROR_COUNTERS = ((0, "Replay Errors"), (1, "Recovery Errors"), (2, "CRC Errors"))
THROUGHPUT = {
    "d": ((138, "Data Tx"), (139, "Data Rx")),
    "r": ((140, "Raw Tx"), (141, "Raw Rx")),
}
P2P_CAPS = {"r": 0, "w": 1, "n": 2, "a": 3, "p": 4}
P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DR", 5: "NS", 6: "U"}
DR_FROM = (610,)
"""The first driver whose legend names ``DR`` (disabled by regkey), as its captures show."""


def _blocks(devices: list[Device], lines_of: Callable[[Device], list[str]]) -> str:
    """One block per GPU; a GPU without links prints the real tool's line instead."""
    out: list[str] = []
    for d in devices:
        out.append(_header(d))
        refusal = _no_links(d)
        if refusal:
            out.append(refusal)
            continue
        out += lines_of(d)
    return "\n".join(out) + "\n"


def _no_links(d: Device) -> str:
    """The real tool's line for a GPU whose links it does not list, or ``""``."""
    if link_count(d) == 0:
        return NO_NVLINK
    try:
        in_mig = d.mig_mode()[0] == 1
    except NvmlError:
        in_mig = False
    return IN_MIG_MODE if in_mig else ""


def per_gpu(devices: list[Device], view: Callable[[list[Device]], str]) -> str:
    """``view`` (``nvlink -s`` or ``-c``) GPU by GPU, the real line for one without NVLink or
    in MIG mode."""
    return "".join(
        f"{_header(d)}\n{refusal}\n" if (refusal := _no_links(d)) else view([d]) for d in devices
    )


def _value(exc: NvmlError) -> str:
    return "N/A" if exc.code == ERROR_NOT_SUPPORTED else exc.text


def error_counters(devices: list[Device]) -> str:
    """``nvlink -e``: replay, recovery and CRC errors of every link, a blank line between."""

    def lines(d: Device) -> list[str]:
        out: list[str] = []
        for link in range(link_count(d)):
            if out:
                out.append("")
            for counter, label in ERROR_COUNTERS:
                value = c_ulonglong()
                try:
                    d.nvml.call(
                        "nvmlDeviceGetNvLinkErrorCounter",
                        d.handle,
                        c_uint(link),
                        c_int(counter),
                        byref(value),
                    )
                    text = str(value.value)
                except NvmlError as exc:
                    text = _value(exc)
                out.append(f"\t Link {link}: {label}: {text}")
        return out

    return _blocks(devices, lines)


def remote_links(devices: list[Device]) -> str:
    """``nvlink -R``: each link's far end, ``Link 0: Remote Device 00000000:07:00.0: Link 46``
    (the remote PCI bus id, and the link number there from
    ``NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID``); a link that cannot say prints the error."""

    def lines(d: Device) -> list[str]:
        out: list[str] = []
        for link in range(link_count(d)):
            try:
                bus = d.nvlink_remote_pci(link).busId.decode()
                far = int(d.field_value(FI_NVLINK_REMOTE_NVLINK_ID, link))
                text = f"Remote Device {bus}: Link {far}"
            except NvmlError as exc:
                text = _value(exc)
            out.append(f"\t Link {link}: {text}")
        return out

    return _blocks(devices, lines)


def throughput(devices: list[Device], kind: str) -> str:
    """``nvlink -gt d|r``: transmitted and received KiB of every link (data, or raw)."""

    def lines(d: Device) -> list[str]:
        out: list[str] = []
        for link in range(link_count(d)):
            for field, label in THROUGHPUT[kind]:
                try:
                    text = f"{int(d.field_value(field, link))} KiB"
                except NvmlError as exc:
                    text = _value(exc)
                out.append(f"\t Link {link}: {label}: {text}")
        return out

    return _blocks(devices, lines)


def p2p_matrix(devices: list[Device], kind: str) -> str:
    """``topo -p2p r|w|n|a|p``: the P2P status of every ordered GPU pair, and its legend."""
    head = "".join(f"GPU{i}\t" for i in range(len(devices))).rstrip("\t")
    out = [f"\t\x1b[4m{head}\x1b[0m"]
    for i, a in enumerate(devices):
        cells = []
        for j, b in enumerate(devices):
            if i == j:
                cells.append("X")
                continue
            status = c_int()
            try:
                a.nvml.call(
                    "nvmlDeviceGetP2PStatus",
                    a.handle,
                    b.handle,
                    c_int(P2P_CAPS[kind]),
                    byref(status),
                )
                cells.append(P2P_STATUS.get(status.value, "U"))
            except NvmlError:
                cells.append("U")
        out.append(f" GPU{i}\t" + "\t".join(cells))
    legend = [
        "",
        "Legend:",
        "",
        "  X    = Self",
        "  OK   = Status Ok",
        "  CNS  = Chipset not supported",
        "  GNS  = GPU not supported",
        "  TNS  = Topology not supported",
        "  NS   = Not supported",
    ]
    if devices and _driver(devices[0]) >= DR_FROM:
        legend.append("  DR   = Disabled by regkey")
    legend += ["  U    = Unknown", ""]
    return "\n".join(out + legend) + "\n"


def _driver(device: Device) -> tuple[int, ...]:
    try:
        return parse_driver_version(device.nvml.driver_version())
    except NvmlError:
        return (9999,)
