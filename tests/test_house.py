"""The house's rooms stay rooms: no package holds more than 35 % of the project's source lines
(``scripts/house_lines.py``), and the count is the one the script documents."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "house_lines.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("house_lines", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_package_holds_more_than_its_share() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    table = json.loads(done.stdout)
    total = table["total"]
    assert total == sum(table["packages"].values()) > 0
    shares = {name: count / total for name, count in table["packages"].items()}
    assert max(shares.values()) <= table["max_share"] == 0.35, shares
    # every package folder is counted, the new ones included
    folders = {p.parent.name for p in (ROOT / "packages").glob("*/pyproject.toml")}
    assert set(shares) == folders


def test_the_count_takes_sources_and_leaves_tests_and_data_out(tmp_path: Path) -> None:
    house = _script()
    files = {
        "packages/a/src/a/mod.py": 3,
        "packages/a/native/src/lib.c": 2,
        "packages/a/native/src/lib.h": 1,
        "packages/a/native/gen.awk": 1,
        "packages/a/src/a/launcher.sh.in": 1,
        "packages/a/bench/run.sh": 1,
        "packages/a/tests/test_mod.py": 50,
        "packages/a/src/a/profiles/x.yaml": 40,
        "packages/a/README.md": 30,
        "packages/b/src/b/mod.py": 4,
    }
    for name, lines in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n" * lines)
    assert house.package_lines(files, tmp_path) == {"a": 9, "b": 4}


def test_a_package_over_its_share_fails_the_script(tmp_path: Path) -> None:
    """The same script on a repository where one package holds most lines: exit 1, named."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "house_lines.py").write_bytes(SCRIPT.read_bytes())
    for name, lines in (("big", 80), ("small", 20)):
        src = repo / "packages" / name / "src"
        src.mkdir(parents=True)
        (src / "mod.py").write_text("x = 1\n" * lines)
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True, timeout=60)
    subprocess.run([*git, "add", "-A"], check=True, timeout=60)
    done = subprocess.run(
        [sys.executable, str(repo / "scripts" / "house_lines.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "big holds more than 35% of the lines" in done.stderr
    assert "big                     80  80.0%" in done.stdout
