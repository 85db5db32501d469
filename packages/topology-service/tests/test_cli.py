"""The real entry point as a process: start-up failures (exit 3), --allow-empty, clean shutdown."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import UUID_B, document, serving, write_atomically


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvml_mock_topology", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


def test_missing_file_is_exit_3_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    result = run("--topology-file", str(missing))
    assert result.returncode == 3
    assert f"topology file {missing} does not exist" in result.stderr
    assert "--allow-empty" in result.stderr


def test_invalid_file_is_exit_3_listing_problems(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(document(c0=["a", "b"], c1=["b"]))
    result = run("--topology-file", str(path))
    assert result.returncode == 3
    assert "node 'b' is in more than one clique" in result.stderr


def test_bad_setting_is_exit_3_naming_key_and_value(tmp_path: Path) -> None:
    result = run("--topology-file", str(tmp_path), env={"NVML_MOCK_TOPOLOGY_MAX_WATCH": "forever"})
    assert result.returncode == 3
    assert "NVML_MOCK_TOPOLOGY_MAX_WATCH='forever' is not a number" in result.stderr


def test_unknown_flag_is_exit_2() -> None:
    assert run("--no-such-flag").returncode == 2


def test_directory_instead_of_a_file_is_exit_3(tmp_path: Path) -> None:
    result = run("--topology-file", str(tmp_path))
    assert result.returncode == 3
    assert "is a directory" in result.stderr


def test_port_in_use_is_exit_3(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(document())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("--topology-file", str(path), "--host", "127.0.0.1", "--port", str(port))
    assert result.returncode == 3
    assert "could not listen" in result.stderr


def test_allow_empty_then_the_file_appears(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    with serving("--topology-file", str(path), "--allow-empty", "--poll-interval", "0.1") as (
        _,
        url,
    ):
        assert httpx.get(f"{url}/v1/nodes/worker-1/identity").status_code == 404
        assert httpx.get(f"{url}/readyz").json()["nodes"] == 0
        write_atomically(path, document(uuid=UUID_B))
        deadline = time.monotonic() + 5
        while httpx.get(f"{url}/v1/nodes/worker-1/identity").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert httpx.get(f"{url}/v1/nodes/worker-1/identity").json()["clusterUuid"] == UUID_B


def test_sigterm_releases_watchers_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(document())
    monkeypatch.setenv("NVML_MOCK_LOG_FORMAT", "json")
    with serving("--topology-file", str(path)) as (process, url):
        revision = httpx.get(f"{url}/v1/nodes/worker-1/identity").json()["revision"]
        answers: list[httpx.Response] = []
        watcher = threading.Thread(
            target=lambda: answers.append(
                httpx.get(
                    f"{url}/v1/nodes/worker-1/identity?revision={revision}&wait=50",
                    timeout=60,
                )
            )
        )
        watcher.start()
        # SIGTERM once the service holds the watch (its gauge says so), not after a guess.
        deadline = time.monotonic() + 20
        while "nvml_mock_topology_watchers 1.0" not in httpx.get(f"{url}/metrics").text:
            assert time.monotonic() < deadline, "the watch never reached the service"
            time.sleep(0.02)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        watcher.join(10)
        assert process.wait(10) == 0
        assert time.monotonic() - started < 5
        assert answers and answers[0].json()["revision"] == revision


def test_json_logs(tmp_path: Path) -> None:
    result = run(
        "--topology-file", str(tmp_path / "absent.yaml"), env={"NVML_MOCK_LOG_FORMAT": "json"}
    )
    assert result.returncode == 3
    record = json.loads(result.stderr.strip().splitlines()[-1])
    assert record["level"] == "error"
    assert record["logger"] == "nvml_mock_topology.cli"
    assert "does not exist" in record["msg"]


def test_sigterm_releases_a_watcher_that_rewatches_on_its_kept_alive_connection(
    tmp_path: Path,
) -> None:
    """The NRI plugin's pattern: the moment a watch returns, the next one goes out on the
    same connection. Every watch, including those that arrive during shutdown, must be
    released, so the process ends quickly and the client never sees a 500."""
    path = tmp_path / "topology.yaml"
    path.write_text(document())
    with serving("--topology-file", str(path)) as (process, url):
        statuses: list[int] = []
        watching = threading.Event()
        stop = threading.Event()

        def plugin() -> None:
            with httpx.Client(base_url=url, timeout=60) as client:
                revision = client.get("/v1/nodes/worker-1/identity").json()["revision"]
                while not stop.is_set():
                    watching.set()
                    try:
                        answer = client.get(
                            f"/v1/nodes/worker-1/identity?revision={revision}&wait=50"
                        )
                    except httpx.HTTPError:
                        return  # the server went away: a real plugin reconnects elsewhere
                    statuses.append(answer.status_code)
                    if answer.status_code == 200:
                        revision = answer.json()["revision"]

        watcher = threading.Thread(target=plugin, daemon=True)
        watcher.start()
        assert watching.wait(10)
        time.sleep(0.5)  # the first watch is waiting in the server
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(10)
        finally:
            stop.set()
        elapsed = time.monotonic() - started
        watcher.join(10)
        assert code == 0
        assert elapsed < 3, f"shutdown took {elapsed:.1f} s"
        assert statuses, "the waiting watch was never answered"
        assert all(status == 200 for status in statuses), statuses
