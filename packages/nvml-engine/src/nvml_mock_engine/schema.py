"""The keys of the rendered state format and the type of each value.

`native/STATE-FORMAT.md` is the contract between this package and the C library that
parses the state. This module is its Python half: one table per section, in the order
the renderer writes them, each key with the C type its value must fit. Profiles, config
overrides and the renderer all validate against these tables, so a value the C parser
would refuse is refused here first, with the config key named instead of a state line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

__all__ = [
    "GPU_KEYS",
    "MAX_GPUS",
    "SYSTEM_KEYS",
    "KeySpec",
    "Kind",
    "format_value",
    "parse_cpu_list",
    "validate_value",
]

MAX_GPUS: Final = 64
MAX_VALUE_BYTES: Final = 255

_UUID_HEX = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_GPU_UUID_RE: Final = re.compile(rf"GPU-{_UUID_HEX}")
_FABRIC_UUID_RE: Final = re.compile(_UUID_HEX)
_BUS_ID_RE: Final = re.compile(r"[0-9a-fA-F]{8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_CPU_RANGE_RE: Final = re.compile(r"(\d+)(?:-(\d+))?")
_MAX_CPU: Final = 1023
"""The highest CPU the library's affinity mask holds (``STATE_MAX_CPUS`` - 1)."""


