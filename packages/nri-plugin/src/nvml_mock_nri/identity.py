"""The node's fabric identity: fetched from the topology service, cached, kept current.

CreateContainer never asks the network: it reads :attr:`IdentityCache.current`,
the identity of a snapshot that the watcher swaps whole. Only right after
registration, before the first answer, does it wait for that answer, a bounded time
(:meth:`IdentityCache.wait_known`; the plugin's start-up hold). The watcher asks
``GET /v1/nodes/{node}/identity`` once, then holds a watch
(``?revision=N&wait=S``) that returns as soon as the node's identity changes, so
a rebind reaches the node in about a round trip without polling.

Answers: 200 is an identity; 404 is an answer too (the node is in no clique, so no
fabric env) and carries the revision to watch from; 304 or an unchanged revision
means nothing changed. Anything else (refused connection, timeout, 5xx, a body
that is not an identity) is a failure: the last known identity keeps being
injected, the failure is logged and counted, and the request is retried after a
jittered exponential backoff so a restarted service is not hit by every node at
once. Until the first answer the identity is unknown, containers get no fabric
env (once the start-up hold is over), and ``/readyz`` says why.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

import httpx
from nvml_mock_protocol import names
from nvml_mock_protocol.identity import (
    REVISION_HEADER,
    REVISION_QUERY,
    WAIT_QUERY,
    NodeIdentity,
)
from pydantic import ValidationError

from nvml_mock_nri.adjust import FabricIdentity
from nvml_mock_nri.errors import IdentityError
from nvml_mock_nri.health import Verdict
from nvml_mock_nri.metrics import Metrics

logger = logging.getLogger(__name__)

BACKOFF_BASE: Final = 0.5
"""Seconds; the first retry waits between half this and this."""
MIN_WATCH_INTERVAL: Final = 1.0
"""Seconds; an unchanged answer that comes back faster than this is paced (a server
that ignores ``wait`` must not turn the watch into a busy loop)."""
WARN_EVERY: Final = 10
"""After the first failure, only every this-many consecutive failures is a warning."""


class Status(enum.Enum):
    """How much the plugin knows about its node."""

    UNKNOWN = "unknown"
    """No answer from the topology service yet."""
    MEMBER = "member"
    """The node is in a ComputeDomain clique."""
    NOT_MEMBER = "not_member"
    """The service answered 404: the node is in no clique."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One consistent view of what is known, swapped whole."""

    status: Status
    identity: FabricIdentity | None
    revision: int | None


