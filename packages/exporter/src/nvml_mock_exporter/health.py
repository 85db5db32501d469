"""``DCGM_EXP_GPU_HEALTH_STATUS``: DCGM's health watches, derived from what NVML shows.

dcgm-exporter reports one series per GPU and health watch (``health_watch``: ``PCIE``,
``NVLINK``, ``PMU``, ``MCU``, ``MEM``, ``SM``, ``INFOROM``, ``THERMAL``, ``POWER``,
``DRIVER``, ``ALL``) with DCGM's result as the value (0 pass, 10 warn, 20 fail) and the
incident's error code as ``health_error_code`` (``DCGM_FR_OK`` when it passes). DCGM's
health checks watch the same conditions the mock's faults produce, so the incidents here
follow them:

- MEM: fail ``DCGM_FR_VOLATILE_DBE_DETECTED`` (volatile double-bit ECC errors), fail
  ``DCGM_FR_ROW_REMAP_FAILURE`` (a row remapping failed), warn ``DCGM_FR_PENDING_ROW_REMAP``
  or ``DCGM_FR_PENDING_PAGE_RETIREMENTS`` (a remap or a retirement pending);
- NVLINK: fail ``DCGM_FR_NVLINK_DOWN`` (a link down), warn ``DCGM_FR_NVLINK_ERROR_THRESHOLD``
  (CRC, replay or recovery errors);
- THERMAL: warn ``DCGM_FR_CLOCK_THROTTLE_THERMAL`` (a thermal slowdown clock event reason);
- POWER: warn ``DCGM_FR_CLOCK_THROTTLE_POWER`` (a power brake clock event reason);
- SM, MEM, NVLINK, PMU, PCIE: ``DCGM_FR_XID_ERROR`` for an Xid within the Xid window, on
  the watch the Xid belongs to (79 on PCIE, 48/94/95 on MEM, 74 on NVLINK, 13/31/43 on SM);
- PCIE and ALL: fail ``DCGM_FR_FALLEN_OFF_BUS`` for a lost GPU.

``ALL`` is the worst of the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["FAIL", "PASS", "WARN", "WATCHES", "health"]

PASS: Final = 0
WARN: Final = 10
FAIL: Final = 20
WATCHES: Final = (
    "PCIE", "NVLINK", "PMU", "MCU", "MEM", "SM", "INFOROM", "THERMAL", "POWER", "DRIVER", "ALL",
)  # fmt: skip

_THERMAL_REASONS: Final = 0x20 | 0x40  # SW and HW thermal slowdown
_POWER_BRAKE: Final = 0x80
# Xid -> (watch, result): what DCGM's health checks make of each Xid the mock injects
_XIDS: Final[dict[int, tuple[str, int]]] = {
    13: ("SM", WARN),
    31: ("SM", WARN),
    43: ("SM", WARN),
    45: ("SM", WARN),
    48: ("MEM", FAIL),
    63: ("MEM", WARN),
    64: ("MEM", FAIL),
    74: ("NVLINK", FAIL),
    79: ("PCIE", FAIL),
    92: ("MEM", WARN),
    94: ("MEM", WARN),
    95: ("MEM", FAIL),
    119: ("PMU", FAIL),
    120: ("PMU", FAIL),
}


def health(values: Mapping[str, float], xids: Mapping[int, int]) -> dict[str, tuple[int, str]]:
    """Watch -> (result, error code) for one GPU's readings and its Xids in the window."""
    found: dict[str, tuple[int, str]] = {}

    def incident(watch: str, result: int, code: str) -> None:
        if result > found.get(watch, (PASS, ""))[0]:
            found[watch] = (result, code)

    if values.get("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0) > 0:
        incident("MEM", FAIL, "DCGM_FR_VOLATILE_DBE_DETECTED")
    if values.get("DCGM_FI_DEV_ROW_REMAP_FAILURE", 0) > 0:
        incident("MEM", FAIL, "DCGM_FR_ROW_REMAP_FAILURE")
    if values.get("_remap_pending", 0) > 0:
        incident("MEM", WARN, "DCGM_FR_PENDING_ROW_REMAP")
    if values.get("DCGM_FI_DEV_RETIRED_PENDING", 0) > 0:
        incident("MEM", WARN, "DCGM_FR_PENDING_PAGE_RETIREMENTS")
    if values.get("_links_down", 0) > 0:
        incident("NVLINK", FAIL, "DCGM_FR_NVLINK_DOWN")
    if any(
        values.get(name, 0) > 0
        for name in (
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        )
    ):
        incident("NVLINK", WARN, "DCGM_FR_NVLINK_ERROR_THRESHOLD")
    reasons = int(values.get("_clock_reasons", 0))
    if reasons & _THERMAL_REASONS:
        incident("THERMAL", WARN, "DCGM_FR_CLOCK_THROTTLE_THERMAL")
    if reasons & _POWER_BRAKE:
        incident("POWER", WARN, "DCGM_FR_CLOCK_THROTTLE_POWER")
    for xid in xids:
        watch, result = _XIDS.get(xid, ("SM", WARN))
        incident(watch, result, "DCGM_FR_XID_ERROR")
    worst = max(found.values(), default=(PASS, "DCGM_FR_OK"))
    return {
        watch: worst if watch == "ALL" else found.get(watch, (PASS, "DCGM_FR_OK"))
        for watch in WATCHES
    }
