"""The work-alike on a MIG-mode GPU, and small formats, as real output has them.

Where a real capture is on file it is named; otherwise the test says what the expectation
rests on (the real tool's published output in a public issue, nvml.h).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import nvml_mock_live as live
import pytest
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.render import render_text
from nvml_mock_live import Allocation, LiveLayer
from nvml_mock_smi._values import clock_stamp
from smi_fixtures.helpers import smi

GiB = 1 << 30


def board(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profile: str, **kw: object) -> Path:
    state = tmp_path / "state.nvmlmock"
    config = resolve_config(node="smi-fidelity", profile=profile, count=2, **kw)  # type: ignore[arg-type]
    state.write_text(render_text(config))
    path = tmp_path / live.LIVE_FILE_NAME
    live.create(path, live.read_board(state))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    return path


@pytest.fixture
def h100_mig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path) -> Path:
    """Two H100s, GPU 0 in MIG mode with one 3g.40gb holding a 1c and a 2c compute instance."""
    path = board(tmp_path, monkeypatch, "h100")
    assert smi(library_file, "-i", "0", "-mig", "1")[0] == 0
    assert smi(library_file, "mig", "-i", "0", "-cgi", "9")[0] == 0
    assert smi(library_file, "mig", "-i", "0", "-cci", "0,1", "-gi", "2")[0] == 0
    return path


def test_date_pads_the_day_with_a_space() -> None:
    """The real date line and ``-q`` Timestamp are C's asctime: ``Thu Nov 14 10:45:47 2024``
    (the text captures), and on a day below 10 ``Tue Dec  1 …``, not ``Dec 01``."""
    first = time.mktime((2026, 12, 1, 9, 5, 2, 0, 0, -1))
    assert clock_stamp(first) == "Tue Dec  1 09:05:02 2026"
    assert (
        clock_stamp(time.mktime((2024, 11, 14, 10, 45, 47, 0, 0, -1))) == "Thu Nov 14 10:45:47 2024"
    )


def test_date_is_never_behind_the_clock_read_before_it() -> None:
    """The stamp reads the fine clock. ``localtime()`` without an argument reads the coarse
    one, which lags by up to a tick, so just after a second turned it named the one before.
    The loop runs across a turn of the second, where that shows."""
    late = []
    end = int(time.time()) + 1.01
    while (before := time.time()) < end:
        stamp = clock_stamp()
        if stamp != clock_stamp(before) and stamp != clock_stamp(time.time()):
            late.append((before, stamp))
    assert late == []


def test_date_line_of_the_table_and_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path
) -> None:
    board(tmp_path, monkeypatch, "h100")
    pattern = re.compile(r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ 1-3]\d \d\d:\d\d:\d\d \d{4}")
    before = time.time()
    rc, out = smi(library_file)
    after = time.time()
    assert rc == 0 and pattern.fullmatch(out.splitlines()[0].rstrip())
    assert out.splitlines()[0].rstrip() in {clock_stamp(before), clock_stamp(after)}
    rc, out = smi(library_file, "-q")
    stamp = next(line for line in out.splitlines() if line.startswith("Timestamp"))
    assert pattern.fullmatch(stamp.split(": ", 1)[1])


def test_compute_instances_of_one_gpu_instance_share_its_memory(
    h100_mig: Path, library_file: Path
) -> None:
    """Memory is the GPU instance's: with a 1c and a 2c in one 3g.40gb the real box shows the
    instance's use on both rows, not a split."""
    with LiveLayer.open(h100_mig, library=library_file) as records:
        records.put(
            Allocation(
                "c1", pid=os.getpid(), gpus=(0,), used_memory_bytes=3 * GiB, mig=((0, 2, 0),)
            )
        )
    rc, out = smi(library_file)
    assert rc == 0
    rows = [line for line in out.splitlines() if re.match(r"\|  0    2   [01] ", line)]
    assert len(rows) == 2
    assert all("3072MiB / 40448MiB" in row for row in rows)


def test_nvlink_status_of_a_mig_gpu(h100_mig: Path, library_file: Path) -> None:
    """The real tool lists no links of a GPU in MIG mode: "Nvlink queries are not supported
    for Devices in MIG mode"; the GPU beside it still lists its 18 links."""
    rc, out = smi(library_file, "nvlink", "-s")
    assert rc == 0
    blocks = out.split("GPU 1:")
    assert "Nvlink queries are not supported for Devices in MIG mode" in blocks[0]
    assert "Link 0" not in blocks[0]
    assert blocks[1].count("Link ") == 18


def test_query_gpu_on_a_mig_gpu(h100_mig: Path, library_file: Path) -> None:
    """On a MIG-mode GPU the whole-GPU engine utilizations and the remapped-row properties are
    ``[N/A]`` (the engines belong to the GPU instances, as SM utilization does)."""
    names = (
        "utilization.gpu,utilization.encoder,utilization.decoder,utilization.jpeg,"
        "utilization.ofa,remapped_rows.correctable,remapped_rows.uncorrectable,"
        "remapped_rows.pending,remapped_rows.failure"
    )
    rc, out = smi(library_file, f"--query-gpu={names}", "--format=csv,noheader")
    assert rc == 0
    mig, whole = out.splitlines()
    assert mig.split(", ") == ["[N/A]"] * 9
    assert whole.split(", ")[:5] == ["0 %"] * 5
    assert "[N/A]" not in whole


