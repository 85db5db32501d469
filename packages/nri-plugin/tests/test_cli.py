"""The command as a process: exit codes, signals, JSON log lines."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

from conftest import container, pod
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.runtime import RuntimeDouble

COMMAND = [sys.executable, "-m", "nvml_mock_nri"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], capture_output=True, text=True, timeout=30, env=env, check=False
    )


def test_help_exits_0() -> None:
    done = run("--help")
    assert done.returncode == 0
    assert "--device-injection-mode" in done.stdout
    assert "(env NVML_MOCK_DEVICE_INJECTION_MODE; default raw)" in " ".join(done.stdout.split())


def test_bad_value_exits_3_naming_key_and_value() -> None:
    done = run("--plugin-index", "100")
    assert done.returncode == 3
    assert "--plugin-index='100'" in done.stderr
    assert "two digits" in done.stderr


def test_bad_env_value_exits_3_naming_the_variable() -> None:
    done = run(env={"NVML_MOCK_DEVICE_INJECTION_MODE": "oci", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 3
    assert "NVML_MOCK_DEVICE_INJECTION_MODE='oci'" in done.stderr


def test_unknown_flag_exits_2() -> None:
    assert run("--bogus").returncode == 2


async def _start(socket_path: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *COMMAND,
        "--socket-path",
        str(socket_path),
        "--health-addr",
        "127.0.0.1:0",
        "--node-name",
        "node-7",
        "--log-format",
        "json",
        stderr=asyncio.subprocess.PIPE,
    )


async def _stopped(pid: int) -> None:
    """Until every thread of *pid* is stopped: SIGSTOP takes effect asynchronously, and a
    thread woken by a request in that moment could still answer it."""
    tasks = Path(f"/proc/{pid}/task")
    for _ in range(2000):
        states = [
            (task / "stat").read_text().rsplit(")", 1)[1].split()[0] for task in tasks.iterdir()
        ]
        if all(state in ("T", "t") for state in states):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"process {pid} did not stop: {states}")


def _json_lines(stderr: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in stderr.decode().splitlines() if line.strip()]


async def test_sigterm_exits_0_and_json_lines_carry_the_container(
    runtime: RuntimeDouble,
) -> None:
    process = await _start(runtime.socket_path)
    try:
        await runtime.wait_for_plugins(1, timeout=20)
        await runtime.create_container(pod(name="web", namespace="kube-system"), container("nginx"))
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 20)
    finally:
        if process.returncode is None:
            process.kill()
    assert process.returncode == 0
    lines = _json_lines(stderr)
    skip = [line for line in lines if line.get("reason") == "excluded_namespace"]
    assert len(skip) == 1
    assert {k: skip[0][k] for k in ("node", "namespace", "pod", "container", "level")} == {
        "node": "node-7",
        "namespace": "kube-system",
        "pod": "web",
        "container": "nginx",
        "level": "info",
    }
    messages = [str(line["msg"]) for line in lines]
    assert any(m.startswith("nvml-mock-nri: registering plugin 10/nvml-mock on ") for m in messages)
    assert messages[-1] == "exiting with code 0"


async def test_runtime_going_away_exits_1_at_once(runtime: RuntimeDouble) -> None:
    process = await _start(runtime.socket_path)
    try:
        await runtime.wait_for_plugins(1, timeout=20)
        await runtime.close()
        _, stderr = await asyncio.wait_for(process.communicate(), 20)
    finally:
        if process.returncode is None:
            process.kill()
    assert process.returncode == 1
    errors = [line for line in _json_lines(stderr) if line["level"] == "error"]
    assert len(errors) == 1
    assert "lost the connection to the container runtime" in str(errors[0]["msg"])


async def test_a_stalled_plugin_is_dropped_by_the_runtime_and_exits_1(short_tmp: Path) -> None:
    double = RuntimeDouble(short_tmp / "s.sock", request_timeout=0.3)
    async with double:
        process = await _start(double.socket_path)
        try:
            await double.wait_for_plugins(1, timeout=20)
            process.send_signal(signal.SIGSTOP)
            await _stopped(process.pid)
            result = await double.create_container(pod(), container())
            assert result.dropped == ("10-nvml-mock",)
            assert result.adjustment == api.ContainerAdjustment(), "the runtime fails open"
            process.send_signal(signal.SIGCONT)
            _, stderr = await asyncio.wait_for(process.communicate(), 20)
        finally:
            if process.returncode is None:
                process.kill()
    assert process.returncode == 1
    assert any(
        "lost the connection to the container runtime" in str(line["msg"])
        for line in _json_lines(stderr)
    )
