"""Fixtures for the runtime work-alike: the libraries built from this checkout, and a C client.

The client (rtclient.c) is compiled against NVIDIA's published runtime headers and linked
against NVIDIA's own libcudart of the same major, with an RPATH to NVIDIA's directory: the
way PyTorch's libraries find their runtime. The tests run it with the work-alike in
``LD_PRELOAD``, as the NRI plugin starts an annotated container, so every test also proves
that the preloaded library wins over NVIDIA's and serves its versioned symbols.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_support import MAJORS, NATIVE, RUNTIME_DIST, distribution_file, nvidia_runtime

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def cuda_runtime(cuda_driver: Path) -> Path:
    """The directory of libcudart.so.13 and libcudart.so.12, (re)built from native/runtime."""
    proc = subprocess.run(
        ["make", "-s", "-C", str(NATIVE), "runtime", f"PYTHON={sys.executable}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"building the runtime failed:\n{proc.stdout}\n{proc.stderr}"
    directory = cuda_driver.parent / "cuda-runtime"
    for major in MAJORS:
        assert (directory / f"libcudart.so.{major}").is_file()
    return directory


@pytest.fixture(scope="session")
def rt_client(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """rtclient compiled per major against NVIDIA's headers and linked to NVIDIA's runtime."""
    out = tmp_path_factory.mktemp("rtclient")
    crt = distribution_file("nvidia-cuda-crt", "include/crt/host_defines.h").parents[1]
    clients = {}
    for major in MAJORS:
        include = distribution_file(RUNTIME_DIST[major], "include/cuda_runtime_api.h").parent
        lib = nvidia_runtime(major).parent
        binary = out / f"rtclient{major}"
        proc = subprocess.run(
            [
                "cc", "-std=c11", "-O1", "-Wall", "-Werror", f"-I{include}", f"-I{crt}",
                str(HERE / "rtclient.c"), "-o", str(binary),
                f"-L{lib}", f"-l:libcudart.so.{major}",
                "-Wl,--disable-new-dtags", f"-Wl,-rpath,{lib}", "-ldl", "-pthread",
            ],
            capture_output=True,
            text=True,
            check=False,
        )  # fmt: skip
        assert proc.returncode == 0, f"compiling rtclient ({major}) failed:\n{proc.stderr}"
        clients[major] = binary
    return clients


RunClient = Callable[..., Any]


@pytest.fixture
def run_client(rt_client: dict[int, Path], cuda_runtime: Path) -> RunClient:
    """``run_client(node, 13, "identity", CUDA_VISIBLE_DEVICES="1")``: the client's JSON.

    The work-alike of that major is preloaded unless ``preload=False``."""

    def run(node: Any, major: int, *args: str, preload: bool = True, **env: str) -> Any:
        if preload:
            env["LD_PRELOAD"] = str(cuda_runtime / f"libcudart.so.{major}")
        proc = subprocess.run(
            [str(rt_client[major]), *args],
            env=node.env(**env),
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert proc.returncode == 0, f"rtclient {args}: exit {proc.returncode}\n{proc.stderr}"
        lines = proc.stdout.strip().splitlines()
        assert lines, f"rtclient {args} printed nothing:\n{proc.stderr}"
        return json.loads(lines[-1])

    return run
