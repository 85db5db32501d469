"""Build every distribution's wheel and sdist into one folder: ``make dist``.

Each package under ``packages/`` is released on its own (``<distribution>-vX.Y.Z``, from its
CHANGELOG); this builds all of them the same way, with PyPA ``build`` in isolated build
environments (so the engine's build hook gets the ``nvidia-nvml-dev`` its ``pyproject.toml``
asks for and compiles the library into the wheel). Prints each file it made.

Usage: ``python scripts/build_dists.py [--out DIR] [PACKAGE ...]`` (default: ``dist/``, all).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# dependencies first, so a reader of the folder sees the order they install in
ORDER = (
    "protocol",
    "live",
    "nvml-engine",
    "smi",
    "imex",
    "topology-service",
    "nri-plugin",
    "check-fabric",
    "node",
)


def packages() -> list[Path]:
    """Every package folder, in :data:`ORDER` (others after, by name)."""
    found = sorted(p.parent for p in (ROOT / "packages").glob("*/pyproject.toml"))
    return sorted(found, key=lambda p: (ORDER.index(p.name) if p.name in ORDER else 99, p.name))


def distribution(package: Path) -> str:
    data = tomllib.loads((package / "pyproject.toml").read_text(encoding="utf-8"))
    name: str = data["project"]["name"]
    return name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="the folder (dist/)")
    parser.add_argument("package", nargs="*", help="package folders' names (default: all)")
    args = parser.parse_args(argv)
    chosen = [p for p in packages() if not args.package or p.name in args.package]
    unknown = set(args.package) - {p.name for p in chosen}
    if unknown:
        print(f"build_dists: no package {sorted(unknown)} under packages/", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for package in chosen:
        before = set(args.out.iterdir())
        done = subprocess.run(
            [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(args.out)],
            cwd=package,
            check=False,
        )
        if done.returncode != 0:
            print(f"build_dists: {distribution(package)} failed to build", file=sys.stderr)
            return 1
        for path in sorted(set(args.out.iterdir()) - before):
            print(f"built {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
