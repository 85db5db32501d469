"""Scenarios: the document beside the topology, served per node, with the agents' status.

The scenario document (``nvml_mock_live.scenarios``) comes from a second file (a
ConfigMap key) and is followed like the topology file: a new version is read and
validated whole off the event loop, and an invalid one is refused with the reason while
the last good one keeps serving (``/readyz`` and ``GET /v1/scenarios`` say so).

Which nodes a scenario picks depends on the topology too (domains, cliques), so a
:class:`ScenarioSnapshot` is rebuilt when either changes. Like the identity snapshot it
holds every known node's answer as bytes, with per-node revisions, so that a watch wakes
only when the node's own list changed and a lookup is a dictionary read.

Each scenario's revision is a hash of its definition (:func:`definition_revision`), and
its first start is resolved once: ``start: now`` is fixed when the service first serves
that version, so an agent that restarts, or a reload that changes another scenario,
never starts it again. A restarted service gives the same revision and resolves ``now``
afresh; agents keep the start they had for that revision, so a run neither re-fires nor
outlives its ``duration``.

Status comes from the agents' reports (``POST /v1/nodes/{node}/scenarios/status``); a
picked node that never reported shows ``pending``. Reports for an older revision of a
scenario are kept out of its status.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import math
import time
from collections.abc import Iterable, Iterator, KeysView, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from nvml_mock_live.scenario_api import (
    SCENARIOS_REVISION_HEADER,
    STATES,
    NodeReport,
    NodeStatus,
    ScenarioDetail,
    ScenarioList,
    ScenarioSummary,
)
from nvml_mock_live.scenarios import (
    Scenario,
    ScenarioDocument,
    ScenarioError,
    read_scenarios_file,
)
from nvml_mock_protocol.topology import TopologyDocument

from nvml_mock_topology import allocator
from nvml_mock_topology.errors import ProblemError
from nvml_mock_topology.snapshot import Answer, next_revision
from nvml_mock_topology.source import (
    FileSignature,
    FollowedFile,
    StatFailure,
    describe_failure,
    signature_of,
)
from nvml_mock_topology.store import TopologyStore
from nvml_mock_topology.watchers import Watchers

__all__ = [
    "ScenarioFile",
    "ScenarioSnapshot",
    "ScenarioStore",
    "WriteAccess",
]

logger = logging.getLogger(__name__)

_JSON = (b"content-type", b"application/json")
_REVISION_HEADER = SCENARIOS_REVISION_HEADER.lower().encode()
_UNKNOWN_CACHE_MAX = 4096


def empty_scenarios() -> ScenarioDocument:
    """No scenarios (served until a scenario file appears)."""
    return ScenarioDocument(version=1)


def _answer(body: bytes, revision: int) -> Answer:
    tag = b'"%d"' % revision
    validators = ((_REVISION_HEADER, b"%d" % revision), (b"etag", tag))
    headers = (_JSON, (b"content-length", b"%d" % len(body)), *validators)
    return Answer(200, body, headers, validators, tag, revision)


@dataclass(frozen=True, slots=True)
class Version:
    """One scenario as served: its definition's revision and resolved first start."""

    scenario: Scenario
    revision: int
    start_ms: int
    wire: dict[str, object]
    """Its entry in a node's answer (name, revision, startMs, scenario)."""
    encoded: bytes
    """``wire`` as JSON, encoded once for every node's answer."""


_Entry = tuple[tuple[Version, ...], int]
"""A node's versions (in scenario name order) and the revision its list last changed."""


