"""The work-alike's MIG tables against the real tool's output (``smi_fixtures/mig``): the same
board and the same steps give the same lines, byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest
from nvml_mock_engine import live
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


def test_cgi_and_lgi_match_the_a100_capture(a100: Path) -> None:
    rc, out = smi(a100, "mig", "-cgi", "9,3g.20gb", "-C")
    assert rc == 0
    assert out.splitlines() == capture("a100-40gb-cgi.txt")
    rc, out = smi(a100, "mig", "-lgi")
    assert rc == 0
    assert out.splitlines() == capture("a100-40gb-lgi.txt")


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
        "|   0      7       MIG 1g.10gb          0         0          0:1     |"
    )
