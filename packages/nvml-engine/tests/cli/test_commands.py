"""Commands other packages register under ``nvml-mock-engine``: found through the entry-point
group, and a package that registers a broken one costs only its own command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nvml_mock_engine.commands import ENTRY_POINT_GROUP


def _fake_distribution(site: Path, entry_points: str) -> None:
    """An installed distribution with only metadata and entry points, as pip leaves one."""
    info = site / "nvml_mock_probe-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvml-mock-probe\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry_points}")


def _engine(site: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), *sys.path]))
    return subprocess.run(
        [sys.executable, "-m", "nvml_mock_engine", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_a_registered_command_runs_under_the_engines_name(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "nvml_mock_probe").mkdir(parents=True)
    (site / "nvml_mock_probe" / "__init__.py").write_text(
        "from nvml_mock_engine.commands import Command\n"
        "from nvml_mock_engine.settings import CommandSettings\n"
        "def _run(settings):\n"
        "    print('probe ran at', settings.log_level)\n"
        "    return 5\n"
        "PROBE = Command('probe', 'a probe', CommandSettings(), (), _run)\n"
    )
    _fake_distribution(site, "probe = nvml_mock_probe:PROBE\n")
    done = _engine(site, "probe", "--log-level", "debug")
    assert done.returncode == 5, done.stderr
    assert done.stdout == "probe ran at debug\n"
    assert "probe" in _engine(site, "--help").stdout


def test_a_broken_registration_is_named_and_the_engine_goes_on(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "nvml_mock_probe.py").write_text("NOT_A_COMMAND = 42\n")
    _fake_distribution(
        site, "gone = nvml_mock_no_such_module:X\nodd = nvml_mock_probe:NOT_A_COMMAND\n"
    )
    done = _engine(site, "profiles")
    assert done.returncode == 0, done.stderr
    assert "h100" in done.stdout
    assert "cannot load command 'gone' (nvml_mock_no_such_module:X)" in done.stderr
    assert "nvml_mock_probe:NOT_A_COMMAND is not a Command named 'odd'" in done.stderr
    refused = _engine(site, "gone")
    assert refused.returncode == 2
    assert "invalid choice: 'gone'" in refused.stderr


def test_a_registration_cannot_take_an_engine_command(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "nvml_mock_probe").mkdir(parents=True)
    (site / "nvml_mock_probe" / "__init__.py").write_text(
        "raise RuntimeError('an engine command is never replaced, so this never loads')\n"
    )
    _fake_distribution(site, "render = nvml_mock_probe:RENDER\n")
    done = _engine(site, "profiles")
    assert done.returncode == 0
    assert done.stderr == ""
