"""Per-device queries through nvidia-ml-py, and the struct layouts older callers pass."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import StateWriter, gpu_entry

NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25


def handle(nvml: Any, index: int = 0) -> Any:
    return nvml.nvmlDeviceGetHandleByIndex(index)


def test_identity(nvml: Any) -> None:
    h = handle(nvml, 1)
    expected = gpu_entry(1)
    assert nvml.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    assert nvml.nvmlDeviceGetUUID(h) == expected["uuid"]
    assert nvml.nvmlDeviceGetSerial(h) == expected["serial"]
    assert nvml.nvmlDeviceGetIndex(h) == 1
    assert nvml.nvmlDeviceGetMinorNumber(h) == 1
    assert nvml.nvmlDeviceGetBrand(h) == nvml.NVML_BRAND_NVIDIA
    assert nvml.nvmlDeviceGetArchitecture(h) == nvml.NVML_DEVICE_ARCH_HOPPER
    assert nvml.nvmlDeviceGetCudaComputeCapability(h) == (9, 0)
    assert nvml.nvmlDeviceGetBoardId(h) == 0x1900
    assert nvml.nvmlDeviceGetBoardPartNumber(h) == "692-2G520-0200-000"
    assert nvml.nvmlDeviceGetVbiosVersion(h) == "96.00.99.00.01"
    assert nvml.nvmlDeviceGetInforomImageVersion(h) == "G520.0200.00.05"
    assert nvml.nvmlDeviceGetInforomVersion(h, nvml.NVML_INFOROM_OEM) == "2.1"
    assert nvml.nvmlDeviceGetInforomVersion(h, nvml.NVML_INFOROM_ECC) == "7.16"
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetInforomVersion(h, nvml.NVML_INFOROM_POWER)
    assert nvml.nvmlDeviceGetMultiGpuBoard(h) == 0
    assert nvml.nvmlDeviceGetModuleId(h) == 2
    assert nvml.nvmlDeviceGetVirtualizationMode(h) == nvml.NVML_GPU_VIRTUALIZATION_MODE_NONE
    assert nvml.nvmlDeviceGetNumaNodeId(h) == 0


def test_handle_lookups_round_trip(nvml: Any) -> None:
    h = handle(nvml, 1)
    uuid = nvml.nvmlDeviceGetUUID(h)
    for other in (
        nvml.nvmlDeviceGetHandleByUUID(uuid),
        nvml.nvmlDeviceGetHandleByUUID(uuid.lower()),
        nvml.nvmlDeviceGetHandleByPciBusId("00000000:19:00.0"),
        nvml.nvmlDeviceGetHandleByPciBusId("0000:19:00.0"),
        nvml.nvmlDeviceGetHandleByPciBusId("19:00.0"),
        nvml.nvmlDeviceGetHandleBySerial(gpu_entry(1)["serial"]),
    ):
        assert nvml.nvmlDeviceGetIndex(other) == 1
    with pytest.raises(nvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(nvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetHandleByPciBusId("0000:99:00.0")
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByPciBusId("not a bus id")
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(2)


def test_forged_handles_are_refused(nvml: Any, cnvml: ctypes.CDLL) -> None:
    name = ctypes.create_string_buffer(96)
    real = ctypes.cast(handle(nvml, 0), ctypes.c_void_p).value
    assert real is not None
    for forged in (None, 1, real + 1, real + 10**6):
        assert (
            cnvml.nvmlDeviceGetName(ctypes.c_void_p(forged), name, 96)
            == NVML_ERROR_INVALID_ARGUMENT
        )


def test_short_buffers_are_insufficient_size(nvml: Any, cnvml: ctypes.CDLL) -> None:
    h = handle(nvml)
    small = ctypes.create_string_buffer(8)
    assert cnvml.nvmlDeviceGetName(h, small, 8) == NVML_ERROR_INSUFFICIENT_SIZE
    assert cnvml.nvmlDeviceGetUUID(h, small, 8) == NVML_ERROR_INSUFFICIENT_SIZE
    assert cnvml.nvmlSystemGetDriverVersion(small, 8) == NVML_ERROR_INSUFFICIENT_SIZE


def test_null_string_buffers_are_refused_before_support(
    pynvml: Any, write_state: StateWriter, cnvml: ctypes.CDLL
) -> None:
    # No part number, image or power infoROM version: a buffer would get NOT_SUPPORTED.
    write_state(count=1, board_part_number="", inforom_image_version="")
    pynvml.nvmlInit()
    h = handle(pynvml)
    small = ctypes.create_string_buffer(16)
    assert cnvml.nvmlDeviceGetBoardPartNumber(h, small, 16) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert cnvml.nvmlDeviceGetBoardPartNumber(h, None, 16) == NVML_ERROR_INVALID_ARGUMENT
    assert cnvml.nvmlDeviceGetInforomImageVersion(h, None, 16) == NVML_ERROR_INVALID_ARGUMENT
    power = pynvml.NVML_INFOROM_POWER
    assert cnvml.nvmlDeviceGetInforomVersion(h, power, small, 16) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert cnvml.nvmlDeviceGetInforomVersion(h, power, None, 16) == NVML_ERROR_INVALID_ARGUMENT


def test_pci_info_v3(nvml: Any) -> None:
    pci = nvml.nvmlDeviceGetPciInfo(handle(nvml, 1))
    assert pci.busId == "00000000:19:00.0"
    assert pci.busIdLegacy == "0000:19:00.0"
    assert (pci.domain, pci.bus, pci.device) == (0, 0x19, 0)
    assert pci.pciDeviceId == 0x233010DE
    assert pci.pciSubSystemId == 0x16C110DE


@pytest.mark.parametrize(
    ("bus_id", "full", "legacy"),
    [
        ("0001ABCD:0F:1E.7", "0001ABCD:0F:1E.7", "ABCD:0F:1E.7"),
        ("FFFFFFFF:FF:1F.7", "FFFFFFFF:FF:1F.7", "FFFF:FF:1F.7"),
        ("c0:01.0", "00000000:C0:01.0", "0000:C0:01.0"),
    ],
)
def test_bus_ids_as_nvml_writes_them(
    pynvml: Any, write_state: StateWriter, bus_id: str, full: str, legacy: str
) -> None:
    """Upper-case hex, zero-padded, the legacy form's domain cut to 16 bits, in the handle's
    own bus id (written at init) and in the PCI info (written per call) alike."""
    write_state(gpus=[gpu_entry(0, pci_bus_id=bus_id)])
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    pci = pynvml.nvmlDeviceGetPciInfo(h)
    assert (pci.busId, pci.busIdLegacy) == (full, legacy)
    assert pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByPciBusId(full)) == 0


@pytest.mark.parametrize("symbol", ["nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v2"])
def test_old_pci_entry_points_write_52_bytes(nvml: Any, cnvml: ctypes.CDLL, symbol: str) -> None:
    buf = (ctypes.c_ubyte * 96)(*([0xEE] * 96))
    assert getattr(cnvml, symbol)(handle(nvml, 1), buf) == 0
    assert bytes(buf[52:]) == b"\xee" * 44
    assert bytes(buf[:16]).rstrip(b"\0") == b"0000:19:00.0"
    words = (ctypes.c_uint * 9).from_buffer(buf, 16)
    assert list(words[:5]) == [0, 0x19, 0, 0x233010DE, 0x16C110DE]


def test_pci_link(nvml: Any) -> None:
    h = handle(nvml)
    assert nvml.nvmlDeviceGetMaxPcieLinkGeneration(h) == 5
    assert nvml.nvmlDeviceGetCurrPcieLinkWidth(h) == 16
    assert nvml.nvmlDeviceGetPcieReplayCounter(h) == 0
    assert nvml.nvmlDeviceGetPcieLinkMaxSpeed(h) == 32000


def test_memory_v1_counts_reserved_as_used(nvml: Any) -> None:
    mem = nvml.nvmlDeviceGetMemoryInfo(handle(nvml))
    entry = gpu_entry(0)
    assert mem.total == entry["memory_total_bytes"]
    assert mem.used == entry["memory_used_bytes"] + entry["memory_reserved_bytes"]
    assert mem.free + mem.used == mem.total


def test_memory_v2(nvml: Any) -> None:
    mem = nvml.nvmlDeviceGetMemoryInfo(handle(nvml), version=nvml.nvmlMemory_v2)
    entry = gpu_entry(0)
    assert mem.reserved == entry["memory_reserved_bytes"]
    assert mem.used == entry["memory_used_bytes"]
    assert mem.free + mem.used + mem.reserved == mem.total


def test_memory_v1_writes_24_bytes(nvml: Any, cnvml: ctypes.CDLL) -> None:
    buf = (ctypes.c_ubyte * 48)(*([0xEE] * 48))
    assert cnvml.nvmlDeviceGetMemoryInfo(handle(nvml), buf) == 0
    assert bytes(buf[24:]) == b"\xee" * 24


@pytest.mark.parametrize("version", [0, 0x01000028, 0x02000018, 0x03000028])
def test_memory_v2_checks_the_version(nvml: Any, cnvml: ctypes.CDLL, version: int) -> None:
    mem = nvml.c_nvmlMemory_v2_t()
    mem.version = version
    assert (
        cnvml.nvmlDeviceGetMemoryInfo_v2(handle(nvml), ctypes.byref(mem))
        == NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    )


def test_bar1(nvml: Any) -> None:
    bar1 = nvml.nvmlDeviceGetBAR1MemoryInfo(handle(nvml))
    assert bar1.bar1Total == 137438953472
    assert bar1.bar1Free + bar1.bar1Used == bar1.bar1Total


def test_process_lists_are_empty(nvml: Any, cnvml: ctypes.CDLL) -> None:
    h = handle(nvml)
    assert nvml.nvmlDeviceGetComputeRunningProcesses(h) == []
    assert nvml.nvmlDeviceGetGraphicsRunningProcesses(h) == []
    assert nvml.nvmlDeviceGetMPSComputeRunningProcesses(h) == []
    count = ctypes.c_uint(5)
    for symbol in (
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetComputeRunningProcesses_v2",
    ):
        count.value = 5
        assert getattr(cnvml, symbol)(h, ctypes.byref(count), None) == 0
        assert count.value == 0


def test_mig_is_disabled(nvml: Any, pynvml: Any, write_state: StateWriter) -> None:
    h = handle(nvml)
    assert nvml.nvmlDeviceGetMigMode(h) == [0, 0]
    assert nvml.nvmlDeviceIsMigDeviceHandle(h).value == 0
    assert nvml.nvmlDeviceGetMaxMigDeviceCount(h) == 0
    with pytest.raises(nvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)


def test_mig_not_supported_without_capability(pynvml: Any, write_state: StateWriter) -> None:
    write_state(count=1, mig_capable=0)
    pynvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigMode(handle(pynvml))


def test_modes(nvml: Any) -> None:
    h = handle(nvml)
    assert nvml.nvmlDeviceGetPersistenceMode(h) == nvml.NVML_FEATURE_ENABLED
    assert nvml.nvmlDeviceGetDisplayMode(h) == nvml.NVML_FEATURE_DISABLED
    assert nvml.nvmlDeviceGetDisplayActive(h) == nvml.NVML_FEATURE_DISABLED
    assert nvml.nvmlDeviceGetComputeMode(h) == nvml.NVML_COMPUTEMODE_DEFAULT
    assert nvml.nvmlDeviceGetAccountingMode(h) == nvml.NVML_FEATURE_DISABLED


def test_clocks(nvml: Any) -> None:
    h = handle(nvml)
    assert nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_GRAPHICS) == 345
    assert nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM) == 2619
    assert nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM) == 1980
    assert nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_VIDEO) == 1545
    assert nvml.nvmlDeviceGetApplicationsClock(h, nvml.NVML_CLOCK_GRAPHICS) == 1980
    assert nvml.nvmlDeviceGetDefaultApplicationsClock(h, nvml.NVML_CLOCK_MEM) == 2619
    assert nvml.nvmlDeviceGetClock(h, nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_ID_CURRENT) == 345
    assert nvml.nvmlDeviceGetSupportedMemoryClocks(h) == [2619]
    graphics = nvml.nvmlDeviceGetSupportedGraphicsClocks(h, 2619)
    assert graphics[0] == 1980 and graphics == sorted(graphics, reverse=True)
    assert nvml.nvmlDeviceGetCurrentClocksEventReasons(h) == 0
    assert nvml.nvmlDeviceGetSupportedClocksEventReasons(h) & nvml.nvmlClocksEventReasonGpuIdle
    assert nvml.nvmlDeviceGetPerformanceState(h) == 0


def test_power(nvml: Any) -> None:
    h = handle(nvml)
    assert nvml.nvmlDeviceGetPowerUsage(h) == 71234
    assert nvml.nvmlDeviceGetPowerManagementLimit(h) == 700000
    assert nvml.nvmlDeviceGetEnforcedPowerLimit(h) == 700000
    assert nvml.nvmlDeviceGetPowerManagementDefaultLimit(h) == 700000
    assert nvml.nvmlDeviceGetPowerManagementLimitConstraints(h) == [200000, 700000]
    assert nvml.nvmlDeviceGetTotalEnergyConsumption(h) == 0


def test_temperatures(nvml: Any) -> None:
    h = handle(nvml)
    assert nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU) == 31
    assert nvml.nvmlDeviceGetTemperatureV(h, nvml.NVML_TEMPERATURE_GPU) == 31
    threshold = nvml.nvmlDeviceGetTemperatureThreshold
    assert threshold(h, nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN) == 92
    assert threshold(h, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN) == 89
    assert threshold(h, nvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX) == 87
    assert threshold(h, nvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX) == 95
    with pytest.raises(nvml.NVMLError_NotSupported):
        threshold(h, nvml.NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MAX)
    # T.Limit: degrees left to the maximum operating temperature
    assert nvml.nvmlDeviceGetMarginTemperature(h) == 87 - 31


def test_fans(nvml: Any, pynvml: Any, write_state: StateWriter) -> None:
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetFanSpeed(handle(nvml))
    nvml.nvmlShutdown()
    write_state(count=1, num_fans=2, fan_speed_pct=30)
    pynvml.nvmlInit()
    h = handle(pynvml)
    assert pynvml.nvmlDeviceGetNumFans(h) == 2
    assert pynvml.nvmlDeviceGetFanSpeed(h) == 30
    assert pynvml.nvmlDeviceGetFanSpeed_v2(h, 1) == 30
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetFanSpeed_v2(h, 2)


def test_utilization(pynvml: Any, write_state: StateWriter) -> None:
    write_state(count=1, util_gpu_pct=42, util_mem_pct=7, util_encoder_pct=3, util_decoder_pct=5)
    pynvml.nvmlInit()
    h = handle(pynvml)
    util = pynvml.nvmlDeviceGetUtilizationRates(h)
    assert (util.gpu, util.memory) == (42, 7)
    assert pynvml.nvmlDeviceGetEncoderUtilization(h) == [3, 167000]
    assert pynvml.nvmlDeviceGetDecoderUtilization(h) == [5, 167000]
    assert pynvml.nvmlDeviceGetJpgUtilization(h) == [0, 167000]
    assert pynvml.nvmlDeviceGetOfaUtilization(h) == [0, 167000]


def test_ecc(pynvml: Any, write_state: StateWriter) -> None:
    write_state(
        count=1,
        ecc_volatile_corrected=5,
        ecc_aggregate_uncorrected=2,
        retired_pages_dbe=2,
        retired_pages_supported=1,  # a Hopper board has none by default (row remapping)
        remapped_rows_correctable=3,
    )
    pynvml.nvmlInit()
    h = handle(pynvml)
    assert pynvml.nvmlDeviceGetEccMode(h) == [1, 1]
    total = pynvml.nvmlDeviceGetTotalEccErrors
    assert total(h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC) == 5
    assert total(h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC) == 2
    assert (
        pynvml.nvmlDeviceGetMemoryErrorCounter(
            h,
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            pynvml.NVML_VOLATILE_ECC,
            pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY,
        )
        == 5
    )
    dbe = pynvml.nvmlDeviceGetRetiredPages(
        h, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    )
    assert len(dbe) == 2 and len(set(dbe)) == 2
    assert (
        pynvml.nvmlDeviceGetRetiredPages(
            h, pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        )
        == []
    )
    assert pynvml.nvmlDeviceGetRetiredPagesPendingStatus(h) == 0
    assert pynvml.nvmlDeviceGetRemappedRows(h) == (3, 0, 0, 0)


def test_retired_pages_size_protocol(
    pynvml: Any, write_state: StateWriter, cnvml: ctypes.CDLL
) -> None:
    write_state(count=1, retired_pages_dbe=2, retired_pages_supported=1)
    pynvml.nvmlInit()
    h = handle(pynvml)
    dbe = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    count = ctypes.c_uint(0)
    rc = cnvml.nvmlDeviceGetRetiredPages(h, dbe, ctypes.byref(count), None)
    assert (rc, count.value) == (NVML_ERROR_INSUFFICIENT_SIZE, 2)
    count = ctypes.c_uint(2)
    rc = cnvml.nvmlDeviceGetRetiredPages_v2(h, dbe, ctypes.byref(count), None, None)
    assert (rc, count.value) == (NVML_ERROR_INVALID_ARGUMENT, 2)


def test_process_name(nvml: Any, cnvml: ctypes.CDLL) -> None:
    """The name as the process was invoked (argv[0], e.g. ``/usr/bin/python3``), as a real
    driver reports it and nvidia-smi prints it, not the kernel's 15-character comm."""
    argv0 = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    assert nvml.nvmlSystemGetProcessName(os.getpid()) == argv0
    assert "/" in argv0  # the tox env's interpreter, by its path
    # a process without a command line (a zombie here) answers its kernel name
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        # waitid(WNOWAIT) returns once the child has exited and leaves it a zombie; polling
        # for an empty cmdline is not enough, since it reads empty for a moment inside execve
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert Path(f"/proc/{child.pid}/cmdline").read_bytes() == b""
        comm = Path(f"/proc/{child.pid}/comm").read_text().strip()
        assert nvml.nvmlSystemGetProcessName(child.pid) == comm
    finally:
        child.wait()
    name = ctypes.create_string_buffer(64)
    assert cnvml.nvmlSystemGetProcessName(os.getpid(), name, 0) == NVML_ERROR_INVALID_ARGUMENT
    assert cnvml.nvmlSystemGetProcessName(os.getpid(), None, 64) == NVML_ERROR_INVALID_ARGUMENT