@dataclass(frozen=True, slots=True)
class ScenarioSnapshot:
    """The scenarios as served at one revision, with every known node's answer built."""

    revision: int
    document: ScenarioDocument
    topology_revision: int
    versions: Mapping[str, Version]
    picked: Mapping[str, frozenset[str]]
    """Each scenario's picked known nodes."""
    answers: NodeAnswers
    """Known nodes with at least one scenario."""
    quiet_since: Mapping[str, int]
    """Known nodes without scenarios, with the revision their list became empty."""
    baseline: int
    source: str | None
    _unknown: dict[str, Answer] = field(default_factory=dict, repr=False, compare=False)

    def answer(self, node: str) -> Answer:
        """The node's scenarios (an empty list when none selects it)."""
        found = self.answers.get(node)
        if found is not None:
            return found
        if node in self.quiet_since:
            return _node_answer(node, (), self.quiet_since[node])
        cached = self._unknown.get(node)
        if cached is not None:
            return cached
        # A node the service does not know: picked by globs and its own hash. Its revision
        # is the snapshot's, so any change of the document wakes its watchers.
        versions = [
            v for v in self.versions.values() if self.document.picks_unknown(v.scenario, node)
        ]
        built = _node_answer(node, versions, self.revision)
        if len(self._unknown) < _UNKNOWN_CACHE_MAX:
            self._unknown[node] = built
        return built

    def node_revision(self, node: str) -> int:
        return self.answer(node).revision

    def known(self, node: str) -> bool:
        return node in self.answers or node in self.quiet_since


class NodeAnswers(Mapping[str, Answer]):
    """Each picked node's answer, encoded the first time it is asked for.

    A reload that picks 100,000 nodes records each node's versions and revision (a
    tuple) and builds no answer: that halved a reload, and a node that never asks
    costs no bytes. Lookups are on the event loop only; a built answer is kept.
    """

    __slots__ = ("_built", "_entries")

    def __init__(self, entries: dict[str, _Entry]) -> None:
        self._entries = entries
        self._built: dict[str, Answer] = {}

    def entry(self, node: str) -> _Entry:
        return self._entries[node]

    def entry_or_none(self, node: str) -> _Entry | None:
        return self._entries.get(node)

    def keys(self) -> KeysView[str]:
        """The nodes, as a set-like view (set operations run without a walk in Python)."""
        return self._entries.keys()

    def __getitem__(self, node: str) -> Answer:
        built = self._built.get(node)
        if built is None:
            versions, revision = self._entries[node]
            built = self._built[node] = _node_answer(node, versions, revision)
        return built

    def __contains__(self, node: object) -> bool:
        return node in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def _node_answer(node: str, versions: Iterable[Version], revision: int) -> Answer:
    """A node's answer, put together from each version's entry encoded once (a scenario
    picking 100,000 nodes is encoded once, not once per node)."""
    entries = b",".join(v.encoded for v in versions)
    name = json.dumps(node, ensure_ascii=False).encode()
    body = b'{"node":%s,"revision":%d,"scenarios":[%s]}' % (name, revision, entries)
    return _answer(body, revision)


def _encoded(wire: Mapping[str, object]) -> bytes:
    return json.dumps(wire, separators=(",", ":"), ensure_ascii=False).encode()


def definition_revision(scenario: Scenario, data: Mapping[str, object] | None = None) -> int:
    """A scenario's revision: a number from its definition alone (53 bits, JSON-safe).

    The same definition has the same revision in every process, so a service restart
    does not look like a new version to the agents: they keep the run they applied, and
    the first start they were given (``start: now`` is resolved afresh by the new
    process, and the agent keeps the one it had for that revision). *data* is the
    scenario's ``to_data()`` when the caller has made it already (a 100,000-name selector
    is dumped once per reload, not once per use).
    """
    canonical = json.dumps(
        scenario.to_data() if data is None else data, sort_keys=True, separators=(",", ":")
    )
    return int.from_bytes(hashlib.sha256(canonical.encode()).digest()[:8], "big") >> 11


