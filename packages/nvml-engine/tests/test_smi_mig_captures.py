"""The work-alike's MIG tables against the real tool's output (``smi_fixtures/mig``): the same
board and the same steps give the same lines, byte for byte."""

from __future__ import annotations

import re
from pathlib import Path

import nvml_mock_live as live
import pytest
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.render import render_text
from smi_fixtures.helpers import smi

CAPTURES = Path(__file__).resolve().parent / "smi_fixtures" / "mig"


def capture(name: str) -> list[str]:
    return (CAPTURES / name).read_text().splitlines()


def board(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profile: str) -> None:
    state = tmp_path / "state.nvmlmock"
    state.write_text(render_text(resolve_config(node="mig-captures", profile=profile, count=1)))
    live.create(tmp_path / live.LIVE_FILE_NAME, live.read_board(state))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))


@pytest.fixture
def a100(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path) -> Path:
    board(tmp_path, monkeypatch, "a100")
    assert smi(library_file, "-mig", "1")[0] == 0
    return library_file


@pytest.fixture
def h100(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path) -> Path:
    board(tmp_path, monkeypatch, "h100")
    assert smi(library_file, "-mig", "1")[0] == 0
    return library_file


def test_lgip_matches_the_a100_capture(a100: Path) -> None:
    rc, out = smi(a100, "mig", "-lgip")
    assert rc == 0
    assert out.splitlines() == capture("a100-40gb-lgip.txt")


def test_lgi_layout_matches_the_a100_capture(a100: Path) -> None:
    """The table's frame and columns are the capture's. Its ids and placements are not: that
    driver (450) put the first of two 3g.20gb at 0:4 as id 2; current drivers, which this
    mock follows, put it at 4:4 as id 2 and the second at 0:4 as id 1."""
    rc, out = smi(a100, "mig", "-cgi", "9,3g.20gb", "-C")
    assert rc == 0
    assert out.splitlines() == capture("a100-40gb-cgi.txt")
    rc, out = smi(a100, "mig", "-lgi")
    real = capture("a100-40gb-lgi.txt")
    lines = out.splitlines()
    assert rc == 0 and lines[:5] == real[:5] and lines[6] == lines[8] == real[6]
    assert lines[5] == real[7].replace("2          0:4", "1          0:4")
    assert lines[7] == real[5].replace("1          4:4", "2          4:4")


def test_cgi_places_as_current_drivers_do(h100: Path) -> None:
    """Without a placement the driver takes the free placement that spoils fewest others:
    seven 1g.10gb land at 6, 4, 5, 0, 1, 2, 3 (ids 13, 11, 12, 7, 8, 9, 10), and a 1g, a 2g
    and a 4g, in that order, all fit."""
    rc, out = smi(h100, "mig", "-cgi", ",".join(["19"] * 7))
    ids = [int(m) for m in re.findall(r"GPU instance ID +(\d+)", out)]
    assert (rc, ids) == (0, [13, 11, 12, 7, 8, 9, 10])


def test_small_instances_leave_room_for_a_4g(a100: Path) -> None:
    rc, out = smi(a100, "mig", "-cgi", "19,14,5")
    ids = [int(m) for m in re.findall(r"GPU instance ID +(\d+)", out)]
    assert (rc, ids) == (0, [13, 5, 1])
    rc, out = smi(a100, "mig", "-lgi")
    assert out.splitlines()[5::2] == [
        "|   0  MIG 1g.5gb       19       13          6:1     |",
        "|   0  MIG 2g.10gb      14        5          4:2     |",
        "|   0  MIG 4g.20gb       5        1          0:4     |",
    ]


def test_lgi_lists_by_profile_then_id(h100: Path) -> None:
    rc, out = smi(h100, "mig", "-cgi", "9,14")
    assert rc == 0 and re.findall(r"GPU instance ID +(\d+)", out) == ["2", "3"]
    rc, out = smi(h100, "mig", "-lgi")
    assert out.splitlines()[5::2] == [
        "|   0  MIG 2g.20gb      14        3          0:2     |",
        "|   0  MIG 3g.40gb       9        2          4:4     |",
    ]