def test_no_ecc_board(pynvml: Any, write_state: StateWriter) -> None:
    write_state(count=1, ecc_enabled=0, ecc_supported=0)
    pynvml.nvmlInit()
    h = handle(pynvml)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetEccMode(h)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetRemappedRows(h)


def test_field_values_that_nvidia_smi_reads(nvml: Any) -> None:
    h = handle(nvml)
    ids = [
        nvml.NVML_FI_DEV_ECC_CURRENT,
        nvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
        nvml.NVML_FI_DEV_RETIRED_PENDING,
        nvml.NVML_FI_DEV_REMAPPED_COR,
        nvml.NVML_FI_DEV_MEMORY_TEMP,
        nvml.NVML_FI_DEV_NVLINK_LINK_COUNT,
        nvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_L0,
        nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
        nvml.NVML_FI_DEV_POWER_INSTANT,
        nvml.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT,
        nvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
        nvml.NVML_FI_DEV_C2C_LINK_COUNT,
        10_000,
    ]
    values = nvml.nvmlDeviceGetFieldValues(h, ids)
    returns = [v.nvmlReturn for v in values]
    # a Hopper board retires no pages (row remapping replaced it) and has no C2C link
    expected = [0] * 11 + [NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT]
    expected[2] = NVML_ERROR_NOT_SUPPORTED
    assert returns == expected
    assert values[0].value.uiVal == 1
    assert values[1].value.ullVal == 0
    assert values[4].value.uiVal == 38
    assert values[5].value.uiVal == 18
    assert values[6].value.uiVal == 26562  # NVLink 4: 26.562 GB/s a link
    assert values[8].value.uiVal == 71234
    assert values[9].value.siVal == 92
    assert all(v.timestamp > 0 for v in values)


