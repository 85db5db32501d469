"""Every declared key renders, parses and reaches its NVML getter, through nvidia-ml-py.

One GPU is rendered (through the engine's config overrides, as a user would set them) with a
distinctive value for every key; the library loads it, and each key is read back through the
getter ``keys.toml`` names for it. A key added to the declaration without a row here fails
``test_every_key_has_a_getter_check``.
"""

from __future__ import annotations

import ctypes
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.render import render_text
from nvml_mock_engine.schema import GPU_KEYS, SYSTEM_KEYS

CLUSTER = "6a5f6f1c-51a8-4b8c-9d0e-1f2a3b4c5d6e"
VALUES: dict[str, Any] = {
    "board_part_number": "699-2G520-0200-XYZ",
    "gpu_part_number": "2330-885-Z9",
    "sparse_operation_mode": 1,
    "pcie_atomics_outbound": "0x15",
    "pcie_atomics_inbound": "0x2A",
    "brand": 12,
    "multiprocessor_count": 131,
    "num_gpu_cores": 16767,
    "multi_gpu_board": 1,
    "vbios_version": "96.00.99.00.77",
    "inforom_image_version": "G520.0200.00.77",
    "inforom_oem": "2.7",
    "inforom_ecc": "7.77",
    "inforom_power": "1.7",
    "bbx_flush_time_us": 1787237943740000,
    "bbx_flush_duration_us": 4321,
    "virtualization_mode": 3,
    "addressing_mode": 2,
    "pci_device_id": "0x233110DE",
    "pci_subsystem_id": "0x16C210DE",
    "pcie_max_gen": 5,
    "pcie_max_width": 16,
    "pcie_cur_gen": 4,
    "pcie_cur_width": 8,
    "pcie_replay_counter": 17,
    "memory_total_bytes": 80 << 30,
    "memory_reserved_bytes": 512 << 20,
    "memory_used_bytes": 3 << 30,
    "memory_bus_width": 4096,
    "bar1_total_bytes": 64 << 30,
    "bar1_used_bytes": 5 << 20,
    "persistence_mode": 0,
    "display_mode": 1,
    "display_active": 1,
    "compute_mode": 2,
    "clock_graphics_mhz": 1410,
    "clock_sm_mhz": 1411,
    "clock_mem_mhz": 2600,
    "clock_video_mhz": 1200,
    "max_clock_graphics_mhz": 1980,
    "max_clock_sm_mhz": 1981,
    "max_clock_mem_mhz": 2619,
    "max_clock_video_mhz": 1545,
    "app_clock_graphics_mhz": 1700,
    "app_clock_mem_mhz": 2500,
    "clocks_event_reasons": 0x4,
    "power_usage_mw": 312345,
    "power_limit_mw": 650000,
    "power_default_limit_mw": 700000,
    "power_min_limit_mw": 200000,
    "power_max_limit_mw": 710000,
    "energy_mj": 123456789,
    "power_average_mw": 301000,
    "memory_power_average_mw": 41000,
    "module_power_average_mw": 901000,
    "module_power_usage_mw": 902000,
    "module_power_limit_mw": 2700000,
    "module_power_default_limit_mw": 2600000,
    "module_power_min_limit_mw": 1000000,
    "module_power_max_limit_mw": 2800000,
    "edpp_multiplier_pct": 95,
    "temperature_c": 44,
    "temp_shutdown_c": 94,
    "temp_slowdown_c": 88,
    "temp_gpu_max_c": 86,
    "temp_mem_max_c": 96,
    "margin_temperature_supported": 1,
    "memory_temperature_c": 51,
    "num_fans": 2,
    "fan_speed_pct": 35,
    "util_gpu_pct": 71,
    "util_mem_pct": 42,
    "util_encoder_pct": 13,
    "util_decoder_pct": 14,
    "pstate": 2,
    "ecc_enabled": 1,
    "ecc_supported": 1,
    "ecc_volatile_corrected": 5,
    "ecc_volatile_uncorrected": 6,
    "ecc_aggregate_corrected": 7,
    "ecc_aggregate_uncorrected": 8,
    "retired_pages_sbe": 3,
    "retired_pages_dbe": 2,
    "retired_pages_pending": 1,
    "retired_pages_supported": 1,
    "remapped_rows_correctable": 9,
    "remapped_rows_uncorrectable": 4,
    "remapped_rows_pending": 1,
    "remapped_rows_failure": 1,
    "remapped_rows_supported": 1,
    "row_remapper_banks": 2000,
    "unrepairable_memory": 1,
    "mig_capable": 1,
    "nvlink_count": 12,
    "nvlink_version": 6,
    "fabric_health_mask": "0x00000002",
    "c2c_enabled": 1,
    "platform_supported": 1,
    "platform_slot_number": 7,
    "platform_tray_index": 3,
    "platform_host_id": 2,
    "platform_peer_type": 1,
}
"""Distinctive values, set through the config's per-GPU overrides."""


