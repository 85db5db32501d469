"""Scenarios served per node with the identity's watch contract, status from reports,
reloads that keep the last good document, and the write API's token."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import LiveServer, document, write_atomically
from nvml_mock_topology.cli import open_scenarios, open_topology, open_write_access
from nvml_mock_topology.errors import StartupError
from nvml_mock_topology.settings import Settings

SCENARIOS = """
version: 1
scenarios:
  - name: xid-half
    selector: {cliques: [0, 1], percent: 50, seed: 3}
    apply: {xid: 79}
    duration: 10m
  - name: hot-clique-1
    selector: {cliques: [1]}
    apply: {set: {temperature_c: 91}}
    start: 2026-12-01T14:00:00Z
"""
TOKEN = "s3cret-token"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    topology = tmp_path / "topology.yaml"
    topology.write_text(document())
    scenarios = tmp_path / "scenarios" / "scenarios.yaml"
    scenarios.parent.mkdir()
    scenarios.write_text(SCENARIOS)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    return {"topology": topology, "scenarios": scenarios, "token": token}


def start(files: dict[str, Path], *, token: bool = True, report_rate: float = 0) -> LiveServer:
    settings = Settings(
        topology_file=files["topology"],
        scenarios_file=files["scenarios"],
        write_token_file=files["token"] if token else None,
        poll_interval=0.05,
    )
    store, follower = open_topology(settings)
    scenarios, scenario_follower = open_scenarios(settings, store)
    return LiveServer(
        store,
        follower,
        max_watch_seconds=5,
        scenarios=scenarios,
        scenario_follower=scenario_follower,
        write_access=open_write_access(settings),
        report_rate=report_rate,
    )


@pytest.fixture
def live(files: dict[str, Path]) -> Iterator[LiveServer]:
    with start(files) as server:
        yield server


def node_scenarios(server: LiveServer, node: str, **params: Any) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/v1/nodes/{node}/scenarios", params=params, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["x-scenarios-revision"] == str(response.json()["revision"])
    body: dict[str, Any] = response.json()
    return body


def names(body: dict[str, Any]) -> list[str]:
    return [entry["name"] for entry in body["scenarios"]]


def test_each_node_gets_the_scenarios_that_pick_it(live: LiveServer) -> None:
    picked = [
        n
        for n in ("worker-1", "worker-2", "worker-3", "worker-4")
        if "xid-half" in names(node_scenarios(live, n))
    ]
    assert len(picked) == 2  # 50% of the four nodes, the same two every time
    assert picked == [
        n
        for n in ("worker-1", "worker-2", "worker-3", "worker-4")
        if "xid-half" in names(node_scenarios(live, n))
    ]
    for node in ("worker-3", "worker-4"):
        entry = next(
            e for e in node_scenarios(live, node)["scenarios"] if e["name"] == "hot-clique-1"
        )
        assert entry["startMs"] == 1_796_133_600_000
        assert entry["scenario"]["apply"]["set"] == {"temperature_c": 91}
    assert "hot-clique-1" not in names(node_scenarios(live, "worker-1"))
    assert node_scenarios(live, "stranger")["scenarios"] == []


def test_start_now_is_fixed_when_first_served(live: LiveServer) -> None:
    before = time.time() * 1000
    nodes = [
        n
        for n in ("worker-1", "worker-2", "worker-3", "worker-4")
        if "xid-half" in names(node_scenarios(live, n))
    ]
    entry = node_scenarios(live, nodes[0])["scenarios"][0]
    assert entry["startMs"] <= before
    time.sleep(0.05)
    assert node_scenarios(live, nodes[0])["scenarios"][0]["startMs"] == entry["startMs"]


def test_a_watch_wakes_when_the_nodes_list_changes(
    live: LiveServer, files: dict[str, Path]
) -> None:
    first = node_scenarios(live, "worker-1")
    result: dict[str, Any] = {}

    def watch() -> None:
        started = time.monotonic()
        result["body"] = node_scenarios(live, "worker-1", revision=first["revision"], wait=5)
        result["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=watch)
    thread.start()
    time.sleep(0.3)
    write_atomically(
        files["scenarios"],
        SCENARIOS + "  - {name: all-busy, apply: {util: busy}, duration: 1m}\n",
    )
    thread.join(10)
    assert "all-busy" in names(result["body"])
    assert result["body"]["revision"] > first["revision"]
    assert result["seconds"] < 3


def test_a_watch_without_change_answers_unchanged_after_the_wait(live: LiveServer) -> None:
    first = node_scenarios(live, "worker-1")
    started = time.monotonic()
    again = node_scenarios(live, "worker-1", revision=first["revision"], wait=0.5)
    assert time.monotonic() - started >= 0.45
    assert again == first
    etag = f'"{first["revision"]}"'
    response = httpx.get(f"{live.url}/v1/nodes/worker-1/scenarios", headers={"if-none-match": etag})
    assert response.status_code == 304


def test_an_invalid_new_document_is_refused_and_the_last_good_one_serves(
    live: LiveServer, files: dict[str, Path]
) -> None:
    before = httpx.get(f"{live.url}/v1/scenarios").json()
    write_atomically(files["scenarios"], "version: 1\nscenarios:\n  - {name: Bad, apply: {}}\n")
    for _ in range(100):
        listing = httpx.get(f"{live.url}/v1/scenarios").json()
        if "reloadError" in listing:
            break
        time.sleep(0.05)
    assert "scenarios[0] 'Bad'" in listing["reloadError"]
    assert [s["name"] for s in listing["scenarios"]] == [s["name"] for s in before["scenarios"]]
    ready = httpx.get(f"{live.url}/readyz").json()
    assert ready["status"] == "degraded" and "'Bad'" in ready["scenarioReloadError"]
    metrics = httpx.get(f"{live.url}/metrics").text
    assert "nvml_mock_topology_scenario_reload_failing 1.0" in metrics


def test_a_topology_change_moves_the_scenarios(live: LiveServer, files: dict[str, Path]) -> None:
    assert "hot-clique-1" not in names(node_scenarios(live, "worker-1"))
    write_atomically(files["topology"], document(c1=["worker-1", "worker-3"], c0=["worker-2"]))
    for _ in range(100):
        if "hot-clique-1" in names(node_scenarios(live, "worker-1")):
            break
        time.sleep(0.05)
    assert "hot-clique-1" in names(node_scenarios(live, "worker-1"))
    assert "hot-clique-1" not in names(node_scenarios(live, "worker-4"))


def report(
    server: LiveServer, node: str, body: dict[str, Any], token: str | None = TOKEN
) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.post(f"{server.url}/v1/nodes/{node}/scenarios/status", json=body, headers=headers)


def test_status_shows_pending_until_agents_report(live: LiveServer) -> None:
    detail = httpx.get(f"{live.url}/v1/scenarios/hot-clique-1").json()
    assert detail["states"]["pending"] == 2
    assert [n["node"] for n in detail["nodes"]] == ["worker-3", "worker-4"]
    revision = detail["revision"]
    answer = report(
        live,
        "worker-3",
        {
            "revision": 1,
            "scenarios": [
                {
                    "name": "hot-clique-1",
                    "revision": revision,
                    "state": "applied",
                    "gpus": ["GPU-1"],
                    "appliedMs": 5,
                    "latencyMs": 120,
                },
            ],
        },
    )
    assert answer.status_code == 200 and answer.json() == {"taken": 1}
    report(
        live,
        "worker-4",
        {
            "revision": 1,
            "scenarios": [
                {
                    "name": "hot-clique-1",
                    "revision": revision,
                    "state": "failed",
                    "reason": "thermal: temperature_c=91 is not above the slowdown threshold",
                },
                {
                    "name": "hot-clique-1",
                    "revision": revision - 1,
                    "state": "applied",
                },  # stale: ignored
            ],
        },
    )
    detail = httpx.get(f"{live.url}/v1/scenarios/hot-clique-1").json()
    states = {n["node"]: (n["state"], n.get("reason")) for n in detail["nodes"]}
    assert states["worker-3"] == ("applied", None)
    assert states["worker-4"][0] == "failed" and "slowdown" in states["worker-4"][1]
    listing = httpx.get(f"{live.url}/v1/scenarios").json()
    summary = next(s for s in listing["scenarios"] if s["name"] == "hot-clique-1")
    assert summary["states"]["applied"] == 1 and summary["states"]["failed"] == 1
    metrics = httpx.get(f"{live.url}/metrics").text
    assert "nvml_mock_topology_scenario_nodes_applied 1.0" in metrics
    assert "nvml_mock_topology_scenario_nodes_failed 1.0" in metrics
    assert "nvml_mock_topology_scenarios_active 1.0" in metrics
    assert "nvml_mock_topology_scenario_apply_latency_seconds_count 1.0" in metrics
    missing = httpx.get(f"{live.url}/v1/scenarios/nope")
    assert missing.status_code == 404 and "no scenario named 'nope'" in missing.json()["detail"]


def test_reports_need_the_token(live: LiveServer) -> None:
    body = {"revision": 1, "scenarios": []}
    assert report(live, "worker-1", body, token=None).status_code == 401
    wrong = report(live, "worker-1", body, token="guess")
    assert wrong.status_code == 403 and "not the write token" in wrong.json()["detail"]
    assert report(live, "worker-1", body).status_code == 200
    assert report(live, "Not_A_Node", body).status_code == 422


def test_the_write_api_is_off_by_default(files: dict[str, Path]) -> None:
    with start(files, token=False) as server:
        answer = report(server, "worker-1", {"revision": 1, "scenarios": []})
        assert answer.status_code == 403 and "write API is off" in answer.json()["detail"]


def test_an_invalid_scenario_file_stops_the_start(files: dict[str, Path]) -> None:
    files["scenarios"].write_text("version: 1\nscenarios: [{name: x}]\n")
    settings = Settings(topology_file=files["topology"], scenarios_file=files["scenarios"])
    store, _ = open_topology(settings)
    with pytest.raises(StartupError, match="apply: required key is missing"):
        open_scenarios(settings, store)
    files["token"].write_text("  \n")
    with pytest.raises(StartupError, match="is empty"):
        open_write_access(Settings(write_token_file=files["token"]))


def test_a_missing_scenario_file_serves_none_until_it_appears(files: dict[str, Path]) -> None:
    files["scenarios"].unlink()
    with start(files) as server:
        assert httpx.get(f"{server.url}/v1/scenarios").json()["scenarios"] == []
        write_atomically(files["scenarios"], SCENARIOS)
        for _ in range(100):
            if httpx.get(f"{server.url}/v1/scenarios").json()["scenarios"]:
                break
            time.sleep(0.05)
        assert len(httpx.get(f"{server.url}/v1/scenarios").json()["scenarios"]) == 2


def test_the_entry_point_serves_scenarios(files: dict[str, Path]) -> None:
    from conftest import serving

    with serving(
        "--topology-file", str(files["topology"]), "--scenarios-file", str(files["scenarios"])
    ) as (_, url):
        listing = httpx.get(f"{url}/v1/scenarios").json()
        assert json.dumps(listing).count("xid-half") == 1


def test_the_fast_path_and_the_fastapi_routes_agree(files: dict[str, Path]) -> None:
    settings = Settings(
        topology_file=files["topology"],
        scenarios_file=files["scenarios"],
        write_token_file=files["token"],
    )
    store, _ = open_topology(settings)
    scenarios, _ = open_scenarios(settings, store)
    access = open_write_access(settings)
    servers = [
        LiveServer(store, None, scenarios=scenarios, write_access=access, fast_path=fast)
        for fast in (True, False)
    ]
    with servers[0] as fast, servers[1] as slow:
        for path in (
            "/v1/nodes/worker-3/scenarios",
            "/v1/nodes/worker-3/scenarios?wait=0",
            "/v1/nodes/Bad_Name/scenarios",
            "/v1/nodes/worker-3/scenarios?revision=x&wait=1",
        ):
            a, b = httpx.get(fast.url + path), httpx.get(slow.url + path)
            assert a.status_code == b.status_code, path
            if a.status_code == 200:
                assert a.content == b.content and a.headers["etag"] == b.headers["etag"]
        for token in (None, "guess", TOKEN):
            body = {"revision": 1, "scenarios": []}
            a, b = report(fast, "worker-1", body, token), report(slow, "worker-1", body, token)
            assert (a.status_code, a.json()) == (b.status_code, b.json())
        bad = {"revision": -1}
        a, b = report(fast, "worker-1", bad), report(slow, "worker-1", bad)
        assert a.status_code == b.status_code == 422


def test_empty_watch_parameters_are_refused_as_the_identitys_are(live: LiveServer) -> None:
    for query in ("revision=&wait=", "revision=", "wait="):
        answer = httpx.get(f"{live.url}/v1/nodes/worker-1/scenarios?{query}", timeout=10)
        assert answer.status_code == 422, (query, answer.text)
        assert "query parameter" in answer.json()["detail"]
