"""FUNCTIONS.md, the index of which C unit answers which NVML function, matches the build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nvml_mock_engine.library import library_path

NATIVE = Path(__file__).resolve().parents[1] / "native"


def test_the_function_index_matches_the_built_units() -> None:
    library_path()  # built by the session's library fixture users, or the install
    done = subprocess.run(
        ["make", "-s", "-C", str(NATIVE), "index-check"],
        env=dict(os.environ, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_modelled_function_is_listed_with_its_unit() -> None:
    rows = [
        line
        for line in (NATIVE / "FUNCTIONS.md").read_text().splitlines()
        if line.startswith("| `nvml")
    ]
    names = [row.split("`")[1] for row in rows]
    assert len(names) == len(set(names))
    assert {"nvmlInit_v2", "nvmlDeviceGetMemoryInfo_v2", "nvmlEventSetWait_v2"} <= set(names)
    for row in rows:
        unit = row.rsplit("`", 2)[-2]
        assert (NATIVE / "src" / unit).is_file(), row
