"""Fabric identity from a real topology service: known, absent, down, back, changed."""

from __future__ import annotations

import asyncio
import logging

import pytest
from conftest import (
    RunningPlugin,
    Start,
    TopologyService,
    container,
    eventually,
    free_port,
    pod,
    topology_text,
)
from nvml_mock_protocol.nri.runtime import RuntimeDouble

UUID_A = "8a0f7c2e-1b3d-4e5f-8a9b-0c1d2e3f4a5b"
UUID_B = "11111111-2222-4333-8444-555555555555"
FAST_RETRY = ("--topology-backoff-max", "0.2", "--topology-timeout", "2")


async def fabric_env(runtime: RuntimeDouble) -> dict[str, str]:
    result = await runtime.create_container(pod(), container())
    return {k: v for k, v in result.env().items() if k.startswith("MOCK_FABRIC_")}


async def ready(plugin: RunningPlugin) -> bool:
    return (await plugin.get("/readyz")).status_code == 200


async def test_identity_is_injected_once_known(
    runtime: RuntimeDouble, start_plugin: Start, topology: TopologyService
) -> None:
    topology.start()
    plugin = await start_plugin("--topology-url", topology.url, *FAST_RETRY)
    await eventually(lambda: ready(plugin))
    assert await fabric_env(runtime) == {
        "MOCK_FABRIC_CLUSTER_UUID": UUID_A,
        "MOCK_FABRIC_CLIQUE_ID": "3",
        "MOCK_FABRIC_DOMAIN": "dom-a",
    }
    assert plugin.service.identity is not None
    revision = plugin.service.identity.snapshot.revision
    assert revision is not None and revision > 0
    assert await plugin.metric("nvml_mock_nri_identity_revision") == revision
    assert await plugin.metric("nvml_mock_nri_fabric_member") == 1


async def test_node_in_no_clique_is_an_answer(
    runtime: RuntimeDouble, start_plugin: Start, topology: TopologyService
) -> None:
    topology.write(topology_text().replace("[node-a, node-b]", "[node-b]"))
    topology.start()
    plugin = await start_plugin("--topology-url", topology.url, *FAST_RETRY)
    await eventually(lambda: ready(plugin))
    assert await fabric_env(runtime) == {}
    result = await runtime.create_container(pod(), container())
    assert result.env()["NODE_NAME"] == "node-a"
    assert await plugin.metric("nvml_mock_nri_identity_known") == 1
    assert await plugin.metric("nvml_mock_nri_fabric_member") == 0
    assert await plugin.metric("nvml_mock_nri_topology_errors_total", 'kind="http_status"') == 0


async def test_down_at_start_then_back(
    runtime: RuntimeDouble, start_plugin: Start, topology: TopologyService
) -> None:
    plugin = await start_plugin("--topology-url", topology.url, *FAST_RETRY)

    async def failed_twice() -> bool:
        return await plugin.metric("nvml_mock_nri_topology_errors_total", 'kind="connect"') >= 2

    await eventually(failed_twice)
    reply = await plugin.get("/readyz")
    assert reply.status_code == 503
    assert reply.text.startswith("node identity not known yet: no answer from the topology")
    assert topology.url in reply.text
    assert await fabric_env(runtime) == {}, "injected, without fabric identity"
    result = await runtime.create_container(pod(), container())
    assert result.env()["MOCK_NVML_CONFIG"].endswith("state.nvmlmock")

    topology.start()
    await eventually(lambda: ready(plugin), timeout=15)
    assert (await fabric_env(runtime))["MOCK_FABRIC_CLIQUE_ID"] == "3"


async def test_down_mid_run_keeps_the_last_identity_and_follows_changes_when_back(
    runtime: RuntimeDouble, start_plugin: Start, topology: TopologyService
) -> None:
    topology.start()
    plugin = await start_plugin("--topology-url", topology.url, *FAST_RETRY)
    await eventually(lambda: ready(plugin))
    first = await fabric_env(runtime)
    assert first["MOCK_FABRIC_CLUSTER_UUID"] == UUID_A

    topology.stop()

    async def degraded() -> bool:
        reply = await plugin.get("/readyz")
        return reply.status_code == 200 and "degraded" in reply.text

    await eventually(degraded, timeout=15)
    assert await fabric_env(runtime) == first, "the last known identity is still injected"

    topology.write(topology_text(domain="dom-b", uuid=UUID_B, clique=9))
    topology.start()

    async def moved() -> bool:
        return (await fabric_env(runtime)).get("MOCK_FABRIC_DOMAIN") == "dom-b"

    await eventually(moved, timeout=15)
    assert await fabric_env(runtime) == {
        "MOCK_FABRIC_CLUSTER_UUID": UUID_B,
        "MOCK_FABRIC_CLIQUE_ID": "9",
        "MOCK_FABRIC_DOMAIN": "dom-b",
    }
    assert (await plugin.get("/readyz")).text == "ok\n"


