"""What NVML numbers print as, and the value formats the real tool uses everywhere.

Shared by the table, the ``-q`` report and the CSV queries, so that a state, a brand or a
power reading reads the same in every view (``Enabled``, ``P0``, ``49.68 W``, ``13.0``).
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

NA = "N/A"


def clock_stamp(seconds: float | None = None) -> str:
    """The date line of the table and the ``-q`` Timestamp: C's asctime, as the real tool
    prints it, the day of the month padded with a space (``Tue Dec  1 09:05:02 2026``).

    The clock is read with ``time.time()`` even when no time is given: ``localtime()`` alone
    reads ``time(NULL)``, the coarse clock, which can still be in the previous second when
    the fine clock every other stamp of the node uses has moved on."""
    return time.asctime(time.localtime(time.time() if seconds is None else seconds))


ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
}
BRANDS = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "Grid",
    5: "GeForce",
    6: "Titan",
    7: "NVIDIA Virtual Applications",
    8: "NVIDIA Virtual PC",
    9: "NVIDIA Virtual Compute Server",
    10: "NVIDIA RTX Virtual Workstation",
    11: "NVIDIA Cloud Gaming",
    12: "Quadro RTX",
    13: "NVIDIA RTX",
    14: "NVIDIA",
    15: "GeForce RTX",
    16: "Titan RTX",
}
VIRTUALIZATION = {0: "None", 1: "Pass-Through", 2: "VGPU", 3: "Host VGPU", 4: "Host VSGA"}
COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
ADDRESSING = {0: "None", 1: "HMM", 2: "ATS"}
GOM = {0: "All On", 1: "Compute", 2: "Low Double Precision"}
FABRIC_STATES = {0: NA, 1: "Not Started", 2: "In Progress", 3: "Completed"}
FABRIC_SUMMARY = {0: NA, 1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}
TRUE_FALSE = {0: NA, 1: "True", 2: "False"}
BANDWIDTH = {0: NA, 1: "Degraded", 2: "Full"}
INCORRECT_CONFIG = {
    0: NA,
    1: "None",
    2: "Incorrect SysGUID",
    3: "Incorrect Chassis Serial Number",
    4: "No Partition",
    5: "Insufficient NVLinks",
    6: "Incompatible GPU Firmware",
    7: "Invalid Location",
    8: "GPU State Invalid",
}
RECOVERY = {
    0: "None",
    1: "Reset",
    2: "Node Reboot",
    3: "Drain P2P",
    4: "Drain and Reset",
    5: "Recover IMEX Domain",
    6: "Bus Reset",
    7: "System Reboot",
}
PEER_TYPES = {0: "Direct Connected", 1: "Switch Connected"}
NOT_REPORTED = 0xFF
"""A platform slot or tray number of 255: the GPU sits in no rack slot (an HGX baseboard)."""


def platform_slot(v: int) -> str:
    """A platform slot / tray number, N/A where the platform reports none."""
    return NA if int(v) == NOT_REPORTED else str(int(v))


def enabled(v: int) -> str:
    return "Enabled" if v else "Disabled"


def yes_no(v: int) -> str:
    return "Yes" if v else "No"


def mib(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB"


def watts(mw: int | float) -> str:
    return f"{mw / 1000:.2f} W"


def mhz(v: int) -> str:
    return f"{v} MHz"


def celsius(v: int) -> str:
    return f"{v} C"


def pct(v: int) -> str:
    return f"{v} %"


def pstate(v: int) -> str:
    return "Unknown" if v == 32 or v < 0 else f"P{v}"


def cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def fabric_uuid(raw: Any) -> str:
    h = bytes(raw).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def timestamp_us(us: int) -> str:
    """Microseconds since the epoch as local ``YYYY/MM/DD HH:MM:SS.mmm``, the tool's stamp."""
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(us // 1_000_000)) + (
        f".{us // 1000 % 1000:03d}"
    )
