"""A staged overlay carries the runtime work-alikes where the NRI plugin preloads them from
(``lib/cuda-runtime/libcudart.so.13`` then ``.so.12``), and with that preload alone, no library
path, a program linked against NVIDIA's runtime of either major sees the node's GPUs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from nvml_mock_cuda.library import RUNTIME_NAMES, driver_path, runtime_paths
from nvml_mock_engine.config import resolve_config
from nvml_mock_node.stage import StageOptions, stage
from nvml_mock_protocol import names


@pytest.fixture
def overlay(tmp_path: Path, cuda_runtime: Path) -> Path:
    root = tmp_path / "overlay"
    stage(root, resolve_config(profile="h100", count=4, node="n"), StageOptions(runtime=False))
    return root


def test_the_package_lays_the_runtimes_out_as_the_plugin_preloads_them() -> None:
    """The package's ``_lib/`` is the overlay's ``lib/``: each built work-alike, relative to
    the driver's directory, is one of the protocol's preload paths, in the same order."""
    lib = driver_path().parent
    laid_out = [f"{names.OVERLAY_LIB_DIR}/{p.relative_to(lib)}" for p in runtime_paths()]
    assert laid_out == list(names.CUDA_RUNTIME_PRELOADS)
    assert [p.rsplit("/", 1)[1] for p in names.CUDA_RUNTIME_PRELOADS] == list(RUNTIME_NAMES)


def test_the_overlay_holds_both_runtimes(overlay: Path, cuda_runtime: Path) -> None:
    staged = {str(p.relative_to(overlay)) for p in (overlay / "lib" / "cuda-runtime").iterdir()}
    assert staged == set(names.CUDA_RUNTIME_PRELOADS)
    for rel in names.CUDA_RUNTIME_PRELOADS:
        name = rel.rsplit("/", 1)[1]
        assert (overlay / rel).read_bytes() == (cuda_runtime / name).read_bytes()
        assert os.access(overlay / rel, os.X_OK)


@pytest.mark.parametrize("major", [13, 12])
def test_the_plugins_preload_alone_serves_a_program(
    overlay: Path, rt_client: dict[int, Path], tmp_path: Path, major: int
) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MOCK_", "NVML_MOCK_", "CUDA_", "LD_"))
        and k != "NVIDIA_VISIBLE_DEVICES"
    }
    env["LD_PRELOAD"] = ":".join(str(overlay / rel) for rel in names.CUDA_RUNTIME_PRELOADS)
    env["NVML_MOCK_LOCK_DIR"] = str(tmp_path / "locks")
    proc = subprocess.run(
        [str(rt_client[major]), "identity"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got.get("failed") is None, got
    assert got["library"].endswith(f"lib/cuda-runtime/libcudart.so.{major}")
    assert got["count"] == 4
    assert {d["name"] for d in got["devices"]} == {"NVIDIA H100 80GB HBM3"}
