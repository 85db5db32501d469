"""Repository rules: services never import each other but through the engine's domain layer;
the floors' import contract (``.importlinter``, run by ``tox -e lint``) holds and fails on a
daemon importing a CLI and on the engine importing a package built on it."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVICES = {
    "nvml-engine": "nvml_mock_engine",
    "smi": "nvml_mock_smi",
    "imex": "nvml_mock_imex",
    "node": "nvml_mock_node",
    "topology-service": "nvml_mock_topology",
    "nri-plugin": "nvml_mock_nri",
    "check-fabric": "check_fabric",
    "exporter": "nvml_mock_exporter",
    "kwok": "nvml_mock_kwok",
    "cuda": "nvml_mock_cuda",
}


ENGINE_FRONT_DOORS = {
    "cli",
    "ctl",
    "ctl_alloc",
    "ctl_cli",
    "ctl_quick",
    "ctl_report",
    "scenario_ctl",
}
"""The engine's command lines: no other package imports them (.importlinter says so too)."""
ENGINE_DOMAIN = (
    {"nvml_mock_engine"}
    | {
        f"nvml_mock_engine.{py.stem}"
        for py in (ROOT / "packages/nvml-engine/src/nvml_mock_engine").glob("*.py")
        if py.stem not in ENGINE_FRONT_DOORS | {"__init__", "__main__"}
    }
    | {"nvml_mock_engine.profiles"}
)
"""The engine's domain layer: what the packages built on it (node, smi, imex) may import."""
DOMAIN_IMPORTS = {
    "kwok": {
        "nvml_mock_engine": {
            "nvml_mock_engine.config",
            "nvml_mock_engine.profiles",
            "nvml_mock_engine.render",
        }
    },
    # and the engine's command line, which ``python -m nvml_mock_node`` runs with its commands;
    # and where nvml-mock-cuda's built driver is, to stage it beside the NVML library
    "node": {
        "nvml_mock_engine": ENGINE_DOMAIN | {"nvml_mock_engine.cli"},
        "nvml_mock_cuda": {"nvml_mock_cuda.library", "nvml_mock_cuda.errors"},
    },
    "smi": {"nvml_mock_engine": ENGINE_DOMAIN},
    "imex": {"nvml_mock_engine": ENGINE_DOMAIN},
}


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _allowed(folder: str, py: Path, others: set[str]) -> set[str]:
    """The other services ``py`` imports beyond its allowance of their domain modules."""
    hits = _imported_top_levels(py) & others
    allowance = DOMAIN_IMPORTS.get(folder, {})
    for top in list(hits):
        modules = {m for m in _imported_modules(py) if m.split(".")[0] == top}
        if top in allowance and modules <= allowance[top]:
            hits.discard(top)
    return hits


def _imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("folder", sorted(SERVICES))
def test_service_imports_no_other_service(folder: str) -> None:
    src = ROOT / "packages" / folder / "src"
    assert src.is_dir(), f"{src} is missing"
    others = set(SERVICES.values()) - {SERVICES[folder]}
    offenders = [
        f"{py.relative_to(ROOT)} imports {sorted(_allowed(folder, py, others))}"
        for py in sorted(src.rglob("*.py"))
        if _allowed(folder, py, others)
    ]
    assert not offenders, "services must not import each other:\n" + "\n".join(offenders)


def test_protocol_imports_no_service() -> None:
    src = ROOT / "packages" / "protocol" / "src"
    bad = [
        str(py.relative_to(ROOT))
        for py in sorted(src.rglob("*.py"))
        if _imported_top_levels(py) & set(SERVICES.values())
    ]
    assert not bad, f"the protocol package must depend on no service: {bad}"


def test_rule_detects_a_cross_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from nvml_mock_topology.app import create_app\nimport os\n")
    assert _imported_top_levels(probe) == {"nvml_mock_topology", "os"}


def _lint_imports(pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if command is None:
        pytest.skip("import-linter (lint-imports) is not installed in this env")
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [command, "--config", str(ROOT / ".importlinter"), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=False,
    )


def test_the_import_contract_holds() -> None:
    done = _lint_imports()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_the_import_contract_bites_on_a_daemon_importing_a_cli(tmp_path: Path) -> None:
    """A copy of the node package whose agent imports nvml-mock-ctl: lint fails, naming it."""
    copy = tmp_path / "nvml_mock_node"
    shutil.copytree(
        ROOT / "packages/node/src/nvml_mock_node",
        copy,
        ignore=shutil.ignore_patterns("__pycache__", "_lib", "*.so*"),
    )
    agent = copy / "agent.py"
    text = agent.read_text(encoding="utf-8")
    agent.write_text(
        text.replace(
            "from nvml_mock_engine import faults\n", "from nvml_mock_engine import ctl, faults\n", 1
        ),
        encoding="utf-8",
    )
    assert "import ctl, faults" in agent.read_text(encoding="utf-8")
    done = _lint_imports(pythonpath=tmp_path)
    assert done.returncode == 1, done.stdout
    assert "Daemons never import a CLI BROKEN" in done.stdout
    assert "nvml_mock_node.agent -> nvml_mock_engine.ctl" in done.stdout


def test_the_domain_allowance_refuses_a_front_door(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from nvml_mock_engine.render import gpu_uuid\n")
    assert _allowed("kwok", probe, {"nvml_mock_engine"}) == set()
    probe.write_text("from nvml_mock_engine.cli import main\n")
    assert _allowed("kwok", probe, {"nvml_mock_engine"}) == {"nvml_mock_engine"}


def test_the_import_contract_bites_on_the_engine_importing_the_node(tmp_path: Path) -> None:
    """A copy of the engine whose renderer imports the node's staging: lint fails, naming the
    floor and the import (the package that builds the library imports nothing built on it)."""
    copy = tmp_path / "nvml_mock_engine"
    shutil.copytree(
        ROOT / "packages/nvml-engine/src/nvml_mock_engine",
        copy,
        ignore=shutil.ignore_patterns("__pycache__", "_lib", "*.so*"),
    )
    render = copy / "render.py"
    text = render.read_text(encoding="utf-8")
    anchor = "from nvml_mock_engine.config import EngineConfig\n"
    assert anchor in text
    render.write_text(
        text.replace(anchor, anchor + "from nvml_mock_node.stage import StageOptions\n", 1),
        encoding="utf-8",
    )
    done = _lint_imports(pythonpath=tmp_path)
    assert done.returncode == 1, done.stdout
    assert "Floors: front-door packages over the live contract over the wire contracts BROKEN" in (
        done.stdout
    )
    assert "nvml_mock_engine.render -> nvml_mock_node.stage" in done.stdout