def _field(nvml: Any, handle: Any, field: int, scope: int = 0) -> Any:
    value = nvml.nvmlDeviceGetFieldValues(handle, [(field, scope)])[0]
    assert value.nvmlReturn == 0, (field, scope, value.nvmlReturn)
    return (
        value.value.ullVal
        if value.valueType == nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        else value.value.uiVal
    )


def _mem(nvml: Any, h: Any) -> Any:
    return nvml.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2)


def _inforom(obj: int) -> Callable[[Any, Any], Any]:
    return lambda n, h: n.nvmlDeviceGetInforomVersion(h, obj)


def _clock(clock: str, kind: str = "info") -> Callable[[Any, Any], Any]:
    def read(n: Any, h: Any) -> Any:
        ident = getattr(n, f"NVML_CLOCK_{clock}")
        return {
            "info": n.nvmlDeviceGetClockInfo,
            "max": n.nvmlDeviceGetMaxClockInfo,
            "app": n.nvmlDeviceGetApplicationsClock,
        }[kind](h, ident)

    return read


def _threshold(name: str) -> Callable[[Any, Any], Any]:
    return lambda n, h: n.nvmlDeviceGetTemperatureThreshold(
        h, getattr(n, f"NVML_TEMPERATURE_THRESHOLD_{name}")
    )


def _ecc(kind: str, counter: str) -> Callable[[Any, Any], Any]:
    return lambda n, h: n.nvmlDeviceGetTotalEccErrors(
        h, getattr(n, f"NVML_MEMORY_ERROR_TYPE_{kind}"), getattr(n, f"NVML_{counter}_ECC")
    )


def _power(field: str, scope: str) -> Callable[[Any, Any], Any]:
    return lambda n, h: _field(
        n, h, getattr(n, f"NVML_FI_DEV_POWER_{field}"), getattr(n, f"NVML_POWER_SCOPE_{scope}")
    )


def _platform_info(n: Any, h: Any) -> Any:
    info = n.c_nvmlPlatformInfo_v2_t()
    n.nvmlDeviceGetPlatformInfo(h, n.byref(info))
    return info


def _platform(attr: str) -> Callable[[Any, Any], Any]:
    return lambda n, h: ord(getattr(_platform_info(n, h), attr))


def _platform_bytes(attr: str) -> Callable[[Any, Any], bytes]:
    def read(n: Any, h: Any) -> bytes:
        info = _platform_info(n, h)
        field = type(info).__dict__[attr]
        return ctypes.string_at(ctypes.addressof(info) + field.offset, field.size)

    return read


def _unrepairable(n: Any, h: Any) -> int:
    """nvml.h's nvmlUnrepairableMemoryStatus_v1_t is one unsigned int (nvidia-ml-py's
    wrapper reads a struct with a version word first, so it is called directly)."""
    status = ctypes.c_uint(99)
    assert (
        n._nvmlGetFunctionPointer("nvmlDeviceGetUnrepairableMemoryFlag_v1")(h, ctypes.byref(status))
        == 0
    )
    return status.value


def _mock_part_number(n: Any, h: Any) -> str:
    buf = ctypes.create_string_buffer(32)
    fn = n._nvmlGetFunctionPointer("nvml_mock_device_gpu_part_number")
    assert fn(h, buf, ctypes.c_uint(32)) == 0
    return buf.value.decode()


