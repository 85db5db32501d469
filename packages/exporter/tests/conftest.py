"""Shared fixtures: a rendered node with its live layer, the exporter as a real process,
nvml-mock-ctl as the operator runs it, and a real Prometheus server scraping on loopback.

The exporter runs exactly as on a node: its own process, the mock ``libnvidia-ml.so.1``
found by the loader through ``LD_LIBRARY_PATH``, the board state through
``MOCK_NVML_CONFIG``, and the live layer beside it. Faults and allocations are written with
the engine's ``nvml-mock-ctl``, in a process of its own, as an operator writes them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"


def _library() -> Path:
    from nvml_mock_engine.library import library_path

    path = library_path()
    if not path.is_file():
        pytest.fail(f"the mock library is not built ({path}): run `tox run -e native` first")
    return path


@dataclass
class Node:
    """A rendered node: its board state, live layer and the environment NVML clients get."""

    root: Path
    state: Path
    live: Path
    library: Path
    gpus: int

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("MOCK_", "NVML_MOCK_")) and k != "NVIDIA_VISIBLE_DEVICES"
        }
        env.update(
            LD_LIBRARY_PATH=str(self.library.parent),
            MOCK_NVML_CONFIG=str(self.state),
            NODE_NAME="node-a",
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def ctl(self, *args: str) -> str:
        """Run ``nvml-mock-ctl`` on this node, as the operator does; its stdout."""
        proc = subprocess.run(
            [sys.executable, "-m", "nvml_mock_engine.ctl", "--live-file", str(self.live), *args],
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert proc.returncode == 0, f"nvml-mock-ctl {' '.join(args)}: {proc.stderr}"
        return proc.stdout


def render_node(root: Path, profile: str = "h100", count: int = 8) -> Node:
    import nvml_mock_live as live
    from nvml_mock_engine.config import resolve_config
    from nvml_mock_engine.render import render_text

    root.mkdir(parents=True, exist_ok=True)
    state = root / "state.nvmlmock"
    state.write_text(render_text(resolve_config(node="node-a", profile=profile, count=count)))
    live_path = root / live.LIVE_FILE_NAME
    live.create(live_path, live.read_board(state))
    return Node(root, state, live_path, _library(), count)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    """An eight-GPU H100 node."""
    return render_node(tmp_path / "node")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(url: str, timeout: float = 10) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@dataclass
class Exporter:
    """A running exporter process."""

    proc: subprocess.Popen[str]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metrics(self) -> str:
        status, body = get(self.url + "/metrics")
        assert status == 200, body
        return body

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 30) -> str:
        """The first /metrics text for which *predicate* holds (fails after *timeout*)."""
        deadline = time.monotonic() + timeout
        body = ""
        while time.monotonic() < deadline:
            body = self.metrics()
            if predicate(body):
                return body
            time.sleep(0.05)
        pytest.fail(f"/metrics never matched; last:\n{body[:3000]}\nlog:\n{self.log.read_text()}")

    def logs(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


def start_exporter(
    node: Node, *args: str, env: dict[str, str] | None = None, wait: bool = True
) -> Exporter:
    port = free_port()
    log = node.root / f"exporter-{port}.log"
    handle = log.open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nvml_mock_exporter",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--collect-interval",
            "0.2",
            "--log-format",
            "json",
            *args,
        ],
        env=env or node.env(),
        stdout=handle,
        stderr=handle,
        text=True,
    )
    handle.close()
    exporter = Exporter(proc, port, log)
    if wait:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"the exporter exited {proc.returncode}:\n{log.read_text()}")
            try:
                status, _ = get(exporter.url + "/health", timeout=1)
            except OSError:
                status = 0
            if status == 200:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"the exporter never became healthy:\n{log.read_text()}")
    return exporter


@pytest.fixture
def exporters() -> Iterator[list[Exporter]]:
    started: list[Exporter] = []
    yield started
    for exporter in started:
        if exporter.proc.poll() is None:
            exporter.proc.terminate()
            try:
                exporter.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                exporter.proc.kill()
                exporter.proc.wait()


@pytest.fixture
def run_exporter(node: Node, exporters: list[Exporter]) -> Callable[..., Exporter]:
    def run(*args: str, on: Node | None = None, **kwargs: Any) -> Exporter:
        exporter = start_exporter(on or node, *args, **kwargs)
        exporters.append(exporter)
        return exporter

    return run


# --- parsing the exposition ------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Exposition:
    helps: dict[str, str] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)

    def of(self, name: str, **labels: str) -> list[Sample]:
        return [
            s
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def label_keys(self, name: str) -> list[list[str]]:
        return [list(s.labels) for s in self.of(name)]


def _labels(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 0
    while i < len(text):
        eq = text.index("=", i)
        key = text[i:eq]
        assert text[eq + 1] == '"', text
        j = eq + 2
        value = []
        while text[j] != '"':
            if text[j] == "\\":
                j += 1
                value.append({"n": "\n"}.get(text[j], text[j]))
            else:
                value.append(text[j])
            j += 1
        out[key] = "".join(value)
        i = j + 1
        if i < len(text):
            assert text[i] == ",", text
            i += 1
    return out


def parse(text: str) -> Exposition:
    """A strict parse of the text format (every line must be well formed)."""
    found = Exposition()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            found.helps[name] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            found.types[name] = kind
        elif line:
            head, _, value = line.rpartition(" ")
            name, _, rest = head.partition("{")
            assert rest.endswith("}"), line
            found.samples.append(Sample(name, _labels(rest[:-1]), float(value)))
    return found


# --- a real Prometheus -------------------------------------------------------------------


def prometheus_binary() -> str | None:
    return os.environ.get("PROMETHEUS") or shutil.which("prometheus")


needs_prometheus = pytest.mark.skipif(
    prometheus_binary() is None,
    reason="needs a Prometheus server: apt-get install prometheus (Debian), or PROMETHEUS=path",
)


@dataclass
class Prometheus:
    proc: subprocess.Popen[str]
    port: int
    log: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        status, body = get(url)
        assert status == 200, body
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def wait_for(
        self, expr: str, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 60
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if predicate(result):
                return result
            time.sleep(0.2)
        pytest.fail(f"{expr}: never matched; last {result}\n{self.log.read_text()[-3000:]}")


def start_prometheus(
    root: Path, targets: Sequence[str], *, rules: Path | None = None, interval: str = "1s"
) -> Prometheus:
    binary = prometheus_binary()
    assert binary is not None
    port = free_port()
    config = root / f"prometheus-{port}.yml"
    lines = [
        "global:",
        f"  scrape_interval: {interval}",
        f"  evaluation_interval: {interval}",
    ]
    if rules is not None:
        lines += ["rule_files:", f"  - {rules}"]
    lines += [
        "scrape_configs:",
        "  - job_name: gpu-metrics",
        "    static_configs:",
        f"      - targets: [{', '.join(repr(t) for t in targets)}]",
    ]
    config.write_text("\n".join(lines) + "\n")
    log = root / f"prometheus-{port}.log"
    handle = log.open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={root / f'tsdb-{port}'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=handle,
        stderr=handle,
        text=True,
    )
    handle.close()
    server = Prometheus(proc, port, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"prometheus exited {proc.returncode}:\n{log.read_text()}")
        try:
            status, _ = get(f"http://127.0.0.1:{port}/-/ready", timeout=1)
        except OSError:
            status = 0
        if status == 200:
            return server
        time.sleep(0.1)
    pytest.fail(f"prometheus never became ready:\n{log.read_text()}")


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[..., Prometheus]]:
    started: list[Prometheus] = []

    def start(targets: Sequence[str], **kwargs: Any) -> Prometheus:
        server = start_prometheus(tmp_path, targets, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.proc.terminate()
        try:
            server.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
