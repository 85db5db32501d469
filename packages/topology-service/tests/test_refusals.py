"""Hostile topology files, at start and on reload: each is a refusal like any invalid document.

At start the process exits 3 with one line saying what is wrong (not a hang, not a
traceback). While serving, the last good document keeps serving, ``/readyz`` says
``degraded`` with the reason, the failure counter moves once per bad version, the
log says so once (not once per poll), and a good file afterwards is loaded.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from conftest import UUID_B, LiveServer, document, write_atomically
from nvml_mock_protocol.topology import REPORT_MAX_BYTES
from nvml_mock_topology.cli import open_topology
from nvml_mock_topology.settings import Settings

LAUGHS = "\n".join(
    ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [
        f"{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    ]
    + ["version: 1", "domains: *i", ""]
)
DEEP_JSON = '{"version": 1, "domains": ' + "[" * 100_000 + "]" * 100_000 + "}"


def bad_names(count: int) -> str:
    nodes = [f"Bad_{i}" for i in range(count)]
    clique = {"id": 0, "nodes": nodes}
    domain = {"name": "d", "uuid": "00000000-0000-0000-0000-0000000000ab", "cliques": [clique]}
    return json.dumps({"version": 1, "domains": [domain]})


def make_laughs(path: Path) -> None:
    path.write_text(LAUGHS)


def make_deep(path: Path) -> None:
    path.write_text(DEEP_JSON)


def make_loop(path: Path) -> None:
    (path.parent / "loop-a").symlink_to("loop-b")
    (path.parent / "loop-b").symlink_to("loop-a")
    path.symlink_to("loop-a")


def make_dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_too_big(path: Path) -> None:
    with path.open("wb") as handle:
        handle.truncate(9 * 1024 * 1024)


HOSTILE: dict[str, tuple[Callable[[Path], None], str]] = {
    "billion-laughs": (make_laughs, "more than 1000000 values"),
    "nested-100000-deep": (make_deep, "nested deeper than"),
    "symlink-loop": (make_loop, "symbolic links"),
    "link-to-dev-zero": (make_dev_zero, "is a character device, not a regular file"),
    "fifo": (make_fifo, "is a FIFO (named pipe), not a regular file"),
    "over-the-size-limit": (make_too_big, "larger than the limit of 8388608 bytes"),
}


def replace_with(path: Path, make: Callable[[Path], None]) -> None:
    """Put the hostile file in place with one rename, as a ConfigMap update would."""
    aside = path.with_name("incoming")
    make(aside)
    os.replace(aside, path)


@pytest.mark.parametrize("case", list(HOSTILE))
def test_at_start_a_hostile_file_is_exit_3_naming_the_problem(tmp_path: Path, case: str) -> None:
    make, why = HOSTILE[case]
    path = tmp_path / "topology.yaml"
    make(path)
    result = subprocess.run(
        [sys.executable, "-m", "nvml_mock_topology", "--topology-file", str(path)],
        capture_output=True,
        text=True,
        timeout=60,  # generous: a refusal takes milliseconds; the bugs hung or read forever
        check=False,
        env={**os.environ, "NVML_MOCK_LOG_FORMAT": "json"},
    )
    assert result.returncode == 3, result.stderr[-2000:]
    [line] = result.stderr.strip().splitlines()
    record = json.loads(line)
    assert record["level"] == "error"
    assert record["msg"].startswith("cannot start: ")
    assert why in record["msg"]
    assert "exc" not in record


@pytest.fixture
def followed(topology_file: Path) -> Iterator[LiveServer]:
    store, follower = open_topology(Settings(topology_file=topology_file, poll_interval=0.05))
    with LiveServer(store, follower, max_watch_seconds=5) as server:
        yield server


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def ready(server: LiveServer) -> dict[str, object]:
    body: dict[str, object] = httpx.get(f"{server.url}/readyz", timeout=5).json()
    return body


def metric(server: LiveServer, name: str) -> float:
    for line in httpx.get(f"{server.url}/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


@pytest.mark.parametrize("case", list(HOSTILE))
def test_on_reload_a_hostile_file_is_refused_once_and_the_last_good_one_serves(
    followed: LiveServer, topology_file: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    make, why = HOSTILE[case]
    good = httpx.get(f"{followed.url}/v1/nodes/worker-1/identity").json()
    caplog.set_level(logging.DEBUG, logger="nvml_mock_topology")
    replace_with(topology_file, make)
    wait_for(lambda: ready(followed)["status"] == "degraded")
    body = ready(followed)
    assert why in str(body["reloadError"])
    assert body["revision"] == good["revision"]
    assert httpx.get(f"{followed.url}/v1/nodes/worker-1/identity").json() == good
    assert metric(followed, "nvml_mock_topology_reload_failures_total") == 1
    assert metric(followed, "nvml_mock_topology_reload_failing") == 1
    time.sleep(0.5)  # ten more polls: the same bad file is not reported again
    assert metric(followed, "nvml_mock_topology_reload_failures_total") == 1
    refusals = [r for r in caplog.records if r.getMessage().startswith("topology reload refused")]
    assert len(refusals) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.exc_info]
    # A good file afterwards is loaded (a FIFO left in place never blocked the follower).
    write_atomically(topology_file, document(uuid=UUID_B))
    wait_for(lambda: ready(followed)["status"] == "ready")
    assert httpx.get(f"{followed.url}/v1/nodes/worker-1/identity").json()["clusterUuid"] == UUID_B


def test_a_document_with_100000_bad_names_gives_a_capped_report(
    followed: LiveServer, topology_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_atomically(topology_file, bad_names(100_000))
    wait_for(lambda: ready(followed)["status"] == "degraded", timeout=30)
    error = str(ready(followed)["reloadError"])
    assert "100000 problem(s)" in error
    assert "more problem(s) not shown" in error
    assert len(error) <= REPORT_MAX_BYTES + 2048
    [logged] = [r for r in caplog.records if r.getMessage().startswith("topology reload refused")]
    assert len(logged.getMessage()) <= REPORT_MAX_BYTES + 2048
