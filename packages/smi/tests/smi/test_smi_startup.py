"""What the common ``nvidia-smi`` commands cost at start-up, held as behaviour rather than time.

Scripts call ``nvidia-smi -L`` and ``--query-gpu`` in loops, and the budget for each run is
a few milliseconds above the interpreter's own start (``bench/smi_bench.py`` measures it).
Timings are not asserted here; what makes them is: the standard-library modules a run
loads beyond the bare interpreter, and the NVML round trips the report makes per GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from nvml_mock_smi import _nvml
from smi_fixtures.helpers import render_profile, smi

HEAVY = frozenset(
    {
        "argparse",
        "collections",
        "contextlib",
        "dataclasses",
        "enum",
        "functools",
        "importlib.util",
        "re",
        "runpy",
        "typing",
    }
)
"""Modules that each cost a measurable share of a ``-L`` run, and that no common command
needs: the tool's code imports them only for type checkers or inside rare paths."""

COMMON = [
    ("-L",),
    (),
    ("-q",),
    ("-q", "-x"),
    ("--query-gpu=index,name,uuid,memory.used,power.draw,fabric.cliqueId", "--format=csv"),
]


@pytest.mark.parametrize("argv", COMMON, ids=lambda a: " ".join(a) or "(table)")
def test_common_commands_load_no_heavy_module(
    argv: tuple[str, ...], library_file: Path, tmp_path: Path
) -> None:
    state = render_profile("h100", 2, tmp_path / "h100.nvmlmock")
    # started as the overlay's launcher starts it: the __main__ module imported, not runpy
    script = (
        "import sys, json\n"
        "before = set(sys.modules)\n"
        "try:\n"
        "    import nvml_mock_smi.__main__\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "sys.stderr.write(json.dumps([code, sorted(set(sys.modules) - before)]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, *argv, "--nvml-lib", str(library_file)],
        env={**os.environ, "MOCK_NVML_CONFIG": str(state)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    code, loaded = json.loads(proc.stderr)
    assert code == 0, proc.stdout
    assert sorted(HEAVY & set(loaded)) == []


def test_the_report_reads_its_field_values_in_one_call_per_gpu(
    library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = render_profile("h100", 2, tmp_path / "h100.nvmlmock")
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    calls: list[int] = []
    original = _nvml.Nvml.call

    def record(self: _nvml.Nvml, name: str, *args: Any) -> None:
        if name == "nvmlDeviceGetFieldValues":
            calls.append(args[1].value)
        original(self, name, *args)

    monkeypatch.setattr(_nvml.Nvml, "call", record)
    rc, out = smi(library_file, "-q")
    assert rc == 0
    assert "Average Power Draw" in out
    assert len(calls) == 2
    assert calls[0] > 20


def test_a_failed_batch_falls_back_to_one_field_at_a_time(
    library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver that refuses the batch (here: any call with more than one field) still gets
    every field asked, and the report is the same."""
    state = render_profile("h100", 1, tmp_path / "h100.nvmlmock")
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    _, expected = smi(library_file, "-q")
    original = _nvml.Nvml.call

    def refuse_batches(self: _nvml.Nvml, name: str, *args: Any) -> None:
        if name == "nvmlDeviceGetFieldValues" and args[1].value > 1:
            raise _nvml.NvmlError(_nvml.ERROR_INVALID_ARGUMENT, "Invalid Argument")
        original(self, name, *args)

    monkeypatch.setattr(_nvml.Nvml, "call", refuse_batches)
    rc, out = smi(library_file, "-q")
    assert rc == 0

    def stable(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("Timestamp")]

    assert stable(out) == stable(expected)
