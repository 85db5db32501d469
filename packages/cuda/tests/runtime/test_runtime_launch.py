"""No pretend compute: kernels register, and every launch fails with a sentence that names the
mock and the kernel; capture and graphs are refused; unimplemented calls say so by name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

KERNEL_PROGRAM = r"""
#include <cstdio>
#include <cuda_runtime.h>

__global__ void add_one(float *x) { x[threadIdx.x] += 1.0f; }

int main() {
    float *d = nullptr;
    cudaError_t alloc = cudaMalloc(&d, 256 * sizeof(float));
    add_one<<<1, 256>>>(d);
    cudaError_t launch = cudaGetLastError();
    std::printf("{\"alloc\": %d, \"launch\": %d, \"string\": \"%s\"}\n", (int)alloc, (int)launch,
                cudaGetErrorString(launch));
    return 0;
}
"""


@pytest.mark.parametrize("major", [13, 12])
def test_launches_fail_naming_the_kernel(node: Any, run_client: Any, major: int) -> None:
    got = run_client(node, major, "launch")
    assert got.get("failed") is None, got
    for key in ("launch", "launch_ex", "launch_handle"):
        assert got[key]["name"] == "cudaErrorNotSupported", key
        assert "nvml-mock's CUDA runtime runs no GPU code" in got[key]["string"], key
        assert "kernel _Z6addonePf" in got[key]["string"], key
    assert got["last"]["code"] == 801 and got["last_cleared"]["code"] == 0
    assert got["pushed"] == 0 and got["popped"] == 0
    assert (got["popped_grid"], got["popped_block"]) == (4, 128)
    assert got["unregistered"]["name"] == "cudaErrorInvalidDeviceFunction"
    assert got["empty_grid"]["name"] == "cudaErrorInvalidConfiguration"
    assert got["get_kernel"]["code"] == 0
    assert got["func_name"]["code"] == 0 and got["name"] == "_Z6addonePf"
    assert got["func_attributes"]["name"] == "cudaErrorNotSupported"
    assert "_Z6addonePf" in got["func_attributes"]["string"]
    assert got["symbol_size"]["code"] == 0 and got["var_size"] == 64
    assert got["to_symbol"]["name"] == "cudaErrorNotSupported"
    assert "device variable table" in got["to_symbol"]["string"]
    assert got["not_a_symbol"]["name"] == "cudaErrorInvalidSymbol"
    assert got["capture"]["name"] == "cudaErrorNotSupported"
    assert "stream capture" in got["capture"]["string"]
    assert got["is_capturing"]["code"] == 0 and got["capture_status"] == 0
    assert got["graph"]["name"] == "cudaErrorNotSupported"
    assert "cudaGraphCreate is not implemented" in got["graph"]["string"]
    assert got["after_unregister"]["name"] == "cudaErrorInvalidDeviceFunction"


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found is None and Path("/usr/local/cuda/bin/nvcc").is_file():
        found = "/usr/local/cuda/bin/nvcc"
    return found


def test_an_nvcc_built_kernel_fails_to_launch(
    node: Any, cuda_runtime: Path, tmp_path: Path
) -> None:
    """A real program from nvcc (fat binary, generated registration and launch stubs)."""
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc is not installed here: the C client covers registration and launch")
    source = tmp_path / "add_one.cu"
    source.write_text(KERNEL_PROGRAM)
    binary = tmp_path / "add_one"
    built = subprocess.run(
        [nvcc, "-cudart", "shared", "-arch=sm_90", str(source), "-o", str(binary)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": f"{Path(nvcc).parent}:{os.environ.get('PATH', '')}"},
    )
    if built.returncode != 0:
        pytest.skip(f"nvcc cannot build here: {built.stderr.strip()[-300:]}")
    major = (
        13
        if "release 13"
        in subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
        else 12
    )
    proc = subprocess.run(
        [str(binary)],
        env=node.env(LD_PRELOAD=str(cuda_runtime / f"libcudart.so.{major}")),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["alloc"] == 0
    assert got["launch"] == 801
    assert "runs no GPU code" in got["string"] and "add_one" in got["string"]
