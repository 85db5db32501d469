"""The probes tell the truth about a plugin process whose event loop stopped, and about
probe clients that hang up early; a real plugin process against the runtime double."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import Callable
from pathlib import Path

from conftest import PluginProcess, container, eventually, pod
from nvml_mock_protocol.nri.runtime import RuntimeDouble

MakePlugin = Callable[..., PluginProcess]


def _all_json(lines: list[str]) -> None:
    for line in lines:
        assert isinstance(json.loads(line), dict), line


async def test_a_stopped_event_loop_fails_healthz_readyz_and_the_registered_metric(
    short_tmp: Path, plugin_process: MakePlugin
) -> None:
    double = RuntimeDouble(short_tmp / "loop.sock", request_timeout=1.0)
    async with double:
        plugin = plugin_process(double.socket_path, "--wedge-threshold", "0.6")
        await plugin.start()
        await double.wait_for_plugins(1, timeout=20)
        await eventually(lambda: plugin.answers("/readyz", 200))
        assert await plugin.metric("nvml_mock_nri_registered") == 1

        plugin.stop_loop()
        await eventually(lambda: plugin.answers("/healthz", 503))
        healthz = (await plugin.get("/healthz")).text
        assert healthz.startswith("wedged: the event loop has not run for "), healthz
        assert "past the 0.6s threshold (--wedge-threshold)" in healthz
        readyz = await plugin.get("/readyz")
        assert readyz.status_code == 503 and readyz.text.startswith("wedged: the event loop")
        assert await plugin.metric("nvml_mock_nri_registered") == 0
        assert await plugin.metric("nvml_mock_nri_event_loop_lag_seconds") > 0.6

        # Container calls are answered on the connection's own thread: the runtime is
        # still served while the loop is stopped (what the probe names is the loop's work).
        result = await double.create_container(pod(), container())
        assert result.dropped == ()
        assert len(result.adjustment.mounts) == 1

        await plugin.release_loop()
        await eventually(lambda: plugin.answers("/healthz", 200))
        await double.close()
        assert await plugin.wait() == 1, "the runtime went away: exit 1 to be restarted"
    _all_json(plugin.lines())


def _hang_up_early(port: int, path: str) -> None:
    # A probe that gives up: the request goes out, then the socket is reset (SO_LINGER 0)
    # before the answer arrives, as kubelet does after its probe timeout.
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: probe\r\n\r\n".encode())


async def test_probe_clients_that_hang_up_early_cost_no_traceback(
    short_tmp: Path, plugin_process: MakePlugin
) -> None:
    double = RuntimeDouble(short_tmp / "hup.sock")
    async with double:
        plugin = plugin_process(double.socket_path, "--log-level", "debug")
        await plugin.start()
        await double.wait_for_plugins(1, timeout=20)
        await eventually(lambda: plugin.answers("/readyz", 200))
        for round_ in range(30):
            await asyncio.to_thread(
                _hang_up_early, plugin.port, ("/metrics", "/healthz")[round_ % 2]
            )
        assert await plugin.answers("/healthz", 200), "the health server keeps serving"
        await eventually(
            lambda: any("hung up before" in line for line in plugin.lines()), timeout=5
        )
        plugin.process.terminate()  # type: ignore[union-attr]
        assert await plugin.wait() == 0
    lines = plugin.lines()
    _all_json(lines)
    assert not any("Traceback" in line or "BrokenPipeError" in line for line in lines)
    hangups = [json.loads(line) for line in lines if "hung up before" in line]
    assert all(entry["level"] == "debug" for entry in hangups), hangups