def test_lgipp_lists_every_possible_placement(h100: Path) -> None:
    expected = [
        "GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1",
        "GPU  0 Profile ID 20 Placements: {0,1,2,3,4,5,6}:1",
        "GPU  0 Profile ID 15 Placements: {0,2,4,6}:2",
        "GPU  0 Profile ID 14 Placements: {0,2,4}:2",
        "GPU  0 Profile ID  9 Placements: {0,4}:4",
        "GPU  0 Profile ID  5 Placement : {0}:4",
        "GPU  0 Profile ID  0 Placement : {0}:8",
    ]
    rc, out = smi(h100, "mig", "-lgipp")
    assert (rc, out.splitlines()) == (0, expected)
    # an instance in place changes nothing: the list is of what the profile can take
    assert smi(h100, "mig", "-cgi", "9")[0] == 0
    assert smi(h100, "mig", "-lgipp")[1].splitlines() == expected


def test_lgip_rows_of_the_h100(h100: Path) -> None:
    rc, out = smi(h100, "mig", "-lgip")
    lines = out.splitlines()
    assert rc == 0 and all(len(line) == 79 for line in lines)
    assert lines[5:7] == [
        "|   0  MIG 1g.10gb       19     7/7        9.75       No     16     1     0   |",
        "|                                                             1     1     0   |",
    ]
    assert lines[-3:-1] == [
        "|   0  MIG 7g.80gb        0     1/1        79.25      No     132    7     0   |",
        "|                                                             8     7     1   |",
    ]


def test_lci_columns(h100: Path) -> None:
    assert smi(h100, "mig", "-cgi", "19", "-C")[0] == 0
    rc, out = smi(h100, "mig", "-lci")
    assert rc == 0
    assert out.splitlines()[6] == (
        "|   0     13       MIG 1g.10gb          0         0          0:1     |"
    )


def test_h200_memory_as_a_real_h200_reports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path
) -> None:
    board(tmp_path, monkeypatch, "h200")
    assert smi(library_file, "-mig", "1")[0] == 0
    rc, out = smi(library_file, "mig", "-lgip")
    memory = {name: gib for name, gib in re.findall(r"MIG (\S+) +\d+ +\d+/\d+ +([\d.]+)", out)}
    assert rc == 0
    assert (memory["1g.18gb"], memory["1g.18gb+me"], memory["2g.35gb"], memory["7g.141gb"]) == (
        "16.00",
        "16.00",
        "32.50",
        "140.00",
    )


def test_lcip_after_three_1c_instances(a100: Path) -> None:
    """The real tool's -lcip for an A100-40GB 3g.20gb holding three 1c.3g.20gb."""
    assert smi(a100, "mig", "-cgi", "9")[0] == 0
    rc, out = smi(a100, "mig", "-cci", "0,0,0", "-gi", "2")
    assert rc == 0 and out.count("Successfully created compute instance") == 3
    rc, out = smi(a100, "mig", "-lcip", "-gi", "2")
    rule = "+" + "-" * 86 + "+"
    second = "|" + " " * 70 + "3     0         |"
    assert (rc, out.splitlines()) == (
        0,
        [
            rule,
            (
                "| Compute instance profiles:                "
                "                                           |"
            ),
            (
                "| GPU     GPU       Name             Profile"
                "  Instances   Exclusive       Shared       |"
            ),
            (
                "|       Instance                       ID   "
                "  Free/Total     SM       DEC   ENC   OFA  |"
            ),
            (
                "|         ID                                "
                "                          CE    JPEG       |"
            ),
            "|" + "=" * 86 + "|",
            (
                "|   0      2       MIG 1c.3g.20gb       0   "
                "   0/3           14        2     0     0   |"
            ),
            second,
            rule,
            (
                "|   0      2       MIG 2c.3g.20gb       1   "
                "   0/1           28        2     0     0   |"
            ),
            second,
            rule,
            (
                "|   0      2       MIG 3g.20gb          2*  "
                "   0/1           42        2     0     0   |"
            ),
            second,
            rule,
        ],
    )
