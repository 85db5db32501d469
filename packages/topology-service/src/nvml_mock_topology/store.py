"""The live topology: the published snapshot, the reload status, and the watchers.

Everything here runs on the event loop thread. Publishing a snapshot is one
assignment followed by waking the watchers of exactly the nodes whose answer
changed, so 5,000 idle watches cost one future each and a change to one node
wakes one watcher, not all of them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from nvml_mock_protocol.topology import TopologyDocument

from nvml_mock_topology.snapshot import Answer, Snapshot, build_snapshot
from nvml_mock_topology.watchers import Watchers

__all__ = ["Prepared", "ReloadStatus", "TopologyStore"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReloadStatus:
    """The outcome of the most recent attempt to load the topology file."""

    ok: bool
    error: str | None
    """What was wrong with the file when ``ok`` is false (the whole message, all problems)."""
    at: float
    """Wall-clock time of the attempt (seconds since the epoch)."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A snapshot built off the event loop, and the snapshot it follows."""

    base: Snapshot
    snapshot: Snapshot
    changed: frozenset[str]


class TopologyStore:
    """Holds the snapshot being served and wakes watchers when a node's answer changes."""

    def __init__(self, first: Snapshot) -> None:
        self._snapshot = first
        self._watchers = Watchers()
        self._closing = False
        self.status = ReloadStatus(ok=True, error=None, at=time.time())

    @classmethod
    def from_document(cls, document: TopologyDocument, source: str | None = None) -> TopologyStore:
        """A store serving ``document`` at a fresh revision."""
        snapshot, _ = build_snapshot(document, None, source=source)
        return cls(snapshot)

    @property
    def snapshot(self) -> Snapshot:
        """The snapshot being served; take it once per request."""
        return self._snapshot

    @property
    def closing(self) -> bool:
        """True once :meth:`close` was called: watches answer at once from then on."""
        return self._closing

    @property
    def watching(self) -> int:
        """How many watch requests are waiting now."""
        return self._watchers.watching

    def publish(self, snapshot: Snapshot, changed: frozenset[str]) -> None:
        """Serve ``snapshot`` from now on and wake the watchers of ``changed`` nodes."""
        if snapshot.revision <= self._snapshot.revision:
            raise ValueError(
                f"revision {snapshot.revision} does not follow {self._snapshot.revision}"
            )
        self._snapshot = snapshot
        self.status = ReloadStatus(ok=True, error=None, at=time.time())
        woken = self._watchers.wake(changed)
        logger.info(
            "serving topology revision %d",
            snapshot.revision,
            extra={"nodes": snapshot.node_count, "changed": len(changed), "woken": woken},
        )

    def prepare(self, document: TopologyDocument, source: str | None = None) -> Prepared | None:
        """Build (on any thread) the snapshot that would follow the one being served.

        Returns None when ``document`` equals the one being served: nothing changes and
        the revision stays. Hand the result to :meth:`commit` on the event loop.
        """
        base = self._snapshot
        if document == base.document:
            return None
        snapshot, changed = build_snapshot(document, base, source=source)
        return Prepared(base, snapshot, changed)

    def commit(self, prepared: Prepared | None) -> frozenset[str]:
        """Publish a prepared snapshot; returns the nodes whose answer changed.

        If another snapshot was published since it was prepared, it is rebuilt on top.
        """
        self.status = ReloadStatus(ok=True, error=None, at=time.time())
        if prepared is None:
            return frozenset()
        if prepared.base is not self._snapshot:
            return self.replace(prepared.snapshot.document, prepared.snapshot.source)
        self.publish(prepared.snapshot, prepared.changed)
        return prepared.changed

    def replace(self, document: TopologyDocument, source: str | None = None) -> frozenset[str]:
        """Build and publish the snapshot for ``document``; returns the changed nodes.

        A document equal to the one being served changes nothing and keeps its revision.
        """
        return self.commit(self.prepare(document, source))

    def fail(self, error: str) -> None:
        """Record that a reload failed; the current snapshot keeps serving."""
        self.status = ReloadStatus(ok=False, error=error, at=time.time())

    draining = False
    """Told to stop and answering out its drain time; ``/readyz`` says 503 meanwhile."""

    def close(self) -> int:
        """Shut down the watches: answer every waiting one now, and every later one at once.

        A client that re-watches the moment its answer arrives (the NRI plugin does, on the
        same keep-alive connection) would otherwise start a new wait after the release and
        hold the server's shutdown until its graceful timeout. Returns how many were released.
        """
        self._closing = True
        return self.release_watchers()

    def release_watchers(self) -> int:
        """Answer every waiting watch now (unchanged). Returns how many."""
        return self._watchers.release()

    async def watch(
        self,
        node: str,
        known_revision: int,
        timeout: float,
        gone: asyncio.Future[None] | None = None,
    ) -> Answer:
        """The answer for ``node`` once its revision differs from ``known_revision``.

        Returns at once when it already differs; otherwise waits up to ``timeout``
        seconds for a change and then returns the (possibly unchanged) answer. The
        wait also ends when ``gone`` completes (the client disconnected). Once the store
        is closing, it returns at once.
        """
        return await self._watchers.watch(
            node, known_revision, timeout, gone, self._lookup, closing=self._closing
        )

    def _lookup(self, node: str) -> Answer:
        return self._snapshot.identity(node)
