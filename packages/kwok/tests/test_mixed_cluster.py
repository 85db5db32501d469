"""A mixed cluster: a real mock node (the chart on a real kubelet) and fake nodes from one
topology document carry the same labels, resources and slices.

``tests/data/gb200-chart-node.json`` is what NVIDIA's components published on a real node
running the nvml-mock chart (README, *Mixed clusters*): GFD's labels from its pod on the
node, the device plugin's resources from the Node's status, the DRA driver's ResourceSlices
from its kubelet plugin pods. It also holds the topology document the chart served. The
generator, fed that document with the real node's name, must give its twin to the field; a
fake node of another name differs only in the values that name a node (node name, pool,
GPU UUIDs) and, in another clique, the clique label.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import field_diff
from nvml_mock_kwok.fleet import FakeNode, fleet_from_document
from nvml_mock_kwok.identity import node_identity
from nvml_mock_kwok.objects import NodeOptions, node_object, slice_objects
from nvml_mock_kwok.truth import Truth, load_truth, variants
from nvml_mock_protocol.topology import validate_topology_data

REAL = json.loads((Path(__file__).parent / "data" / "gb200-chart-node.json").read_text())


def _fleet(*only: str) -> dict[str, FakeNode]:
    truths = {v: load_truth(v) for v in variants()}
    document = validate_topology_data(REAL["topology"], source="gb200-chart-node.json")
    fleet = fleet_from_document(
        document,
        profile=REAL["profile"],
        gpus_per_node={v: t.gpu_count for v, t in truths.items()},
        fabric_profiles=frozenset(v for v, t in truths.items() if t.identity.fabric is not None),
        only=list(only),
    )
    return {node.name: node for node in fleet.nodes}


def _published(truth: Truth, node: FakeNode) -> dict[str, Any]:
    """What a fake node shows of the components' output, in the recording's shape."""
    obj = node_object(truth, node, NodeOptions(strategy="none"))
    status = obj["status"]
    slices: dict[str, list[Any]] = {}
    for item in slice_objects(truth, node):
        slices.setdefault(item["spec"]["driver"], []).append(item["spec"])
    return {
        "gfd": {k: v for k, v in obj["metadata"]["labels"].items() if k.startswith("nvidia.com/")},
        "devicePlugin": {
            name: {
                "capacity": int(status["capacity"][name]),
                "allocatable": int(status["allocatable"][name]),
            }
            for name in status["capacity"]
            if name.startswith("nvidia.com/")
        },
        "resourceSlices": slices,
    }


def _recorded() -> dict[str, Any]:
    return {
        "gfd": REAL["gfd"]["none"],
        "devicePlugin": REAL["devicePlugin"]["none"],
        "resourceSlices": REAL["resourceSlices"],
    }


def test_the_real_node_was_recorded_with_the_fixtures_components() -> None:
    """The real node ran the binaries the profile's truth was recorded with, so a
    difference below is the generator's, not a version's."""
    assert REAL["components"] == dict(load_truth(REAL["profile"]).data["components"])


def test_the_fake_twin_of_the_real_node_differs_in_no_field() -> None:
    truth = load_truth(REAL["profile"])
    twin = _fleet(REAL["node"])[REAL["node"]]
    assert field_diff(_published(truth, twin), _recorded()) == []


def test_the_real_nodes_identity_is_the_engines_derivation() -> None:
    """UUIDs and bus ids the real node's DRA driver published are the ones the generator
    derives from the node's name (bus ids as the DRA driver spells them)."""
    twin = _fleet(REAL["node"])[REAL["node"]]
    truth = load_truth(REAL["profile"])
    identity = node_identity(REAL["profile"], twin.name, truth.gpu_count, twin.fabric)
    assert list(identity.gpu_uuids) == REAL["identity"]["gpuUuids"]
    spelled = [b.lower().removeprefix("0000") for b in identity.bus_ids]
    assert spelled == REAL["identity"]["busIds"]


@pytest.mark.parametrize(
    ("other", "clique_changes"), [("kwok-gpu-00000", False), ("kwok-gpu-00002", True)]
)
def test_a_fake_node_beside_it_differs_only_in_what_names_a_node(
    other: str, clique_changes: bool
) -> None:
    truth = load_truth(REAL["profile"])
    fake = _fleet(REAL["node"], other)[other]
    diff = field_diff(_published(truth, fake), _recorded())
    gpus = truth.gpu_count
    names = [d for d in diff if d.endswith((f".nodeName: {other!r} != {REAL['node']!r}",
                                            f".name: {other!r} != {REAL['node']!r}"))]  # fmt: skip
    uuids = [d for d in diff if ".attributes.uuid.string: 'GPU-" in d]
    clique = [d for d in diff if d.startswith(".gfd.nvidia.com/gpu.clique:")]
    assert len(names) == 2 * len(REAL["resourceSlices"])  # nodeName and pool, per slice
    assert len(uuids) == gpus
    assert len(clique) == (1 if clique_changes else 0)
    assert sorted(diff) == sorted(names + uuids + clique)
