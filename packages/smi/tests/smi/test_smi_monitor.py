"""``dmon`` and ``pmon`` against real output: the heading lines byte for byte, the rows in the
real column positions, the groups of ``-s`` in the order given, ``-o DT``, CSV and exit codes.

No test waits on the clock for its result: ``-c 1``/``-c 2 -d 1`` bound every run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from smi_fixtures.helpers import render_profile, smi

FIXTURES = Path(__file__).resolve().parents[1] / "smi_fixtures"
H100_590 = FIXTURES / "exporter" / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
DT_SAMPLE = FIXTURES / "monitor" / "dmon-s-mutc-o-TD.txt"


def captured(command: str, state: str = "idle") -> list[str]:
    """The lines a capture recorded for ``nvidia-smi <command>`` in ``state``."""
    text = H100_590.read_text()
    start = text.index(f"# {state} :: {command.split(maxsplit=1)[0]}")
    body = text[start:].split("\n")[3:]
    return body[: body.index("")]


def ends(line: str) -> list[int]:
    """Where each blank-separated cell of ``line`` ends: the right edges of its columns."""
    return [m.end() for m in re.finditer(r"\S+", line)]


@pytest.fixture(scope="module")
def h100_state(library_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render_profile("h100", 2, tmp_path_factory.mktemp("smi-monitor") / "h100.nvmlmock")


@pytest.fixture(autouse=True)
def node(h100_state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(h100_state))


def test_dmon_default_is_the_real_layout(library_file: Path) -> None:
    real = captured("dmon")
    rc, out = smi(library_file, "dmon", "-c", "1")
    assert rc == 0, out
    lines = out.splitlines()
    assert lines[:2] == real[:2]  # the two heading lines, byte for byte
    assert len(lines) == 4  # one row per GPU
    for row in lines[2:]:
        assert len(row) == len(real[2])
        assert ends(row) == ends(real[2])  # every value right-aligned in the real column
    assert [row.split()[0] for row in lines[2:]] == ["0", "1"]


def test_dmon_every_group_in_the_order_given_with_date_and_time(library_file: Path) -> None:
    real = DT_SAMPLE.read_text().splitlines()
    rc, out = smi(library_file, "dmon", "-s", "mutc", "-o", "TD", "-c", "1", "-i", "1")
    assert rc == 0, out
    lines = out.splitlines()
    assert lines[:2] == real[:2]
    assert len(lines) == 3
    assert ends(lines[2]) == ends(real[2])
    assert re.fullmatch(r" \d{8}   \d\d:\d\d:\d\d      1", lines[2][:27])
    rc, out = smi(library_file, "dmon", "-s", "pucvmet", "-c", "1", "-i", "0")
    assert rc == 0
    names, units, row = out.splitlines()
    assert names.split()[1:] == [
        "gpu",
        "pwr",
        "gtemp",
        "mtemp",
        "sm",
        "mem",
        "enc",
        "dec",
        "jpg",
        "ofa",
        "mclk",
        "pclk",
        "pviol",
        "tviol",
        "fb",
        "bar1",
        "ccpm",
        "sbecc",
        "dbecc",
        "pci",
        "rxpci",
        "txpci",
    ]
    assert units.split()[1:] == [
        "Idx",
        "W",
        "C",
        "C",
        "%",
        "%",
        "%",
        "%",
        "%",
        "%",
        "MHz",
        "MHz",
        "%",
        "bool",
        "MB",
        "MB",
        "MB",
        "errs",
        "errs",
        "errs",
        "MB/s",
        "MB/s",
    ]
    assert len(row.split()) == 22
    assert ends(row) == ends(units)[1:]


def test_dmon_repeats_count_samples(library_file: Path) -> None:
    rc, out = smi(library_file, "dmon", "-c", "2", "-d", "1", "-i", "0")
    assert rc == 0
    lines = out.splitlines()
    assert len(lines) == 4 and lines[2] == lines[3]  # an idle board reads the same twice


def test_dmon_csv(library_file: Path) -> None:
    rc, out = smi(library_file, "dmon", "-c", "1", "--format", "csv")
    assert rc == 0
    names, units, *rows = out.splitlines()
    assert names == "#gpu, pwr, gtemp, mtemp, sm, mem, enc, dec, jpg, ofa, mclk, pclk"
    assert units == "#Idx, W, C, C, %, %, %, %, %, %, MHz, MHz"
    assert [r.split(", ")[0] for r in rows] == ["0", "1"]
    assert all(len(r.split(", ")) == 12 for r in rows)
    rc, out = smi(library_file, "dmon", "-c", "1", "--format", "csv,noheader,nounit", "-i", "1")
    assert rc == 0 and out.startswith("1, ") and len(out.splitlines()) == 1


@pytest.mark.parametrize(
    "args",
    [("-s", "x"), ("-s", "pp"), ("-o", "Q"), ("-c", "0"), ("-d", "0"), ("--format", "xml")],
)
def test_dmon_refuses_bad_values(library_file: Path, args: tuple[str, ...]) -> None:
    rc, out = (
        smi(library_file, "dmon", *args, "-c", "1")
        if args[0] != "-c"
        else smi(library_file, "dmon", *args)
    )
    assert rc == 2
    assert out.startswith(f'Invalid value "{args[1]}" for {args[0]}.')


def test_dmon_flags_are_its_own(library_file: Path) -> None:
    assert smi(library_file, "dmon", "-q")[0] == 2
    assert smi(library_file, "dmon", "-c", "1", "-i", "7") == (6, "No devices were found\n")


def test_pmon_without_processes_is_the_real_row(library_file: Path) -> None:
    real = captured("pmon")
    rc, out = smi(library_file, "pmon", "-c", "1")
    assert rc == 0, out
    lines = out.splitlines()
    assert lines[:2] == real[:2]
    assert lines[2:] == [real[2], real[2].replace("    0 ", "    1 ", 1)]


def test_pmon_columns_follow_the_real_layout(library_file: Path) -> None:
    real = captured("pmon", "load")  # a capture with processes: where each column ends
    rc, out = smi(library_file, "pmon", "-c", "1", "-i", "0")
    assert rc == 0
    row = out.splitlines()[2]
    assert len(row) == len(real[2])
    assert ends(row)[:9] == [ends(real[2])[0], *ends(real[2])[1:9]]
    rc, out = smi(library_file, "pmon", "-c", "2", "-d", "1", "-s", "um", "-i", "1")
    assert rc == 0
    names, units, *rows = out.splitlines()
    assert names.split()[-3:] == ["fb", "ccpm", "command"]
    assert units.split()[-3:] == ["MB", "MB", "name"]
    assert len(rows) == 2
    assert smi(library_file, "pmon", "-s", "p", "-c", "1")[0] == 2
