"""Repository rules for the distributions under packages/.

Each is released on its own, so each must carry what a release needs: its own version
(read by hatch from ``_version.py``), a README, a Keep-a-Changelog CHANGELOG whose newest
released heading matches that version, ``py.typed``, a ``__main__`` for every command, and
ranges (never pins) on its siblings.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())
SIBLINGS = {tomllib.loads((p / "pyproject.toml").read_text())["project"]["name"] for p in PACKAGES}
RELEASED = re.compile(r"^## \[?(\d+\.\d+\.\d+)\]?", re.MULTILINE)


def _project(package: Path) -> dict[str, object]:
    data = tomllib.loads((package / "pyproject.toml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _version(package: Path) -> str:
    data = _project(package)
    path = package / data["tool"]["hatch"]["version"]["path"]  # type: ignore[index]
    match = re.search(r'__version__ = "([^"]+)"', path.read_text(encoding="utf-8"))
    assert match, f"{path} has no __version__"
    return match.group(1)


def test_every_package_is_found() -> None:
    assert {p.name for p in PACKAGES} == {
        "protocol",
        "live",
        "nvml-engine",
        "smi",
        "imex",
        "node",
        "topology-service",
        "nri-plugin",
        "check-fabric",
        "exporter",
        "kwok",
        "cuda",
    }


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_version_is_semver_and_matches_the_changelog(package: Path) -> None:
    version = _version(package)
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    changelog = (package / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = [line for line in changelog.splitlines() if line.startswith("## ")]
    assert headings and headings[0] == "## Unreleased", "the first heading must be ## Unreleased"
    released = RELEASED.findall(changelog)
    if released:
        assert released[0] == version, f"newest release {released[0]} != __version__ {version}"


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_layout(package: Path) -> None:
    modules = [p for p in (package / "src").iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert len(modules) == 1, modules
    assert (modules[0] / "py.typed").is_file()
    assert (package / "README.md").stat().st_size > 500
    assert (package / "tests").is_dir()


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_siblings_are_ranges_not_pins(package: Path) -> None:
    deps = _project(package)["project"]["dependencies"]  # type: ignore[index]
    for dep in deps:  # type: ignore[attr-defined]
        name = re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0]
        if name in SIBLINGS:
            assert "==" not in dep and ">=" in dep and "<" in dep.replace("<=", ""), dep


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_every_command_has_a_main_and_a_module_entry(package: Path) -> None:
    scripts = _project(package)["project"].get("scripts", {})  # type: ignore[attr-defined]
    for command, target in scripts.items():
        module, _, func = target.partition(":")
        assert func == "main", f"{command} must call main(argv)"
        parts = module.split(".")
        src = package / "src" / Path(*parts)
        file = src.with_suffix(".py") if src.with_suffix(".py").is_file() else src / "__init__.py"
        assert re.search(r"^def main\(", file.read_text(encoding="utf-8"), re.MULTILINE), file
        top = package / "src" / parts[0]
        mains = (top / "__main__.py", src / "__main__.py", src.parent / "__main__.py")
        assert any(m.is_file() for m in mains), command


def _local_requirements(package: Path) -> set[str]:
    """The folders of the siblings a package requires at run time."""
    by_name = {_project(p)["project"]["name"]: p.name for p in PACKAGES}  # type: ignore[index]
    deps = _project(package)["project"].get("dependencies", [])  # type: ignore[union-attr]
    names = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0] for d in deps}
    return {by_name[n] for n in names if n in by_name}


def test_every_tox_env_installs_the_siblings_its_packages_need() -> None:
    """An env that installs a package editable must install its siblings too: pip would
    otherwise look for them on the package index, where they are not, and the env fails
    before a test runs."""
    tox = (ROOT / "tox.ini").read_text(encoding="utf-8")
    missing: dict[str, list[str]] = {}
    for section in re.split(r"(?m)^(?=\[)", tox):
        env = re.match(r"\[testenv:([^\]]+)\]", section)
        if not env:
            continue
        installed = set(re.findall(r"-e packages/([\w-]+)", section))
        for folder in installed:
            lacking = _local_requirements(ROOT / "packages" / folder) - installed
            if lacking:
                missing.setdefault(env.group(1), []).extend(sorted(lacking))
    assert not missing, f"tox envs lack siblings their packages require: {missing}"
