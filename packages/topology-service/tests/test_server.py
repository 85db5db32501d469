"""Against a real uvicorn server on loopback: lookups, watches, reloads, symlink swaps, readers."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import UUID_A, UUID_B, ConfigMapDir, LiveServer, document, write_atomically
from nvml_mock_topology.cli import open_topology
from nvml_mock_topology.settings import Settings


def wait_until(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def identity(server: LiveServer, node: str) -> httpx.Response:
    return httpx.get(f"{server.url}/v1/nodes/{node}/identity")


def test_lookup_404_and_422(live: LiveServer) -> None:
    ok = identity(live, "worker-2")
    assert ok.status_code == 200
    assert ok.json()["clusterUuid"] == UUID_A
    assert ok.json()["cliqueId"] == 0
    assert identity(live, "nobody").status_code == 404
    bad = identity(live, "UPPER")
    assert bad.status_code == 422
    assert "uppercase" in bad.json()["detail"]


def test_etag_304(live: LiveServer) -> None:
    first = identity(live, "worker-1")
    again = httpx.get(
        f"{live.url}/v1/nodes/worker-1/identity", headers={"If-None-Match": first.headers["etag"]}
    )
    assert again.status_code == 304


def test_watch_returns_on_change_and_on_timeout(live: LiveServer, topology_file: Path) -> None:
    revision = identity(live, "worker-1").json()["revision"]
    started = time.monotonic()
    unchanged = httpx.get(
        f"{live.url}/v1/nodes/worker-1/identity?revision={revision}&wait=0.5", timeout=5
    )
    assert time.monotonic() - started >= 0.45
    assert unchanged.json()["revision"] == revision

    answers: list[httpx.Response] = []
    watcher = threading.Thread(
        target=lambda: answers.append(
            httpx.get(
                f"{live.url}/v1/nodes/worker-1/identity?revision={revision}&wait=5", timeout=10
            )
        )
    )
    watcher.start()
    wait_until(lambda: live.store.watching == 1)
    write_atomically(topology_file, document(uuid=UUID_B))
    watcher.join(5)
    assert answers and answers[0].status_code == 200
    assert answers[0].json()["clusterUuid"] == UUID_B
    assert answers[0].json()["revision"] > revision


def test_reload_on_file_change(live: LiveServer, topology_file: Path) -> None:
    before = httpx.get(f"{live.url}/v1/topology").json()["revision"]
    write_atomically(topology_file, document(c5=["worker-1"]))
    wait_until(lambda: identity(live, "worker-1").json()["cliqueId"] == 5)
    assert identity(live, "worker-2").status_code == 404
    assert httpx.get(f"{live.url}/v1/topology").json()["revision"] > before
    # Rewriting in place (no rename) is seen too.
    topology_file.write_text(document(c6=["worker-1"]))
    wait_until(lambda: identity(live, "worker-1").json()["cliqueId"] == 6)


def test_invalid_reload_keeps_the_last_good_document(
    live: LiveServer, topology_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = identity(live, "worker-1").json()
    write_atomically(topology_file, document().replace(UUID_A, "not-a-uuid"))
    wait_until(lambda: httpx.get(f"{live.url}/readyz").json()["status"] == "degraded")
    ready = httpx.get(f"{live.url}/readyz").json()
    assert "not-a-uuid" in ready["reloadError"]
    assert ready["revision"] == good["revision"]
    assert identity(live, "worker-1").json() == good
    metrics = httpx.get(f"{live.url}/metrics").text
    assert "nvml_mock_topology_reload_failures_total 1.0" in metrics
    assert "nvml_mock_topology_reload_failing 1.0" in metrics
    assert any("not-a-uuid" in record.getMessage() for record in caplog.records)
    # Deleting the file is refused the same way; a good file recovers.
    topology_file.unlink()
    wait_until(lambda: "does not exist" in httpx.get(f"{live.url}/readyz").json()["reloadError"])
    assert identity(live, "worker-1").json() == good
    write_atomically(topology_file, document(c9=["worker-1"]))
    wait_until(lambda: httpx.get(f"{live.url}/readyz").json()["status"] == "ready")
    assert identity(live, "worker-1").json()["cliqueId"] == 9
    assert "nvml_mock_topology_reload_failures_total 2.0" in httpx.get(f"{live.url}/metrics").text


@pytest.fixture
def configmap(tmp_path: Path) -> Iterator[tuple[ConfigMapDir, LiveServer]]:
    volume = ConfigMapDir(tmp_path / "volume")
    volume.publish(document())
    store, follower = open_topology(Settings(topology_file=volume.path, poll_interval=0.05))
    with LiveServer(store, follower, max_watch_seconds=5) as server:
        yield volume, server


def test_reload_on_configmap_symlink_swap(configmap: tuple[ConfigMapDir, LiveServer]) -> None:
    volume, server = configmap
    assert identity(server, "worker-1").json()["clusterUuid"] == UUID_A
    volume.publish(document(uuid=UUID_B))
    wait_until(lambda: identity(server, "worker-1").json()["clusterUuid"] == UUID_B)
    volume.publish(document(uuid=UUID_B, c42=["worker-1"]))
    wait_until(lambda: identity(server, "worker-1").json()["cliqueId"] == 42)
    volume.publish("version: 7\n")
    wait_until(lambda: httpx.get(f"{server.url}/readyz").json()["status"] == "degraded")
    assert identity(server, "worker-1").json()["cliqueId"] == 42


def test_concurrent_readers_never_see_a_mix(live: LiveServer, topology_file: Path) -> None:
    """Readers racing many reloads see each answer whole: old or new, never half of each."""
    generations = {
        UUID_A: ("domain-a", 0),
        UUID_B: ("domain-b", 1),
    }
    texts = {
        uuid: document(domain=name, uuid=uuid, **{f"c{clique}": [f"n-{i}" for i in range(300)]})
        for uuid, (name, clique) in generations.items()
    }
    write_atomically(topology_file, texts[UUID_A])
    wait_until(lambda: identity(live, "n-0").status_code == 200)
    stop = threading.Event()
    problems: list[str] = []
    seen: set[str] = set()

    def reader(node: str) -> None:
        with httpx.Client(base_url=live.url) as client:
            while not stop.is_set():
                body = client.get(f"/v1/nodes/{node}/identity").json()
                expected = generations.get(body["clusterUuid"])
                if expected != (body["domain"], body["cliqueId"]):
                    problems.append(f"mixed identity {body}")
                whole = client.get("/v1/topology").json()
                uuids = {d["uuid"] for d in whole["topology"]["domains"]}
                names = {d["name"] for d in whole["topology"]["domains"]}
                if len(uuids) != 1 or {generations[u][0] for u in uuids} != names:
                    problems.append(f"mixed document at revision {whole['revision']}")
                seen.add(body["clusterUuid"])

    threads = [threading.Thread(target=reader, args=(f"n-{i * 37}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for round_ in range(12):
        write_atomically(topology_file, texts[UUID_B if round_ % 2 == 0 else UUID_A])
        time.sleep(0.12)
    stop.set()
    for thread in threads:
        thread.join(10)
    assert not problems, problems[:5]
    assert seen == {UUID_A, UUID_B}


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "fastapi-route"])
def test_a_watcher_that_disconnects_leaves_nothing_behind(
    topology_file: Path, fast_path: bool
) -> None:
    store, follower = open_topology(Settings(topology_file=topology_file))
    with LiveServer(store, follower, max_watch_seconds=5, fast_path=fast_path) as live:
        revision = identity(live, "worker-1").json()["revision"]
        port = int(live.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(
                f"GET /v1/nodes/worker-1/identity?revision={revision}&wait=5 HTTP/1.1\r\n"
                "Host: t\r\n\r\n".encode()
            )
            wait_until(lambda: live.store.watching == 1)
        started = time.monotonic()
        wait_until(lambda: live.store.watching == 0, timeout=2)
        assert time.monotonic() - started < 2  # well before the 5 s wait would have ended


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux-only")
@pytest.mark.parametrize("layout", ["plain", "configmap"])
def test_inotify_sees_a_change_long_before_the_poll(tmp_path: Path, layout: str) -> None:
    volume = ConfigMapDir(tmp_path / "volume")
    if layout == "configmap":
        volume.publish(document())
        path = volume.path
    else:
        path = tmp_path / "topology.yaml"
        path.write_text(document())
    store, follower = open_topology(Settings(topology_file=path, poll_interval=60))
    with LiveServer(store, follower, max_watch_seconds=5) as server:
        time.sleep(0.2)  # the follower has started and watches the directory
        if layout == "configmap":
            volume.publish(document(uuid=UUID_B))
        else:
            write_atomically(path, document(uuid=UUID_B))
        wait_until(lambda: identity(server, "worker-1").json()["clusterUuid"] == UUID_B, 3)
