"""Print each package's share of the project's source lines: ``python scripts/house_lines.py``.

Source lines are the lines of the tracked ``*.py``, ``*.c``, ``*.h``, ``*.sh``, ``*.in`` and
``*.awk`` files under ``packages/<name>/``, a package's ``tests/`` left out (tests grow with
what they test, and a package is not the bigger for testing itself well). No package may
hold more than :data:`MAX_SHARE` of them: a package that outgrows it holds more than one
program, and the next one goes in a package of its own (CONTRIBUTING.md, "A new package").
Exit status 1 when one does; ``--json`` prints the table as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
SUFFIXES: Final = frozenset({".py", ".c", ".h", ".sh", ".in", ".awk"})
MAX_SHARE: Final = 0.35


def tracked_files(root: Path = ROOT) -> list[str]:
    """The repository's tracked files under ``packages/``, as git lists them."""
    done = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--", "packages"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    return [name for name in done.stdout.decode().split("\0") if name]


def package_lines(files: Iterable[str], root: Path = ROOT) -> Counter[str]:
    """Source lines per package folder name, from *files* (paths relative to *root*)."""
    lines: Counter[str] = Counter()
    for name in files:
        path = PurePosixPath(name)
        parts = path.parts
        if len(parts) < 3 or parts[0] != "packages" or parts[2] == "tests":
            continue
        if path.suffix not in SUFFIXES:
            continue
        with open(root / name, "rb") as handle:
            lines[parts[1]] += sum(1 for _ in handle)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    lines = package_lines(tracked_files())
    total = sum(lines.values())
    over = [name for name, count in lines.items() if count > MAX_SHARE * total]
    if args.json:
        print(json.dumps({"total": total, "max_share": MAX_SHARE, "packages": dict(lines)}))
    else:
        print(f"{'package':18} {'lines':>7} {'share':>6}")
        for name, count in lines.most_common():
            print(f"{name:18} {count:7d} {count / total:6.1%}")
        print(f"{'all':18} {total:7d}   (at most {MAX_SHARE:.0%} each)")
    for name in over:
        print(f"house_lines: {name} holds more than {MAX_SHARE:.0%} of the lines", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
