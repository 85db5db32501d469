"""What the runtime tests share besides fixtures: where NVIDIA's wheels put their files."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parents[2] / "native"
MAJORS = (13, 12)
RUNTIME_DIST = {13: "nvidia-cuda-runtime", 12: "nvidia-cuda-runtime-cu12"}


def distribution_file(dist: str, suffix: str) -> Path:
    """The installed file of *dist* whose path ends with *suffix*; fails naming the wheel."""
    for f in importlib.metadata.files(dist) or []:
        if str(f).endswith(suffix):
            return Path(str(f.locate())).resolve()
    pytest.fail(f"{dist} has no {suffix}: install the cuda package's [test] extra")


def nvidia_runtime(major: int) -> Path:
    """NVIDIA's own libcudart.so.<major>, from its wheel."""
    return distribution_file(RUNTIME_DIST[major], f"lib/libcudart.so.{major}")