def test_platform_info_on_trays(pynvml: Any, write_state: StateWriter) -> None:
    write_state(
        count=1,
        platform_chassis_serial="1821124000042",
        platform_slot_number=3,
        platform_tray_index=2,
        platform_host_id=1,
        platform_peer_type=2,
        module_id=4,
    )
    pynvml.nvmlInit()
    info = pynvml.c_nvmlPlatformInfo_v2_t()
    info.version = pynvml.nvmlPlatformInfo_v2
    pynvml.nvmlDeviceGetPlatformInfo(handle(pynvml), ctypes.byref(info))
    serial = info.chassisSerialNumber
    assert (serial.decode() if isinstance(serial, bytes) else serial) == "1821124000042"
    # nvidia-ml-py declares these bytes as c_char
    raw = (info.slotNumber, info.trayIndex, info.hostId, info.peerType, info.moduleId)
    assert [ord(x) if isinstance(x, (str, bytes)) else x for x in raw] == [3, 2, 1, 2, 4]


def test_unsupported_calls_before_versions(nvml: Any, cnvml: ctypes.CDLL) -> None:
    """Versioned structs are checked before anything is written."""
    buf = (ctypes.c_ubyte * 64)()
    assert (
        cnvml.nvmlDeviceGetTemperatureV(handle(nvml), buf) == NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    )
    assert cnvml.nvmlDeviceGetPciInfoExt(handle(nvml), buf) == NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    assert bytes(buf) == b"\0" * 64


