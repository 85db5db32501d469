"""The simulated cluster of the local demo: a topology service, and per node an NRI plugin
beside its own containerd stand-in.

Every part is the real one, started the way a deployment starts it: the topology service
and the plugins are separate processes run through their console entry points, each plugin
dials its own node's runtime socket, and the runtime side is the protocol package's
``RuntimeDouble`` (containerd's rules: registration, Configure, Synchronize, timeouts).
Only Kubernetes and containerd's container creation are simulated; see ``workload.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nvml_mock_protocol import names
from nvml_mock_protocol.nri import RuntimeDouble

RELEASE_NAMESPACE = "nvml-mock"
"""The namespace the mock would be installed in; the plugins exclude it."""


def free_port() -> int:
    """A loopback TCP port that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    """GET ``url``: ``(status, body)``; status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return int(reply.status), reply.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", "replace")
    except (OSError, urllib.error.URLError) as exc:
        return 0, str(getattr(exc, "reason", exc))


async def wait_until(what: str, probe: object, timeout: float) -> None:
    """Poll the zero-argument callable ``probe`` until it is truthy, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        if await asyncio.to_thread(probe):  # type: ignore[arg-type]
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


@dataclass
class Process:
    """A child process the demo owns; its output goes to a log file."""

    name: str
    proc: asyncio.subprocess.Process
    log: Path

    @classmethod
    async def start(
        cls, name: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None
    ) -> Process:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                start_new_session=True,
            )
        return cls(name, proc, log)

    @property
    def running(self) -> bool:
        return self.proc.returncode is None

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> int | None:
        """Send ``sig``; kill after ``timeout``. Returns the exit status."""
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        return self.proc.returncode

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class TopologyService:
    """The topology service on loopback, serving ``document``."""

    document: Path
    workdir: Path
    port: int = field(default_factory=free_port)
    process: Process | None = None
    extra: tuple[str, ...] = ()
    """More flags (the scenario file and the write token)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        argv = [
            sys.executable,
            "-m",
            "nvml_mock_topology",
            "--topology-file",
            str(self.document),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--poll-interval",
            "0.2",
            *self.extra,
        ]
        self.process = await Process.start(
            "topology-service", argv, self.workdir / "logs" / "topology-service.log"
        )
        await wait_until(
            "the topology service's /readyz", lambda: self._ready() or self._died(), 20
        )
        if self._died():
            raise RuntimeError(f"the topology service exited:\n{self.process.tail()}")

    def _ready(self) -> bool:
        return http_get(f"{self.url}/readyz", 0.5)[0] == 200

    def _died(self) -> bool:
        return self.process is not None and not self.process.running

    def revision(self) -> int:
        status, body = http_get(f"{self.url}{names.TOPOLOGY_DOCUMENT_PATH}")
        if status != 200:
            raise RuntimeError(f"GET /v1/topology answered {status}: {body}")
        return int(json.loads(body)["revision"])

    async def stop(self) -> None:
        if self.process is not None:
            await self.process.stop()


@dataclass
class Node:
    """One simulated node: its containerd stand-in and its NRI plugin process."""

    name: str
    workdir: Path
    overlay: Path
    topology_url: str
    socket_dir: Path | None = None
    """Where the runtime socket lives when ``workdir`` is too deep for AF_UNIX (108 bytes)."""
    device_namespaces: tuple[str, ...] = ()
    """Namespaces whose pods may opt in to device nodes and IMEX channels."""
    runtime: RuntimeDouble | None = None
    plugin: Process | None = None
    health_port: int = field(default_factory=free_port)

    @property
    def socket_path(self) -> Path:
        return (self.socket_dir or self.workdir) / "nri.sock"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.health_port}"

    async def start_runtime(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.runtime = RuntimeDouble(
            str(self.socket_path), request_timeout=2.0, label=f"containerd@{self.name}"
        )
        await self.runtime.start()

    async def start_plugin(self) -> None:
        assert self.runtime is not None
        argv = [
            sys.executable,
            "-m",
            "nvml_mock_nri",
            "--socket-path",
            str(self.socket_path),
            "--node-name",
            self.name,
            "--overlay-host-path",
            str(self.overlay),
            "--health-addr",
            f"127.0.0.1:{self.health_port}",
            "--release-namespace",
            RELEASE_NAMESPACE,
            "--device-host-path",
            str(self.overlay / names.OVERLAY_DEV_DIR),
            "--log-format",
            "json",
        ]
        if self.topology_url:
            argv += ["--topology-url", self.topology_url]
        if self.device_namespaces:
            argv += ["--device-namespaces", ",".join(self.device_namespaces)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NRI_", "NVML_MOCK_"))}
        env.pop(names.ENV_NODE_NAME, None)
        self.plugin = await Process.start(
            f"nri-plugin@{self.name}", argv, self.workdir / "nri-plugin.log", env
        )
        try:
            await self.runtime.wait_for_plugins(1, timeout=20)
        except TimeoutError:
            raise RuntimeError(
                f"the NRI plugin of {self.name} did not register:\n{self.plugin.tail()}"
            ) from None

    def readyz(self) -> tuple[int, str]:
        status, body = http_get(f"{self.health_url}/readyz", 1.0)
        return status, body.strip()

    def metric(self, series: str) -> float | None:
        """One unlabelled series from the plugin's ``/metrics``."""
        status, body = http_get(f"{self.health_url}/metrics", 1.0)
        if status != 200:
            return None
        for line in body.splitlines():
            if line.startswith(series + " "):
                return float(line.split()[1])
        return None

    async def stop(self) -> None:
        if self.plugin is not None:
            await self.plugin.stop()
        if self.runtime is not None:
            await self.runtime.close()
