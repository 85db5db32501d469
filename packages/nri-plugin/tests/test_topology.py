"""Fabric identity from a real topology service: known, absent, down, back, changed."""

from __future__ import annotations

import asyncio

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