def test_queries_nvidia_smi_makes_at_start(nvml: Any) -> None:
    h = handle(nvml)
    assert nvml.nvmlUnitGetCount() == 0
    assert nvml.nvmlGetExcludedDeviceCount() == 0
    assert nvml.nvmlDeviceGetSupportedPerformanceStates(h) == [0]
    assert nvml.nvmlDeviceGetEncoderSessions(h) == []
    assert nvml.nvmlDeviceGetFBCSessions(h) == []
    assert nvml.nvmlDeviceGetFBCStats(h).sessionsCount == 0
    assert nvml.nvmlDeviceGetBusType(h) == nvml.NVML_BUS_TYPE_PCIE
    assert nvml.nvmlDeviceGetPowerSource(h) == nvml.NVML_POWER_SOURCE_AC
    nvml.nvmlDeviceValidateInforom(h)


def test_gsp_firmware_follows_the_driver(nvml: Any) -> None:
    h = handle(nvml)
    assert list(nvml.nvmlDeviceGetGspFirmwareMode(h)) == [1, 1]
    assert nvml.nvmlDeviceGetGspFirmwareVersion(h) == b"580.65.06"  # pynvml returns bytes here


class UUIDV(ctypes.Structure):
    """nvmlUUID_v1_t: a version word, a type and a 41-byte union (ASCII or 16 bytes)."""

    _fields_ = [("version", ctypes.c_uint), ("type", ctypes.c_uint), ("value", ctypes.c_ubyte * 41)]


