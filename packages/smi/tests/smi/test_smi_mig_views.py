"""MIG devices in the default table and in ``-q`` / ``-q -x``, in the real tool's formats
(the 91-column ``MIG devices`` box of current drivers; ``<mig_devices>`` of the XML report)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import nvml_mock_live as live
import pytest
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.render import render_text
from smi_fixtures.helpers import smi

HEAD = [
    "+-----------------------------------------------------------------------------------------+",
    "| MIG devices:                                                                            |",
    "+------------------+----------------------------------+-----------+-----------------------+",
    "| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |",
    "|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |",
    "|                  |                                  |        ECC|                       |",
    "|==================+==================================+===========+=======================|",
]
SPLIT = (
    "+------------------+----------------------------------+-----------+-----------------------+"
)


@pytest.fixture
def h100(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path) -> Path:
    state = tmp_path / "state.nvmlmock"
    state.write_text(render_text(resolve_config(node="mig-views", profile="h100", count=2)))
    live.create(tmp_path / live.LIVE_FILE_NAME, live.read_board(state))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    return library_file


def _box(out: str) -> list[str]:
    lines = out.splitlines()
    start = lines.index(HEAD[1]) - 1
    end = lines.index("", start)
    return lines[start:end]


def test_no_box_without_mig(h100: Path) -> None:
    rc, out = smi(h100)
    assert rc == 0 and "MIG devices:" not in out


def test_box_lists_each_mig_device(h100: Path) -> None:
    assert smi(h100, "-i", "0", "-mig", "1")[0] == 0
    rc, out = smi(h100)
    assert rc == 0
    assert _box(out) == [*HEAD, "|  No MIG devices found" + " " * 67 + "|", HEAD[0]]
    assert smi(h100, "mig", "-i", "0", "-cgi", "19,14", "-C")[0] == 0
    rc, out = smi(h100)
    assert rc == 0
    box = _box(out)
    assert box[: len(HEAD)] == HEAD
    # volatile uncorrected ECC 0 and BAR1 used / total as the real box prints them (a real
    # A100 80GB's 2g.20gb: "4MiB / 32767MiB", a quarter of its BAR1 less 1 MiB; nvitop#8)
    assert box[len(HEAD) :: 3] == [
        (
            "|  0    5   0   0  |               0MiB / 200"
            "96MiB    | 32      0 |  2   0    2    0    2 |"
        ),
        (
            "|  0   13   0   1  |               0MiB /  99"
            "84MiB    | 16      0 |  1   0    1    0    1 |"
        ),
    ]
    bar1 = "|" + " " * 18 + "|{:>21} / {:>8}  |" + " " * 11 + "|" + " " * 23 + "|"
    assert box[len(HEAD) + 1 :: 3] == [
        bar1.format("0MiB", "32767MiB"),
        bar1.format("0MiB", "16383MiB"),
    ]
    assert box[len(HEAD) + 2 :: 3] == [SPLIT, SPLIT]
    assert all(len(line) == 91 for line in box)


def test_gpu_row_under_mig(h100: Path) -> None:
    assert smi(h100, "-i", "0", "-mig", "1")[0] == 0
    _rc, out = smi(h100)
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|   0  NVIDIA"))
    assert lines[first].endswith("|                   On |")
    assert lines[first + 1].endswith("|     N/A      Default |")
    second = next(i for i, line in enumerate(lines) if line.startswith("|   1  NVIDIA"))
    assert lines[second + 1].endswith("      0%      Default |")


def test_report_mig_device_sections(h100: Path) -> None:
    assert smi(h100, "-i", "0", "-mig", "1")[0] == 0
    assert smi(h100, "mig", "-i", "0", "-cgi", "9", "-C")[0] == 0
    rc, out = smi(h100, "-i", "0", "-q")
    assert rc == 0
    lines = out.splitlines()
    at = lines.index("    MIG Device")
    assert lines[at - 3] == "    MIG Mode"
    assert [line.split(":")[0].rstrip() for line in lines[at + 1 : at + 16]] == [
        "        Index",
        "        GPU Instance ID",
        "        Compute Instance ID",
        "        Device Attributes",
        "            Shared",
        "                Multiprocessor count",
        "                Copy Engine count",
        "                Encoder count",
        "                Decoder count",
        "                OFA count",
        "                JPG count",
        "        FB Memory Usage",
        "            Total",
        "            Reserved",
        "            Used",
    ]
    assert lines[at + 2].endswith(": 2") and lines[at + 6].endswith(": 60")

    rc, out = smi(h100, "-q", "-x")
    assert rc == 0
    gpus = ET.fromstring(out).findall("gpu")
    devices = gpus[0].findall("mig_devices/mig_device")
    assert [(d.findtext("index"), d.findtext("gpu_instance_id")) for d in devices] == [("0", "2")]
    assert devices[0].findtext("device_attributes/shared/multiprocessor_count") == "60"
    assert devices[0].findtext("fb_memory_usage/total") == "40448 MiB"
    assert gpus[1].findtext("mig_devices").strip() == "None"
