"""``make test``'s per-env test counts, read from JUnit reports that real pytest runs wrote."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SUMMARY = REPO_ROOT / "scripts" / "test_summary.py"

SAMPLE = """
import pytest

def test_one(): pass
def test_two(): pass
@pytest.mark.skip(reason="clang is not installed")
def test_tsan(): pass
@pytest.mark.skip(reason="clang is not installed")
def test_asan(): pass
def test_broken(): assert 1 == 2
"""


def _pytest_report(tmp_path: Path, env: str, source: str) -> Path:
    """Run real pytest on ``source`` the way a tox env does, into ``<tox>/<env>/tmp``."""
    suite = tmp_path / f"suite_{env.replace('-', '_')}"
    suite.mkdir()
    (suite / "test_sample.py").write_text(source)
    report = tmp_path / "tox" / env / "tmp" / "junit.xml"
    report.parent.mkdir(parents=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(suite),
            f"--junitxml={report}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert report.is_file()
    return report


def _summary(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SUMMARY), "--tox-dir", str(tmp_path / "tox"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_counts_and_skip_reasons_per_env(tmp_path: Path) -> None:
    _pytest_report(tmp_path, "nvml-engine", SAMPLE)
    _pytest_report(tmp_path, "protocol", "def test_ok(): pass\n")
    done = _summary(tmp_path)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:5] for line in done.stdout.splitlines()[2:5]}
    assert rows == {
        "nvml-engine": ["2", "2", "1", "0"],
        "protocol": ["1", "0", "0", "0"],
        "total": ["3", "2", "1", "0"],
    }
    assert "  skipped in nvml-engine (2): clang is not installed" in done.stdout.splitlines()
    assert done.stdout.splitlines()[1].split() == [
        "env",
        "passed",
        "skipped",
        "failed",
        "errors",
        "time",
    ]


def test_reports_from_before_the_run_are_left_out(tmp_path: Path) -> None:
    old = _pytest_report(tmp_path, "deploy", "def test_ok(): pass\n")
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    done = _summary(tmp_path, "--since", str(time.time() - 60))
    assert done.returncode == 0
    assert done.stdout == ("test counts: no pytest report from this run (did any test env run?)\n")


def test_an_unreadable_report_is_named_and_never_fails_the_run(tmp_path: Path) -> None:
    _pytest_report(tmp_path, "protocol", "def test_ok(): pass\n")
    broken = tmp_path / "tox" / "e2e" / "tmp" / "junit.xml"
    broken.parent.mkdir(parents=True)
    broken.write_text("<testsuites><testsuite")
    done = _summary(tmp_path)
    assert done.returncode == 0
    assert "  no readable report: e2e (ParseError: " in done.stdout
    assert "  protocol " in done.stdout


def test_make_test_prints_the_counts_after_tox() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest: $(TOX)\n", 1)[1].split("\n\n", 1)[0]
    assert "run-parallel" in recipe and "scripts/test_summary.py --since" in recipe
    assert recipe.rstrip().endswith("exit $$status"), "the exit status stays tox's"
    tox_ini = (REPO_ROOT / "tox.ini").read_text()
    pytest_lines = [line for line in tox_ini.splitlines() if line.startswith("commands = pytest")]
    assert len(pytest_lines) >= 7
    for line in pytest_lines:
        assert "--junitxml={env_tmp_dir}/junit.xml" in line, line
