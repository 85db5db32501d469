"""The topology document model: valid documents, the index, and every refusal naming its place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nvml_mock_protocol.topology import (
    CLIQUE_ID_MAX,
    NodePlacement,
    TopologyDocument,
    TopologyError,
    check_node_name,
    node_name_problem,
    parse_topology,
    read_topology_file,
    validate_topology_data,
)
from pydantic import ValidationError

DEMO = """\
version: 1
domains:
  - name: demo-domain
    uuid: 00000000-0000-0000-0000-0000000000AB
    cliques:
      - id: 0
        nodes: [worker-1, worker-2]
      - id: 1
        nodes: [worker-3, worker-4]
  - name: rebinder
    uuid: 00000000-0000-0000-0000-0000000000ff
    cliques:
      - id: 99
        nodes: [worker-5.example.com]
"""


def problems_of(text: str) -> list[str]:
    with pytest.raises(TopologyError) as caught:
        parse_topology(text, source="topology.yaml")
    assert "topology.yaml" in str(caught.value)
    return list(caught.value.problems)


def doc(*cliques: str, uuid: str = "00000000-0000-0000-0000-0000000000ab") -> str:
    body = "".join(f"      - {clique}\n" for clique in cliques)
    return f"version: 1\ndomains:\n  - name: d\n    uuid: {uuid}\n    cliques:\n{body}"


def test_demo_document_indexes_every_node() -> None:
    document = parse_topology(DEMO)
    index = document.node_index()
    assert set(index) == {"worker-1", "worker-2", "worker-3", "worker-4", "worker-5.example.com"}
    assert index["worker-3"] == NodePlacement(
        "worker-3", "demo-domain", "00000000-0000-0000-0000-0000000000ab", 1
    )
    assert document.placement("worker-5.example.com") == NodePlacement(
        "worker-5.example.com", "rebinder", "00000000-0000-0000-0000-0000000000ff", 99
    )
    assert document.placement("nobody") is None


def test_uuid_is_lowercased() -> None:
    assert parse_topology(DEMO).domains[0].uuid == "00000000-0000-0000-0000-0000000000ab"


def test_json_text_gives_the_same_document() -> None:
    document = parse_topology(DEMO)
    as_json = json.dumps(document.to_data())
    assert parse_topology(as_json) == document
    assert parse_topology(as_json.encode()) == document


def test_round_trip_through_plain_data() -> None:
    document = parse_topology(DEMO)
    again = TopologyDocument.model_validate(document.to_data())
    assert again == document
    assert again.node_index() == document.node_index()


def test_empty_topologies_are_valid() -> None:
    assert parse_topology("version: 1").node_index() == {}
    assert parse_topology("version: 1\ndomains: []").domains == ()
    assert parse_topology(doc("id: 0")).node_index() == {}


def test_clique_id_bounds() -> None:
    assert parse_topology(doc(f"{{id: {CLIQUE_ID_MAX}, nodes: [a]}}")).placement("a") is not None
    [problem] = problems_of(doc(f"{{id: {CLIQUE_ID_MAX + 1}, nodes: [a]}}"))
    assert problem.startswith("domains[0] 'd'.cliques[0] (id 4294967296).id:")
    assert "outside 0..4294967295" in problem
    [problem] = problems_of(doc("{id: -1, nodes: [a]}"))
    assert "-1" in problem and "outside" in problem


@pytest.mark.parametrize("value", ["1.5", "'2'", "true", "[1]"])
def test_clique_id_must_be_an_integer(value: str) -> None:
    [problem] = problems_of(doc(f"{{id: {value}, nodes: [a]}}"))
    assert problem.startswith("domains[0] 'd'.cliques[0]")
    assert ".id:" in problem


def test_node_in_two_cliques_names_both_places() -> None:
    text = DEMO.replace("[worker-5.example.com]", "[worker-2]")
    [problem] = problems_of(text)
    assert "node 'worker-2' is in more than one clique" in problem
    assert "domains[0] 'demo-domain' cliques[0] (id 0) nodes[1]" in problem
    assert "domains[1] 'rebinder' cliques[0] (id 99) nodes[0]" in problem


def test_node_listed_twice_in_one_clique() -> None:
    [problem] = problems_of(doc("{id: 3, nodes: [a, b, a]}"))
    assert "node 'a' is listed twice" in problem
    assert "nodes[0] and nodes[2]" in problem


def test_duplicate_clique_id_in_a_domain() -> None:
    [problem] = problems_of(doc("{id: 7, nodes: [a]}", "{id: 7, nodes: [b]}"))
    assert "domain 'd' has clique id 7 twice (cliques[0] and cliques[1])" in problem


def test_same_clique_id_in_two_domains_is_fine() -> None:
    text = DEMO.replace("id: 99", "id: 0")
    assert parse_topology(text).placement("worker-5.example.com").clique_id == 0  # type: ignore[union-attr]


def test_duplicate_domain_name_and_uuid() -> None:
    text = DEMO.replace("rebinder", "demo-domain").replace("0000000000ff", "0000000000AB")
    found = problems_of(text)
    assert any("domain name 'demo-domain' is used twice" in p for p in found)
    assert any(
        "cluster uuid 00000000-0000-0000-0000-0000000000ab is used by two" in p for p in found
    )


@pytest.mark.parametrize(
    "uuid",
    [
        "0000-0000-0000-0000-0000000000ab",
        "00000000000000000000000000000000ab",
        "00000000-0000-0000-0000-0000000000ag",
        "'{00000000-0000-0000-0000-0000000000ab}'",
        "''",
    ],
)
def test_malformed_uuid(uuid: str) -> None:
    [problem] = problems_of(doc("{id: 0, nodes: [a]}", uuid=uuid))
    assert problem.startswith("domains[0] 'd'.uuid:")
    assert "is not a UUID" in problem


def test_unknown_version() -> None:
    [problem] = problems_of("version: 2\ndomains: []")
    assert problem == "version: unsupported topology document version 2; this build reads version 1"
    [problem] = problems_of("version: true")
    assert problem.startswith("version: unsupported")
    [problem] = problems_of("domains: []")
    assert problem == "version: required key is missing"
    for value in ("'1'", "1.5", "null"):
        [problem] = problems_of(f"version: {value}")
        assert problem.startswith("version: unsupported topology document version "), problem


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("''", "domain name is empty"),
        ("'   '", "domain name is empty"),
        ('"demo\\tdomain"', "contains a control character"),
        ("42", "valid string, got 42 (int)"),
    ],
)
def test_bad_domain_names_say_why(name: str, why: str) -> None:
    [problem] = problems_of(doc("{id: 0, nodes: [a]}").replace("name: d", f"name: {name}"))
    assert problem.startswith("domains[0]"), problem
    assert ".name:" in problem
    assert why in problem


@pytest.mark.parametrize(
    ("node", "why"),
    [
        ("''", "node name is empty"),
        ("Worker-1", "uppercase 'W' at position 0"),
        ("worker_1", "'_' at position 6"),
        ("-worker", "must start and end with a letter or digit"),
        ("worker-", "must start and end with a letter or digit"),
        ("a..b", "empty label"),
        ("a.-b", "label '-b' must start and end"),
        ("'" + ".".join(["a" * 60] * 5) + "'", "at most 253"),
        ("0123", "valid string, got 83 (int); quote it in YAML"),
    ],
)
def test_bad_node_names_say_why(node: str, why: str) -> None:
    [problem] = problems_of(doc(f"{{id: 0, nodes: [ok, {node}]}}"))
    assert problem.startswith("domains[0] 'd'.cliques[0] (id 0).nodes[1]:")
    assert why in problem


def test_every_problem_is_reported_in_one_pass() -> None:
    text = """\
