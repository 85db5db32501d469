"""The pre-commit config runs ruff and the drift checks, through envs tox really defines."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]


def _hooks() -> dict[str, dict[str, Any]]:
    config = yaml.safe_load((REPO_ROOT / ".pre-commit-config.yaml").read_text())
    return {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}


def _tox_envs() -> set[str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(REPO_ROOT / "tox.ini")
    return {s.removeprefix("testenv:") for s in parser.sections() if s.startswith("testenv:")}


def test_ruff_lints_and_checks_formatting_without_rewriting() -> None:
    hooks = _hooks()
    # --force-exclude: pre-commit passes files by name, and ruff's excludes (the generated
    # files) only hold for named files with it
    assert hooks["ruff-check"]["entry"] == "ruff check --force-exclude"
    assert hooks["ruff-format"]["entry"] == "ruff format --check --force-exclude"
    for hook in (hooks["ruff-check"], hooks["ruff-format"]):
        assert "--fix" not in hook["entry"]
        assert hook["additional_dependencies"] == ["ruff>=0.6"]
    lint = configparser.ConfigParser(interpolation=None)
    lint.read(REPO_ROOT / "tox.ini")
    assert "ruff>=0.6" in lint["testenv:lint"]["deps"], "same ruff as the lint env"


@pytest.mark.parametrize("env", ["proto-check", "keys-check"])
def test_drift_checks_call_their_tox_env(env: str) -> None:
    hook = _hooks()[env]
    assert hook["entry"] == f"tox run -e {env}"
    assert hook["pass_filenames"] is False
    makefile = (REPO_ROOT / "Makefile").read_text()
    (tox_pin,) = hook["additional_dependencies"]
    assert f"'{tox_pin}'" in makefile, "the tox the Makefile bootstraps"
    assert re.search(hook["files"], "tox.ini")
    if env not in _tox_envs():
        pytest.skip(f"tox.ini defines no {env} env yet; the hook runs once it does")


def test_proto_check_hook_covers_the_generator_inputs() -> None:
    pattern = _hooks()["proto-check"]["files"]
    for path in (
        "packages/protocol/proto/nvml_mock_protocol/nri/v1alpha1/api.proto",
        "packages/protocol/scripts/gen_proto.py",
        "packages/protocol/gen-requirements.txt",
        "packages/protocol/src/nvml_mock_protocol/nri/api_pb2.py",
    ):
        assert re.search(pattern, path), path
    assert not re.search(pattern, "packages/check-fabric/src/check_fabric/cli.py")


def test_the_ruff_hooks_pass_on_every_tracked_python_file() -> None:
    """What ``pre-commit run --all-files`` runs: each hook's entry over every tracked Python
    file, named one by one, generated ones among them (the lint env's ruff)."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed in this env (tox -e lint has it)")
    listed = subprocess.run(
        ["git", "ls-files", "*.py", "*.pyi"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    files = [f for f in listed.stdout.split() if not re.search(r"_pb2\.pyi?$", f)]
    assert any(f.endswith("nvml_mock_live/_keys.py") for f in files)
    for hook in ("ruff-check", "ruff-format"):
        entry = _hooks()[hook]["entry"].split()
        done = subprocess.run(
            [ruff, *entry[1:], *files], cwd=REPO_ROOT, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"{hook}: {done.stdout}{done.stderr}"