def build_scenario_snapshot(
    document: ScenarioDocument,
    topology: TopologyDocument,
    topology_revision: int,
    previous: ScenarioSnapshot | None,
    *,
    source: str | None,
    now_ms: int | None = None,
) -> tuple[ScenarioSnapshot, frozenset[str]]:
    """The snapshot that follows ``previous``, and the known nodes whose answer changed."""
    revision = next_revision(previous.revision if previous is not None else 0)
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    versions: dict[str, Version] = {}
    for scenario in document.scenarios:
        old = previous.versions.get(scenario.name) if previous is not None else None
        if old is not None and old.scenario == scenario:
            versions[scenario.name] = old
            continue
        start = scenario.start_ms(now)
        data = scenario.to_data()
        version_revision = definition_revision(scenario, data)
        wire = {
            "name": scenario.name,
            "revision": version_revision,
            "startMs": start,
            "scenario": scenario.to_node_data(data),
        }
        versions[scenario.name] = Version(scenario, version_revision, start, wire, _encoded(wire))
    picked = document.select(topology)
    entries = _fresh_entries(picked, versions, revision)
    old_answers = previous.answers if previous is not None else NodeAnswers({})
    changed = _keep_unchanged(entries, old_answers)
    answers = NodeAnswers(entries)
    quiet = dict(previous.quiet_since) if previous is not None else {}
    gone = old_answers.keys() - entries.keys() if len(old_answers) else set()
    if gone:
        quiet.update(dict.fromkeys(gone, revision))
        changed = changed | gone
    quiet_base = previous.baseline if previous is not None else revision
    for node in topology.node_index().keys() - entries.keys() - quiet.keys():
        quiet[node] = quiet_base
    for node in quiet.keys() & entries.keys():
        del quiet[node]
    snapshot = ScenarioSnapshot(
        revision=revision,
        document=document,
        topology_revision=topology_revision,
        versions=MappingProxyType(versions),
        picked=MappingProxyType(picked),
        answers=answers,
        quiet_since=MappingProxyType(quiet),
        baseline=previous.baseline if previous is not None else revision,
        source=source,
    )
    return snapshot, changed if isinstance(changed, frozenset) else frozenset(changed)


def _reuse_unchanged(served: ScenarioDocument, new: ScenarioDocument) -> ScenarioDocument:
    """``new`` with each scenario equal to a served one replaced by the served object.

    An edit of one scenario of forty then costs one scenario's memory, not forty: the new
    file's copies of the others (their names, their selector's index, their picked set)
    are dropped at once instead of living beside the served ones until the swap. A 20,000-
    name scenario is 3 MB of names and index.
    """
    before = served.by_name()
    scenarios = []
    reused = 0
    for scenario in new.scenarios:
        old = before.get(scenario.name)
        if old is not None and old == scenario:
            scenarios.append(old)
            reused += 1
        else:
            scenarios.append(scenario)
    if not reused:
        return new
    return new.model_copy(update={"scenarios": tuple(scenarios)})


def _fresh_entries(
    picked: Mapping[str, frozenset[str]], versions: Mapping[str, Version], revision: int
) -> dict[str, _Entry]:
    """Each picked node's entry at ``revision``.

    Nodes picked by the same scenarios share one entry, and the work is done a scenario at
    a time with set operations: a node is visited one by one only where scenarios overlap.
    A 100,000-name scenario is one ``dict.fromkeys``, where a list per node was a fifth of
    a reload.
    """
    entries: dict[str, _Entry] = {}
    extended: dict[tuple[int, str], tuple[_Entry, _Entry]] = {}
    for name in sorted(picked):
        version, nodes = versions[name], picked[name]
        if not entries:  # the first scenario: one dict made in C, nothing to merge
            entries = dict.fromkeys(nodes, ((version,), revision))
            continue
        overlap = entries.keys() & nodes
        entries.update(dict.fromkeys(nodes - overlap if overlap else nodes, ((version,), revision)))
        for node in overlap:
            before = entries[node]
            known = extended.get((id(before), name))
            if known is None:  # the entry is kept beside its id, so the id stays its own
                known = extended[(id(before), name)] = (before, ((*before[0], version), revision))
            entries[node] = known[1]
    return entries


def _keep_unchanged(entries: dict[str, _Entry], old: NodeAnswers) -> set[str] | frozenset[str]:
    """Give back their old entry (and revision, so their watchers stay asleep) to the nodes
    whose scenarios and revisions are those they had; returns the nodes that changed.
    Lists are compared once per pair of distinct entries, not once per node."""
    if not len(old):
        return frozenset(entries)
    same: dict[tuple[int, int], bool] = {}
    changed: set[str] = set()
    old_entry = old.entry_or_none
    for node, entry in entries.items():
        before = old_entry(node)
        if before is not None:
            pair = (id(before), id(entry))
            equal = same.get(pair)
            if equal is None:
                equal = same[pair] = _signature(before[0]) == _signature(entry[0])
            if equal:
                entries[node] = before
                continue
        changed.add(node)
    return changed


def _signature(versions: tuple[Version, ...]) -> tuple[tuple[str, int], ...]:
    return tuple((v.scenario.name, v.revision) for v in versions)


