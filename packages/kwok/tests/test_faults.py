"""Scenario runs on fake nodes: schedule, GPU pick, effects."""

from __future__ import annotations

from nvml_mock_kwok.faults import (
    CONDITION,
    GpuFault,
    allocatable_with,
    condition_with,
    faults_of,
    pick_gpus,
    run_window,
)
from nvml_mock_kwok.truth import load_truth
from nvml_mock_live.scenario_api import NodeScenario
from nvml_mock_live.scenarios import Scenario

UUIDS = tuple(f"GPU-{i:08x}-0000-0000-0000-000000000000" for i in range(4))


def _scenario(**extra: object) -> tuple[NodeScenario, Scenario]:
    data = {"name": "s", "apply": {"xid": 79}, "gpus": [0], **extra}
    scenario = Scenario.model_validate(data)
    entry = NodeScenario.model_validate(
        {"name": "s", "revision": 1, "startMs": 1000, "scenario": scenario.to_data()}
    )
    return entry, scenario


def test_run_window_with_duration_and_repeat() -> None:
    entry, scenario = _scenario(duration="10s", repeat={"every": "60s", "times": 2})
    assert run_window(entry, scenario, 999) is None
    assert run_window(entry, scenario, 1000) == (0, 1000, 11000)
    assert run_window(entry, scenario, 11000) is None
    assert run_window(entry, scenario, 61500) == (1, 61000, 71000)
    assert run_window(entry, scenario, 121000) is None


def test_pick_gpus_by_index_uuid_all_and_count() -> None:
    assert pick_gpus(_scenario(gpus=[0])[1], "n", UUIDS) == [0]
    assert pick_gpus(_scenario(gpus=[UUIDS[2]])[1], "n", UUIDS) == [2]
    assert pick_gpus(_scenario(gpus="all")[1], "n", UUIDS) == [0, 1, 2, 3]
    picked = pick_gpus(_scenario(gpus={"count": 2})[1], "n", UUIDS)
    assert len(picked) == 2 and picked == pick_gpus(_scenario(gpus={"count": 2})[1], "n", UUIDS)


def test_only_xids_the_components_act_on_make_faults() -> None:
    assert faults_of(_scenario()[1], [0, 1]) == [GpuFault(0, 79, "s"), GpuFault(1, 79, "s")]
    assert faults_of(_scenario(apply={"xid": 13})[1], [0]) == []
    assert faults_of(_scenario(apply={"util": "busy"})[1], [0]) == []


def test_two_faulty_gpus_drop_two_and_the_condition_names_them() -> None:
    truth = load_truth("gb200")
    faults = {GpuFault(0, 79, "a"), GpuFault(2, 79, "b")}
    assert allocatable_with(truth, "none", faults) == {"nvidia.com/gpu": "2"}
    condition = condition_with(faults, UUIDS, "t")
    assert (condition["type"], condition["status"]) == (CONDITION, "False")
    assert "GPU 2" in condition["message"]
    assert condition_with(set(), UUIDS, "t")["status"] == "True"