def _mock_sparse(n: Any, h: Any) -> int:
    mode = ctypes.c_uint(99)
    fn = n._nvmlGetFunctionPointer("nvml_mock_device_sparse_operation_mode")
    assert fn(h, ctypes.byref(mode)) == 0
    return mode.value


def _fabric(n: Any, h: Any) -> Any:
    info = n.c_nvmlGpuFabricInfoV_t()
    info.version = n.nvmlGpuFabricInfo_v3
    n.nvmlDeviceGetGpuFabricInfoV(h, n.byref(info))
    return info


GETTERS: dict[str, tuple[Callable[[Any, Any], Any], Any]] = {
    # key: (read through nvidia-ml-py, the value that must come back; None = VALUES[key])
    "name": (lambda n, h: n.nvmlDeviceGetName(h), "NVIDIA H100 80GB HBM3"),
    "uuid": (lambda n, h: n.nvmlDeviceGetUUID(h).startswith("GPU-"), True),
    "serial": (lambda n, h: len(n.nvmlDeviceGetSerial(h)), 13),
    "pdi": (lambda n, h: n.nvmlDeviceGetPdi(h) != 0, True),
    "board_part_number": (lambda n, h: n.nvmlDeviceGetBoardPartNumber(h), None),
    "gpu_part_number": (_mock_part_number, None),
    "sparse_operation_mode": (_mock_sparse, None),
    "pcie_atomics_outbound": (lambda n, h: _field(n, h, 228), None),
    "pcie_atomics_inbound": (lambda n, h: _field(n, h, 229), None),
    "board_id": (lambda n, h: n.nvmlDeviceGetBoardId(h) != 0, True),
    "minor_number": (lambda n, h: n.nvmlDeviceGetMinorNumber(h), 0),
    "brand": (lambda n, h: n.nvmlDeviceGetBrand(h), None),
    "architecture": (lambda n, h: n.nvmlDeviceGetArchitecture(h), 9),
    "cuda_cc_major": (lambda n, h: n.nvmlDeviceGetCudaComputeCapability(h)[0], 9),
    "cuda_cc_minor": (lambda n, h: n.nvmlDeviceGetCudaComputeCapability(h)[1], 0),
    "multiprocessor_count": (lambda n, h: n.nvmlDeviceGetAttributes(h).multiprocessorCount, None),
    "num_gpu_cores": (lambda n, h: n.nvmlDeviceGetNumGpuCores(h), None),
    "multi_gpu_board": (lambda n, h: n.nvmlDeviceGetMultiGpuBoard(h), None),
    "module_id": (lambda n, h: n.nvmlDeviceGetModuleId(h), 7),
    "vbios_version": (lambda n, h: n.nvmlDeviceGetVbiosVersion(h), None),
    "inforom_image_version": (lambda n, h: n.nvmlDeviceGetInforomImageVersion(h), None),
    "inforom_oem": (_inforom(0), None),
    "inforom_ecc": (_inforom(1), None),
    "inforom_power": (_inforom(2), None),
    "bbx_flush_time_us": (lambda n, h: n.nvmlDeviceGetLastBBXFlushTime(h)[0], None),
    "bbx_flush_duration_us": (lambda n, h: n.nvmlDeviceGetLastBBXFlushTime(h)[1], None),
    "virtualization_mode": (lambda n, h: n.nvmlDeviceGetVirtualizationMode(h), None),
    "addressing_mode": (lambda n, h: n.nvmlDeviceGetAddressingMode(h), None),
    "pci_bus_id": (lambda n, h: n.nvmlDeviceGetPciInfo(h).busId, "00000000:53:00.0"),
    "pci_device_id": (lambda n, h: n.nvmlDeviceGetPciInfo(h).pciDeviceId, 0x233110DE),
    "pci_subsystem_id": (lambda n, h: n.nvmlDeviceGetPciInfo(h).pciSubSystemId, 0x16C210DE),
    "pcie_max_gen": (lambda n, h: n.nvmlDeviceGetMaxPcieLinkGeneration(h), None),
    "pcie_max_width": (lambda n, h: n.nvmlDeviceGetMaxPcieLinkWidth(h), None),
    "pcie_cur_gen": (lambda n, h: n.nvmlDeviceGetCurrPcieLinkGeneration(h), None),
    "pcie_cur_width": (lambda n, h: n.nvmlDeviceGetCurrPcieLinkWidth(h), None),
    "pcie_replay_counter": (lambda n, h: n.nvmlDeviceGetPcieReplayCounter(h), None),
    "memory_total_bytes": (lambda n, h: _mem(n, h).total, None),
    "memory_reserved_bytes": (lambda n, h: _mem(n, h).reserved, None),
    "memory_used_bytes": (lambda n, h: _mem(n, h).used, None),
    "memory_bus_width": (lambda n, h: n.nvmlDeviceGetMemoryBusWidth(h), None),
    "bar1_total_bytes": (lambda n, h: n.nvmlDeviceGetBAR1MemoryInfo(h).bar1Total, None),
    "bar1_used_bytes": (lambda n, h: n.nvmlDeviceGetBAR1MemoryInfo(h).bar1Used, None),
    "numa_node": (lambda n, h: n.nvmlDeviceGetNumaNodeId(h), 0),
    "cpu_affinity": (lambda n, h: n.nvmlDeviceGetCpuAffinity(h, 4)[0] & 0xFF, 0xFF),
    "persistence_mode": (lambda n, h: n.nvmlDeviceGetPersistenceMode(h), None),
    "display_mode": (lambda n, h: n.nvmlDeviceGetDisplayMode(h), None),
    "display_active": (lambda n, h: n.nvmlDeviceGetDisplayActive(h), None),
    "compute_mode": (lambda n, h: n.nvmlDeviceGetComputeMode(h), None),
    "clock_graphics_mhz": (_clock("GRAPHICS"), None),
    "clock_sm_mhz": (_clock("SM"), None),
    "clock_mem_mhz": (_clock("MEM"), None),
    "clock_video_mhz": (_clock("VIDEO"), None),
    "max_clock_graphics_mhz": (_clock("GRAPHICS", "max"), None),
    "max_clock_sm_mhz": (_clock("SM", "max"), None),
    "max_clock_mem_mhz": (_clock("MEM", "max"), None),
    "max_clock_video_mhz": (_clock("VIDEO", "max"), None),
    "app_clock_graphics_mhz": (_clock("GRAPHICS", "app"), None),
    "app_clock_mem_mhz": (_clock("MEM", "app"), None),
    "clocks_event_reasons": (lambda n, h: n.nvmlDeviceGetCurrentClocksEventReasons(h), None),
    "power_usage_mw": (lambda n, h: n.nvmlDeviceGetPowerUsage(h), None),
    "power_limit_mw": (lambda n, h: n.nvmlDeviceGetPowerManagementLimit(h), None),
    "power_default_limit_mw": (lambda n, h: n.nvmlDeviceGetPowerManagementDefaultLimit(h), None),
    "power_min_limit_mw": (lambda n, h: n.nvmlDeviceGetPowerManagementLimitConstraints(h)[0], None),
    "power_max_limit_mw": (lambda n, h: n.nvmlDeviceGetPowerManagementLimitConstraints(h)[1], None),
    "energy_mj": (lambda n, h: n.nvmlDeviceGetTotalEnergyConsumption(h), None),
    "power_average_mw": (_power("AVERAGE", "GPU"), None),
    "memory_power_average_mw": (_power("AVERAGE", "MEMORY"), None),
    "module_power_average_mw": (_power("AVERAGE", "MODULE"), None),
    "module_power_usage_mw": (_power("INSTANT", "MODULE"), None),
    "module_power_limit_mw": (_power("CURRENT_LIMIT", "MODULE"), None),
    "module_power_default_limit_mw": (_power("DEFAULT_LIMIT", "MODULE"), None),
    "module_power_min_limit_mw": (_power("MIN_LIMIT", "MODULE"), None),
    "module_power_max_limit_mw": (_power("MAX_LIMIT", "MODULE"), None),
    "edpp_multiplier_pct": (lambda n, h: _field(n, h, 274), None),  # NVML_FI_DEV_EDPP_MULTIPLIER
    "temperature_c": (lambda n, h: n.nvmlDeviceGetTemperature(h, 0), None),
    "temp_shutdown_c": (_threshold("SHUTDOWN"), None),
    "temp_slowdown_c": (_threshold("SLOWDOWN"), None),
    "temp_gpu_max_c": (_threshold("GPU_MAX"), None),
    "temp_mem_max_c": (_threshold("MEM_MAX"), None),
    "margin_temperature_supported": (lambda n, h: n.nvmlDeviceGetMarginTemperature(h), 86 - 44),
    "memory_temperature_c": (lambda n, h: _field(n, h, n.NVML_FI_DEV_MEMORY_TEMP), None),
    "num_fans": (lambda n, h: n.nvmlDeviceGetNumFans(h), None),
    "fan_speed_pct": (lambda n, h: n.nvmlDeviceGetFanSpeed(h), None),
    "util_gpu_pct": (lambda n, h: n.nvmlDeviceGetUtilizationRates(h).gpu, None),
    "util_mem_pct": (lambda n, h: n.nvmlDeviceGetUtilizationRates(h).memory, None),
    "util_encoder_pct": (lambda n, h: n.nvmlDeviceGetEncoderUtilization(h)[0], None),
    "util_decoder_pct": (lambda n, h: n.nvmlDeviceGetDecoderUtilization(h)[0], None),
    "pstate": (lambda n, h: n.nvmlDeviceGetPerformanceState(h), None),
    "ecc_enabled": (lambda n, h: n.nvmlDeviceGetEccMode(h)[0], None),
    "ecc_supported": (lambda n, h: n.nvmlDeviceGetEccMode(h)[1], 1),
    "ecc_volatile_corrected": (_ecc("CORRECTED", "VOLATILE"), None),
    "ecc_volatile_uncorrected": (_ecc("UNCORRECTED", "VOLATILE"), None),
    "ecc_aggregate_corrected": (_ecc("CORRECTED", "AGGREGATE"), None),
    "ecc_aggregate_uncorrected": (_ecc("UNCORRECTED", "AGGREGATE"), None),
    "retired_pages_sbe": (
        lambda n, h: len(
            n.nvmlDeviceGetRetiredPages(
                h, n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
            )
        ),
        None,
    ),
    "retired_pages_dbe": (
        lambda n, h: len(
            n.nvmlDeviceGetRetiredPages(h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        ),
        None,
    ),
    "retired_pages_pending": (lambda n, h: n.nvmlDeviceGetRetiredPagesPendingStatus(h), None),
    "retired_pages_supported": (
        lambda n, h: isinstance(n.nvmlDeviceGetRetiredPages(h, 0), list),
        True,
    ),
    "remapped_rows_correctable": (lambda n, h: n.nvmlDeviceGetRemappedRows(h)[0], None),
    "remapped_rows_uncorrectable": (lambda n, h: n.nvmlDeviceGetRemappedRows(h)[1], None),
    "remapped_rows_pending": (lambda n, h: n.nvmlDeviceGetRemappedRows(h)[2], None),
    "remapped_rows_failure": (lambda n, h: n.nvmlDeviceGetRemappedRows(h)[3], None),
    "remapped_rows_supported": (lambda n, h: len(n.nvmlDeviceGetRemappedRows(h)), 4),
    "row_remapper_banks": (lambda n, h: n.nvmlDeviceGetRowRemapperHistogram(h).max, 2000 - 13),
    "unrepairable_memory": (_unrepairable, None),
    "mig_capable": (lambda n, h: n.nvmlDeviceGetMigMode(h)[0], 0),
    # with a table SetMigMode gets past NOT_SUPPORTED to the live layer (absent here);
    # tests/native/test_library_mig.py reads the table itself with MIG enabled
    "mig_gi_profile": (lambda n, h: _status(n, n.nvmlDeviceSetMigMode, h, 1), 4),
    "nvlink_count": (lambda n, h: _field(n, h, n.NVML_FI_DEV_NVLINK_LINK_COUNT), None),
    "nvlink_version": (lambda n, h: n.nvmlDeviceGetNvLinkVersion(h, 0), None),
    "nvlink_remote_bus_ids": (
        lambda n, h: n.nvmlDeviceGetNvLinkRemotePciInfo(h, 0).busId,
        "00000000:05:00.0",
    ),
    "fabric_attached": (lambda n, h: _fabric(n, h).state, 3),
    "fabric_cluster_uuid": (
        lambda n, h: str(uuidlib.UUID(bytes=bytes(_fabric(n, h).clusterUuid))),
        CLUSTER,
    ),
    "fabric_clique_id": (lambda n, h: _fabric(n, h).cliqueId, 5),
    "fabric_state": (lambda n, h: _fabric(n, h).state, 3),
    "fabric_health_mask": (lambda n, h: _fabric(n, h).healthMask, 2),
    "gpu_group": (
        lambda n, h: n.nvmlDeviceGetTopologyCommonAncestor(h, n.nvmlDeviceGetHandleByIndex(1)),
        20,
    ),  # same group: NVML_TOPOLOGY_MULTIPLE
    "c2c_enabled": (lambda n, h: n.nvmlDeviceGetC2cModeInfoV(h).isC2cEnabled, None),
    "platform_supported": (_platform("slotNumber"), 7),
    "platform_chassis_serial": (
        _platform_bytes("chassisSerialNumber"),
        bytes(16),
    ),  # an HGX board: no rack
    "platform_slot_number": (_platform("slotNumber"), None),
    "platform_tray_index": (_platform("trayIndex"), None),
    "platform_host_id": (_platform("hostId"), None),
    "platform_peer_type": (_platform("peerType"), None),
    "platform_ib_guid": (lambda n, h: any(_platform_bytes("ibGuid")(n, h)), True),
}

SYSTEM_GETTERS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "driver_version": (lambda n: n.nvmlSystemGetDriverVersion(), "580.105.08"),
    "nvml_version": (lambda n: n.nvmlSystemGetNVMLVersion(), "13.580.105.08"),
    "cuda_driver_version": (lambda n: n.nvmlSystemGetCudaDriverVersion(), 13000),
    "device_count": (lambda n: n.nvmlDeviceGetCount(), 2),
}
INFORMATIONAL = {"node_name", "profile"}
"""``[system]`` keys no NVML call answers (they name the node and profile in the file)."""


