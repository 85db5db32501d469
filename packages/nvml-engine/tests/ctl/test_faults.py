"""Fault recipes: what each fault writes, per architecture, on every packaged profile.

Recipes are pure data over a GPU's board and live values; the live-layer and NVML side of
writing them is in test_ctl.py. The fabric summary the library derives from a degraded mask
is checked through the built library here, since the mask is a board-backed live key.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from conftest import StateWriter
from nvml_mock_engine import faults
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.errors import LiveValueError
from nvml_mock_engine.faults import Event, FaultOptions, GpuView
from nvml_mock_engine.profiles import profile_names
from nvml_mock_engine.render import render_text
from nvml_mock_engine.schema import LIVE_GPU_KEYS, validate_value
from nvml_structs import FABRIC_V3, FabricV3

XID, DBE, SBE, CLOCK = (
    faults.EVENT_XID,
    faults.EVENT_DOUBLE_BIT_ECC,
    faults.EVENT_SINGLE_BIT_ECC,
    faults.EVENT_CLOCK,
)


def board(architecture: int, **values: object) -> live.BoardGpu:
    base: dict[str, object] = {
        "uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "architecture": architecture,
        "temp_slowdown_c": 89,
        "max_clock_sm_mhz": 1980,
        "max_clock_graphics_mhz": 1980,
        "clock_sm_mhz": 345,
        "clock_graphics_mhz": 345,
        "power_limit_mw": 700000,
        "power_usage_mw": 70000,
        "nvlink_count": 18,
        "fabric_attached": 1,
        "fabric_health_mask": "0x1aa",
        "ecc_volatile_uncorrected": 2,
        "ecc_aggregate_uncorrected": 10,
        **values,
    }
    return live.BoardGpu(0, str(base["uuid"]), {k: str(v) for k, v in base.items()})


def xids(plan: faults.FaultPlan) -> list[int]:
    return [e.data for e in plan.events if e.event_type == XID]


@pytest.mark.parametrize("architecture", [5, 6])  # Volta, Turing
def test_uncorrectable_before_ampere_retires_a_page_with_xid_48(architecture: int) -> None:
    plan = faults.plan("ecc-uncorrectable", GpuView(board(architecture)), FaultOptions(count=2))
    assert plan.values == {
        "ecc_volatile_uncorrected": 4,
        "ecc_aggregate_uncorrected": 12,
        "retired_pages_dbe": 2,
        "retired_pages_pending": 1,
        "recovery_action": 1,
    }
    assert plan.events == (Event(DBE), Event(XID, 48), Event(XID, 63))


def test_uncorrectable_before_ampere_with_a_failed_retirement_reports_xid_64() -> None:
    plan = faults.plan("ecc-uncorrectable", GpuView(board(6)), FaultOptions(remap_failure=True))
    assert xids(plan) == [48, 64]
    assert "retired_pages_dbe" not in plan.values


@pytest.mark.parametrize("architecture", [7, 8, 9, 10])  # Ampere, Ada, Hopper, Blackwell
def test_uncorrectable_from_ampere_on_remaps_a_row_contained(architecture: int) -> None:
    gpu = GpuView(
        board(architecture), {"remapped_rows_uncorrectable": 1, "ecc_volatile_uncorrected": 5}
    )
    plan = faults.plan("ecc-uncorrectable", gpu)
    assert plan.values == {
        "ecc_volatile_uncorrected": 6,  # the live value grows, not the board's
        "ecc_aggregate_uncorrected": 11,
        "remapped_rows_uncorrectable": 2,
        "remapped_rows_pending": 1,
        "recovery_action": 1,
    }
    assert plan.events == (Event(DBE), Event(XID, 94), Event(XID, 63))
    assert not any(k.startswith("retired_pages") for k in plan.values)


def test_uncorrectable_uncontained_and_remap_failure_from_ampere_on() -> None:
    plan = faults.plan("ecc-uncorrectable", GpuView(board(9)), FaultOptions(uncontained=True))
    assert xids(plan) == [95, 63]
    failed = faults.plan(
        "ecc-uncorrectable",
        GpuView(board(9, unrepairable_memory=0)),
        FaultOptions(remap_failure=True),
    )
    assert xids(failed) == [94, 64]
    assert failed.values["remapped_rows_failure"] == 1
    assert failed.values["unrepairable_memory"] == 1
    assert "remapped_rows_pending" not in failed.values
    # a board that does not answer the unrepairable-memory flag (-1) keeps it so
    unsupported = faults.plan(
        "ecc-uncorrectable", GpuView(board(9)), FaultOptions(remap_failure=True)
    )
    assert "unrepairable_memory" not in unsupported.values


def test_correctable_grows_the_corrected_counters_with_a_single_bit_event() -> None:
    plan = faults.plan(
        "ecc-correctable", GpuView(board(9), {"ecc_volatile_corrected": 3}), FaultOptions(count=4)
    )
    assert plan.values == {"ecc_volatile_corrected": 7, "ecc_aggregate_corrected": 4}
    assert plan.events == (Event(SBE),)


def test_thermal_is_over_slowdown_with_both_thermal_reasons_and_halved_clocks() -> None:
    plan = faults.plan("thermal", GpuView(board(9), {"clocks_event_reasons": 0x1 | 0x4}))
    assert plan.values["temperature_c"] == 92
    # the idle reason goes (a throttled GPU is busy); a power cap already shown stays
    assert plan.values["clocks_event_reasons"] == 0x4 | 0x8 | 0x20 | 0x40
    assert plan.values["clock_sm_mhz"] == plan.values["clock_graphics_mhz"] == 990
    assert plan.events == (Event(CLOCK),)
    with pytest.raises(
        LiveValueError, match="temperature_c=80: a thermal slowdown needs more than"
    ):
        faults.plan("thermal", GpuView(board(9)), FaultOptions(temperature_c=80))


def test_power_cap_and_power_brake() -> None:
    cap = faults.plan("power-cap", GpuView(board(9)))
    assert cap.values["clocks_event_reasons"] == 0x4
    assert cap.values["power_usage_mw"] == 700000
    assert cap.values["clock_sm_mhz"] < 1980
    brake = faults.plan("power-brake", GpuView(board(9)))
    assert brake.values["clocks_event_reasons"] == 0x80 | 0x8
    assert brake.values["clock_sm_mhz"] <= 990


def test_nvlink_down_sets_the_link_bits_counters_and_xid_74() -> None:
    plan = faults.plan(
        "nvlink-down",
        GpuView(board(9), {"nvlink_down_mask": 1}),
        FaultOptions(links=(17,), count=3),
    )
    assert plan.values == {
        "nvlink_down_mask": 1 | 1 << 17,
        "nvlink_crc_errors": 3,
        "nvlink_replay_errors": 3,
        "nvlink_recovery_errors": 1,
    }
    assert xids(plan) == [74]
    with pytest.raises(LiveValueError, match=r"link=18: the GPU's links are 0\.\.17"):
        faults.plan("nvlink-down", GpuView(board(9)), FaultOptions(links=(18,)))
    with pytest.raises(LiveValueError, match="link=0: the GPU has no NVLinks"):
        faults.plan("nvlink-down", GpuView(board(8, nvlink_count=0)))


def test_fabric_degraded_sets_the_health_fields() -> None:
    assert faults.plan("fabric-degraded", GpuView(board(10))).values == {
        "fabric_health_mask": 0x1A9
    }
    both = faults.plan(
        "fabric-degraded",
        GpuView(board(10)),
        FaultOptions(fabric_reasons=("route-unhealthy", "incorrect-configuration")),
    )
    assert both.values == {"fabric_health_mask": 0x49A}
    with pytest.raises(LiveValueError, match="not fabric-attached"):
        faults.plan("fabric-degraded", GpuView(board(7, fabric_attached=0)))


def test_lost_and_fallen_off_bus() -> None:
    assert faults.plan("lost", GpuView(board(9))) == faults.FaultPlan("lost", {"gpu_lost": 1})
    off = faults.plan("fallen-off-bus", GpuView(board(9)))
    assert off.values == {"gpu_lost": 1}
    assert off.events == (Event(XID, 79),)


def test_an_unknown_fault_is_refused_by_name() -> None:
    with pytest.raises(LiveValueError, match=r"fault='melt': is not a fault; faults: lost, "):
        faults.plan("melt", GpuView(board(9)))


@pytest.mark.parametrize("profile", profile_names())
def test_every_recipe_writes_valid_values_on_every_profile(profile: str, tmp_path: Path) -> None:
    state = tmp_path / "state.nvmlmock"
    state.write_text(render_text(resolve_config(profile=profile, count=1, node="n")))
    gpu = GpuView(live.read_board(state)[0])
    arch = gpu.architecture
    for name in faults.FAULTS:
        try:
            plan = faults.plan(name, gpu)
        except LiveValueError as exc:  # a fault the board cannot have
            assert (name, exc.key) in (
                ("nvlink-down", "link"),
                ("fabric-degraded", "fabric_health_mask"),
            ), exc
            continue
        for key, value in plan.values.items():
            validate_value(LIVE_GPU_KEYS[key], value)
        if name == "ecc-uncorrectable":
            assert ("remapped_rows_pending" in plan.values) == (arch >= faults.ARCH_AMPERE)
            assert ("retired_pages_pending" in plan.values) == (arch < faults.ARCH_AMPERE)


def test_a_degraded_mask_reads_as_limited_capacity_and_a_fault_as_unhealthy(
    pynvml: Any, cnvml: ctypes.CDLL, write_state: StateWriter
) -> None:
    """NVML_GPU_FABRIC_HEALTH_SUMMARY_*: degraded bandwidth alone is LIMITED_CAPACITY (3),
    any other fault UNHEALTHY (2); the library derives it from the mask the recipe writes."""
    state = write_state()
    path = live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    def summary() -> tuple[int, int]:
        info = FabricV3(version=FABRIC_V3)
        assert cnvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info)) == 0
        return info.healthMask, info.healthSummary

    assert summary() == (0x1AA, 1)
    with live.LiveLayer.open(path) as layer:
        board_gpu = layer.board[0]
        layer.set(0, faults.plan("fabric-degraded", GpuView(board_gpu)).values)
        assert summary() == (0x1A9, 3)
        worse = FaultOptions(fabric_reasons=("degraded-bandwidth", "route-unhealthy"))
        layer.set(
            0, faults.plan("fabric-degraded", GpuView(board_gpu, layer.values(0)), worse).values
        )
        assert summary() == (0x199, 2)
