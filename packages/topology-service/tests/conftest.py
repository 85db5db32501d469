"""Fixtures: topology documents on disk, and real uvicorn servers on loopback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from nvml_mock_topology.api import create_app
from nvml_mock_topology.cli import open_topology
from nvml_mock_topology.settings import Settings
from nvml_mock_topology.source import TopologyFile
from nvml_mock_topology.store import TopologyStore
from nvml_mock_topology.testing import ThreadedServer

UUID_A = "00000000-0000-0000-0000-0000000000ab"
UUID_B = "00000000-0000-0000-0000-0000000000ff"


def document(domain: str = "demo-domain", uuid: str = UUID_A, **cliques: list[str]) -> str:
    """A topology document as YAML with one domain; cliques are given as c<ID>=[nodes]."""
    items = cliques or {"c0": ["worker-1", "worker-2"], "c1": ["worker-3", "worker-4"]}
    lines = ["version: 1", "domains:", f"  - name: {domain}", f"    uuid: {uuid}", "    cliques:"]
    for key, nodes in items.items():
        lines.append(f"      - id: {int(key[1:])}")
        lines.append(f"        nodes: {json.dumps(nodes)}")
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` the way editors and kubectl cp do: write aside, then rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class ConfigMapDir:
    """A directory laid out as the kubelet lays out a ConfigMap volume, with its symlink swap."""

    def __init__(self, root: Path, key: str = "topology.yaml") -> None:
        self.root = root
        self.key = key
        self.generation = 0
        root.mkdir(parents=True, exist_ok=True)

    @property
    def path(self) -> Path:
        return self.root / self.key

    def publish(self, text: str) -> None:
        self.generation += 1
        data_dir = self.root / f"..2026_11_30_00_00_{self.generation:02d}.000000001"
        data_dir.mkdir()
        (data_dir / self.key).write_text(text)
        tmp_link = self.root / "..data_tmp"
        tmp_link.symlink_to(data_dir.name)
        os.replace(tmp_link, self.root / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to(f"..data/{self.key}")


class LiveServer(ThreadedServer):
    """The service's app for ``store`` (and ``follower``), served for real on loopback."""

    def __init__(
        self, store: TopologyStore, follower: TopologyFile | None, **app_args: Any
    ) -> None:
        self.store = store
        self.follower = follower
        super().__init__(create_app(store, follower, **app_args), lifespan="on", backlog=2048)

    def __enter__(self) -> LiveServer:
        super().__enter__()
        return self


@contextmanager
def serving(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The real entry point as a process on a free loopback port; yields it and its URL."""
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


@pytest.fixture
def topology_file(tmp_path: Path) -> Path:
    path = tmp_path / "topology.yaml"
    path.write_text(document())
    return path


@pytest.fixture
def live(topology_file: Path) -> Iterator[LiveServer]:
    settings = Settings(topology_file=topology_file, poll_interval=0.05)
    store, follower = open_topology(settings)
    with LiveServer(store, follower, max_watch_seconds=5) as server:
        yield server


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("NVML_MOCK_"):
            monkeypatch.delenv(key)
