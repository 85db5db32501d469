"""Run the ``nvidia-smi`` work-alike in-process or as a subprocess against the mock library.

In-process runs keep the suite fast on small machines; a few tests use a real subprocess
(``python -m``) to cover start-up, argv handling and exit codes end to end.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from nvml_mock_smi import main

CAPTURES = Path(__file__).resolve().parent / "captures"
LIBRARY_ENV = "NVML_MOCK_SMI_LIB"
PROFILE_CAPTURES = {
    "a100": "qx-a100.xml",
    "b200": "qx-b200.xml",
    "gb200": "qx-gb200.xml",
    "gb300": "qx-gb300.xml",
    "h100": "qx-h100.xml",
    "l40s": "qx-l40s.xml",
    "t4": "qx-t4.xml",
}


def smi(library: Path, *args: str) -> tuple[int, str]:
    """Run ``main`` in this process; the state comes from ``MOCK_NVML_CONFIG``."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([*args, "--nvml-lib", str(library)])
    return rc, buf.getvalue()


def smi_process(
    library: Path, args: Sequence[str], env: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ)
    full.update(env)
    full["NVML_MOCK_SMI_LIB"] = str(library)
    return subprocess.run(
        [sys.executable, "-m", "nvml_mock_smi", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def render_profile(profile: str, count: int, out: Path, *, driver: str | None = None) -> Path:
    """Render a node's state with the engine's own CLI (the documented contract); ``driver``
    overrides the profile's driver version."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nvml_mock_engine",
            "render",
            "--profile",
            profile,
            "--count",
            str(count),
            "-o",
            str(out),
            *(("--driver-version", driver) if driver else ()),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"render {profile} failed: {proc.stderr}")
    return out


def read_state(path: Path) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Parse a rendered state (format 1) into the system keys and one dict per GPU."""
    system: dict[str, str] = {}
    gpus: list[dict[str, str]] = []
    current = system
    for raw in path.read_text().splitlines()[1:]:
        if not raw or raw.startswith("#"):
            continue
        if raw == "[system]":
            current = system
        elif raw.startswith("[gpu "):
            gpus.append({})
            current = gpus[-1]
        else:
            key, _, value = raw.partition("=")
            current[key] = value
    return system, gpus
