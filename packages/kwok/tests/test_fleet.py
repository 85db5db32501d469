"""Fleets from topology documents: checks before anything is made, stable objects on re-runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from nvml_mock_engine.render import gpu_uuid
from nvml_mock_kwok.cli import EXIT_CONFIG, EXIT_OK, main
from nvml_mock_kwok.errors import PlanError
from nvml_mock_kwok.fleet import fleet_from_document, plan_document

GPUS = {"gb200": 4, "h100": 8}
FABRIC = frozenset({"gb200", "h100"})


def _generate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict], str]:
    code = main(["generate", *argv])
    out, err = capsys.readouterr()
    return code, [d for d in yaml.safe_load_all(out) if d], err


def test_nvl72_shaped_by_default() -> None:
    doc = plan_document(5000)
    cliques = [c for d in doc.domains for c in d.cliques]
    assert len(cliques) == 278
    assert {len(c.nodes) for c in cliques[:-1]} == {18}
    assert len(cliques[-1].nodes) == 5000 - 277 * 18
    assert [c.id for c in cliques] == list(range(278))
    assert len({d.uuid for d in doc.domains}) == len(doc.domains)


def test_every_node_has_its_own_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    code, objects, _ = _generate(capsys, "--nodes", "40", "--no-stages")
    assert code == EXIT_OK
    nodes = [o for o in objects if o["kind"] == "Node"]
    slices = [o for o in objects if o["kind"] == "ResourceSlice"]
    assert len(nodes) == 40 and len(slices) == 80
    uuids = [
        d["attributes"]["uuid"]["string"]
        for s in slices
        if s["spec"]["driver"] == "gpu.nvidia.com"
        for d in s["spec"]["devices"]
    ]
    assert len(uuids) == len(set(uuids)) == 160
    # the engine's own derivation: a real mock node of the same name has these UUIDs
    first = next(
        s
        for s in slices
        if s["spec"]["nodeName"] == "kwok-gpu-00000" and s["spec"]["driver"] == "gpu.nvidia.com"
    )
    names = {d["name"]: d["attributes"]["uuid"]["string"] for d in first["spec"]["devices"]}
    assert names["gpu-0"] == gpu_uuid("kwok-gpu-00000", "gb200", 0)
    cliques = {n["metadata"]["labels"]["nvidia.com/gpu.clique"] for n in nodes}
    assert len(cliques) == 3  # 18 + 18 + 4
    for s in slices:
        assert s["spec"]["pool"]["name"] == s["spec"]["nodeName"]


def test_a_rerun_makes_the_same_objects(capsys: pytest.CaptureFixture[str]) -> None:
    first = _generate(capsys, "--nodes", "20")[1]
    second = _generate(capsys, "--nodes", "20")[1]
    assert first == second
    names = [(o["kind"], o["metadata"]["name"]) for o in first]
    assert len(names) == len(set(names))


def test_a_count_the_document_cannot_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "t.yaml"
    doc.write_text(yaml.safe_dump(plan_document(36).to_data()))
    code, objects, err = _generate(capsys, "--topology", str(doc), "--nodes", "37")
    assert code == EXIT_CONFIG and objects == []
    assert "places 36 node(s); it cannot hold 37" in err


def test_a_clique_shape_one_nvlink_domain_cannot_hold(capsys: pytest.CaptureFixture[str]) -> None:
    code, objects, err = _generate(capsys, "--nodes", "19", "--clique-size", "19")
    assert code == EXIT_CONFIG and objects == []
    assert "clique 0 has 19 nodes of 4 gb200 GPUs (76 GPUs); one NVLink domain holds 72" in err


def test_a_profile_without_recorded_truth(capsys: pytest.CaptureFixture[str]) -> None:
    code, objects, err = _generate(capsys, "--nodes", "3", "--profile", "rtx9000")
    assert code == EXIT_CONFIG and objects == []
    assert "profile 'rtx9000' has no recorded truth (recorded: a100," in err


def test_a_strategy_without_recorded_truth(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _generate(capsys, "--nodes", "3", "--mig-strategy", "mixed")
    assert code == EXIT_CONFIG
    assert "gb200 has no recorded truth for MIG strategy 'mixed'" in err


def test_a_mig_variant_under_mixed(capsys: pytest.CaptureFixture[str]) -> None:
    code, objects, _ = _generate(
        capsys,
        "--nodes",
        "2",
        "--clique-size",
        "2",
        "--profile",
        "h100-mig-all-1g.10gb",
        "--mig-strategy",
        "mixed",
        "--no-stages",
    )
    assert code == EXIT_OK
    node = objects[0]
    assert node["status"]["capacity"]["nvidia.com/mig-1g.10gb"] == "56"
    assert node["metadata"]["labels"]["nvidia.com/mig.strategy"] == "mixed"


def test_domains_of_other_profiles_and_only_some_nodes(tmp_path: Path) -> None:
    doc = plan_document(4, clique_size=2)
    fleet = fleet_from_document(
        doc,
        profile="gb200",
        gpus_per_node=GPUS,
        fabric_profiles=FABRIC,
        domain_profiles={"nvl72-0001": "h100"},
        only=["kwok-gpu-00000", "kwok-gpu-00003"],
    )
    assert [(n.name, n.variant) for n in fleet.nodes] == [
        ("kwok-gpu-00000", "gb200"),
        ("kwok-gpu-00003", "h100"),
    ]
    with pytest.raises(PlanError, match="kwok-gpu-00009 are not in the topology document"):
        fleet_from_document(
            doc,
            profile="gb200",
            gpus_per_node=GPUS,
            fabric_profiles=FABRIC,
            only=["kwok-gpu-00009"],
        )
    with pytest.raises(PlanError, match=r"domain.s. nope are not in the topology document"):
        fleet_from_document(
            doc,
            profile="gb200",
            gpus_per_node=GPUS,
            fabric_profiles=FABRIC,
            domain_profiles={"nope": "h100"},
        )


def test_plan_writes_a_document_the_topology_service_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nvml_mock_protocol.topology import read_topology_file

    out = tmp_path / "topology.yaml"
    assert main(["plan", "--nodes", "100", "-o", str(out)]) == EXIT_OK
    doc = read_topology_file(out)
    assert len(doc.node_index()) == 100
    assert doc.placement("kwok-gpu-00054").clique_id == 3  # type: ignore[union-attr]