_Reported = tuple[int, str, str | None, tuple[str, ...], int, int | None, int | None, int]
"""(revision, state, reason, gpus, run, applied ms, cleared ms, reported ms): a plain tuple of
atoms, which the garbage collector stops tracking, so 10,000 nodes' reports add nothing to the
collector's full passes (which would pause every request)."""


class _Tally:
    """One scenario's current reports, counted by state."""

    __slots__ = ("picked_reported", "states")

    def __init__(self) -> None:
        self.states = dict.fromkeys(STATES, 0)
        self.picked_reported = 0
        """Reporting nodes that the scenario picks (the rest of the picked are pending)."""


class ScenarioStore:
    """The served scenarios, their watchers and the agents' reports (event loop thread)."""

    def __init__(self, topology: TopologyStore, snapshot: ScenarioSnapshot) -> None:
        self.topology = topology
        self._snapshot = snapshot
        self._watchers = Watchers()
        self._reports: dict[str, dict[str, _Reported]] = {}
        self._tally: dict[str, _Tally] = {}
        """Per scenario, its current reports counted by state: kept up to date by each
        report (O(1)) and rebuilt when the snapshot changes, so neither the status API nor
        a metrics scrape walks 10,000 nodes' reports."""
        self.error: str | None = None
        """Why the newest scenario file was refused (None while it is served)."""
        self.reports = 0
        self.latencies: list[float] = []
        """Apply latencies (seconds) reported since the last scrape took them."""

    @classmethod
    def start(
        cls,
        topology: TopologyStore,
        document: ScenarioDocument | None = None,
        source: str | None = None,
    ) -> ScenarioStore:
        served = topology.snapshot
        snapshot, _ = build_scenario_snapshot(
            document or empty_scenarios(), served.document, served.revision, None, source=source
        )
        return cls(topology, snapshot)

    @property
    def snapshot(self) -> ScenarioSnapshot:
        return self._snapshot

    @property
    def watching(self) -> int:
        return self._watchers.watching

    def prepare(
        self, document: ScenarioDocument | None, source: str | None
    ) -> tuple[ScenarioSnapshot, ScenarioSnapshot, frozenset[str]] | None:
        """Build (on any thread) what follows the served snapshot; None when nothing changes."""
        base = self._snapshot
        topology = self.topology.snapshot
        document = base.document if document is None else _reuse_unchanged(base.document, document)
        if document == base.document and topology.revision == base.topology_revision:
            return None
        snapshot, changed = build_scenario_snapshot(
            document, topology.document, topology.revision, base, source=source or base.source
        )
        return base, snapshot, changed

    def commit(
        self, prepared: tuple[ScenarioSnapshot, ScenarioSnapshot, frozenset[str]] | None
    ) -> bool:
        """Publish a prepared snapshot and wake the watchers of the nodes it changed."""
        if prepared is None:
            return False
        base, snapshot, changed = prepared
        if base is not self._snapshot:  # published meanwhile: rebuild on top
            return self.commit(self.prepare(snapshot.document, snapshot.source))
        self._snapshot = snapshot
        self._retally()
        woken = self._watchers.wake_where(lambda node: node in changed or not snapshot.known(node))
        logger.info(
            "serving scenarios revision %d",
            snapshot.revision,
            extra={
                "scenarios": len(snapshot.versions),
                "changed_nodes": len(changed),
                "woken": woken,
            },
        )
        return True

    def replace(self, document: ScenarioDocument, source: str | None = None) -> bool:
        """Build and publish ``document`` now (tests, and the start)."""
        self.error = None
        return self.commit(self.prepare(document, source))

    def release_watchers(self) -> int:
        return self._watchers.release()

    async def watch(
        self, node: str, known: int, timeout: float, gone: asyncio.Future[None] | None = None
    ) -> Answer:
        """The node's answer once its revision differs from ``known`` (or after ``timeout``)."""
        return await self._watchers.watch(
            node, known, timeout, gone, self._lookup, closing=self.topology.closing
        )

    def _lookup(self, node: str) -> Answer:
        return self._snapshot.answer(node)

    # -- status -------------------------------------------------------------------------

    def report(self, node: str, report: NodeReport) -> int:
        """Record a node's report; returns how many scenario entries were taken."""
        snapshot = self._snapshot
        now = time.time_ns() // 1_000_000
        taken = 0
        for entry in report.scenarios:
            version = snapshot.versions.get(entry.name)
            if version is None or entry.revision != version.revision:
                continue  # a scenario since removed or changed: not this version's status
            per_node = self._reports.setdefault(entry.name, {})
            before = per_node.get(node)
            tally = self._tally.get(entry.name)
            if tally is None:
                tally = self._tally[entry.name] = _Tally()
            if before is not None and before[0] == version.revision:
                tally.states[before[1]] -= 1
            elif node in snapshot.picked.get(entry.name, ()):
                tally.picked_reported += 1
            tally.states[entry.state] += 1
            newly_applied = entry.state == "applied" and (
                before is None or before[1] != "applied" or before[4] != entry.run
            )
            if newly_applied and entry.latency_ms is not None:
                self.latencies.append(entry.latency_ms / 1000)
            per_node[node] = (
                entry.revision,
                entry.state,
                entry.reason,
                tuple(entry.gpus),
                entry.run,
                entry.applied_ms,
                entry.cleared_ms,
                now,
            )
            taken += 1
        self.reports += 1
        return taken

    def node_states(self, name: str) -> list[NodeStatus]:
        """Every picked or reporting node's state for scenario ``name`` (sorted by node)."""
        snapshot = self._snapshot
        version = snapshot.versions[name]
        reported = self._reports.get(name, {})
        rows: dict[str, NodeStatus] = {}
        for node in snapshot.picked.get(name, ()):
            rows[node] = NodeStatus(node=node, state="pending")
        for node, (revision, state, reason, gpus, run, applied, cleared, at) in reported.items():
            if revision == version.revision:
                rows[node] = NodeStatus(
                    node=node,
                    state=state,  # type: ignore[arg-type]
                    reason=reason,
                    gpus=gpus,
                    run=run,
                    appliedMs=applied,
                    clearedMs=cleared,
                    reportedMs=at,
                )
        return [rows[node] for node in sorted(rows)]

    def _retally(self) -> None:
        """Count every scenario's current reports again (a new snapshot: new revisions,
        other picked nodes); reports of versions no longer served are dropped."""
        snapshot = self._snapshot
        tallies: dict[str, _Tally] = {}
        for name, version in snapshot.versions.items():
            reported = self._reports.get(name)
            if not reported:
                continue
            picked = snapshot.picked.get(name, frozenset())
            tally = tallies[name] = _Tally()
            stale = []
            for node, entry in reported.items():
                if entry[0] != version.revision:
                    stale.append(node)
                    continue
                tally.states[entry[1]] += 1
                tally.picked_reported += node in picked
            for node in stale:
                del reported[node]
        for name in [n for n in self._reports if n not in snapshot.versions]:
            del self._reports[name]
        self._tally = tallies

    def counts(self, name: str) -> dict[str, int]:
        """Nodes per state for scenario ``name``, from the tally (O(1))."""
        snapshot = self._snapshot
        if name not in snapshot.versions:
            raise KeyError(name)
        tally = self._tally.get(name)
        counts = dict.fromkeys(STATES, 0)
        reported_picked = 0
        if tally is not None:
            counts.update(tally.states)
            reported_picked = tally.picked_reported
        counts["pending"] += len(snapshot.picked.get(name, ())) - reported_picked
        return counts

    def listing(self) -> ScenarioList:
        snapshot = self._snapshot
        summaries = []
        for name, version in snapshot.versions.items():
            counts = self.counts(name)
            summaries.append(
                ScenarioSummary(
                    name=name,
                    revision=version.revision,
                    startMs=version.start_ms,
                    nodes=sum(counts.values()),
                    states=counts,
                )
            )
        return ScenarioList(
            revision=snapshot.revision,
            source=snapshot.source,
            reloadError=self.error,
            scenarios=tuple(summaries),
        )

    def detail(self, name: str) -> ScenarioDetail:
        version = self._snapshot.versions.get(name)
        if version is None:
            known = ", ".join(sorted(self._snapshot.versions)) or "none"
            raise ProblemError(404, f"no scenario named {name[:80]!r} (served: {known[:500]})")
        rows = self.node_states(name)
        counts = self.counts(name)
        return ScenarioDetail(
            name=name,
            revision=version.revision,
            startMs=version.start_ms,
            scenario=version.scenario.to_data(),
            states=counts,
            nodes=tuple(rows),
        )

    def applied_failed(self) -> tuple[int, int]:
        """Nodes whose current report is ``applied``, and ``failed``, over all scenarios."""
        applied = failed = 0
        for tally in self._tally.values():
            applied += tally.states["applied"]
            failed += tally.states["failed"]
        return applied, failed


