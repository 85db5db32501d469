"""A staged node carries the driver: the overlay's lib/ holds libcuda.so.1 beside the mock NVML
library, which it loads from its own directory, so a client given only that directory finds
the node's GPUs; and nvidia-smi's "CUDA Version" is the version the driver reports."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from driver_clients import CUDA_IDENTITY
from nvml_mock_cuda.library import driver_path
from nvml_mock_engine.config import resolve_config
from nvml_mock_node.stage import StageOptions, stage


def _env(lib: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MOCK_", "NVML_MOCK_", "CUDA_")) and k != "NVIDIA_VISIBLE_DEVICES"
    }
    env.update(LD_LIBRARY_PATH=str(lib), **extra)
    return env


def test_a_staged_overlay_serves_cuda_and_smi_agrees(tmp_path: Path, cuda_driver: Any) -> None:
    overlay = tmp_path / "overlay"
    stage(overlay, resolve_config(profile="a100", count=4, node="n"), StageOptions(runtime=False))
    lib = overlay / "lib"
    # the package's build is what stages (the fixture built it, or names a sanitizer build)
    assert (lib / "libcuda.so.1").read_bytes() == driver_path().read_bytes()
    env = _env(lib, NVML_MOCK_LOCK_DIR=str(tmp_path / "locks"))
    proc = subprocess.run(
        [sys.executable, "-c", CUDA_IDENTITY],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    identity = json.loads(proc.stdout)
    assert [d["name"] for d in identity["devices"]] == ["NVIDIA A100-SXM4-40GB"] * 4
    smi = subprocess.run(
        [sys.executable, "-m", "nvml_mock_smi"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert smi.returncode == 0, smi.stderr
    shown = re.search(r"CUDA Version: (\d+)\.(\d+)", smi.stdout)
    assert shown is not None, smi.stdout
    version = identity["version"]
    assert (int(shown.group(1)), int(shown.group(2))) == (version // 1000, version % 1000 // 10)


def test_mig_devices_are_cuda_devices(tmp_path: Path, cuda_driver: Any) -> None:
    from driver_clients import NVML_IDENTITY
    from nvml_mock_engine.mig_layout import parse_spec

    config = resolve_config(profile="h100", count=2, node="n")
    plan = parse_spec("all-balanced", config.profile.mig, config.count)
    overlay = tmp_path / "overlay"
    stage(overlay, config, StageOptions(runtime=False, mig=plan))
    env = _env(overlay / "lib", NVML_MOCK_LOCK_DIR=str(tmp_path / "locks"))

    def run(code: str, **extra: str) -> Any:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    cuda, nvml = run(CUDA_IDENTITY), run(NVML_IDENTITY)
    assert len(cuda["devices"]) == len(nvml["devices"]) == 8  # 4 MIG devices on each GPU
    for got, want in zip(cuda["devices"], nvml["devices"], strict=True):
        assert {k: got[k] for k in want} == want
    assert "MIG" in cuda["devices"][0]["name"]
    one = run(CUDA_IDENTITY, CUDA_VISIBLE_DEVICES="MIG-" + nvml["devices"][5]["uuid"])
    assert [d["uuid"] for d in one["devices"]] == [nvml["devices"][5]["uuid"]]
