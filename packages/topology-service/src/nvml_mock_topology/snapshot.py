"""Immutable snapshots of the served topology, with every answer's bytes precomputed.

A lookup must be O(1) and cheap enough that one worker serves a 10,000-node
cluster, and a reader must never see half of an old document and half of a
new one. Both follow from building a complete :class:`Snapshot` off to the
side (per-node answers already serialised, with their ETags and headers) and
publishing it with one reference assignment. A reader takes the reference
once and answers from it alone.

Revisions: each node's answer carries the revision at which that answer last
changed, so a watcher wakes only when its own node changes. Revisions come
from :func:`next_revision`: the previous revision plus one or the wall clock in
milliseconds, whichever is larger, so they grow across reloads *and* across
restarts (a client holding a revision from before a restart never mistakes
the new process's first answer for the one it has).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nvml_mock_protocol.identity import REVISION_HEADER, ErrorBody, TopologyResponse
from nvml_mock_protocol.topology import TopologyDocument

__all__ = ["Answer", "Snapshot", "build_snapshot", "empty_document", "next_revision"]

_JSON = (b"content-type", b"application/json")
_REVISION_HEADER = REVISION_HEADER.lower().encode()


def next_revision(previous: int) -> int:
    """A revision larger than ``previous`` and than any earlier process's (wall-clock ms)."""
    return max(previous + 1, time.time_ns() // 1_000_000)


def empty_document() -> TopologyDocument:
    """The topology with no domains (served with ``--allow-empty`` until a file appears)."""
    return TopologyDocument(version=1)


@dataclass(frozen=True, slots=True)
class Answer:
    """One precomputed HTTP answer: status, body bytes, raw ASGI headers, ETag and revision."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    """Headers of the full answer: content type and length, revision, ETag when it has one."""
    not_modified_headers: tuple[tuple[bytes, bytes], ...]
    """Headers of a 304 answer standing for this one (revision and ETag only)."""
    etag: bytes
    """The strong ETag (quoted revision), or empty for answers without one (404)."""
    revision: int

    @classmethod
    def json(cls, status: int, body: bytes, revision: int, *, etag: bool) -> Answer:
        """A JSON answer; with ``etag`` its ETag is the quoted revision."""
        tag = b'"%d"' % revision if etag else b""
        validators = [(_REVISION_HEADER, b"%d" % revision)]
        if etag:
            validators.append((b"etag", tag))
        headers = (_JSON, (b"content-length", b"%d" % len(body)), *validators)
        return cls(status, body, headers, tuple(validators), tag, revision)


def _absent_answer(node: str, revision: int) -> Answer:
    body = ErrorBody(
        detail=f"node {node!r} is in no clique of the topology (it belongs to no ComputeDomain)",
        revision=revision,
    )
    return Answer.json(404, body.model_dump_json().encode(), revision, etag=False)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The topology as served at one revision; never changed once published."""

    revision: int
    document: TopologyDocument
    identities: Mapping[str, Answer]
    """200 answers of every node in a clique."""
    absent_since: Mapping[str, int]
    """Nodes that were in a clique once and are not now, with the revision they left at."""
    baseline: int
    """Revision of the first snapshot: the 'absent since' of nodes never placed."""
    topology: Answer
    """The ``GET /v1/topology`` answer."""
    source: str | None = None
    """Where the document came from (a path), or None for an empty start."""
    _absent_cache: dict[str, Answer] = field(default_factory=dict, repr=False, compare=False)

    def identity(self, node: str) -> Answer:
        """The answer for ``node``: its identity (200) or that it is in no clique (404)."""
        answer = self.identities.get(node)
        if answer is not None:
            return answer
        answer = self._absent_cache.get(node)
        if answer is None:
            answer = _absent_answer(node, self.absent_since.get(node, self.baseline))
            if len(self._absent_cache) < 4096:  # bound what unknown names can make us keep
                self._absent_cache[node] = answer
        return answer

    def node_revision(self, node: str) -> int:
        """The revision of ``node``'s current answer, without building the answer."""
        answer = self.identities.get(node)
        if answer is not None:
            return answer.revision
        return self.absent_since.get(node, self.baseline)

    @property
    def node_count(self) -> int:
        return len(self.identities)


def _topology_answer(document: TopologyDocument, revision: int) -> Answer:
    body = TopologyResponse(revision=revision, topology=document).model_dump_json().encode()
    return Answer.json(200, body, revision, etag=True)


def _identity_body(node: str, domain: str, cluster_uuid: str, clique_id: int, rev: int) -> bytes:
    # Hand-built for speed on 10,000-node documents; test_snapshot checks it against
    # NodeIdentity's own serialisation byte for byte.
    return json.dumps(
        {
            "node": node,
            "domain": domain,
            "clusterUuid": cluster_uuid,
            "cliqueId": clique_id,
            "revision": rev,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


def build_snapshot(
    document: TopologyDocument,
    previous: Snapshot | None,
    *,
    source: str | None = None,
    revision: int | None = None,
) -> tuple[Snapshot, frozenset[str]]:
    """Build the snapshot that follows ``previous`` for ``document``.

    Returns the snapshot and the names of the nodes whose answer changed (placed,
    moved, renamed domain or removed); unchanged nodes keep their answer object and
    revision. ``revision`` defaults to :func:`next_revision` of the previous one.
    """
    if revision is None:
        revision = next_revision(previous.revision if previous is not None else 0)
    elif previous is not None and revision <= previous.revision:
        raise ValueError(f"revision {revision} does not follow {previous.revision}")
    old_index = previous.document.node_index() if previous is not None else {}
    old_answers = previous.identities if previous is not None else {}
    identities: dict[str, Answer] = {}
    changed: set[str] = set()
    for node, placement in document.node_index().items():
        if old_index.get(node) == placement:
            identities[node] = old_answers[node]
            continue
        body = _identity_body(
            node, placement.domain, placement.cluster_uuid, placement.clique_id, revision
        )
        identities[node] = Answer.json(200, body, revision, etag=True)
        changed.add(node)
    absent = dict(previous.absent_since) if previous is not None else {}
    for node in old_index:
        if node not in identities:
            absent[node] = revision
            changed.add(node)
    for node in changed:
        if node in identities:
            absent.pop(node, None)
    baseline = previous.baseline if previous is not None else revision
    snapshot = Snapshot(
        revision=revision,
        document=document,
        identities=MappingProxyType(identities),
        absent_since=MappingProxyType(absent),
        baseline=baseline,
        topology=_topology_answer(document, revision),
        source=source,
    )
    return snapshot, frozenset(changed)