class Kind(Enum):
    """The value types the state format knows."""

    STRING = "string"
    UINT32 = "uint32"
    UINT64 = "uint64"
    INT32 = "int32"
    FLAG = "flag"
    HEX32 = "hex32"
    GPU_UUID = "gpu-uuid"
    FABRIC_UUID = "fabric-uuid"
    BUS_ID = "bus-id"
    BUS_ID_LIST = "bus-id-list"
    CPU_LIST = "cpu-list"


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One key: its type and bounds (inclusive) as the C parser enforces them."""

    kind: Kind
    max_len: int = MAX_VALUE_BYTES
    minimum: int | None = None
    maximum: int | None = None


_S = Kind.STRING
_U32 = KeySpec(Kind.UINT32)
_U64 = KeySpec(Kind.UINT64)
_FLAG = KeySpec(Kind.FLAG)


def _str(max_len: int) -> KeySpec:
    return KeySpec(_S, max_len=max_len)


def _int(minimum: int, maximum: int) -> KeySpec:
    return KeySpec(Kind.INT32, minimum=minimum, maximum=maximum)


SYSTEM_KEYS: Final[Mapping[str, KeySpec]] = {
    "driver_version": _str(79),
    "nvml_version": _str(79),
    "cuda_driver_version": _int(1000, 99999),
    "device_count": KeySpec(Kind.UINT32, maximum=MAX_GPUS),
    "node_name": _str(MAX_VALUE_BYTES),
    "profile": _str(63),
}
"""``[system]`` keys, in output order."""

GPU_KEYS: Final[Mapping[str, KeySpec]] = {
    "name": _str(95),
    "uuid": KeySpec(Kind.GPU_UUID, max_len=79),
    "serial": _str(29),
    "pdi": _U64,
    "board_part_number": _str(79),
    "board_id": KeySpec(Kind.HEX32),
    "minor_number": _U32,
    "brand": _int(0, 64),
    "architecture": _U32,
    "cuda_cc_major": _int(0, 99),
    "cuda_cc_minor": _int(0, 99),
    "multi_gpu_board": _FLAG,
    "module_id": _U32,
    "vbios_version": _str(31),
    "inforom_image_version": _str(15),
    "inforom_oem": _str(15),
    "inforom_ecc": _str(15),
    "inforom_power": _str(15),
    "bbx_flush_time_us": _U64,
    "bbx_flush_duration_us": _U32,
    "virtualization_mode": _int(0, 16),
    "addressing_mode": _int(-1, 2),
    "pci_bus_id": KeySpec(Kind.BUS_ID),
    "pci_device_id": KeySpec(Kind.HEX32),
    "pci_subsystem_id": KeySpec(Kind.HEX32),
    "pcie_max_gen": KeySpec(Kind.UINT32, minimum=1, maximum=7),
    "pcie_max_width": KeySpec(Kind.UINT32, minimum=1, maximum=32),
    "pcie_cur_gen": KeySpec(Kind.UINT32, minimum=1, maximum=7),
    "pcie_cur_width": KeySpec(Kind.UINT32, minimum=1, maximum=32),
    "memory_total_bytes": KeySpec(Kind.UINT64, minimum=1),
    "memory_reserved_bytes": _U64,
    "memory_used_bytes": _U64,
    "memory_bus_width": _U32,
    "bar1_total_bytes": _U64,
    "bar1_used_bytes": _U64,
    "numa_node": _int(-1, 1023),
    "cpu_affinity": KeySpec(Kind.CPU_LIST),
    "persistence_mode": _FLAG,
    "display_mode": _FLAG,
    "display_active": _FLAG,
    "compute_mode": _int(0, 3),
    "clock_graphics_mhz": _U32,
    "clock_sm_mhz": _U32,
    "clock_mem_mhz": _U32,
    "clock_video_mhz": _U32,
    "max_clock_graphics_mhz": _U32,
    "max_clock_sm_mhz": _U32,
    "max_clock_mem_mhz": _U32,
    "max_clock_video_mhz": _U32,
    "app_clock_graphics_mhz": _U32,
    "app_clock_mem_mhz": _U32,
    "power_usage_mw": _U32,
    "power_limit_mw": _U32,
    "power_default_limit_mw": _U32,
    "power_min_limit_mw": _U32,
    "power_max_limit_mw": _U32,
    "energy_mj": _U64,
    "power_average_mw": _U32,
    "memory_power_average_mw": _U32,
    "module_power_average_mw": _U32,
    "module_power_usage_mw": _U32,
    "module_power_limit_mw": _U32,
    "module_power_default_limit_mw": _U32,
    "module_power_min_limit_mw": _U32,
    "module_power_max_limit_mw": _U32,
    "temperature_c": KeySpec(Kind.UINT32, maximum=200),
    "temp_shutdown_c": KeySpec(Kind.UINT32, maximum=200),
    "temp_slowdown_c": KeySpec(Kind.UINT32, maximum=200),
    "temp_gpu_max_c": KeySpec(Kind.UINT32, maximum=200),
    "temp_mem_max_c": KeySpec(Kind.UINT32, maximum=200),
    "margin_temperature_supported": _FLAG,
    "memory_temperature_c": KeySpec(Kind.UINT32, maximum=200),
    "num_fans": KeySpec(Kind.UINT32, maximum=32),
    "fan_speed_pct": KeySpec(Kind.UINT32, maximum=100),
    "util_gpu_pct": KeySpec(Kind.UINT32, maximum=100),
    "util_mem_pct": KeySpec(Kind.UINT32, maximum=100),
    "pstate": _int(0, 15),
    "ecc_enabled": _FLAG,
    "ecc_supported": _FLAG,
    "remapped_rows_supported": _FLAG,
    "retired_pages_supported": _FLAG,
    "row_remapper_banks": _U32,
    "unrepairable_memory": _int(-1, 1),
    "mig_capable": _FLAG,
    "nvlink_count": KeySpec(Kind.UINT32, maximum=18),
    "nvlink_version": KeySpec(Kind.UINT32, maximum=8),
    "nvlink_remote_bus_ids": KeySpec(Kind.BUS_ID_LIST),
    "fabric_attached": _FLAG,
    "fabric_cluster_uuid": KeySpec(Kind.FABRIC_UUID),
    "fabric_clique_id": _U32,
    "fabric_state": _int(0, 3),
    "fabric_health_mask": KeySpec(Kind.HEX32),
    "gpu_group": _U32,
    "c2c_enabled": _FLAG,
    "platform_supported": _FLAG,
    "platform_chassis_serial": _str(16),
    "platform_slot_number": KeySpec(Kind.UINT32, maximum=255),
    "platform_tray_index": KeySpec(Kind.UINT32, maximum=255),
    "platform_host_id": KeySpec(Kind.UINT32, maximum=255),
    "platform_peer_type": KeySpec(Kind.UINT32, maximum=255),
    "platform_ib_guid": _U64,
}
"""``[gpu N]`` keys, in output order."""

_LIMITS: Final = {
    Kind.UINT32: (0, 2**32 - 1),
    Kind.UINT64: (0, 2**64 - 1),
    Kind.INT32: (-(2**31), 2**31 - 1),
    Kind.HEX32: (0, 2**32 - 1),
    Kind.FLAG: (0, 1),
}

ValueType = str | int | bool | tuple[str, ...]


def parse_cpu_list(text: str) -> tuple[tuple[int, int], ...]:
    """Parse a Linux cpu list (``0-71,144-215``) into inclusive ranges; ValueError if malformed."""
    ranges: list[tuple[int, int]] = []
    if not text:
        raise ValueError("must be a cpu list such as 0-71,144-215")
    for part in text.split(","):
        match = _CPU_RANGE_RE.fullmatch(part)
        if match is None:
            raise ValueError(f"{part!r} is not a cpu or cpu range (a list such as 0-71,144-215)")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low:
            raise ValueError(f"range {part!r} runs backwards")
        if high > _MAX_CPU:
            raise ValueError(f"cpu {high} is above the supported {_MAX_CPU}")
        ranges.append((low, high))
    return tuple(ranges)


def validate_value(spec: KeySpec, value: object) -> ValueType:
    """Check *value* against *spec* and return it normalised; ValueError says what is wrong.

    Integers may come from YAML as ints or (for ids) as ``0x`` strings; booleans are accepted
    for flags. The message is written to follow ``<key>: `` in an error.
    """
    kind = spec.kind
    if kind in _LIMITS:
        number = _as_int(value, allow_hex=kind is Kind.HEX32 or kind is Kind.UINT32)
        if number is None:
            if kind is Kind.FLAG:
                raise ValueError(f"must be 0/1 or true/false, got {value!r}")
            raise ValueError(f"must be an integer, got {value!r}")
        low, high = _LIMITS[kind]
        if spec.minimum is not None:
            low = max(low, spec.minimum)
        if spec.maximum is not None:
            high = min(high, spec.maximum)
        if not low <= number <= high:
            if kind is Kind.FLAG:
                raise ValueError(f"must be 0/1 or true/false, got {value!r}")
            if low == 1 and high >= 2**32 - 1:
                raise ValueError(f"must be a positive integer, got {value!r}")
            raise ValueError(f"must be an integer in {low}..{high}, got {value!r}")
        return number
    if kind is Kind.BUS_ID_LIST:
        items = value.split(",") if isinstance(value, str) and value else value
        if items in ("", []):
            return ()
        if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
            raise ValueError(f"must be a list of PCI bus ids, got {value!r}")
        for item in items:
            if not _BUS_ID_RE.fullmatch(item):
                raise ValueError(f"{item!r} is not a PCI bus id of the form 00000000:BB:DD.F")
        normalised = tuple(i.upper() for i in items)
        if len(",".join(normalised)) > spec.max_len:
            raise ValueError(f"list is {len(normalised)} bus ids, longer than {spec.max_len} bytes")
        return normalised
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {value!r}")
    _check_text(value, spec.max_len)
    if kind is Kind.GPU_UUID and not _GPU_UUID_RE.fullmatch(value):
        raise ValueError(f"must look like GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, got {value!r}")
    if kind is Kind.FABRIC_UUID and not _FABRIC_UUID_RE.fullmatch(value):
        raise ValueError(f"must be a UUID xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, got {value!r}")
    if kind is Kind.BUS_ID:
        if not _BUS_ID_RE.fullmatch(value):
            raise ValueError(f"must be a PCI bus id of the form 00000000:BB:DD.F, got {value!r}")
        return value.upper()
    if kind is Kind.CPU_LIST:
        parse_cpu_list(value)
    return value


def format_value(spec: KeySpec, value: ValueType) -> str:
    """Write a validated value the way the state format spells it."""
    if spec.kind is Kind.HEX32:
        assert isinstance(value, int)
        return f"0x{value:08X}"
    if spec.kind is Kind.BUS_ID_LIST:
        assert isinstance(value, tuple)
        return ",".join(value)
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _as_int(value: object, *, allow_hex: bool) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and allow_hex and re.fullmatch(r"0[xX][0-9a-fA-F]{1,16}", value):
        return int(value, 16)
    return None


def _check_text(value: str, max_len: int) -> None:
    if "\n" in value or "\r" in value or "\x00" in value:
        raise ValueError("must be a single line of text")
    size = len(value.encode("utf-8"))
    if size > max_len:
        raise ValueError(f"is {size} bytes, longer than the {max_len} the state format allows")