class WriteAccess:
    """Who may use the write API (the agents' reports): off, or a bearer token from a file.

    The token file (a Secret's key) is read again when it changes, so a rotated Secret
    takes effect without a restart. Whether it changed is looked at most once per
    ``recheck_seconds``, not on every report: resolving and stat-ing the file was most of
    a report's cost when 10,000 agents report at once.
    """

    def __init__(self, token_file: Path | None, *, recheck_seconds: float = 1.0) -> None:
        self.token_file = token_file
        self.recheck_seconds = recheck_seconds
        self._seen: FileSignature | StatFailure | None = None
        self._token: bytes | None = None
        self._checked_at = -math.inf

    @property
    def enabled(self) -> bool:
        return self.token_file is not None

    def load(self) -> None:
        """Read the token now; raises ``OSError`` or ``ValueError`` (empty) naming the file."""
        if self.token_file is None:
            return
        token = self.token_file.read_bytes().strip()
        if not token:
            raise ValueError(f"token file {self.token_file} is empty")
        self._token = token
        self._seen = signature_of(self.token_file)

    def check(self, authorization: str | None) -> None:
        """Raise :class:`ProblemError` unless the request may write."""
        if self.token_file is None:
            raise ProblemError(
                403,
                "the write API is off; start the service with --write-token-file "
                "(NVML_MOCK_TOPOLOGY_WRITE_TOKEN_FILE) to accept reports",
            )
        now = time.monotonic()
        if now - self._checked_at >= self.recheck_seconds:
            self._checked_at = now
            current = signature_of(self.token_file)
            if current != self._seen:
                try:
                    self.load()
                except (OSError, ValueError) as exc:
                    logger.error("cannot read the write token again; keeping the last one: %s", exc)
                    self._seen = current
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise ProblemError(401, "reports need an 'Authorization: Bearer <token>' header")
        if self._token is None or not hmac.compare_digest(given.strip().encode(), self._token):
            raise ProblemError(403, "the bearer token is not the write token")