version: 1
domains:
  - name: d
    uuid: not-a-uuid
    cliques:
      - {id: 0, nodes: [a, B]}
      - {id: 0, nodes: [a], colour: red}
"""
    found = problems_of(text)
    assert len(found) == 5, found
    assert any("uuid:" in p and "not-a-uuid" in p for p in found)
    assert any("nodes[1]:" in p and "uppercase" in p for p in found)
    assert any(p.endswith(".colour: unknown key") for p in found)
    assert any("clique id 0 twice" in p for p in found)
    assert any("node 'a' is in more than one clique" in p for p in found)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "document is empty"),
        ("# only a comment\n", "document is empty"),
        ("[1, 2]", "expected a mapping"),
        ("version: 1\nversion: 1\n", "duplicate key 'version'"),
        ("version: [1\n", "not valid YAML: line 2"),
        ('{"version": 1, "version": 1}', "duplicate key 'version'"),
        ('{"version": 1,', "not valid JSON at line 1"),
        ("version: 1\ndomains: {}\n", "domains:"),
        ("version: 1\ndomains: [3]\n", "domains[0]:"),
        ("version: !!python/object:os.system x\n", "not valid YAML"),
    ],
)
def test_malformed_text(text: str, why: str) -> None:
    [problem] = problems_of(text)
    assert why in problem


def test_non_utf8_bytes() -> None:
    with pytest.raises(TopologyError, match="not UTF-8"):
        parse_topology(b"version: 1\n\xff\xfe")


def test_validate_topology_data_refuses_non_mappings() -> None:
    with pytest.raises(TopologyError, match="expected a mapping"):
        validate_topology_data("version: 1")


def test_model_validate_also_refuses_cross_entry_problems() -> None:
    data = {
        "version": 1,
        "domains": [
            {
                "name": "d",
                "uuid": "00000000-0000-0000-0000-0000000000ab",
                "cliques": [{"id": 0, "nodes": ["a"]}, {"id": 1, "nodes": ["a"]}],
            }
        ],
    }
    with pytest.raises(ValidationError, match="node 'a' is in more than one clique"):
        TopologyDocument.model_validate(data)


def test_document_is_immutable() -> None:
    document = parse_topology(DEMO)
    with pytest.raises(ValidationError):
        document.version = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        document.node_index()["x"] = document.node_index()["worker-1"]  # type: ignore[index]


def test_read_topology_file(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(DEMO)
    assert read_topology_file(path) == parse_topology(DEMO)
    path.write_text("version: 3\n")
    with pytest.raises(TopologyError, match=str(path)):
        read_topology_file(path)
    with pytest.raises(FileNotFoundError):
        read_topology_file(tmp_path / "missing.yaml")


def test_node_name_helpers() -> None:
    assert node_name_problem("worker-1.zone-a") is None
    # Kubernetes limits the whole name to 253 characters, not each label to 63.
    assert node_name_problem("a" * 253) is None
    assert node_name_problem("a" * 254) == "node name is 254 characters long; at most 253 allowed"
    assert check_node_name("ok") == "ok"
    with pytest.raises(ValueError, match="uppercase"):
        check_node_name("NotOk")
    with pytest.raises(ValueError, match="'é' at position 0"):
        check_node_name("é")


def test_large_document_parses_and_indexes() -> None:
    nodes = [f"node-{i:05d}" for i in range(10_000)]
    data = {
        "version": 1,
        "domains": [
            {
                "name": f"domain-{d}",
                "uuid": f"00000000-0000-0000-0000-{d:012x}",
                "cliques": [
                    {"id": c, "nodes": nodes[d * 1000 + c * 100 : d * 1000 + (c + 1) * 100]}
                    for c in range(10)
                ],
            }
            for d in range(10)
        ],
    }
    document = parse_topology(json.dumps(data))
    assert len(document.node_index()) == 10_000
    assert document.placement("node-09999") == NodePlacement(
        "node-09999", "domain-9", "00000000-0000-0000-0000-000000000009", 9
    )