async def test_a_rebind_reaches_the_plugin_through_the_watch(
    runtime: RuntimeDouble, start_plugin: Start, topology: TopologyService
) -> None:
    topology.start()
    plugin = await start_plugin("--topology-url", topology.url, "--topology-watch-seconds", "30")
    await eventually(lambda: ready(plugin))
    errors_before = await plugin.metric("nvml_mock_nri_topology_errors_total", 'kind="timeout"')
    topology.write(topology_text(clique=5))

    async def rebound() -> bool:
        return (await fabric_env(runtime)).get("MOCK_FABRIC_CLIQUE_ID") == "5"

    await eventually(rebound, timeout=10)
    assert (
        await plugin.metric("nvml_mock_nri_topology_errors_total", 'kind="timeout"')
        == errors_before
    )


async def test_topology_url_without_a_listener_never_blocks_injection(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    await start_plugin("--topology-url", f"http://127.0.0.1:{free_port()}", *FAST_RETRY)
    result = await runtime.create_container(pod(), container())
    assert len(result.adjustment.mounts) == 1


async def test_a_topology_service_that_never_answers_times_out_and_is_reported(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        plugin = await start_plugin(
            "--topology-url",
            f"http://127.0.0.1:{port}",
            "--topology-timeout",
            "0.2",
            "--topology-backoff-max",
            "0.2",
        )

        async def timed_out() -> bool:
            return await plugin.metric("nvml_mock_nri_topology_errors_total", 'kind="timeout"') >= 1

        await eventually(timed_out)
        reply = await plugin.get("/readyz")
        assert reply.status_code == 503
        assert "timed out" in reply.text
        result = await runtime.create_container(pod(), container())
        assert len(result.adjustment.mounts) == 1
        assert "MOCK_FABRIC_DOMAIN" not in result.env()


class GatedProxy:
    """A TCP proxy in front of the real topology service that holds every connection
    until ``gate`` is set: the service answers only when the test says so."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.gate = asyncio.Event()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[object]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> GatedProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self.gate.wait()
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            await asyncio.gather(
                self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
            )
        finally:
            writer.close()
            self._tasks.discard(task)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()


async def test_containers_created_at_start_wait_for_the_first_identity(
    runtime: RuntimeDouble, start_plugin: Start, topology: TopologyService
) -> None:
    topology.start()
    runtime.request_timeout = 30.0  # room for a long hold (a quarter of it: 7.5 s)
    async with GatedProxy(topology.port) as proxy:
        plugin = await start_plugin("--topology-url", proxy.url, "--identity-hold", "6")
        creating = asyncio.create_task(runtime.create_container(pod(), container()))
        await eventually(lambda: plugin.service.state.in_flight() == 1)
        assert not creating.done(), "held for the identity the service is about to send"
        readyz = (await plugin.get("/readyz")).text
        assert "CreateContainer is held up to 6.00s after start for it" in readyz, readyz
        proxy.gate.set()
        result = await creating
        assert result.env()["MOCK_FABRIC_CLUSTER_UUID"] == UUID_A
        assert result.env()["MOCK_FABRIC_CLIQUE_ID"] == "3"
        await eventually(lambda: ready(plugin))


async def test_the_hold_is_bounded_then_containers_go_without_identity(
    runtime: RuntimeDouble,
    start_plugin: Start,
    topology: TopologyService,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topology.start()
    runtime.request_timeout = 1.2
    caplog.set_level(logging.INFO)
    async with GatedProxy(topology.port) as proxy:
        plugin = await start_plugin("--topology-url", proxy.url, "--identity-hold", "5")
        messages = [r.getMessage() for r in caplog.records]
        assert (
            "--identity-hold 5.00s is more than 0.25 of the runtime's request timeout (1.20s); "
            "holding CreateContainer for the node identity at most 0.30s"
        ) in messages
        first = await runtime.create_container(pod(), container())
        assert first.consulted == ("10-nvml-mock",), "answered within the runtime's deadline"
        assert len(first.adjustment.mounts) == 1, "injected, without the identity"
        assert not any(k.startswith("MOCK_FABRIC_") for k in first.env())
        messages = [r.getMessage() for r in caplog.records]
        assert (
            "no node identity from the topology service within the 0.30s start-up hold; "
            "injecting containers without fabric identity until it answers"
        ) in messages
        held = [m for m in messages if m.startswith("held ")]
        assert len(held) == 1 and held[0].endswith("none yet: injecting without fabric identity")
        readyz = await plugin.get("/readyz")
        assert readyz.status_code == 503
        assert "the 0.30s start-up hold expired; containers are injected without" in readyz.text
        second = await runtime.create_container(pod(), container())
        assert len(second.adjustment.mounts) == 1
        assert len([r for r in caplog.records if r.getMessage().startswith("held ")]) == 1, (
            "once the window is over, containers are not held"
        )
        proxy.gate.set()
        await eventually(lambda: ready(plugin))
        assert (await fabric_env(runtime))["MOCK_FABRIC_CLUSTER_UUID"] == UUID_A