class ScenarioFile(FollowedFile[ScenarioStore]):
    """Follows the scenario file (and the topology's revision) and publishes each change."""

    async def check(self) -> bool:
        """Reload when the file or the topology changed; True when a change was published."""
        current = signature_of(self.path)
        document: ScenarioDocument | None = None
        if current != self._seen:
            self._seen = current
            if current is None:
                self._refuse(f"scenario file {self.path} does not exist")
            elif isinstance(current, StatFailure):
                self._refuse(current.message.replace("topology file", "scenario file"))
            else:
                try:
                    document = await self._load(
                        read_scenarios_file,
                        self.path,
                        max_bytes=self.max_bytes,
                        max_items=self.max_items,
                    )
                except ScenarioError as exc:
                    self._refuse(str(exc))
                except OSError as exc:
                    self._refuse(f"scenario file {self.path} cannot be read: {exc.strerror or exc}")
                except Exception as exc:
                    self._refuse(describe_failure(self.path, exc).replace("topology", "scenario"))
                else:
                    self.store.error = None
        if document is None and self.store.topology.snapshot.revision == (
            self.store.snapshot.topology_revision
        ):
            return False
        prepared = await self._load(self.store.prepare, document, str(self.path))
        published = self.store.commit(prepared)
        if published and document is not None:
            self.reloads += 1
        # the snapshot served before is referenced by nothing else now: its memory goes back
        del prepared, document
        allocator.give_back()
        return published

    def _refuse(self, message: str) -> None:
        self.failures += 1
        self.store.error = message[:20_000]
        logger.error(
            "scenario reload refused; still serving revision %d: %s",
            self.store.snapshot.revision,
            message,
            extra={"path": str(self.path)},
        )

    def _unexpected(self, exc: Exception) -> None:
        logger.exception("unexpected error while checking the scenario file")
