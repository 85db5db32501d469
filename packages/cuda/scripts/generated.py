"""The command line every header generator here shares: write the rendered text to the
target, or with ``--check`` compare it and fail when the committed header has drifted, so
the tests catch a declaration changed without its header."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def main(
    doc: str, script: str, target: Path, render: Callable[[], str], argv: list[str] | None
) -> int:
    """Run generator *script* (described by its docstring *doc*) that renders *target*."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the header is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not target.is_file() or target.read_text() != text:
            print(f"{target.name} is stale: run python {Path(script).name}", file=sys.stderr)
            return 1
        return 0
    target.write_text(text)
    return 0
