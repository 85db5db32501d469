"""Snapshots: precomputed bytes equal the protocol's serialisation; revisions and change sets."""

from __future__ import annotations

import time

from conftest import UUID_B, document
from nvml_mock_protocol.identity import ErrorBody, NodeIdentity
from nvml_mock_protocol.topology import parse_topology
from nvml_mock_topology.snapshot import build_snapshot, next_revision


def test_bodies_match_the_protocol_models_byte_for_byte() -> None:
    doc = parse_topology(document())
    snapshot, changed = build_snapshot(doc, None)
    assert changed == frozenset(doc.node_index())
    for node, placement in doc.node_index().items():
        answer = snapshot.identity(node)
        expected = NodeIdentity.from_placement(placement, snapshot.revision).to_json_bytes()
        assert answer.body == expected
        assert answer.etag == f'"{snapshot.revision}"'.encode()
        assert (b"content-length", str(len(expected)).encode()) in answer.headers
    absent = snapshot.identity("nobody")
    assert absent.status == 404
    assert ErrorBody.model_validate_json(absent.body).revision == snapshot.baseline


def test_revisions_grow_and_follow_the_clock() -> None:
    now_ms = time.time_ns() // 1_000_000
    assert next_revision(0) >= now_ms
    assert next_revision(now_ms + 10_000) == now_ms + 10_001


def test_only_changed_nodes_get_a_new_revision() -> None:
    first, _ = build_snapshot(parse_topology(document()), None)
    second, changed = build_snapshot(
        parse_topology(document(c0=["worker-1", "worker-2"], c3=["worker-3"], c4=["worker-9"])),
        first,
    )
    assert changed == {"worker-3", "worker-4", "worker-9"}
    assert second.revision > first.revision
    assert second.identity("worker-1") is first.identity("worker-1")
    assert second.identity("worker-3").revision == second.revision
    assert second.identity("worker-4").status == 404
    assert second.node_revision("worker-4") == second.revision
    assert second.node_revision("never-seen") == first.revision
    third, changed = build_snapshot(parse_topology(document(uuid=UUID_B)), second)
    assert "worker-1" in changed and "worker-4" in changed
    assert third.node_revision("worker-4") == third.revision
