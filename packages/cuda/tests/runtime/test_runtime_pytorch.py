"""The documented PyTorch check (checks/pytorch_check.py), run for real when a PyTorch is at
hand: in this interpreter, or the one NVML_MOCK_TORCH_PYTHON names."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = Path(__file__).resolve().parents[2] / "checks" / "pytorch_check.py"


def torch_python() -> str | None:
    named = os.environ.get("NVML_MOCK_TORCH_PYTHON")
    if named:
        return named
    return sys.executable if importlib.util.find_spec("torch") is not None else None


def test_pytorch_sees_the_mock_gpus(cuda_runtime: Path, nvml_library: Path) -> None:
    python = torch_python()
    if python is None:
        pytest.skip(
            "PyTorch is not installed in this interpreter: pip install torch==2.14.1, or set "
            "NVML_MOCK_TORCH_PYTHON to a Python that has it"
        )
    proc = subprocess.run(
        [sys.executable, str(CHECK), "--torch-python", python, "--count", "4"],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 failed" in proc.stdout
    assert proc.stdout.count("PASS") == 13
