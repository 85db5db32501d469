"""Every family the exporter can serve: dcgm-exporter's name, type and HELP text, declared once.

The names, types and HELP texts are dcgm-exporter 4.x's (its ``etc/default-counters.csv``,
``etc/dcp-metrics-included.csv`` and the exporter-made families), so that a counters file
written for dcgm-exporter selects the same families here and a dashboard finds them. The
``tests/fixtures/dcgm-exporter-counters.csv`` copy of those facts and ``test_drift.py`` keep
this table honest. What NVML call answers each family is in :mod:`nvml_mock_exporter.readings`.

``DEFAULT_COUNTERS`` is dcgm-exporter's default set (20 device fields, the driver-version
label and 5 profiling fields), served when no counters file is given, plus the exporter-made
Xid count and health families.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "DEFAULT_COUNTERS",
    "FIELDS",
    "KINDS",
    "Field",
    "Kind",
]

Kind = Literal["gauge", "counter", "label"]
KINDS: Final[tuple[Kind, ...]] = ("gauge", "counter", "label")


@dataclass(frozen=True, slots=True)
class Field:
    """One family: its name, its dcgm-exporter type and HELP text, and whether it is GPM's."""

    name: str
    kind: Kind
    help: str
    profiling: bool = False
    """A DCGM_FI_PROF_* family, answered through GPM (Hopper and later)."""
    exporter: bool = False
    """Made by the exporter itself (DCGM_EXP_*), not read from one NVML value."""


def _f(name: str, kind: Kind, text: str, **flags: bool) -> Field:
    return Field(name, kind, text, **flags)


FIELDS: Final[dict[str, Field]] = {
    f.name: f
    for f in (
        # Clocks
        _f("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
        _f("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
        # Temperature
        _f("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
        _f("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
        # Power
        _f("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
        _f(
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "counter",
            "Total energy consumption since boot (in mJ).",
        ),
        # PCIe
        _f("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
        # Utilization
        _f("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
        _f("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
        _f("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
        _f("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
        # Errors and violations
        _f("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
        _f(
            "DCGM_FI_DEV_POWER_VIOLATION",
            "counter",
            "Throttling duration due to power constraints (in ns).",
        ),
        _f(
            "DCGM_FI_DEV_THERMAL_VIOLATION",
            "counter",
            "Throttling duration due to thermal constraints (in ns).",
        ),
        # Memory usage
        _f("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
        _f("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
        _f("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
        # ECC
        _f(
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "counter",
            "Total number of single-bit volatile ECC errors.",
        ),
        _f(
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "counter",
            "Total number of double-bit volatile ECC errors.",
        ),
        _f(
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
            "counter",
            "Total number of single-bit persistent ECC errors.",
        ),
        _f(
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
            "counter",
            "Total number of double-bit persistent ECC errors.",
        ),
        # Retired pages
        _f(
            "DCGM_FI_DEV_RETIRED_SBE",
            "counter",
            "Total number of retired pages due to single-bit errors.",
        ),
        _f(
            "DCGM_FI_DEV_RETIRED_DBE",
            "counter",
            "Total number of retired pages due to double-bit errors.",
        ),
        _f("DCGM_FI_DEV_RETIRED_PENDING", "counter", "Total number of pages pending retirement."),
        # NVLink
        _f(
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            "counter",
            "Total number of NVLink flow-control CRC errors.",
        ),
        _f(
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
            "counter",
            "Total number of NVLink data CRC errors.",
        ),
        _f(
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
            "counter",
            "Total number of NVLink retries.",
        ),
        _f(
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
            "counter",
            "Total number of NVLink recovery errors.",
        ),
        _f(
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            "counter",
            "Total number of NVLink bandwidth counters for all lanes.",
        ),
        # vGPU license status
        _f("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
        # Remapped rows
        _f(
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "counter",
            "Number of remapped rows for uncorrectable errors",
        ),
        _f(
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            "counter",
            "Number of remapped rows for correctable errors",
        ),
        _f("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
        # Static configuration, shown as labels on the other families
        _f("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
        _f("DCGM_FI_NVML_VERSION", "label", "NVML Version"),
        _f("DCGM_FI_DEV_SERIAL", "label", "Device Serial Number"),
        _f("DCGM_FI_DEV_VBIOS_VERSION", "label", "VBIOS version of the device"),
        # Datacenter profiling (DCP), through GPM
        _f(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "gauge",
            "Ratio of time the graphics engine is active.",
            profiling=True,
        ),
        _f(
            "DCGM_FI_PROF_SM_ACTIVE",
            "gauge",
            "The ratio of cycles an SM has at least 1 warp assigned.",
            profiling=True,
        ),
        _f(
            "DCGM_FI_PROF_SM_OCCUPANCY",
            "gauge",
            "The ratio of number of warps resident on an SM.",
            profiling=True,
        ),
        _f(
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "gauge",
            "Ratio of cycles the tensor (HMMA) pipe is active.",
            profiling=True,
        ),
        _f(
            "DCGM_FI_PROF_DRAM_ACTIVE",
            "gauge",
            "Ratio of cycles the device memory interface is active sending or receiving data.",
            profiling=True,
        ),
        _f(
            "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
            "gauge",
            "Ratio of cycles the fp64 pipes are active.",
            profiling=True,
        ),
        _f(
            "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
            "gauge",
            "Ratio of cycles the fp32 pipes are active.",
            profiling=True,
        ),
        _f(
            "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
            "gauge",
            "Ratio of cycles the fp16 pipes are active.",
            profiling=True,
        ),
        _f(
            "DCGM_FI_PROF_PCIE_TX_BYTES",
            "gauge",
            "The rate of data transmitted over the PCIe bus - including both protocol headers "
            "and data payloads - in bytes per second.",
            profiling=True,
        ),
        _f(
            "DCGM_FI_PROF_PCIE_RX_BYTES",
            "gauge",
            "The rate of data received over the PCIe bus - including both protocol headers "
            "and data payloads - in bytes per second.",
            profiling=True,
        ),
        # Made by the exporter
        _f(
            "DCGM_EXP_XID_ERRORS_COUNT",
            "counter",
            "reported XIDs during last window",
            exporter=True,
        ),
        _f("DCGM_EXP_GPU_HEALTH_STATUS", "counter", "DCGM reported health status", exporter=True),
    )
}
"""Every family the exporter knows, by name, in dcgm-exporter's order."""

DEFAULT_COUNTERS: Final[tuple[str, ...]] = (
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DRIVER_VERSION",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_EXP_GPU_HEALTH_STATUS",
)
"""dcgm-exporter's ``default-counters.csv`` set, plus the Xid-count and health families."""
