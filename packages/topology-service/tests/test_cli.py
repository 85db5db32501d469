"""The real entry point as a process: start-up failures (exit 3), --allow-empty, clean shutdown."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from conftest import UUID_B, document, write_atomically


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvml_mock_topology", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


@contextmanager
def serving(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "nvml_mock_topology", "--host", "127.0.0.1", "--port", "0", *args],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    url = None
    lines: list[str] = []
    deadline = time.monotonic() + 20
    while url is None and time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        lines.append(line)
        match = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", line)
        if match:
            url = match.group(1)
    assert url is not None, "".join(lines)
    drain = threading.Thread(target=lambda: lines.extend(process.stderr or ()), daemon=True)
    drain.start()
    try:
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        drain.join(10)
        process.stderr.close()


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
        time.sleep(0.5)
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
