"""The release: every package's wheel and sdist built by one command (``make dist``, i.e.
``scripts/build_dists.py``), installed into a fresh venv, and working there.

Needs PyPA ``build`` (the e2e env has it) and the package registry for the build and runtime
dependencies, as ``make test`` does anyway.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p.parent for p in (ROOT / "packages").glob("*/pyproject.toml"))
RELEASED = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.MULTILINE)


def _name(package: Path) -> str:
    name: str = tomllib.loads((package / "pyproject.toml").read_text())["project"]["name"]
    return name


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("build") is None:
        pytest.skip("PyPA build is not installed in this env (tox -e e2e has it)")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/build_dists.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_one_command_builds_a_wheel_and_an_sdist_of_every_package(dists: Path) -> None:
    for package in PACKAGES:
        stem = _name(package).replace("-", "_")
        assert list(dists.glob(f"{stem}-*.whl")), f"no wheel of {_name(package)}"
        assert list(dists.glob(f"{stem}-*.tar.gz")), f"no sdist of {_name(package)}"


def test_the_wheels_install_into_a_fresh_venv_and_work(dists: Path, tmp_path: Path) -> None:
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    wheels = sorted(str(p) for p in dists.glob("*.whl"))
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--find-links", str(dists), *wheels],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    state = tmp_path / "state.nvmlmock"
    bin_dir = env / "bin"
    argv = ["render", "--profile", "h100", "--count", "2", "-o", str(state)]
    render = subprocess.run(
        [str(bin_dir / "nvml-mock-engine"), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert render.returncode == 0, render.stderr
    # the live writer finds the engine's library through its entry point, in the installed
    # wheels, and writes a live layer the library reads back
    code = (
        "import sys, nvml_mock_live as live; from pathlib import Path; "
        "state = Path(sys.argv[1]); path = state.parent / live.LIVE_FILE_NAME; "
        "live.create(path, live.read_board(state)); "
        "layer = live.LiveLayer.open(path); layer.set(0, {'temperature_c': 77}); "
        "print(layer.values(0))"
    )
    written = subprocess.run(
        [str(python), "-c", code, str(state)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert written.returncode == 0, written.stderr
    assert "'temperature_c': 77" in written.stdout
    commands = ("nvml-mock-ctl", "nvml-mock-topology-service", "nvml-mock-nri-plugin")
    for command in (*commands, "nvml-mock-imex", "nvml-mock-imex-ctl"):
        version = subprocess.run(
            [str(bin_dir / command), "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert version.returncode == 0 and "usage:" in version.stdout, command
    # nvml-mock-node's commands under the engine's name, and the overlay they stage running
    # the tools of the other wheels (nvidia-smi from nvml-mock-smi) with no environment at all
    overlay = tmp_path / "overlay"
    argv = ["stage", str(overlay), "--profile", "h100", "--count", "2", "--no-devices"]
    staged = subprocess.run(
        [str(bin_dir / "nvml-mock-engine"), *argv],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert staged.returncode == 0, staged.stderr
    listed = subprocess.run(
        ["env", "-i", str(overlay / "bin" / "nvidia-smi"), "-L"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert listed.stdout.count("NVIDIA H100") == 2, listed.stdout


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_the_release_is_cut_from_the_changelog(package: Path) -> None:
    """The newest release section is dated and names the version the package carries, and
    its tag is ``<distribution>-vX.Y.Z`` (CONTRIBUTING.md, "Releasing"). A package not yet
    released on its own (moved out of another, or new) carries the version its first release
    takes, 0.1.0, and its changelog says where it came from or that it is new."""
    changelog = (package / "CHANGELOG.md").read_text(encoding="utf-8")
    released = RELEASED.findall(changelog)
    source = (package / "src").glob("*/_version.py")
    if not released:
        origin = "Moved from nvml-mock-" in changelog or "A new distribution" in changelog
        assert origin, f"{package.name}: no released section"
        assert '__version__ = "0.1.0"' in next(source).read_text(encoding="utf-8")
        return
    version, _date = released[0]
    assert f'__version__ = "{version}"' in next(source).read_text(encoding="utf-8")
