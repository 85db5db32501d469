"""Repository rule: services never import each other; all may import the protocol package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVICES = {
    "nvml-engine": "nvml_mock_engine",
    "topology-service": "nvml_mock_topology",
    "nri-plugin": "nvml_mock_nri",
    "check-fabric": "check_fabric",
    "kwok": "nvml_mock_kwok",
}


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
        f"{py.relative_to(ROOT)} imports {sorted(_imported_top_levels(py) & others)}"
        for py in sorted(src.rglob("*.py"))
        if _imported_top_levels(py) & others
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
