"""The generator held to recorded truth: 0 fields of difference per variant.

The fixtures are what NVIDIA's components published on real mock nodes (``record``). A fake
node for the recorded node's name must equal them field for field; a fake node for another
name must equal what the same components published on a real mock node of that name
(``tests/data/gb200-tray-b07.json``, recorded the same way).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import field_diff
from nvml_mock_kwok.faults import GpuFault, allocatable_with, slices_with
from nvml_mock_kwok.fleet import FakeNode
from nvml_mock_kwok.objects import FAKE_LABEL, NodeOptions, node_object, slice_objects
from nvml_mock_kwok.truth import STRATEGIES, Truth, load_truth, parse_truth, variants

DATA = Path(__file__).parent / "data"
VARIANTS = variants()


def _published(truth: Truth, node: FakeNode, strategy: str) -> dict[str, Any]:
    """What a fake node shows of the components' output, in the fixture's shape."""
    obj = node_object(truth, node, NodeOptions(strategy=strategy))
    labels = {k: v for k, v in obj["metadata"]["labels"].items() if k.startswith("nvidia.com/")}
    status = obj["status"]
    resources = {
        name: {
            "capacity": int(status["capacity"][name]),
            "allocatable": int(status["allocatable"][name]),
        }
        for name in status["capacity"]
        if name.startswith("nvidia.com/")
    }
    slices: dict[str, list[Any]] = {}
    for item in slice_objects(truth, node):
        slices.setdefault(item["spec"]["driver"], []).append(item["spec"])
    return {"gfd": labels, "devicePlugin": resources, "resourceSlices": slices}


def _recorded(data: dict[str, Any], strategy: str) -> dict[str, Any]:
    return {
        "gfd": data["gfd"][strategy],
        "devicePlugin": data["devicePlugin"][strategy],
        "resourceSlices": data["resourceSlices"],
    }


def _node(truth: Truth, name: str) -> FakeNode:
    return FakeNode(name, truth.variant, "recorded", truth.identity.fabric)


def test_every_profile_has_recorded_truth() -> None:
    assert {"a100", "b200", "gb200", "gb300", "h100", "h200", "l40s", "t4"} <= set(VARIANTS)
    assert "h100-mig-all-1g.10gb" in VARIANTS


@pytest.mark.parametrize("variant", VARIANTS)
def test_fake_node_equals_the_recorded_node(variant: str) -> None:
    truth = load_truth(variant)
    for strategy in (s for s in STRATEGIES if s in truth.device_plugin):
        got = _published(truth, _node(truth, truth.identity.node), strategy)
        want = _recorded(dict(truth.data), strategy)
        assert field_diff(got, want) == [], f"{variant} ({strategy})"


def test_a_fake_node_of_another_name_equals_that_real_mock_node() -> None:
    """The recording of node tray-b07 against the generator fed with rec-gb200's truth."""
    truth = load_truth("gb200")
    other = json.loads((DATA / "gb200-tray-b07.json").read_text())
    assert other["identity"]["node"] == "tray-b07"
    assert other["identity"]["gpuUuids"] != truth.data["identity"]["gpuUuids"]
    got = _published(truth, _node(truth, "tray-b07"), "none")
    assert field_diff(got, _recorded(other, "none")) == []


def test_the_comparison_sees_a_single_changed_field() -> None:
    truth = load_truth("gb200")
    want = _recorded(dict(truth.data), "none")
    got = _published(truth, _node(truth, "tray-b07"), "none")
    diff = field_diff(got, want)
    assert any(d.endswith(".nodeName: 'tray-b07' != 'rec-gb200'") for d in diff)
    assert sum(".uuid.string" in d for d in diff) == 4  # one per GPU, nothing else
    assert not any("pcieRoot" in d or "productName" in d for d in diff)


def test_another_clique_rewrites_the_clique_label_only() -> None:
    from nvml_mock_kwok.identity import Fabric

    truth = load_truth("gb200")
    node = FakeNode("tray-b07", "gb200", "d", Fabric("11111111-2222-4333-8444-555555555555", 9))
    labels = node_object(truth, node, NodeOptions())["metadata"]["labels"]
    assert labels["nvidia.com/gpu.clique"] == "11111111-2222-4333-8444-555555555555.9"
    recorded = truth.gfd["none"]
    changed = [k for k in recorded if labels[k] != recorded[k]]
    assert changed == ["nvidia.com/gpu.clique"]


@pytest.mark.parametrize("variant", [v for v in VARIANTS if "mig" not in v])
def test_xid79_on_gpu0_equals_the_recorded_fault(variant: str) -> None:
    truth = load_truth(variant)
    fault = {GpuFault(0, 79, "s")}
    node = _node(truth, truth.identity.node)
    recorded = truth.faults["xid79"]
    got = allocatable_with(truth, "none", fault)
    assert got == {k: str(v["allocatable"]) for k, v in recorded["devicePlugin"].items()}
    specs = {
        d: [s for s in (x["spec"] for x in slice_objects(truth, node)) if s["driver"] == d]
        for d in truth.resource_slices
    }
    tainted = slices_with(truth, specs, truth.identity.gpu_uuids, fault, "2026-01-01T00:00:00Z")
    for spec in tainted["gpu.nvidia.com"]:
        for device in spec["devices"]:
            for taint in device.get("taints", ()):
                assert taint.pop("timeAdded") == "2026-01-01T00:00:00Z"
    assert field_diff(tainted["gpu.nvidia.com"], recorded["resourceSlices"]["gpu.nvidia.com"]) == []
    assert allocatable_with(truth, "none", set()) == {
        k: str(v["allocatable"]) for k, v in truth.device_plugin["none"].items()
    }


def test_fixtures_name_one_version_per_component() -> None:
    seen: dict[str, set[tuple[str, str]]] = {}
    for variant in VARIANTS:
        for name, info in load_truth(variant).components.items():
            assert info["version"] and len(info["revision"]) == 40, (variant, name)
            seen.setdefault(name, set()).add((info["version"], info["revision"]))
    assert {n: len(v) for n, v in seen.items()} == {n: 1 for n in seen}
    assert set(seen) == {
        "nvidia-device-plugin",
        "gpu-feature-discovery",
        "gpu-kubelet-plugin",
        "compute-domain-kubelet-plugin",
    }


def test_a_malformed_fixture_is_named() -> None:
    from nvml_mock_kwok.errors import TruthError

    with pytest.raises(TruthError, match=r"x.json: schemaVersion must be 1"):
        parse_truth({"schemaVersion": 7}, "x.json")


def test_fake_objects_carry_the_fake_label() -> None:
    truth = load_truth("gb200")
    node = _node(truth, "n1")
    assert node_object(truth, node, NodeOptions())["metadata"]["labels"][FAKE_LABEL] == "true"
    assert all(s["metadata"]["labels"][FAKE_LABEL] == "true" for s in slice_objects(truth, node))