def test_dmon_prints_dashes_for_a_mig_gpu(h100_mig: Path, library_file: Path) -> None:
    rc, out = smi(library_file, "dmon", "-c", "1", "-s", "u")
    assert rc == 0
    rows = [line.split() for line in out.splitlines() if not line.startswith("#")]
    assert rows[0] == ["0", "-", "-", "-", "-", "-", "-"]
    assert rows[1] == ["1", "0", "0", "0", "0", "0", "0"]


def test_pmon_prints_dashes_for_an_idle_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path
) -> None:
    """A process that ran nothing in the window has no sample: real pmon prints ``-``."""
    path = board(tmp_path, monkeypatch, "h100")
    with LiveLayer.open(path, library=library_file) as records:
        records.put(Allocation("idle", pid=os.getpid(), gpus=(0,), used_memory_bytes=GiB))
    rc, out = smi(library_file, "pmon", "-c", "1", "-s", "u")
    assert rc == 0
    row = next(
        line.split() for line in out.splitlines() if line.split()[:2] == ["0", str(os.getpid())]
    )
    assert row[2:9] == ["C", "-", "-", "-", "-", "-", "-"]


def test_h200_edpp_multiplier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path
) -> None:
    """The H200 shares the H100's baseboard, whose 590 capture reports EDPp 100.00 %."""
    board(tmp_path, monkeypatch, "h200", driver_version="590.44.01")
    rc, out = smi(library_file, "--query-gpu=edpp_multiplier", "--format=csv,noheader")
    assert (rc, out.splitlines()) == (0, ["100.00 %", "100.00 %"])


def test_help_query_gpu_lists_the_drivers_properties(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path
) -> None:
    """The real tool ships with its driver: ``--help-query-gpu`` of 580 does not list the
    properties only later drivers accept (those ``--query-gpu`` refuses there)."""
    board(tmp_path, monkeypatch, "h100", driver_version="580.105.08")
    rc, old = smi(library_file, "--help-query-gpu")
    assert rc == 0
    listed = set(re.findall(r'^"([^"]+)"', old, re.M))
    for name in listed:
        assert smi(library_file, f"--query-gpu={name}", "--format=csv")[0] == 0, name
    board(tmp_path, monkeypatch, "h100", driver_version="595.80.01")
    rc, new = smi(library_file, "--help-query-gpu")
    newer = set(re.findall(r'^"([^"]+)"', new, re.M)) - listed
    assert rc == 0 and newer
    for name in newer:
        rc, out = smi(library_file, f"--query-gpu={name}", "--format=csv")
        assert rc == 0, name
    # the last one of 595 is refused by 580, as --help-query-gpu of 580 says
    board(tmp_path, monkeypatch, "h100", driver_version="580.105.08")
    rc, out = smi(library_file, f"--query-gpu={sorted(newer)[0]}", "--format=csv")
    assert rc == 2 and "is not a valid field to query" in out


def test_610_names_the_kmd_and_cuda_umd_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path
) -> None:
    """A real 610.43.02 table (sglang-project/sglang#27487, 8 x B200):
    ``| NVIDIA-SMI 610.43.02              KMD Version: 610.43.02     CUDA UMD Version: 13.3     |``;
    rendered with no cuda_driver_version given."""
    board(tmp_path, monkeypatch, "b200", driver_version="610.43.02")
    rc, out = smi(library_file)
    assert rc == 0
    assert out.splitlines()[2] == (
        "| NVIDIA-SMI 610.43.02              KMD Version: 610.43.02"
        "     CUDA UMD Version: 13.3     |"
    )
    board(tmp_path, monkeypatch, "b200", driver_version="580.105.08")
    rc, out = smi(library_file)
    assert "Driver Version: 580.105.08" in out.splitlines()[2] and "KMD" not in out


EXPORTER = Path(__file__).resolve().parents[1] / "smi_fixtures" / "exporter"


@pytest.mark.parametrize(
    ("capture", "profile", "driver"),
    [
        ("linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt", "h100", "590.48.01"),
        ("linux-x86_64__nvidia-l40s__595.80.txt", "l40s", "595.80"),
        ("linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt", "l40s", "610.57.04"),
    ],
)
def test_version_matches_the_real_tool(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    library_file: Path,
    capture: str,
    profile: str,
    driver: str,
) -> None:
    """``--version`` line for line as the real 590, 595 and 610 tools print it (610: the
    driver and CUDA lines deprecated for ``KMD version`` and ``CUDA UMD version``)."""
    text = (EXPORTER / capture).read_text()
    body = text[text.index("# $ nvidia-smi --version") :].split("\n", 2)[2]
    real = body.split("\n\n", 1)[0].splitlines()
    board(tmp_path, monkeypatch, profile, driver_version=driver)
    rc, out = smi(library_file, "--version")
    assert (rc, out.splitlines()) == (0, real)


def test_610_report_header_matches_the_real_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path
) -> None:
    """The real 610.57.04 ``-q`` keeps Driver / CUDA Version marked deprecated and adds KMD
    and CUDA UMD Version; the default table's version line names them too."""
    text = (EXPORTER / "linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt").read_text()
    body = text[text.index("# $ nvidia-smi -q") :].split("\n", 2)[2].splitlines()
    real = body[body.index("==============NVSMI LOG==============") + 3 :][:4]
    table = text[text.index("# $ nvidia-smi \n") :].splitlines()
    version_line = next(line for line in table if line.startswith("| NVIDIA-SMI"))
    board(tmp_path, monkeypatch, "l40s", driver_version="610.57.04")
    rc, out = smi(library_file, "-q")
    lines = out.splitlines()
    assert rc == 0 and lines[4:8] == real
    rc, out = smi(library_file)
    assert rc == 0 and out.splitlines()[2] == version_line
