"""Fixtures: the runtime test double on a real unix socket, the plugin in-process or
as its own process, and a real topology service in a subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from nvml_mock_nri.devices import DeviceScan, cdi_spec_exists, scan_device_nodes
from nvml_mock_nri.service import PluginService
from nvml_mock_nri.settings import load_settings
from nvml_mock_protocol import names
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.events import Event
from nvml_mock_protocol.nri.runtime import RuntimeDouble

ENV_PREFIXES = ("NRI_", "NVML_MOCK_", "NODE_NAME")


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No setting leaks in from the developer's shell."""
    for key in list(os.environ):
        if key.startswith(ENV_PREFIXES):
            monkeypatch.delenv(key)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp dir with a short path (unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


NO_DRIVER_DEVICES = "Character devices:\n  1 mem\n  5 /dev/tty\n\nBlock devices:\n  7 loop\n"
"""A ``/proc/devices`` with no NVIDIA driver registered."""


@dataclass
class FakeHost:
    """A host ``/proc`` and ``/sys`` for real-driver detection, without a driver at first."""

    proc: Path
    sys: Path

    @property
    def flags(self) -> list[str]:
        return ["--host-proc-root", str(self.proc), "--host-sys-root", str(self.sys)]

    def load_driver(self) -> None:
        """What a loaded NVIDIA kernel module shows."""
        version = self.proc / "driver" / "nvidia" / "version"
        version.parent.mkdir(parents=True, exist_ok=True)
        version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n")
        (self.sys / "module" / "nvidia").mkdir(exist_ok=True)
        (self.proc / "devices").write_text(NO_DRIVER_DEVICES.replace("\n\n", "\n195 nvidia\n\n"))


@pytest.fixture
def fake_host(short_tmp: Path) -> FakeHost:
    """Device tests must not depend on whether this machine has a real GPU driver."""
    host = FakeHost(short_tmp / "host" / "proc", short_tmp / "host" / "sys")
    (host.sys / "module").mkdir(parents=True)
    host.proc.mkdir(parents=True)
    (host.proc / "devices").write_text(NO_DRIVER_DEVICES)
    return host


@pytest.fixture
async def runtime(short_tmp: Path, request: pytest.FixtureRequest) -> AsyncIterator[RuntimeDouble]:
    """A runtime test double listening on a real unix socket; parametrized indirectly with
    False, one that plays an NRI before v0.12 (notifications on StateChange only)."""
    rpcs = bool(getattr(request, "param", True))
    double = RuntimeDouble(short_tmp / "nri.sock", request_timeout=2.0, notification_rpcs=rpcs)
    async with double:
        yield double


def pod(
    name: str = "app",
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
) -> api.PodSandbox:
    return api.PodSandbox(
        id=f"pod-{namespace}-{name}",
        name=name,
        uid=f"uid-{name}",
        namespace=namespace,
        annotations=annotations or {},
    )


def container(
    name: str = "main",
    env: list[str] | None = None,
    mounts: list[str] | None = None,
    devices: list[str] | None = None,
    cdi: list[str] | None = None,
) -> api.Container:
    created = api.Container(
        id=f"ctr-{name}-{time.perf_counter_ns()}",
        pod_sandbox_id="pod",
        name=name,
        env=env if env is not None else ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root"],
        mounts=[api.Mount(destination=d, source="/x", type="bind") for d in mounts or []],
        CDI_devices=[api.CDIDevice(name=n) for n in cdi or []],
    )
    for path in devices or []:
        created.linux.devices.add(path=path, type="c", major=195, minor=0)
    return created


def allocated(
    name: str, sandbox: api.PodSandbox, *, gpus: str | None = None, cdi: list[str] | None = None
) -> api.Container:
    """A container of *sandbox* that a device plugin gave *gpus* (env) or *cdi* names."""
    env = ["PATH=/usr/bin:/bin"]
    if gpus is not None:
        env.append(f"NVIDIA_VISIBLE_DEVICES={gpus}")
    made = container(name, env=env, cdi=cdi)
    made.pod_sandbox_id = sandbox.id
    return made


async def run_container(
    runtime: RuntimeDouble, sandbox: api.PodSandbox, made: api.Container, pid: int
) -> str:
    """Create and start *made* as process *pid*; its container id."""
    result = await runtime.create_container(sandbox, made)
    await runtime.start_container(sandbox, result.container.id, pid)
    await settled(runtime, sandbox)
    return result.container.id


async def settled(runtime: RuntimeDouble, sandbox: api.PodSandbox) -> None:
    """Wait until the plugin has done what its last replies left for after them (it keeps
    the allocation records once a life-cycle event is answered): one more round trip, which
    it reads only then, as it would a runtime's next request. A RemoveContainer of a
    container that never existed changes nothing."""
    await runtime.state_change(Event.REMOVE_CONTAINER, sandbox, api.Container(id="settle"))


def read_through_library(overlay: Path, script: str) -> dict[str, object]:
    """Run *script* (given the overlay's library path as argv[1]) in a child process against
    the staged state, as a node-level monitor reads it; its JSON output."""
    library = overlay / names.OVERLAY_LIB_DIR / names.LIBRARY_NAME
    state = overlay / names.OVERLAY_CONFIG_DIR / names.STATE_FILE_NAME
    done = subprocess.run(
        [sys.executable, "-c", script, str(library)],
        check=True,
        capture_output=True,
        text=True,
        env={names.ENV_MOCK_NVML_CONFIG: str(state), "PATH": "/usr/bin:/bin"},
    )
    view: dict[str, object] = json.loads(done.stdout)
    return view


@dataclass
class RunningPlugin:
    """A plugin service running in this event loop against the test double."""

    service: PluginService
    task: asyncio.Task[int]
    runtime: RuntimeDouble

    @property
    def health_url(self) -> str:
        assert self.service.health is not None
        host, port = self.service.health.address
        return f"http://{host}:{port}"

    async def get(self, path: str) -> httpx.Response:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await client.get(self.health_url + path, timeout=5)

    async def metric(self, name: str, labels: str = "") -> float:
        text = (await self.get("/metrics")).text
        key = f"{name}{{{labels}}}" if labels else name
        for line in text.splitlines():
            if line.startswith(key + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"metric {key} not found")

    async def exit_code(self, timeout: float = 5.0) -> int:
        async with asyncio.timeout(timeout):
            return await self.task


Start = Callable[..., Awaitable[RunningPlugin]]
"""The ``start_plugin`` fixture: flags as arguments, the running plugin when awaited."""


@pytest.fixture
async def start_plugin(runtime: RuntimeDouble, fake_host: FakeHost) -> AsyncIterator[Start]:
    """Start a plugin (flags as arguments) and wait until the double synchronized it.

    Pods in ``default`` may opt in to devices and the host has no real driver, unless
    the test's own flags (which come last and win) say otherwise.
    """
    running: list[RunningPlugin] = []

    async def start(
        *argv: str,
        wait: bool = True,
        scan: Callable[[str], DeviceScan] = scan_device_nodes,
        spec_exists: Callable[[str], bool] = cdi_spec_exists,
    ) -> RunningPlugin:
        settings = load_settings(
            [
                "--socket-path",
                str(runtime.socket_path),
                "--health-addr",
                "127.0.0.1:0",
                "--node-name",
                "node-a",
                "--device-namespaces",
                "default",
                *fake_host.flags,
                *argv,
            ],
            {},
        )
        service = PluginService(settings, environ={}, scan=scan, cdi_spec_exists=spec_exists)
        task = asyncio.create_task(service.run())
        plugin = RunningPlugin(service, task, runtime)
        running.append(plugin)
        if wait:
            await runtime.wait_for_plugins(len(runtime.plugins) + 1)
        return plugin

    yield start
    for plugin in running:
        plugin.service.stop()
        with contextlib.suppress(Exception):
            await plugin.exit_code()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


TOPOLOGY = """\
version: 1
domains:
  - name: {domain}
    uuid: {uuid}
    cliques:
      - id: {clique}
        nodes: [node-a, node-b]
"""


def topology_text(domain: str = "dom-a", uuid: str = "", clique: int = 3) -> str:
    uuid = uuid or "8a0f7c2e-1b3d-4e5f-8a9b-0c1d2e3f4a5b"
    return TOPOLOGY.format(domain=domain, uuid=uuid, clique=clique)


class TopologyService:
    """The real topology service, as a subprocess on a fixed port."""

    def __init__(self, directory: Path) -> None:
        self.file = directory / "topology.yaml"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / "topology.log"

    def write(self, text: str) -> None:
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.file)

    def start(self) -> None:
        assert self.process is None
        command = [
            sys.executable,
            "-m",
            "nvml_mock_topology",
            "--topology-file",
            str(self.file),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-watch-seconds",
            "5",
        ]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"topology service exited: {self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"topology service did not become ready: {self.log.read_text()}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


