"""The store and the file follower without a server: unchanged documents, races, refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import UUID_B, document
from nvml_mock_protocol.topology import parse_topology
from nvml_mock_topology.cli import open_topology
from nvml_mock_topology.settings import Settings
from nvml_mock_topology.snapshot import build_snapshot
from nvml_mock_topology.store import TopologyStore


def test_an_equal_document_keeps_the_revision_and_clears_a_refusal() -> None:
    store = TopologyStore.from_document(parse_topology(document()))
    served = store.snapshot
    store.fail("invalid topology document")
    assert store.replace(parse_topology(document())) == frozenset()
    assert store.snapshot is served
    assert store.status.ok and store.status.error is None


def test_a_snapshot_prepared_before_another_commit_is_rebuilt_on_top() -> None:
    store = TopologyStore.from_document(parse_topology(document()))
    wanted = parse_topology(
        document(c0=["worker-1", "worker-2"], c1=["worker-3", "worker-4", "n9"])
    )
    prepared = store.prepare(wanted)
    assert prepared is not None and prepared.changed == {"n9"}
    # Another reload is published while the first one was being built off the loop.
    store.replace(parse_topology(document(c0=["worker-1", "worker-2"], c5=["worker-3"])))
    between = store.snapshot
    changed = store.commit(prepared)
    assert store.snapshot.revision > between.revision
    assert store.snapshot.document == wanted
    # Measured against what was served in between, not against the stale base.
    assert changed == {"worker-3", "worker-4", "n9"}
    assert store.snapshot.identity("worker-4").revision == store.snapshot.revision
    assert store.snapshot.identity("worker-1") is between.identity("worker-1")


def test_publishing_an_older_revision_is_refused() -> None:
    store = TopologyStore.from_document(parse_topology(document()))
    stale, changed = build_snapshot(
        parse_topology(document(uuid=UUID_B)), None, revision=store.snapshot.revision
    )
    with pytest.raises(ValueError, match="does not follow"):
        store.publish(stale, changed)


async def test_a_rewrite_with_the_same_document_is_no_reload(topology_file: Path) -> None:
    store, follower = open_topology(Settings(topology_file=topology_file))
    revision = store.snapshot.revision
    topology_file.write_text("# same document, new bytes\n" + document())
    os.utime(topology_file, ns=(1, 1))  # a stat change the signature cannot miss
    assert await follower.check() is False
    assert (store.snapshot.revision, follower.reloads, follower.failures) == (revision, 0, 0)
    topology_file.write_text(document(uuid=UUID_B))
    assert await follower.check() is True
    assert follower.reloads == 1
    assert store.snapshot.revision > revision
