"""Loads that used to freeze the service: a 100,000-name selector, a load still running at
SIGTERM, and a rollout's stop (the drain). Real processes on loopback."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import httpx
from conftest import document, serving, write_atomically
from nvml_mock_protocol.topology import parse_topology
from nvml_mock_topology.api import create_app
from nvml_mock_topology.source import TopologyFile, off_loop
from nvml_mock_topology.store import TopologyStore

NAMES = [f"node-{i:05d}" for i in range(100_000)]


def big_document(xid: int) -> str:
    """A 1.1 MB scenario document whose selector lists 100,000 node names."""
    return (
        "version: 1\nscenarios:\n"
        f"  - {{name: big, selector: {{nodes: [{','.join(NAMES)}]}}, apply: {{xid: {xid}}}}}\n"
    )


def until(check: object, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.05)


def scenario_xids(url: str, node: str) -> list[int]:
    body = httpx.get(f"{url}/v1/nodes/{node}/scenarios", timeout=10).json()
    return [entry["scenario"]["apply"]["xid"] for entry in body["scenarios"]]


def test_100000_names_are_served_later_files_keep_loading_and_sigterm_stops(
    tmp_path: Path,
) -> None:
    topology = tmp_path / "topology.yaml"
    topology.write_text(document())
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text("version: 1\nscenarios: []\n")
    with serving(
        "--topology-file", str(topology), "--scenarios-file", str(scenarios),
        "--poll-interval", "0.2",
    ) as (process, url):  # fmt: skip
        write_atomically(scenarios, big_document(79))
        assert len(big_document(79)) > 1_100_000
        until(lambda: scenario_xids(url, "node-99999") == [79])
        body = httpx.get(f"{url}/v1/nodes/node-00000/scenarios").content
        assert len(body) < 2_000, "a node's answer carries every other node's name"
        # A later bad file is refused, and a later good one served, in turn.
        write_atomically(scenarios, "version: 1\nscenarios: [{name: Bad, apply: {}}]\n")
        until(
            lambda: "'Bad'" in (httpx.get(f"{url}/readyz").json().get("scenarioReloadError") or "")
        )
        write_atomically(scenarios, big_document(48))
        until(lambda: scenario_xids(url, "node-12345") == [48])
        assert httpx.get(f"{url}/readyz").json()["status"] == "ready"
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0


def test_a_load_still_running_at_sigterm_does_not_hold_the_exit() -> None:
    """The pool of ``asyncio.to_thread`` is joined at exit, so a long load kept the process
    for minutes after SIGTERM; a load in ``off_loop`` is abandoned."""
    program = textwrap.dedent(
        """
        import asyncio, signal, sys, time
        from nvml_mock_topology.source import off_loop

        async def main():
            task = asyncio.ensure_future(off_loop(time.sleep, 600))
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
            print("loading", flush=True)
            try:
                await task
            except asyncio.CancelledError:
                return 0

        sys.exit(asyncio.run(main()))
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    ) as process:
        assert process.stdout is not None and process.stdout.readline() == "loading\n"
        process.send_signal(signal.SIGTERM)
        assert process.wait(10) == 0


def test_readyz_names_a_load_while_it_runs(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(document())
    store = TopologyStore.from_document(parse_topology(document()))
    follower = TopologyFile(path, store, loaded=None)
    release = threading.Event()
    app_with_follower = create_app(store, follower)

    async def scenario() -> tuple[dict[str, object], dict[str, object]]:
        load = asyncio.ensure_future(follower._load(release.wait, 30))
        await asyncio.sleep(0.1)
        transport = httpx.ASGITransport(app=app_with_follower)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            during = (await client.get("/readyz")).json()
            release.set()
            await load
            after = (await client.get("/readyz")).json()
        return during, after

    during, after = asyncio.run(scenario())
    assert during["loading"] and "loading for" in during["loading"][0]
    assert str(path) in during["loading"][0]
    assert "loading" not in after
    assert asyncio.run(_result_of_off_loop()) == 42


async def _result_of_off_loop() -> int:
    return await off_loop(lambda: 42)


def test_sigterm_drains_first_answering_with_readyz_503(tmp_path: Path) -> None:
    """A rollout: Kubernetes stops routing to a pod some seconds after SIGTERM. The pod
    keeps answering (and says it is going) for its drain time, so no client is refused."""
    path = tmp_path / "topology.yaml"
    path.write_text(document())
    with serving("--topology-file", str(path), "--drain-seconds", "2") as (process, url):
        assert httpx.get(f"{url}/readyz").status_code == 200
        process.send_signal(signal.SIGTERM)
        until(lambda: httpx.get(f"{url}/readyz").status_code == 503, 5)
        assert httpx.get(f"{url}/readyz").json()["status"] == "draining"
        # New connections are still served while draining.
        with httpx.Client(base_url=url) as fresh:
            assert fresh.get("/v1/nodes/worker-1/identity").status_code == 200
        assert process.poll() is None
        assert process.wait(20) == 0


def test_a_second_signal_ends_the_drain_at_once(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(document())
    with serving("--topology-file", str(path), "--drain-seconds", "120") as (process, url):
        process.send_signal(signal.SIGTERM)
        until(lambda: httpx.get(f"{url}/readyz").status_code == 503, 5)
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
