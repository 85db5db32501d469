"""The work-alike exports what NVIDIA's runtime of the same major exports, under the same
version node: a program linked against NVIDIA's libcudart (PyTorch) binds versioned names
like ``cudaMalloc@libcudart.so.13``, and a preloaded library without one would fail to load
it. The few names left out are listed here with the reason."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from runtime_support import nvidia_runtime

# Graphics interop needs GL/EGL/VDPAU headers and a display; a mock GPU has neither.
GRAPHICS = ("cudaGL", "cudaEGL", "cudaVDPAU", "cudaGraphicsGL", "cudaGraphicsEGL",
            "cudaGraphicsVDPAU", "cudaGraphicsResourceGetMappedEglFrame",
            "cudaEventCreateFromEGLSync")  # fmt: skip
# Entry points that no header of NVIDIA's declares (compiler internals, and the cudaSubgrid
# calls 13.5 exports without a prototype): there is no published signature to implement.
UNPUBLISHED = ("__cudaRegisterHostVar", "__cudaRegisterUnifiedTable", "__cudaGetProcAddress",
               "cudaSubgrid")  # fmt: skip


def exports(library: Path) -> set[str]:
    """``name@version`` for each defined dynamic symbol."""
    out = subprocess.run(
        ["readelf", "--dyn-syms", "-W", str(library)], capture_output=True, text=True, check=True
    ).stdout
    names = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[6] != "UND" and "@" in fields[7]:
            name, _, version = fields[7].partition("@")
            names.add(f"{name}@{version.lstrip('@')}")
    return names


@pytest.mark.parametrize("major", [13, 12])
def test_exports_cover_nvidias_runtime(cuda_runtime: Path, major: int) -> None:
    ours = exports(cuda_runtime / f"libcudart.so.{major}")
    theirs = exports(nvidia_runtime(major))
    assert theirs, "NVIDIA's runtime exports nothing readable"
    missing = {
        s for s in theirs - ours
        if not s.split("@")[0].startswith(GRAPHICS + UNPUBLISHED)
    }  # fmt: skip
    assert not missing, sorted(missing)
    assert {s.split("@")[1] for s in ours} == {f"libcudart.so.{major}"}
