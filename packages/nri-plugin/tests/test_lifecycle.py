"""Registration, readiness, the runtime going away, signals, wedges and runtime config."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import FakeHost, RunningPlugin, Start, container, eventually, pod
from nvml_mock_nri.devices import DeviceScan
from nvml_mock_nri.health import HealthServer, PluginState
from nvml_mock_nri.metrics import Metrics
from nvml_mock_nri.service import PluginService
from nvml_mock_nri.settings import load_settings
from nvml_mock_protocol.nri import NRI_API_VERSION
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.runtime import RuntimeDouble

OPT_IN = {"nvml-mock.nvidia.com/devices": "true"}


async def test_ready_once_registered_and_synchronized(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    plugin: RunningPlugin = await start_plugin()
    await eventually(lambda: plugin.service.state.synchronized)
    ready = await plugin.get("/readyz")
    assert (ready.status_code, ready.text) == (200, "ok\n")
    assert (await plugin.get("/healthz")).status_code == 200
    assert await plugin.metric("nvml_mock_nri_registered") == 1
    assert await plugin.metric("nvml_mock_nri_synchronized") == 1
    assert (await plugin.get("/nope")).status_code == 404
    handle = runtime.plugins[0]
    assert handle.events == 0x668, "CreateContainer, Start, PostStart, Stop, RemoveContainer"
    assert handle.nri_version == NRI_API_VERSION, "containerd 2.3 logs it instead of 'unknown'"


async def test_runtime_going_away_exits_1_with_a_clear_line(
    runtime: RuntimeDouble, start_plugin: Start, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = await start_plugin()
    caplog.set_level(logging.INFO)
    await runtime.close()
    assert await plugin.exit_code() == 1
    assert not plugin.service.state.registered
    assert any(
        "lost the connection to the container runtime" in r.getMessage()
        and r.levelno == logging.ERROR
        for r in caplog.records
    )


async def test_stop_closes_the_connection_and_exits_0(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    plugin = await start_plugin()
    plugin.service.stop()
    assert await plugin.exit_code() == 0
    await eventually(lambda: not runtime.plugins)
    assert runtime.dropped == []


async def test_no_runtime_socket_exits_1(short_tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = load_settings(
        ["--socket-path", str(short_tmp / "absent.sock"), "--health-addr", ""], {}
    )
    assert await PluginService(settings, environ={}).run() == 1
    assert any("cannot connect to the NRI socket" in r.getMessage() for r in caplog.records)


async def test_health_port_in_use_exits_3(short_tmp: Path) -> None:
    state, metrics = PluginState(), Metrics()
    holder = HealthServer("127.0.0.1", 0, state, metrics)
    try:
        port = holder.address[1]
        settings = load_settings(
            ["--socket-path", str(short_tmp / "x.sock"), "--health-addr", f"127.0.0.1:{port}"],
            {},
        )
        assert await PluginService(settings, environ={}).run() == 3
    finally:
        holder.close()


async def test_runtime_sent_config_is_applied(short_tmp: Path) -> None:
    double = RuntimeDouble(
        short_tmp / "cfg.sock",
        plugin_config={"nvml-mock": "excludedNamespaces: [batch]\nreleaseNamespace: gpu\n"},
    )
    async with double:
        settings = load_settings(
            ["--socket-path", str(double.socket_path), "--health-addr", ""], {}
        )
        service = PluginService(settings, environ={})
        task = asyncio.create_task(service.run())
        await double.wait_for_plugins(1)
        for namespace in ("batch", "gpu"):
            result = await double.create_container(pod(namespace=namespace), container())
            assert result.adjustment == api.ContainerAdjustment()
        result = await double.create_container(pod(namespace="default"), container())
        assert len(result.adjustment.mounts) == 1
        service.stop()
        assert await task == 0


async def test_bad_runtime_config_refuses_configure_and_exits_3(
    short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    double = RuntimeDouble(
        short_tmp / "bad.sock", plugin_config={"nvml-mock": "deviceInjectionMode: oci\n"}
    )
    async with double:
        settings = load_settings(
            ["--socket-path", str(double.socket_path), "--health-addr", ""], {}
        )
        code = await asyncio.wait_for(PluginService(settings, environ={}).run(), 5)
    assert code == 3
    assert any("config.deviceInjectionMode='oci'" in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]


async def test_wedged_handler_trips_healthz_and_clears_when_it_finishes(
    short_tmp: Path, fake_host: FakeHost
) -> None:
    # The device look-up hangs and blocks the plugin's event loop (as a hung file
    # system would). Configure told the plugin the runtime's deadline is 0.2 s, so it
    # is wedged after 0.4 s; the probes answer from their own thread all the while.
    # The double's deadline is raised after Configure so that, once the look-up
    # returns, the call completes instead of racing the double's timeout.
    release = threading.Event()
    seen: dict[str, tuple[int, str]] = {}

    def probe(url: str) -> None:
        try:
            with httpx.Client(base_url=url, trust_env=False, timeout=5) as client:
                seen["early"] = _answer(client.get("/healthz"))
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    reply = client.get("/healthz")
                    if reply.status_code == 503:
                        seen["healthz"] = _answer(reply)
                        seen["readyz"] = _answer(client.get("/readyz"))
                        break
                    time.sleep(0.02)
        finally:
            release.set()

    def hanging_scan(path: str) -> DeviceScan:
        threading.Thread(target=probe, args=(url,), daemon=True).start()
        release.wait(15)
        return DeviceScan()

    double = RuntimeDouble(short_tmp / "w.sock", request_timeout=0.2)
    async with double:
        settings = load_settings(
            [
                "--socket-path",
                str(double.socket_path),
                "--health-addr",
                "127.0.0.1:0",
                "--device-namespaces",
                "default",
                *fake_host.flags,
            ],
            {},
        )
        service = PluginService(settings, environ={}, scan=hanging_scan)
        task = asyncio.create_task(service.run())
        await double.wait_for_plugins(1)
        double.request_timeout = 30.0
        assert service.health is not None
        url = "http://{}:{}".format(*service.health.address)
        result = await double.create_container(pod(annotations=OPT_IN), container())
        assert len(result.adjustment.mounts) == 1, "the call completes once the look-up returns"
        assert seen["early"][0] == 200
        status, body = seen["healthz"]
        assert status == 503
        assert body.startswith("wedged: a container request has been in flight for")
        assert "past the 0.4s threshold" in body
        assert seen["readyz"][0] == 503 and seen["readyz"][1].startswith("wedged")
        async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/readyz")).status_code == 200
        service.stop()
        assert await task == 0


def _answer(reply: httpx.Response) -> tuple[int, str]:
    return reply.status_code, reply.text


async def test_probe_table_without_a_runtime() -> None:
    state, metrics = PluginState(), Metrics()
    server = HealthServer("127.0.0.1", 0, state, metrics)
    server.start()
    url = "http://{}:{}".format(*server.address)
    try:
        async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 503
            assert ready.text == (
                "not registered with the container runtime; new containers are not being injected\n"
            )
            assert ready.headers["content-type"] == "text/plain; charset=utf-8"
            assert (await client.get("/healthz")).status_code == 200, "unregistered is alive"
            state.registered = True
            assert (await client.get("/readyz")).text.startswith("registered but")
            state.synchronized = True
            assert (await client.get("/readyz")).status_code == 200
            metrics_reply = await client.get("/metrics")
            assert "nvml_mock_nri_create_container_seconds_bucket" in metrics_reply.text
    finally:
        server.close()


def test_wedge_threshold_follows_the_runtime_timeout() -> None:
    now = [100.0]
    state = PluginState(clock=lambda: now[0])
    assert state.wedge_threshold == 4.0, "2 x NRI's default 2 s before Configure"
    state.request_timeout = 0.5
    first = state.begin()
    now[0] += 0.6
    second = state.begin()
    assert state.wedged() is None
    now[0] += 0.5
    verdict = state.wedged()
    assert verdict is not None and "1.1s" in verdict.reason, "the oldest call decides"
    assert verdict.reason == (
        "wedged: a container request has been in flight for 1.1s, past the 1.0s threshold "
        "(2 x the runtime's request timeout)"
    ), "the README's wording"
    state.end(first)
    assert state.wedged() is None
    state.end(second)
    assert state.oldest_age() is None


def test_health_listens_on_ipv6() -> None:
    try:
        server = HealthServer("::1", 0, PluginState(), Metrics())
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    server.start()
    try:
        reply = httpx.get(f"http://[::1]:{server.address[1]}/healthz", trust_env=False)
        assert reply.status_code == 200
    finally:
        server.close()


async def test_sigterm_while_the_runtime_has_not_answered_registration_exits_0(
    short_tmp: Path,
) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    server = await asyncio.start_unix_server(silent, str(short_tmp / "silent.sock"))
    async with server:
        settings = load_settings(
            ["--socket-path", str(short_tmp / "silent.sock"), "--health-addr", ""], {}
        )
        service = PluginService(settings, environ={})
        task = asyncio.create_task(service.run())
        await asyncio.sleep(0.2)
        assert not task.done(), "still waiting for the registration reply"
        service.stop()
        assert await asyncio.wait_for(task, 2) == 0


async def test_runtime_launched_plugin_uses_the_inherited_socket_and_index(
    short_tmp: Path,
) -> None:
    double = RuntimeDouble(short_tmp / "unused.sock")
    plugin_end, runtime_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    await double.attach(runtime_end)
    try:
        settings = load_settings(["--socket-path", "/nonexistent.sock", "--health-addr", ""], {})
        environ = {"NRI_PLUGIN_SOCKET": str(plugin_end.detach()), "NRI_PLUGIN_IDX": "42"}
        service = PluginService(settings, environ=environ)
        task = asyncio.create_task(service.run())
        (handle,) = await double.wait_for_plugins(1)
        assert handle.id == "42-nvml-mock"
        result = await double.create_container(pod(), container())
        assert len(result.adjustment.mounts) == 1
        service.stop()
        assert await task == 0
    finally:
        await double.close()


def test_a_silent_event_loop_is_a_wedge_past_the_threshold() -> None:
    now = [10.0]
    state = PluginState(clock=lambda: now[0])
    now[0] += 100
    assert state.wedged() is None, "no heartbeat started yet: nothing to judge"
    state.beat()
    now[0] += 3.9
    assert state.wedged() is None
    now[0] += 0.2
    verdict = state.wedged()
    assert verdict is not None and verdict.reason == (
        "wedged: the event loop has not run for 4.1s, past the 4.0s threshold (2 x the "
        "runtime's request timeout); the node identity is no longer kept current and a "
        "lost runtime connection does not end the plugin"
    )
    state.wedge_override = 5.0
    assert state.wedged() is None, "--wedge-threshold replaces 2 x the request timeout"
    assert state.heartbeat_interval == 0.25
    state.wedge_override = 0.2
    assert state.heartbeat_interval == 0.05, "a short threshold gets a faster heartbeat"


@pytest.mark.parametrize(
    ("send_timeouts", "expected", "source"),
    [
        (False, 3.0, "not sent by the runtime (NRI before v0.7); --runtime-request-timeout"),
        (True, 0.7, "sent by the runtime"),
    ],
)
async def test_request_timeout_from_the_runtime_else_from_the_flag(
    short_tmp: Path,
    caplog: pytest.LogCaptureFixture,
    send_timeouts: bool,
    expected: float,
    source: str,
) -> None:
    # containerd 1.7.0 to 1.7.25 (NRI v0.3 to v0.6) sends no timeouts in Configure.
    caplog.set_level(logging.INFO)
    double = RuntimeDouble(
        short_tmp / "old.sock",
        request_timeout=0.7,
        send_timeouts=send_timeouts,
        runtime_name="containerd",
        runtime_version="v1.7.25",
    )
    async with double:
        settings = load_settings(
            [
                "--socket-path",
                str(double.socket_path),
                "--health-addr",
                "",
                "--runtime-request-timeout",
                "3",
            ],
            {},
        )
        service = PluginService(settings, environ={})
        task = asyncio.create_task(service.run())
        await double.wait_for_plugins(1)
        assert service.state.request_timeout == expected
        assert service.state.wedge_threshold == 2 * expected
        service.stop()
        assert await task == 0
    messages = [r.getMessage() for r in caplog.records]
    line = (
        f"configured by containerd v1.7.25: request timeout {expected:.3f}s ({source}), "
        f"wedged after {2 * expected:.3f}s, events 0x668"
    )
    assert line in messages, messages
    assert not any("Nones" in m for m in messages), messages
    stub_says = "no request timeout sent (NRI before v0.7)" if not send_timeouts else "0.7s"
    assert any("configured by containerd" in m and stub_says in m for m in messages)
