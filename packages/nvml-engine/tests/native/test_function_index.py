"""FUNCTIONS.md, the index of which C unit answers which NVML function, matches the build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nvml_mock_engine.library import library_path

NATIVE = Path(__file__).resolve().parents[2] / "native"


def test_the_function_index_matches_the_built_units() -> None:
    library_path()  # built by the session's library fixture users, or the install
    done = subprocess.run(
        ["make", "-s", "-C", str(NATIVE), "index-check"],
        env=dict(os.environ, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_modelled_function_is_listed_with_its_unit() -> None:
    rows = [
        line
        for line in (NATIVE / "FUNCTIONS.md").read_text().splitlines()
        if line.startswith("| `nvml")
    ]
    names = [row.split("`")[1] for row in rows]
    assert len(names) == len(set(names))
    assert {"nvmlInit_v2", "nvmlDeviceGetMemoryInfo_v2", "nvmlEventSetWait_v2"} <= set(names)
    for row in rows:
        unit = row.rsplit("`", 2)[-2]
        assert (NATIVE / "src" / unit).is_file(), row


def _header_comment(unit: Path) -> str:
    text = unit.read_text()
    assert text.startswith("/*"), f"{unit.name} opens without a header comment"
    return text[: text.index("*/")]


def test_each_unit_answers_the_chapters_its_header_names() -> None:
    """A unit is named for the nvml.h chapter it answers and says so at its top, so that a
    function's home follows from its chapter. A function outside every chapter is named in
    its unit's header instead; a unit that answers no function says that."""
    answering: dict[str, list[str]] = {}
    offenders = []
    for line in (NATIVE / "FUNCTIONS.md").read_text().splitlines():
        if not line.startswith("| `nvml"):
            continue
        function, chapter, unit = (cell.strip().strip("`") for cell in line.strip("|").split("|"))
        answering.setdefault(unit, []).append(function)
        header = _header_comment(NATIVE / "src" / unit)
        wanted = function if chapter.startswith("(") else chapter
        if wanted not in header:
            offenders.append(f"{unit}: {function} ({chapter})")
    for unit in sorted((NATIVE / "src").glob("*.c")):
        if unit.name not in answering:
            assert "answers no nvml.h function" in _header_comment(unit).lower(), unit.name
    assert offenders == []
