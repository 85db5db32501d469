"""Facts the C driver takes from declarations, never written twice: the attributes NVML does
not carry (declared once per profile, every engine profile under its own PCI device id) and
the live file's process record layout (nvml_mock_live's); the headers generated from both are
current."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from nvml_mock_engine.profiles import load_profile, profile_names

PACKAGE = Path(__file__).resolve().parents[2]
DECLARATION = PACKAGE / "src" / "nvml_mock_cuda" / "device_attributes.toml"


def test_every_profile_is_declared_under_its_pci_device_id() -> None:
    declared = tomllib.loads(DECLARATION.read_text())["profiles"]
    assert set(declared) == set(profile_names())
    for name, spec in declared.items():
        board = load_profile(name).gpu
        assert spec["pci_device_id"] == board["pci_device_id"], name


@pytest.mark.parametrize("script", ["gen_attributes.py", "gen_live.py"])
def test_the_generated_headers_are_current(script: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(PACKAGE / "scripts" / script), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_drift_check_bites(tmp_path: Path) -> None:
    header = PACKAGE / "native" / "driver" / "attributes_gen.h"
    original = header.read_text()
    try:
        header.write_text(original.replace("1024LL", "512LL", 1))
        proc = subprocess.run(
            [sys.executable, str(PACKAGE / "scripts" / "gen_attributes.py"), "--check"],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        header.write_text(original)
    assert proc.returncode == 1
    assert "stale" in proc.stderr
