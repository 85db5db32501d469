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

CAPTURES = Path(__file__).resolve().parents[1] / "smi_fixtures" / "mig"


def capture(name: str) -> list[str]:
    return (CAPTURES / name).read_text().splitlines()


def board(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    profile: str,
    driver: str | None = None,
    count: int = 1,
) -> None:
    """A node of *profile* (on *driver*, the capture's, where its layout depends on it)."""
    cuda = {"450": 11000, "570": 12080}.get((driver or "").split(".")[0])
    config = resolve_config(
        node="mig-captures",
        profile=profile,
        count=count,
        driver_version=driver,
        cuda_driver_version=cuda,
    )
    state = tmp_path / "state.nvmlmock"
    state.write_text(render_text(config))
    live.create(tmp_path / live.LIVE_FILE_NAME, live.read_board(state))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))


@pytest.fixture
def a100(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path) -> Path:
    """The A100 captures' node: driver 450.80.02 (``smi_fixtures/mig/README.md``)."""
    board(tmp_path, monkeypatch, "a100", "450.80.02")
    assert smi(library_file, "-mig", "1")[0] == 0
    return library_file


@pytest.fixture
def h100(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path) -> Path:
    """An H100 node on a 570-series driver, whose tables the published H100 output has."""
    board(tmp_path, monkeypatch, "h100", "570.148.08")
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
        "|   0  MIG 2g.20gb         14        3          0:2     |",
        "|   0  MIG 3g.40gb          9        2          4:4     |",
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


def test_h200_lgip_matches_a_real_h200(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path
) -> None:
    """An 8 x H200 node's ``mig -lgip`` (NVIDIA/mig-parted#120): the rows of GPU 6 and GPU
    2's 7g.141gb, cell for cell (memory 16.00 / 32.25 / 69.50 / 139.75 GiB)."""
    board(tmp_path, monkeypatch, "h200", "570.148.08", count=8)
    assert smi(library_file, "-mig", "1")[0] == 0
    rc, out = smi(library_file, "mig", "-lgip")
    lines = out.splitlines()
    assert rc == 0
    rows = capture("h200-lgip-rows.txt")
    at = lines.index(rows[0])
    assert lines[at : at + len(rows)] == rows
    seven = capture("h200-lgip-rows-7g.txt")
    at = lines.index(seven[0])
    assert lines[at : at + 2] == seven


def test_b200_lgip_matches_a_real_b200(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path
) -> None:
    """A B200's ``mig -lgip`` on a 570-series driver (NVIDIA/mig-parted#166,
    NVIDIA/gpu-operator#1242): frame and the four smallest profiles, cell for cell: 1g.45gb
    has 30 SMs, 2g.45gb 2 NVDEC, 4 copy engines and 2 JPEG. GFD's
    ``nvidia.com/mig-1g.45gb.multiprocessors`` label reads these numbers."""
    board(tmp_path, monkeypatch, "b200", "570.148.08")
    assert smi(library_file, "-mig", "1")[0] == 0
    rc, out = smi(library_file, "mig", "-lgip")
    real = capture("b200-lgip-head.txt")
    assert rc == 0 and out.splitlines()[: len(real)] == real


def test_gb200_lgip_matches_a_real_gb200(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path
) -> None:
    """A GB200 node's ``mig -lgip`` (NVIDIA/mig-parted#227, 2025-08, the 81-column layout of
    current drivers): frame and the four smallest profiles (1g.47gb 32 SMs, 2g.47gb 38)."""
    board(tmp_path, monkeypatch, "gb200")
    assert smi(library_file, "-mig", "1")[0] == 0
    rc, out = smi(library_file, "mig", "-lgip")
    real = capture("gb200-lgip-head.txt")
    lines = out.splitlines()
    assert rc == 0 and lines[: len(real)] == real
    assert all(len(line) == 81 for line in lines)


def test_lgi_of_an_h100_matches_a_real_one(h100: Path) -> None:
    """An H100's ``mig -lgi`` on a 535/545-era driver (NVIDIA/DCGM#138): 57 columns, the
    same ids and placements for a 3g, a 2g and two 1g made in that order."""
    assert smi(h100, "mig", "-cgi", "9,14,19,19")[0] == 0
    rc, out = smi(h100, "mig", "-lgi")
    lines = out.splitlines()
    assert rc == 0 and lines[5:-1] == capture("h100-lgi-57.txt")
    assert all(len(line) == 57 for line in lines)


def test_lgi_is_59_columns_on_current_drivers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path
) -> None:
    """Current drivers (kubernetes-sigs/dra-driver-nvidia-gpu#933, 2026) print ``-lgi`` 59
    columns wide: ``|   3  MIG 1g.10gb           19        7          0:1     |``."""
    board(tmp_path, monkeypatch, "h100")
    assert smi(library_file, "-mig", "1")[0] == 0
    assert smi(library_file, "mig", "-cgi", "19")[0] == 0
    rc, out = smi(library_file, "mig", "-lgi")
    lines = out.splitlines()
    assert rc == 0 and all(len(line) == 59 for line in lines)
    assert lines[5] == "|   0  MIG 1g.10gb           19       13          6:1     |"


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
