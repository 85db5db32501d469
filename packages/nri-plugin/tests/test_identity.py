"""Identity answers the real service cannot produce (garbage, 5xx, wrong node), via
httpx.MockTransport, and the retry pacing."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest
from conftest import eventually
from nvml_mock_nri.errors import IdentityError
from nvml_mock_nri.health import Verdict
from nvml_mock_nri.identity import (
    BACKOFF_BASE,
    IdentityCache,
    IdentityWatcher,
    Snapshot,
    Status,
    backoff_delay,
    parse_answer,
)
from nvml_mock_nri.metrics import Metrics

URL = "http://topology.test"
IDENTITY = {
    "node": "node-a",
    "domain": "dom-a",
    "clusterUuid": "8a0f7c2e-1b3d-4e5f-8a9b-0c1d2e3f4a5b",
    "cliqueId": 3,
    "revision": 17,
}
UNKNOWN = Snapshot(Status.UNKNOWN, None, None)


def reply(status: int, **kwargs: object) -> httpx.Response:
    request = httpx.Request("GET", f"{URL}/v1/nodes/node-a/identity")
    return httpx.Response(status, request=request, **kwargs)  # type: ignore[arg-type]


def test_identity_answer() -> None:
    snapshot = parse_answer(reply(200, json=IDENTITY), "node-a", UNKNOWN)
    assert snapshot.status is Status.MEMBER
    assert snapshot.identity is not None and snapshot.identity.clique_id == 3
    assert snapshot.revision == 17


def test_404_is_an_answer_with_its_revision() -> None:
    body = {"detail": "node node-a is in no clique", "revision": 9}
    snapshot = parse_answer(reply(404, json=body), "node-a", UNKNOWN)
    assert snapshot == Snapshot(Status.NOT_MEMBER, None, 9)
    header_only = reply(404, json={"detail": "x"}, headers={"X-Topology-Revision": "12"})
    assert parse_answer(header_only, "node-a", UNKNOWN).revision == 12


def test_304_keeps_what_is_known() -> None:
    known = Snapshot(Status.NOT_MEMBER, None, 4)
    assert parse_answer(reply(304), "node-a", known) is known


@pytest.mark.parametrize(
    ("response", "kind", "text"),
    [
        (reply(503, text="overloaded"), "http_status", "HTTP 503"),
        (reply(200, text="<html>"), "bad_response", "is not JSON"),
        (reply(200, json={**IDENTITY, "cliqueId": -1}), "bad_response", "cliqueId"),
        (reply(200, json={**IDENTITY, "node": "node-b"}), "bad_response", "'node-b'"),
    ],
)
def test_failures_are_classified(response: httpx.Response, kind: str, text: str) -> None:
    with pytest.raises(IdentityError) as info:
        parse_answer(response, "node-a", UNKNOWN)
    assert info.value.kind == kind
    assert text in str(info.value)


def test_backoff_grows_to_the_cap_with_jitter() -> None:
    rng = random.Random(7)
    first = [backoff_delay(1, 30, rng) for _ in range(200)]
    assert all(BACKOFF_BASE / 2 <= d <= BACKOFF_BASE for d in first)
    assert len(set(first)) > 150, "jittered"
    later = [backoff_delay(40, 30, rng) for _ in range(200)]
    assert all(15 <= d <= 30 for d in later)


async def test_watcher_survives_errors_keeps_identity_and_watches_with_revision() -> None:
    seen: list[httpx.URL] = []
    answers = [
        httpx.Response(500, text="boom"),
        httpx.Response(200, json=IDENTITY),
        httpx.Response(502, text="bad gateway"),
        httpx.Response(200, json={**IDENTITY, "cliqueId": 4, "revision": 18}),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        if answers:
            return answers.pop(0)
        return httpx.Response(200, json={**IDENTITY, "cliqueId": 4, "revision": 18})

    metrics = Metrics()
    cache = IdentityCache(URL, metrics)
    watcher = IdentityWatcher(
        cache,
        "node-a",
        watch_seconds=5,
        timeout=1,
        backoff_max=0.01,
        client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
    )
    task = asyncio.create_task(watcher.run())
    try:
        await eventually(lambda: cache.current is not None and cache.current.clique_id == 4)
        assert cache.snapshot.revision == 18
        assert cache.readiness() == Verdict(True, "ok"), "recovered: no degraded note"
        assert seen[0].params == httpx.QueryParams()
        assert dict(seen[2].params) == {"revision": "17", "wait": "5"}
        sample = metrics.registry.get_sample_value(
            "nvml_mock_nri_topology_errors_total", {"kind": "http_status"}
        )
        assert sample == 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_unknown_identity_is_not_ready_and_says_why() -> None:
    cache = IdentityCache(URL, Metrics())
    cache.fail(IdentityError("connect", "connection refused"))
    verdict = cache.readiness()
    assert not verdict.ok
    assert "connection refused" in verdict.reason
    assert URL in verdict.reason