@pytest.fixture
def topology(short_tmp: Path) -> Iterator[TopologyService]:
    """A topology service (not started; call ``start()``), stopped at the end."""
    service = TopologyService(short_tmp)
    service.write(topology_text())
    try:
        yield service
    finally:
        service.stop()


async def eventually(
    check: Callable[[], object], timeout: float = 10.0, interval: float = 0.02
) -> None:
    """Wait until ``check()`` (sync or async) is truthy."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)


STOPPABLE_PLUGIN = """
import signal, sys, threading
from nvml_mock_nri.cli import main

release = threading.Event()

def stop_the_loop(signum, frame):
    # Python runs signal handlers on the main thread, between two steps of the event
    # loop: while this waits, the loop is really stopped (the health thread is not).
    release.wait()

def release_on_stdin():
    sys.stdin.readline()
    release.set()

signal.signal(signal.SIGUSR1, stop_the_loop)
threading.Thread(target=release_on_stdin, daemon=True).start()
sys.exit(main(sys.argv[1:]))
"""
"""The real plugin entry point, plus a way to stop its event loop from outside:
SIGUSR1 blocks the main thread, a line on stdin lets it go on."""


class PluginProcess:
    """The plugin as its own process (``nvml_mock_nri.cli.main``), logging JSON to a file."""

    def __init__(self, directory: Path, socket_path: Path, *argv: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = directory / f"plugin-{self.port}.log"
        self.argv = [
            "--socket-path",
            str(socket_path),
            "--health-addr",
            f"127.0.0.1:{self.port}",
            "--node-name",
            "node-a",
            "--log-format",
            "json",
            *argv,
        ]
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                STOPPABLE_PLUGIN,
                *self.argv,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=log,
            )

    def stop_loop(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGUSR1)

    async def release_loop(self) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(b"go\n")
        await self.process.stdin.drain()

    async def get(self, path: str) -> httpx.Response:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await client.get(self.url + path, timeout=5)

    async def answers(self, path: str, status: int) -> bool:
        try:
            return (await self.get(path)).status_code == status
        except httpx.HTTPError:
            return False

    async def metric(self, name: str) -> float:
        for line in (await self.get("/metrics")).text.splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"metric {name} not found")

    async def wait(self, timeout: float = 10.0) -> int:
        assert self.process is not None
        async with asyncio.timeout(timeout):
            return await self.process.wait()

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


@pytest.fixture
async def plugin_process(short_tmp: Path) -> AsyncIterator[Callable[..., PluginProcess]]:
    """Make plugin processes (``make(socket_path, *flags)``); all are killed at the end."""
    made: list[PluginProcess] = []

    def make(socket_path: Path, *argv: str) -> PluginProcess:
        made.append(PluginProcess(short_tmp, socket_path, *argv))
        return made[-1]

    yield make
    for plugin in made:
        await plugin.kill()