@pytest.fixture(scope="module")
def state_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = {
        "profile": "h100",
        "count": 2,
        "node": "node-keys",
        "driver_version": "580.105.08",
        "cuda_driver_version": 13000,
        "fabric": {"cluster_uuid": CLUSTER, "clique_id": 5},
        "gpus": {0: VALUES},
    }
    state = tmp_path_factory.mktemp("keys") / "state.nvmlmock"
    state.write_text(render_text(resolve_config(file_data=config)))
    return state


def _status(pynvml: Any, call: Any, *args: Any) -> int:
    try:
        call(*args)
    except pynvml.NVMLError as exc:
        return int(exc.value)
    return 0


def test_every_key_has_a_getter_check() -> None:
    assert set(GETTERS) == set(GPU_KEYS)
    assert set(SYSTEM_GETTERS) | INFORMATIONAL == set(SYSTEM_KEYS)


def test_every_overridden_key_is_in_the_rendered_state(state_file: Path) -> None:
    section = state_file.read_text().split("[gpu 0]", 1)[1].split("[gpu 1]", 1)[0]
    written = dict(line.split("=", 1) for line in section.strip().splitlines())
    for key in VALUES:
        assert key in written, key


@pytest.mark.parametrize("key", sorted(GPU_KEYS))
def test_a_key_reaches_its_nvml_getter(
    pynvml: Any, state_file: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state_file))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    read, expected = GETTERS[key]
    if expected is None:
        expected = VALUES[key]
        if isinstance(expected, str) and expected.startswith("0x"):
            expected = int(expected, 16)
    assert read(pynvml, handle) == expected


@pytest.mark.parametrize("key", sorted(SYSTEM_GETTERS))
def test_a_system_key_reaches_its_nvml_getter(
    pynvml: Any, state_file: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state_file))
    pynvml.nvmlInit()
    read, expected = SYSTEM_GETTERS[key]
    assert read(pynvml) == expected
