"""Queries whose answer differs by board, checked through nvidia-ml-py against the library.

Real boards disagree on what they support (a T4 has no row remapper, an A100 no T.Limit
sensor) and on values that only a capture shows (bank counts, addressing mode). The state
carries each of these explicitly; these tests hold the library to the state, and the
packaged profiles to what the real boards' ``nvidia-smi -q -x`` reports show.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest
from conftest import StateWriter, gpu_entry
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.render import render, render_text

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
ARCH_TURING = 6
ARCH_AMPERE = 7


def handle(nvml: Any, index: int = 0) -> Any:
    return nvml.nvmlDeviceGetHandleByIndex(index)


def load_profile_state(
    pynvml: Any, profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / f"{profile}.nvmlmock"
    path.write_text(render_text(resolve_config(profile=profile, count=1, node="boards")))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(path))
    pynvml.nvmlInit()


def test_row_remapping_follows_the_architecture(pynvml: Any, write_state: StateWriter) -> None:
    write_state(
        gpus=[
            gpu_entry(0, architecture=ARCH_AMPERE, remapped_rows_correctable=3),
            gpu_entry(1, architecture=ARCH_TURING),
            gpu_entry(2, architecture=ARCH_TURING, remapped_rows_supported=1),
            gpu_entry(3, remapped_rows_supported=0),
        ]
    )
    pynvml.nvmlInit()
    ampere, turing, turing_forced, hopper_off = (handle(pynvml, i) for i in range(4))
    assert pynvml.nvmlDeviceGetRemappedRows(ampere) == (3, 0, 0, 0)
    assert pynvml.nvmlDeviceGetRemappedRows(turing_forced) == (0, 0, 0, 0)
    for h in (turing, hopper_off):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetRemappedRows(h)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            info = pynvml.c_nvmlRemappedRowsInfo_v2_t()
            pynvml.nvmlDeviceGetRemappedRows_v2(h, ctypes.byref(info))
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetRowRemapperHistogram(h)
        (field,) = pynvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_REMAPPED_COR])
        assert field.nvmlReturn == NVML_ERROR_NOT_SUPPORTED
        # ECC itself still answers: only the remapper is missing.
        assert pynvml.nvmlDeviceGetEccMode(h) == [1, 1]
    (field,) = pynvml.nvmlDeviceGetFieldValues(ampere, [pynvml.NVML_FI_DEV_REMAPPED_COR])
    assert (field.nvmlReturn, field.value.uiVal) == (NVML_SUCCESS, 3)


def test_page_retirement_only_before_ampere(pynvml: Any, write_state: StateWriter) -> None:
    write_state(
        gpus=[
            gpu_entry(0, architecture=ARCH_TURING, retired_pages_sbe=2),
            gpu_entry(1, architecture=ARCH_AMPERE, retired_pages_sbe=2),
            gpu_entry(2, retired_pages_supported=1, retired_pages_dbe=1),
        ]
    )
    pynvml.nvmlInit()
    turing, ampere, hopper_forced = (handle(pynvml, i) for i in range(3))
    sbe = pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    dbe = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    assert len(pynvml.nvmlDeviceGetRetiredPages(turing, sbe)) == 2
    assert pynvml.nvmlDeviceGetRetiredPagesPendingStatus(turing) == 0
    assert len(pynvml.nvmlDeviceGetRetiredPages(hopper_forced, dbe)) == 1
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetRetiredPages(ampere, sbe)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetRetiredPages_v2(ampere, dbe)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetRetiredPagesPendingStatus(ampere)
    fields = [pynvml.NVML_FI_DEV_RETIRED_SBE, pynvml.NVML_FI_DEV_RETIRED_PENDING]
    assert [f.nvmlReturn for f in pynvml.nvmlDeviceGetFieldValues(ampere, fields)] == [
        NVML_ERROR_NOT_SUPPORTED
    ] * 2
    got = pynvml.nvmlDeviceGetFieldValues(turing, fields)
    assert [(f.nvmlReturn, f.value.ullVal) for f in got] == [(NVML_SUCCESS, 2), (NVML_SUCCESS, 0)]


def test_row_remapper_histogram_counts_the_boards_banks(
    pynvml: Any, write_state: StateWriter
) -> None:
    write_state(
        gpus=[
            gpu_entry(0, row_remapper_banks=640, remapped_rows_correctable=3),
            gpu_entry(1, row_remapper_banks=2, remapped_rows_uncorrectable=5),
            gpu_entry(2),
        ]
    )
    pynvml.nvmlInit()
    hist = [pynvml.nvmlDeviceGetRowRemapperHistogram(handle(pynvml, i)) for i in range(3)]
    assert [(h.max, h.high, h.partial, h.low, h.none) for h in hist] == [
        (637, 3, 0, 0, 0),
        (0, 2, 0, 0, 0),
        (4096, 0, 0, 0, 0),  # the format's default bank count
    ]


# "Bank Remap Availability Histogram: Max" in each board's capture.
CAPTURED_BANKS = {
    "a100": 640,
    "b200": 3840,
    "gb200": 3968,
    "gb300": 5952,
    "h100": 2560,
    "l40s": 192,
}


@pytest.mark.parametrize("profile", sorted(CAPTURED_BANKS))
def test_profiles_report_the_captured_bank_count(
    profile: str, pynvml: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_profile_state(pynvml, profile, tmp_path, monkeypatch)
    assert pynvml.nvmlDeviceGetRowRemapperHistogram(handle(pynvml)).max == CAPTURED_BANKS[profile]


def test_t4_profile_has_no_row_remapper(
    pynvml: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_profile_state(pynvml, "t4", tmp_path, monkeypatch)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetRemappedRows(handle(pynvml))
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetRowRemapperHistogram(handle(pynvml))


def test_margin_temperature_only_with_a_tlimit_sensor(
    pynvml: Any, write_state: StateWriter
) -> None:
    write_state(
        gpus=[
            gpu_entry(0, temperature_c=27, temp_gpu_max_c=87),
            gpu_entry(1, margin_temperature_supported=0),
            gpu_entry(2, margin_temperature_supported=None),  # key absent: no sensor
        ]
    )
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetMarginTemperature(handle(pynvml, 0)) == 60
    for index in (1, 2):
        h = handle(pynvml, index)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetMarginTemperature(h)
        # the absolute thresholds still answer (nvidia-smi prints those instead)
        slowdown = pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        assert pynvml.nvmlDeviceGetTemperatureThreshold(h, slowdown) == 89


# "GPU T.Limit Temp" of each capture's first GPU; None where it prints N/A.
CAPTURED_TLIMIT = {
    "a100": None,
    "b200": 49,
    "gb200": 60,
    "gb300": 49,
    "h100": 58,
    "l40s": 59,
    "t4": None,
}


@pytest.mark.parametrize("profile", sorted(CAPTURED_TLIMIT))
def test_profiles_report_the_captured_tlimit(
    profile: str, pynvml: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_profile_state(pynvml, profile, tmp_path, monkeypatch)
    expected = CAPTURED_TLIMIT[profile]
    if expected is None:
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetMarginTemperature(handle(pynvml))
    else:
        assert pynvml.nvmlDeviceGetMarginTemperature(handle(pynvml)) == expected


def test_addressing_mode_comes_from_the_state(
    pynvml: Any, write_state: StateWriter, cnvml: ctypes.CDLL
) -> None:
    write_state(
        gpus=[
            gpu_entry(0, addressing_mode=pynvml.NVML_DEVICE_ADDRESSING_MODE_ATS),
            gpu_entry(1, addressing_mode=pynvml.NVML_DEVICE_ADDRESSING_MODE_NONE),
            gpu_entry(2),  # key absent: NOT_SUPPORTED
        ]
    )
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetAddressingMode(handle(pynvml, 0)) == 2
    assert pynvml.nvmlDeviceGetAddressingMode(handle(pynvml, 1)) == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetAddressingMode(handle(pynvml, 2))
    stale = pynvml.c_nvmlDeviceAddressingMode_t()
    stale.version = 0
    rc = cnvml.nvmlDeviceGetAddressingMode(handle(pynvml, 0), ctypes.byref(stale))
    assert (rc, stale.value) == (NVML_ERROR_ARGUMENT_VERSION_MISMATCH, 0)


@pytest.mark.parametrize("value", ["3", "-2", "ats"])
def test_bad_addressing_mode_fails_init_naming_the_key(
    value: str, pynvml: Any, write_state: StateWriter
) -> None:
    write_state(count=1, addressing_mode=value)
    with pytest.raises(pynvml.NVMLError) as failed:
        pynvml.nvmlInit()
    assert "addressing_mode" in str(failed.value)


class UnrepairableMemoryStatus(ctypes.Structure):
    """``nvmlUnrepairableMemoryStatus_v1_t`` as nvml.h declares it: one flag, no version word."""

    _fields_ = [("bUnrepairableMemory", ctypes.c_uint)]


def test_unrepairable_memory_flag_comes_from_the_state(
    pynvml: Any, write_state: StateWriter, cnvml: ctypes.CDLL
) -> None:
    write_state(
        gpus=[
            gpu_entry(0, unrepairable_memory=0),
            gpu_entry(1, unrepairable_memory=1),
            gpu_entry(2),  # key absent: NOT_SUPPORTED
        ]
    )
    pynvml.nvmlInit()
    got = []
    for index in range(3):
        status = UnrepairableMemoryStatus(bUnrepairableMemory=7)
        rc = cnvml.nvmlDeviceGetUnrepairableMemoryFlag_v1(
            handle(pynvml, index), ctypes.byref(status)
        )
        got.append((rc, status.bUnrepairableMemory))
    assert got == [(NVML_SUCCESS, 0), (NVML_SUCCESS, 1), (NVML_ERROR_NOT_SUPPORTED, 7)]


def test_last_bbx_flush_comes_from_the_state(pynvml: Any, write_state: StateWriter) -> None:
    write_state(
        gpus=[
            gpu_entry(0, bbx_flush_time_us=1787268780497000, bbx_flush_duration_us=61655),
            gpu_entry(1),  # never flushed: NOT_SUPPORTED
            gpu_entry(2, bbx_flush_time_us=1787268780497000, inforom_image_version=""),
        ]
    )
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetLastBBXFlushTime(handle(pynvml, 0)) == [1787268780497000, 61655]
    for index in (1, 2):  # no flush recorded; no infoROM at all
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetLastBBXFlushTime(handle(pynvml, index))


def test_conf_compute_memory_from_ampere_on(pynvml: Any, write_state: StateWriter) -> None:
    write_state(gpus=[gpu_entry(0), gpu_entry(1, architecture=ARCH_TURING)])
    pynvml.nvmlInit()
    info = pynvml.nvmlDeviceGetConfComputeMemSizeInfo(handle(pynvml, 0))
    # confidential computing is off: nothing protected, the whole framebuffer unprotected
    total = gpu_entry(0)["memory_total_bytes"]
    assert (info.protectedMemSizeKib, info.unprotectedMemSizeKib) == (0, total // 1024)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetConfComputeMemSizeInfo(handle(pynvml, 1))


def platform_info(pynvml: Any, cnvml: ctypes.CDLL, index: int) -> tuple[int, Any]:
    info = pynvml.c_nvmlPlatformInfo_v2_t()
    info.version = pynvml.nvmlPlatformInfo_v2
    rc = cnvml.nvmlDeviceGetPlatformInfo(handle(pynvml, index), ctypes.byref(info))
    return rc, info


def as_int(raw: Any) -> int:
    """nvidia-ml-py declares the platform bytes as c_char."""
    return ord(raw) if isinstance(raw, (str, bytes)) else int(raw)


def test_platform_info_on_an_hgx_baseboard(
    pynvml: Any, write_state: StateWriter, cnvml: ctypes.CDLL
) -> None:
    write_state(
        gpus=[
            # an HGX B200 baseboard: answers, but with no chassis and no rack slot
            gpu_entry(
                0,
                platform_supported=1,
                platform_slot_number=255,
                platform_tray_index=255,
                platform_host_id=1,
                platform_peer_type=1,
                platform_ib_guid="0x0123456789abcdef",
                module_id=6,
            ),
            gpu_entry(1, platform_supported=0, platform_chassis_serial="1821124000042"),
            gpu_entry(2),
        ]
    )
    pynvml.nvmlInit()
    rc, info = platform_info(pynvml, cnvml, 0)
    assert rc == NVML_SUCCESS
    assert bytes(info)[20:36] == bytes(16)  # chassisSerialNumber: empty
    # slotNumber, trayIndex, hostId, peerType, moduleId (raw: pynvml cannot decode 0xff)
    assert list(bytes(info)[36:41]) == [255, 255, 1, 1, 6]
    assert bytes(info)[4:20] == bytes.fromhex("0123456789abcdef") + bytes(8)  # ibGuid
    # an explicit platform_supported=0 wins over a chassis serial; no keys: NOT_SUPPORTED
    assert platform_info(pynvml, cnvml, 1)[0] == NVML_ERROR_NOT_SUPPORTED
    assert platform_info(pynvml, cnvml, 2)[0] == NVML_ERROR_NOT_SUPPORTED


def test_platform_info_v1_layout_carries_the_guid(
    pynvml: Any, write_state: StateWriter, cnvml: ctypes.CDLL
) -> None:
    write_state(count=1, platform_supported=1, platform_ib_guid=1, platform_slot_number=14)
    pynvml.nvmlInit()
    info = pynvml.c_nvmlPlatformInfo_v1_t()
    info.version = pynvml.nvmlPlatformInfo_v1
    assert cnvml.nvmlDeviceGetPlatformInfo(handle(pynvml), ctypes.byref(info)) == NVML_SUCCESS
    assert bytes(info)[4:20] == (1).to_bytes(8, "big") + bytes(8)  # ibGuid
    assert as_int(info.chassisPhysicalSlotNumber) == 14


def render_gpus(profile: str, node: str, **file_data: Any) -> list[Any]:
    config = resolve_config(profile=profile, node=node, file_data=file_data or None)
    return list(render(config).gpus)


def test_rack_trays_share_the_chassis_of_their_nvlink_domain() -> None:
    tray_a, tray_b = render_gpus("gb200", "tray-a"), render_gpus("gb200", "tray-b")
    other_rack = render_gpus(
        "gb200",
        "tray-c",
        fabric={"cluster_uuid": "6a5f6f1c-51a8-4b8c-9d0e-1f2a3b4c5d6e", "clique_id": 0},
    )
    serials = {g["platform_chassis_serial"] for g in tray_a + tray_b}
    assert len(serials) == 1
    (serial,) = serials
    assert len(serial) == 13 and serial.isdigit()
    assert {g["platform_chassis_serial"] for g in other_rack} != serials
    # fabric GUIDs are per GPU: distinct within a node and across nodes
    guids = [g["platform_ib_guid"] for g in tray_a + tray_b + other_rack]
    assert len(set(guids)) == len(guids)
    assert {(g["platform_slot_number"], g["platform_tray_index"]) for g in tray_a} == {(14, 4)}


def test_platform_keys_follow_the_board() -> None:
    (b200,) = {g["platform_chassis_serial"] for g in render_gpus("b200", "hgx")}
    assert b200 == ""
    for profile in ("a100", "h100", "l40s", "t4"):
        gpu = render_gpus(profile, "n")[0]
        assert not any(key.startswith("platform_") for key in gpu), profile
    override = render_gpus(
        "gb200", "n", gpus={0: {"platform_ib_guid": 7, "platform_chassis_serial": "X1"}}
    )
    assert (override[0]["platform_ib_guid"], override[0]["platform_chassis_serial"]) == (7, "X1")
    assert override[1]["platform_ib_guid"] != 7


def test_c2c_mode_from_hopper_on(pynvml: Any, write_state: StateWriter) -> None:
    write_state(
        gpus=[
            gpu_entry(0, c2c_enabled=1, architecture=10),  # a GB200: beside a Grace CPU
            gpu_entry(1),  # an HGX H100: C2C-capable, not attached
            gpu_entry(2, architecture=ARCH_AMPERE),
        ]
    )
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetC2cModeInfoV(handle(pynvml, 0)).isC2cEnabled == 1
    assert pynvml.nvmlDeviceGetC2cModeInfoV(handle(pynvml, 1)).isC2cEnabled == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetC2cModeInfoV(handle(pynvml, 2))


def power_fields(pynvml: Any, index: int, scope: int) -> list[tuple[int, int]]:
    ids = [
        pynvml.NVML_FI_DEV_POWER_AVERAGE,
        pynvml.NVML_FI_DEV_POWER_INSTANT,
        pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT,
        pynvml.NVML_FI_DEV_POWER_REQUESTED_LIMIT,
        pynvml.NVML_FI_DEV_POWER_DEFAULT_LIMIT,
        pynvml.NVML_FI_DEV_POWER_MIN_LIMIT,
        pynvml.NVML_FI_DEV_POWER_MAX_LIMIT,
    ]
    got = pynvml.nvmlDeviceGetFieldValues(handle(pynvml, index), [(f, scope) for f in ids])
    return [(f.nvmlReturn, f.value.uiVal if f.nvmlReturn == 0 else 0) for f in got]


def test_power_readings_by_scope(pynvml: Any, write_state: StateWriter) -> None:
    module = {
        "module_power_average_mw": 467170,
        "module_power_usage_mw": 467680,
        "module_power_limit_mw": 2500000,
        "module_power_default_limit_mw": 2400000,
        "module_power_min_limit_mw": 500000,
        "module_power_max_limit_mw": 2600000,
    }
    write_state(
        gpus=[
            # a GB200-like GPU: averaged reading, memory average, module readings
            gpu_entry(0, power_average_mw=68570, memory_power_average_mw=30260, **module),
            gpu_entry(1, architecture=ARCH_AMPERE, pci_device_id="0x20B010DE"),  # an A100
            gpu_entry(2, architecture=ARCH_AMPERE, pci_device_id="0x223610DE"),  # an A10
            gpu_entry(3, architecture=ARCH_TURING),
        ]
    )
    pynvml.nvmlInit()
    gpu, mod, memory = (
        pynvml.NVML_POWER_SCOPE_GPU,
        pynvml.NVML_POWER_SCOPE_MODULE,
        pynvml.NVML_POWER_SCOPE_MEMORY,
    )
    ns = (NVML_ERROR_NOT_SUPPORTED, 0)
    limits = [(0, 700000), (0, 700000), (0, 700000), (0, 200000), (0, 700000)]
    assert power_fields(pynvml, 0, gpu) == [(0, 68570), (0, 71234), *limits]
    assert power_fields(pynvml, 0, memory) == [(0, 30260)] + [ns] * 6
    assert power_fields(pynvml, 0, mod) == [
        (0, 467170),
        (0, 467680),
        (0, 2500000),
        (0, 2500000),
        (0, 2400000),
        (0, 500000),
        (0, 2600000),
    ]
    # the averaged reading: Ampere on, except GA100 (nvml.h); no memory or module readings
    assert power_fields(pynvml, 1, gpu)[:2] == [ns, (0, 71234)]
    assert power_fields(pynvml, 2, gpu)[:2] == [(0, 71234), (0, 71234)]
    assert power_fields(pynvml, 3, gpu)[:2] == [ns, (0, 71234)]
    for index in (1, 2, 3):
        assert power_fields(pynvml, index, memory) == [ns] * 7
        assert power_fields(pynvml, index, mod) == [ns] * 7


NVML_ERROR_DEPRECATED = 26


@pytest.mark.parametrize(
    ("driver", "deprecated"), [("580.173.02", False), ("590.44.01", True), ("595.91.07", True)]
)
def test_drivers_from_590_deprecate_applications_clocks_and_power_state(
    driver: str, deprecated: bool, pynvml: Any, write_state: StateWriter, cnvml: ctypes.CDLL
) -> None:
    write_state(count=1, system={"driver_version": driver})
    pynvml.nvmlInit()
    h = handle(pynvml)
    clock = ctypes.c_uint()
    rcs = [
        cnvml.nvmlDeviceGetApplicationsClock(h, pynvml.NVML_CLOCK_GRAPHICS, ctypes.byref(clock)),
        cnvml.nvmlDeviceGetDefaultApplicationsClock(h, pynvml.NVML_CLOCK_MEM, ctypes.byref(clock)),
        cnvml.nvmlDeviceGetPowerState(h, ctypes.byref(clock)),
        cnvml.nvmlDeviceGetPowerManagementMode(h, ctypes.byref(clock)),
    ]
    assert rcs == [NVML_ERROR_DEPRECATED if deprecated else NVML_SUCCESS] * 4
    # the current P-state is still answered through its own entry point
    assert pynvml.nvmlDeviceGetPerformanceState(h) == 0


@pytest.mark.parametrize(
    ("driver", "branch"), [("580.105.08", "r580_00"), ("595.91.07", "r595_00"), ("dev", None)]
)
def test_driver_branch_follows_the_driver_version(
    driver: str, branch: str | None, pynvml: Any, write_state: StateWriter
) -> None:
    write_state(count=1, system={"driver_version": driver})
    pynvml.nvmlInit()
    if branch is None:
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlSystemGetDriverBranch()
    else:
        assert pynvml.nvmlSystemGetDriverBranch().branch == branch