class IdentityCache:
    """The identity in use, plus the topology service's recent health."""

    def __init__(self, url: str, metrics: Metrics, clock: Callable[[], float] = time.monotonic):
        self.url = url
        self._metrics = metrics
        self._clock = clock
        self.snapshot = Snapshot(Status.UNKNOWN, None, None)
        self.hold_note: str | None = None
        """What the start-up hold of CreateContainer is doing, for /readyz (set by the plugin)."""
        self._known = threading.Event()
        """Set once (from the loop); waited on by CreateContainer on the connection's thread."""
        self.last_error: str | None = None
        self.failing_since: float | None = None
        self.failures = 0

    @property
    def current(self) -> FabricIdentity | None:
        """The identity to inject now; None while unknown or when the node is in no clique."""
        return self.snapshot.identity

    def update(self, snapshot: Snapshot) -> bool:
        """Adopt a fresh answer; True when it changed what is injected."""
        changed = snapshot != self.snapshot
        self.snapshot = snapshot
        self._known.set()
        self.failures = 0
        self.failing_since = None
        self.last_error = None
        self._metrics.identity_known.set(1)
        self._metrics.fabric_member.set(1 if snapshot.status is Status.MEMBER else 0)
        self._metrics.identity_revision.set(-1 if snapshot.revision is None else snapshot.revision)
        return changed

    def wait_known(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for the first answer; True once it is known.

        Called on the NRI connection's thread (the start-up hold): the watch that brings
        the answer runs on the event loop meanwhile."""
        if timeout > 0:
            return self._known.wait(timeout)
        return self._known.is_set()

    def fail(self, error: IdentityError) -> None:
        """Record a failed request; the cached identity stays in use."""
        self.failures += 1
        self.last_error = str(error)
        if self.failing_since is None:
            self.failing_since = self._clock()
        self._metrics.topology_errors.labels(error.kind).inc()

    def readiness(self) -> Verdict:
        """The identity part of /readyz."""
        snapshot = self.snapshot
        if snapshot.status is Status.UNKNOWN:
            why = f" (last error: {self.last_error})" if self.last_error else ""
            return Verdict(
                False,
                f"node identity not known yet: no answer from the topology service at "
                f"{self.url}{why}; {self.hold_note + '; ' if self.hold_note else ''}"
                "containers are injected without fabric identity",
            )
        if self.failing_since is not None:
            since = self._clock() - self.failing_since
            return Verdict(
                True,
                f"ok (degraded: the topology service has failed for {since:.0f}s, "
                f"{self.failures} attempts, last error: {self.last_error}; injecting the last "
                f"known identity, revision {snapshot.revision})",
            )
        return Verdict(True, "ok")


def _revision(response: httpx.Response, body: object) -> int | None:
    if isinstance(body, dict):
        value = body.get("revision")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    header = response.headers.get(REVISION_HEADER)
    if header is not None and header.isdigit():
        return int(header)
    return None


def parse_answer(response: httpx.Response, node: str, previous: Snapshot) -> Snapshot:
    """The snapshot an identity response describes; raises IdentityError otherwise."""
    status = response.status_code
    if status == 304:
        return previous
    if status not in (200, 404):
        raise IdentityError(
            "http_status",
            f"HTTP {status} from {response.request.url}: {response.text[:200]!r}",
        )
    try:
        body = response.json()
    except ValueError:
        raise IdentityError(
            "bad_response",
            f"HTTP {status} from {response.request.url} is not JSON: {response.text[:200]!r}",
        ) from None
    if status == 404:
        return Snapshot(Status.NOT_MEMBER, None, _revision(response, body))
    try:
        identity = NodeIdentity.model_validate(body)
    except ValidationError as exc:
        raise IdentityError(
            "bad_response",
            f"the identity from {response.request.url} is invalid: "
            f"{exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}",
        ) from None
    if identity.node != node:
        raise IdentityError(
            "bad_response",
            f"asked for node {node!r}, the topology service answered for {identity.node!r}",
        )
    return Snapshot(
        Status.MEMBER,
        FabricIdentity(
            domain=identity.domain,
            cluster_uuid=identity.cluster_uuid,
            clique_id=identity.clique_id,
        ),
        identity.revision,
    )


def backoff_delay(failures: int, cap: float, rng: random.Random) -> float:
    """Seconds to wait after the given number of consecutive failures (equal jitter)."""
    ceiling = min(cap, BACKOFF_BASE * 2 ** min(failures - 1, 30))
    return rng.uniform(ceiling / 2, ceiling)


class IdentityWatcher:
    """Keeps an :class:`IdentityCache` current for one node; run it as a task."""

    def __init__(
        self,
        cache: IdentityCache,
        node: str,
        *,
        watch_seconds: float,
        timeout: float,
        backoff_max: float,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._cache = cache
        self._node = node
        self._watch_seconds = watch_seconds
        self._timeout = timeout
        self._backoff_max = backoff_max
        self._client = client or httpx.AsyncClient(trust_env=False)
        self._rng = random.Random()
        path = names.TOPOLOGY_IDENTITY_PATH.format(node=quote(node, safe=""))
        self._endpoint = cache.url + path

    async def fetch_once(self) -> Snapshot:
        """One request: a plain GET before the first answer, a watch afterwards."""
        previous = self._cache.snapshot
        params: dict[str, str] = {}
        wait = 0.0
        if previous.status is not Status.UNKNOWN and previous.revision is not None:
            wait = self._watch_seconds
            params = {REVISION_QUERY: str(previous.revision), WAIT_QUERY: f"{wait:g}"}
        timeout = httpx.Timeout(self._timeout + wait, connect=self._timeout)
        try:
            response = await self._client.get(self._endpoint, params=params, timeout=timeout)
        except httpx.TimeoutException as exc:
            raise IdentityError("timeout", f"{self._endpoint}: timed out ({exc!r})") from None
        except httpx.HTTPError as exc:
            raise IdentityError("connect", f"{self._endpoint}: {exc!r}") from None
        return parse_answer(response, self._node, previous)

    async def run(self) -> None:
        """Watch until cancelled; never raises for topology failures."""
        try:
            while True:
                started = time.monotonic()
                try:
                    snapshot = await self.fetch_once()
                except IdentityError as error:
                    self._failed(error)
                    await asyncio.sleep(
                        backoff_delay(self._cache.failures, self._backoff_max, self._rng)
                    )
                    continue
                recovered = self._cache.failures
                changed = self._cache.update(snapshot)
                if recovered:
                    logger.info(
                        "topology service answers again after %d failed attempts",
                        recovered,
                        extra={"node": self._node},
                    )
                if changed:
                    self._log_change(snapshot)
                elif time.monotonic() - started < MIN_WATCH_INTERVAL:
                    await asyncio.sleep(MIN_WATCH_INTERVAL)
        finally:
            await self._client.aclose()

    def _failed(self, error: IdentityError) -> None:
        self._cache.fail(error)
        known = self._cache.snapshot.status is not Status.UNKNOWN
        consequence = (
            f"keeping the last known identity (revision {self._cache.snapshot.revision})"
            if known
            else "containers get no fabric identity until it answers"
        )
        count = self._cache.failures
        if count == 1 or count % WARN_EVERY == 0:
            logger.warning(
                "topology service request failed (%d in a row): %s; %s; retrying with backoff",
                count,
                error,
                consequence,
                extra={"node": self._node},
            )
        else:
            logger.debug("topology service request failed again: %s", error)

    def _log_change(self, snapshot: Snapshot) -> None:
        if snapshot.identity is not None:
            ident = snapshot.identity
            logger.info(
                "node identity: domain %s, cluster UUID %s, clique %d (revision %s)",
                ident.domain,
                ident.cluster_uuid,
                ident.clique_id,
                snapshot.revision,
                extra={"node": self._node},
            )
        else:
            logger.info(
                "node is in no ComputeDomain clique (revision %s); no fabric env is injected",
                snapshot.revision,
                extra={"node": self._node},
            )
