"""The node agent without a topology service: it keeps the surfaces true and nothing else.

Every staged node needs its MIG capability files to follow the live MIG layout, with or
without a topology service (a plain ``stage``, the local demo, a KWOK recording run). The agent
runs there without ``--topology-url``: a GPU instance made through NVML (nvidia-ml-py bound to
the built library, in this process) appears in ``proc/driver/nvidia/capabilities`` with no
other process told, the agent is ready on its probe, and no scenario is written.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from conftest import wait_for_line
from nvml_mock_engine.config import resolve_config
from nvml_mock_node.stage import StageOptions, stage


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _access(mig: Path) -> list[str]:
    return sorted(str(p.relative_to(mig)) for p in mig.rglob("access"))


def _until(mig: Path, wanted: list[str]) -> list[str]:
    found = _access(mig)
    for _ in range(200):
        if found == wanted:
            break
        time.sleep(0.05)
        found = _access(mig)
    return found


def test_without_a_topology_service_the_agent_keeps_the_mig_files_true(
    tmp_path: Path, library: Path, pynvml: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = tmp_path / "host-proc"
    proc.mkdir()
    (proc / "devices").write_text("Character devices:\n  1 mem\n\nBlock devices:\n")
    monkeypatch.setenv("NVML_MOCK_HOST_PROC_ROOT", str(proc))
    monkeypatch.setenv("NVML_MOCK_HOST_SYS_ROOT", str(tmp_path / "host-sys"))
    overlay = tmp_path / "o"
    config = resolve_config(profile="h100", count=2, node="node-1")
    stage(overlay, config, StageOptions(runtime=False, library=library, devices=False))
    live_file = overlay / "config" / live.LIVE_FILE_NAME
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(overlay / "config" / "state.nvmlmock"))
    mig = overlay / "proc" / "driver" / "nvidia" / "capabilities" / "gpu1" / "mig"

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("NVML_MOCK_TOPOLOGY_URL", "NODE_NAME")}
    argv = [sys.executable, "-m", "nvml_mock_engine", "--log-format", "json", "agent"]
    argv += ["--overlay-path", str(overlay), "--probe-addr", f"127.0.0.1:{port}"]
    log = tmp_path / "agent.log"
    with log.open("wb") as sink:
        agent = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)
        try:
            started = json.loads(wait_for_line(log, "keeping the surfaces", agent))
            assert started["live"] == str(live_file)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=30) as r:
                ready = json.load(r)
            assert ready["status"] == "ready" and ready["scenarios"] == "off"

            pynvml.nvmlInit()
            gpu = pynvml.nvmlDeviceGetHandleByIndex(1)
            pynvml.nvmlDeviceSetMigMode(gpu, pynvml.NVML_DEVICE_MIG_ENABLE)
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
                gpu, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE
            )
            gi = pynvml.nvmlDeviceCreateGpuInstance(gpu, info.id)
            gid = pynvml.nvmlGpuInstanceGetInfo(gi).id
            assert _until(mig, [f"gi{gid}/access"]) == [f"gi{gid}/access"]
            ci_info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 0)
            ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
            wanted = [f"gi{gid}/access", f"gi{gid}/ci0/access"]
            assert _until(mig, wanted) == wanted
            pynvml.nvmlComputeInstanceDestroy(ci)
            pynvml.nvmlGpuInstanceDestroy(gi)
            assert _until(mig, []) == []
            # no scenario was taken, so the agent recorded none
            assert not (live_file.resolve().parent / "scenarios.applied.json").exists()
        finally:
            agent.terminate()
            agent.wait(timeout=30)
    assert agent.returncode == 0
    assert "Traceback" not in log.read_text()


def test_with_a_topology_service_the_node_is_still_required(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "nvml_mock_engine", "agent", "--topology-url"]
    argv += ["http://127.0.0.1:9", "--overlay-path", str(tmp_path), "--probe-addr", ""]
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 3
    assert "node" in proc.stderr and "is required with a topology service" in proc.stderr