def uuid_v(version: int, kind: int, data: bytes) -> UUIDV:
    return UUIDV(version=version, type=kind, value=(ctypes.c_ubyte * 41)(*data))


def test_handle_by_uuid_v(nvml: Any, cnvml: ctypes.CDLL) -> None:
    text = gpu_entry(1)["uuid"]
    version = ctypes.sizeof(UUIDV) | 1 << 24
    found = ctypes.c_void_p()
    ascii_form = uuid_v(version, 1, text.encode())
    assert cnvml.nvmlDeviceGetHandleByUUIDV(ctypes.byref(ascii_form), ctypes.byref(found)) == 0
    assert nvml.nvmlDeviceGetIndex(ctypes.cast(found, type(handle(nvml)))) == 1
    binary = uuid_v(version, 2, bytes.fromhex(text[4:].replace("-", "")))
    assert cnvml.nvmlDeviceGetHandleByUUIDV(ctypes.byref(binary), ctypes.byref(found)) == 0
    assert nvml.nvmlDeviceGetIndex(ctypes.cast(found, type(handle(nvml)))) == 1
    stale = uuid_v(version - 1, 1, text.encode())
    result = cnvml.nvmlDeviceGetHandleByUUIDV(ctypes.byref(stale), ctypes.byref(found))
    assert result == NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_process_utilization_has_no_samples(nvml: Any) -> None:
    with pytest.raises(nvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetProcessUtilization(handle(nvml), 0)


class Versioned(ctypes.Structure):
    """A versioned struct of NVML: the version word and room for the largest payload used here."""

    _fields_ = [("version", ctypes.c_uint), ("payload", ctypes.c_uint * 32)]


def call_versioned(cnvml: ctypes.CDLL, symbol: str, h: Any, size: int, version: int) -> Any:
    buf = Versioned(version=size | version << 24)
    return getattr(cnvml, symbol)(h, ctypes.byref(buf)), buf


def test_reliability_and_identity_extras(
    pynvml: Any, write_state: StateWriter, cnvml: ctypes.CDLL
) -> None:
    write_state(gpus=[gpu_entry(0, pdi="0x2a"), gpu_entry(1, architecture=7)])
    pynvml.nvmlInit()
    h0, h1 = handle(pynvml, 0), handle(pynvml, 1)
    rc, pdi = call_versioned(cnvml, "nvmlDeviceGetPdi", h0, 16, 1)
    assert rc == 0
    assert ctypes.c_ulonglong.from_buffer(pdi, 8).value == 0x2A
    assert call_versioned(cnvml, "nvmlDeviceGetPdi", h1, 16, 1)[0] == NVML_ERROR_NOT_SUPPORTED
    assert (
        call_versioned(cnvml, "nvmlDeviceGetPdi", h0, 12, 1)[0]
        == NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    )
    rc, caps = call_versioned(cnvml, "nvmlDeviceGetCapabilities", h0, 8, 1)
    assert (rc, caps.payload[0]) == (0, 0)
    assert call_versioned(cnvml, "nvmlDeviceGetRepairStatus", h0, 12, 1)[0] == 0
    assert (
        call_versioned(cnvml, "nvmlDeviceGetRepairStatus", h1, 12, 1)[0] == NVML_ERROR_NOT_SUPPORTED
    )
    rc, sram = call_versioned(cnvml, "nvmlDeviceGetSramEccErrorStatus", h0, 104, 1)
    assert rc == 0 and list(sram.payload) == [0] * 32
    assert list(pynvml.nvmlDeviceGetEncoderStats(h0)) == [0, 0, 0]
    recovery = pynvml.nvmlDeviceGetFieldValues(h0, [pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
    assert (recovery[0].nvmlReturn, recovery[0].value.uiVal) == (0, 0)
