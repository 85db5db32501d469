"""The HTTP API in process (httpx over ASGI): lookups, errors, ETags, watches, probes, metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from conftest import UUID_A, UUID_B, document
from nvml_mock_protocol.identity import ErrorBody, NodeIdentity, TopologyResponse
from nvml_mock_protocol.topology import parse_topology
from nvml_mock_topology.api import create_app
from nvml_mock_topology.store import TopologyStore
from prometheus_client.parser import text_string_to_metric_families


async def scrape(client: httpx.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await client.get("/metrics")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


@pytest.fixture
def store() -> TopologyStore:
    return TopologyStore.from_document(parse_topology(document()), source="topology.yaml")


@pytest.fixture(params=[True, False], ids=["fast-path", "fastapi-route"])
async def client(
    request: pytest.FixtureRequest, store: TopologyStore
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(store, max_watch_seconds=2, fast_path=request.param)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://topology") as client:
        yield client


async def test_identity_of_a_placed_node(client: httpx.AsyncClient, store: TopologyStore) -> None:
    response = await client.get("/v1/nodes/worker-3/identity")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    identity = NodeIdentity.model_validate_json(response.content)
    assert (identity.node, identity.domain, identity.cluster_uuid, identity.clique_id) == (
        "worker-3",
        "demo-domain",
        UUID_A,
        1,
    )
    assert identity.revision == store.snapshot.revision
    assert response.headers["etag"] == f'"{identity.revision}"'
    assert response.headers["x-topology-revision"] == str(identity.revision)
    assert set(response.json()) == {"node", "domain", "clusterUuid", "cliqueId", "revision"}


async def test_node_in_no_clique_is_404_with_a_message(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/nodes/control-plane/identity")
    assert response.status_code == 404
    body = ErrorBody.model_validate_json(response.content)
    assert "'control-plane' is in no clique" in body.detail
    assert body.revision is not None
    assert response.headers["x-topology-revision"] == str(body.revision)
    assert "etag" not in response.headers


@pytest.mark.parametrize(
    ("node", "why"),
    [
        ("Worker-1", "uppercase 'W'"),
        ("worker_1", "'_' at position 6"),
        ("-worker", "must start and end with a letter or digit"),
        ("a" * 254, "at most 253"),
        ("%C3%A9", "'é' at position 0"),
        ("a..b", "empty label"),
    ],
)
async def test_bad_node_names_are_422_saying_why(
    client: httpx.AsyncClient, node: str, why: str
) -> None:
    response = await client.get(f"/v1/nodes/{node}/identity")
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert isinstance(detail, str)
    assert why in detail


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("revision=abc", "'revision'"),
        ("revision=-1", "'revision'"),
        ("wait=soon&revision=1", "'wait'"),
        ("wait=-1&revision=1", "'wait'"),
        ("wait=inf&revision=1", "'wait'"),
        ("wait=nan&revision=1", "'wait'"),
    ],
)
async def test_bad_query_parameters_are_422(
    client: httpx.AsyncClient, query: str, why: str
) -> None:
    response = await client.get(f"/v1/nodes/worker-1/identity?{query}")
    assert response.status_code == 422
    assert why in response.json()["detail"]


async def test_wait_without_a_revision_waits_for_the_next_change(
    client: httpx.AsyncClient, store: TopologyStore
) -> None:
    watch = asyncio.create_task(client.get("/v1/nodes/worker-1/identity?wait=2"))
    await asyncio.sleep(0.05)
    assert not watch.done()
    store.replace(parse_topology(document(c3=["worker-1"])))
    response = await asyncio.wait_for(watch, 1)
    assert response.json()["cliqueId"] == 3


async def test_etag_gives_304(client: httpx.AsyncClient) -> None:
    first = await client.get("/v1/nodes/worker-1/identity")
    etag = first.headers["etag"]
    for header in (etag, f"W/{etag}", f'"1", {etag}', "*"):
        again = await client.get("/v1/nodes/worker-1/identity", headers={"If-None-Match": header})
        assert again.status_code == 304, header
        assert again.content == b""
        assert again.headers["etag"] == etag
    other = await client.get("/v1/nodes/worker-1/identity", headers={"If-None-Match": '"1"'})
    assert other.status_code == 200


async def test_topology_document_with_etag(client: httpx.AsyncClient, store: TopologyStore) -> None:
    response = await client.get("/v1/topology")
    assert response.status_code == 200
    body = TopologyResponse.model_validate_json(response.content)
    assert body.revision == store.snapshot.revision
    assert body.topology == parse_topology(document())
    cached = await client.get("/v1/topology", headers={"If-None-Match": response.headers["etag"]})
    assert cached.status_code == 304


async def test_watch_returns_when_the_node_changes(
    client: httpx.AsyncClient, store: TopologyStore
) -> None:
    revision = store.snapshot.revision
    url = f"/v1/nodes/worker-1/identity?revision={revision}&wait=2"
    watch = asyncio.create_task(client.get(url))
    await asyncio.sleep(0.05)
    assert not watch.done()
    # A change elsewhere does not wake this watcher...
    store.replace(parse_topology(document(c0=["worker-1", "worker-2"], c1=["worker-3"])))
    await asyncio.sleep(0.05)
    assert not watch.done()
    # ...a change of its own node does, at once.
    store.replace(parse_topology(document(c7=["worker-1", "worker-2"], c1=["worker-3"])))
    response = await asyncio.wait_for(watch, 1)
    assert response.status_code == 200
    assert response.json()["cliqueId"] == 7
    assert response.json()["revision"] > revision


async def test_watch_returns_unchanged_when_the_wait_ends(
    client: httpx.AsyncClient, store: TopologyStore
) -> None:
    revision = store.snapshot.revision
    loop = asyncio.get_running_loop()
    started = loop.time()
    response = await client.get(f"/v1/nodes/worker-1/identity?revision={revision}&wait=0.3")
    assert loop.time() - started >= 0.29
    assert response.status_code == 200
    assert response.json()["revision"] == revision
    assert store.watching == 0


async def test_watch_is_capped_by_the_server(store: TopologyStore) -> None:
    app = create_app(store, max_watch_seconds=0.2)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        revision = store.snapshot.revision
        response = await asyncio.wait_for(
            c.get(f"/v1/nodes/worker-1/identity?revision={revision}&wait=3600"), 2
        )
    assert response.status_code == 200


async def test_watch_with_an_older_revision_answers_at_once(client: httpx.AsyncClient) -> None:
    response = await asyncio.wait_for(
        client.get("/v1/nodes/worker-1/identity?revision=5&wait=2"), 1
    )
    assert response.status_code == 200


async def test_watch_of_an_absent_node_wakes_when_it_is_placed(
    client: httpx.AsyncClient, store: TopologyStore
) -> None:
    absent = await client.get("/v1/nodes/worker-9/identity")
    assert absent.status_code == 404
    revision = absent.json()["revision"]
    watch = asyncio.create_task(
        client.get(f"/v1/nodes/worker-9/identity?revision={revision}&wait=2")
    )
    await asyncio.sleep(0.05)
    store.replace(parse_topology(document(c0=["worker-9"])))
    response = await asyncio.wait_for(watch, 1)
    assert response.status_code == 200
    assert response.json()["node"] == "worker-9"
    # And removal wakes a watcher of a placed node, answering 404.
    placed = response.json()["revision"]
    watch = asyncio.create_task(client.get(f"/v1/nodes/worker-9/identity?revision={placed}&wait=2"))
    await asyncio.sleep(0.05)
    store.replace(parse_topology(document(c0=["worker-1"])))
    gone = await asyncio.wait_for(watch, 1)
    assert gone.status_code == 404
    assert gone.json()["revision"] > placed


async def test_watch_with_if_none_match_ends_in_304(
    client: httpx.AsyncClient, store: TopologyStore
) -> None:
    etag = f'"{store.snapshot.revision}"'
    response = await client.get(
        "/v1/nodes/worker-1/identity?wait=0.1", headers={"If-None-Match": etag}
    )
    assert response.status_code == 304


async def test_readyz_reports_a_failed_reload(
    client: httpx.AsyncClient, store: TopologyStore
) -> None:
    ready = (await client.get("/readyz")).json()
    assert ready == {
        "status": "ready",
        "revision": store.snapshot.revision,
        "nodes": 4,
        "source": "topology.yaml",
    }
    store.fail("invalid topology document topology.yaml: 1 problem(s)\n  - version: ...")
    response = await client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["status"] == "degraded"
    assert "invalid topology document" in response.json()["reloadError"]


async def test_healthz(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_metrics(client: httpx.AsyncClient, store: TopologyStore) -> None:
    await client.get("/v1/nodes/worker-1/identity")
    await client.get("/v1/nodes/nobody/identity")
    await client.get("/v1/topology")
    samples = await scrape(client)
    assert (
        samples["nvml_mock_topology_requests_total", (("code", "200"), ("endpoint", "identity"))]
        == 1
    )
    assert (
        samples["nvml_mock_topology_requests_total", (("code", "404"), ("endpoint", "identity"))]
        == 1
    )
    assert (
        samples["nvml_mock_topology_requests_total", (("code", "200"), ("endpoint", "topology"))]
        == 1
    )
    assert (
        samples["nvml_mock_topology_request_duration_seconds_count", (("endpoint", "identity"),)]
        == 2
    )
    assert samples["nvml_mock_topology_revision", ()] == store.snapshot.revision
    assert samples["nvml_mock_topology_nodes", ()] == 4
    assert samples["nvml_mock_topology_reload_failing", ()] == 0
    store.fail("broken")
    samples = await scrape(client)
    assert samples["nvml_mock_topology_reload_failing", ()] == 1


async def test_requests_are_labelled_by_their_parsed_wait_parameter(
    client: httpx.AsyncClient,
) -> None:
    assert (await client.get("/v1/nodes/worker-1/identity?await=1")).status_code == 200
    watch = await client.get("/v1/nodes/worker-1/identity?revision=0&wait=0.01")
    assert watch.status_code == 200
    samples = await scrape(client)
    for endpoint in ("identity", "identity_watch"):
        key = (("code", "200"), ("endpoint", endpoint))
        assert samples["nvml_mock_topology_requests_total", key] == 1, endpoint


async def test_unknown_routes_and_methods(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/nodes/a/b/identity")).status_code == 404
    assert (await client.get("/v2/topology")).status_code == 404
    assert (await client.post("/v1/nodes/worker-1/identity")).status_code == 405


async def test_openapi_documents_the_contract(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    identity = schema["paths"]["/v1/nodes/{node}/identity"]["get"]
    assert {p["name"] for p in identity["parameters"]} == {"node", "revision", "wait"}
    assert {"200", "304", "404", "422"} <= set(identity["responses"])
    assert "/v1/topology" in schema["paths"]
    assert (await client.get("/docs")).status_code == 200


async def test_both_paths_give_identical_answers(store: TopologyStore) -> None:
    answers = []
    for fast in (True, False):
        app = create_app(store, max_watch_seconds=1, fast_path=fast)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            got = []
            for url in (
                "/v1/nodes/worker-1/identity",
                "/v1/nodes/nobody/identity",
                f"/v1/nodes/worker-1/identity?revision={store.snapshot.revision}&wait=0.01",
            ):
                r = await c.get(url)
                got.append((r.status_code, r.content, r.headers.get("etag")))
            answers.append(got)
    assert answers[0] == answers[1]


async def test_a_second_domain(client: httpx.AsyncClient, store: TopologyStore) -> None:
    two = parse_topology(
        document().replace(
            "domains:\n",
            "domains:\n  - {name: other, uuid: "
            + UUID_B
            + ", cliques: [{id: 3, nodes: [worker-9]}]}\n",
        )
    )
    store.replace(two)
    response = await client.get("/v1/nodes/worker-9/identity")
    assert response.json()["domain"] == "other"
    assert response.json()["clusterUuid"] == UUID_B


HUGE = "9" * 5000


@pytest.mark.parametrize(
    "tag",
    [
        f'"{HUGE}"',
        f'W/"{HUGE}"',
        HUGE,
        f'"{2**63}"',
        f'"{"1" * 20}"',
        f'"{HUGE}", "1"',
        "*, " * 2000,
    ],
    ids=["quoted", "weak", "bare", "past-int64", "twenty-digits", "list", "many-stars"],
)
async def test_an_absurd_if_none_match_is_a_mismatch_not_a_500(
    client: httpx.AsyncClient, tag: str
) -> None:
    for url in (
        "/v1/nodes/worker-1/identity?wait=0.01",
        "/v1/nodes/worker-1/identity",
        "/v1/topology",
    ):
        response = await client.get(url, headers={"If-None-Match": tag})
        assert response.status_code in (200, 304), (url, response.status_code)
        if "*" not in tag:
            assert response.status_code == 200


@pytest.mark.parametrize(
    "query",
    [f"revision={HUGE}", f"revision={HUGE}&wait=1", f"wait={HUGE}", f"revision=1&wait={HUGE}"],
)
async def test_absurd_query_values_are_422_with_a_short_message(
    client: httpx.AsyncClient, query: str
) -> None:
    response = await client.get(f"/v1/nodes/worker-1/identity?{query}")
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert len(detail) < 600
    assert "'revision'" in detail or "'wait'" in detail
