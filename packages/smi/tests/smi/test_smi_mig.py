"""The work-alike's MIG commands over the library's MIG API, in the real tool's formats:
``-mig 1``, ``mig -lgip``, ``-cgi ... -C``, ``-lgi``, ``-lci``, ``-dci``, ``-dgi`` and the MIG
rows of ``-L``."""

from __future__ import annotations

import re
from pathlib import Path

import nvml_mock_live as live
import pytest
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.render import render_text
from smi_fixtures.helpers import smi


@pytest.fixture
def h100(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state.nvmlmock"
    state.write_text(render_text(resolve_config(node="smi-mig", profile="h100", count=2)))
    live.create(tmp_path / live.LIVE_FILE_NAME, live.read_board(state))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    return state


def test_enable_create_list_destroy(library_file: Path, h100: Path) -> None:
    rc, out = smi(library_file, "mig", "-lgi")
    assert (rc, out) == (6, "No MIG-enabled devices found.\n")
    rc, out = smi(library_file, "-i", "0", "-mig", "1")
    assert (rc, out) == (0, "Enabled MIG Mode for GPU 00000000:53:00.0\nAll done.\n")

    rc, out = smi(library_file, "mig", "-cgi", "9,1g.10gb", "-C")
    assert rc == 0
    assert out.splitlines() == [
        "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.40gb (ID  9)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using"
        " profile MIG 3g.40gb (ID  2)",
        "Successfully created GPU instance ID  7 on GPU  0 using profile MIG 1g.10gb (ID 19)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  7 using"
        " profile MIG 1g.10gb (ID  0)",
    ]

    rc, out = smi(library_file, "mig", "-lgi")
    lines = out.splitlines()
    assert rc == 0 and all(len(line) == 59 for line in lines)  # the 580 driver's -lgi
    assert lines[1] == "| GPU instances:                                          |"
    assert lines[5] == "|   0  MIG 1g.10gb           19        7          0:1     |"
    assert lines[7] == "|   0  MIG 3g.40gb            9        2          4:4     |"

    rc, out = smi(library_file, "mig", "-lci")
    assert rc == 0 and "| Compute instances:" in out
    assert "MIG 3g.40gb          2         0          0:3" in out

    rc, out = smi(library_file, "-L")
    assert rc == 0
    rows = out.splitlines()
    assert rows[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    assert re.fullmatch(r"  MIG 3g\.40gb     Device  0: \(UUID: MIG-[0-9a-f-]{36}\)", rows[1])
    assert re.fullmatch(r"  MIG 1g\.10gb     Device  1: \(UUID: MIG-[0-9a-f-]{36}\)", rows[2])
    assert rows[3].startswith("GPU 1: ")

    rc, out = smi(library_file, "mig", "-dgi")
    assert rc == 1 and "In use by another client" in out
    rc, out = smi(library_file, "mig", "-dci")
    assert rc == 0 and out.count("Successfully destroyed compute instance") == 2
    rc, out = smi(library_file, "mig", "-dgi", "-gi", "7")
    assert (rc, out) == (0, "Successfully destroyed GPU instance ID  7 from GPU  0\n")


def test_profile_table(library_file: Path, h100: Path) -> None:
    smi(library_file, "-i", "0", "-mig", "1")
    rc, out = smi(library_file, "mig", "-lgip")
    lines = out.splitlines()
    assert rc == 0 and all(len(line) == 81 for line in lines)  # the 580 driver's -lgip
    assert lines[2] == (
        "| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |"
    )
    names = re.findall(r"MIG (\S+)", out)
    assert names == [
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
    ]
    assert "|   0  MIG 7g.80gb         0     1/1          79.25      No     132   7     0   |" in (
        lines
    ) or any(line.startswith("|   0  MIG 7g.80gb") and "79.25" in line for line in lines)


def test_bad_combinations_are_refused(library_file: Path, h100: Path) -> None:
    rc, _ = smi(library_file, "mig", "-lgi", "-lgip")
    assert rc == 2
    rc, _ = smi(library_file, "-mig", "2")
    assert rc == 2


def test_destroying_an_instance_that_does_not_exist_is_not_found(
    library_file: Path, h100: Path
) -> None:
    """It returned 0 and said nothing; the real tool names each missing instance and
    exits 6 (NVML's Not Found)."""
    assert smi(library_file, "-i", "0", "-mig", "1")[0] == 0
    rc, out = smi(library_file, "mig", "-i", "0", "-dgi", "-gi", "5")
    assert (rc, out) == (
        6,
        "Unable to destroy GPU instance ID  5 from GPU  0: Not Found\n"
        "Failed to destroy GPU instances: Not Found\n",
    )
    rc, out = smi(library_file, "mig", "-i", "0", "-dci", "-gi", "5")
    assert rc == 6 and "Unable to find GPU instance ID  5 on GPU  0: Not Found" in out
    assert smi(library_file, "mig", "-i", "0", "-dgi")[0] == 6  # none at all
    rc, out = smi(library_file, "mig", "-i", "0", "-cgi", "19", "-C")
    assert rc == 0
    gid = int(re.search(r"GPU instance ID +(\d+)", out).group(1))  # type: ignore[union-attr]
    rc, out = smi(library_file, "mig", "-i", "0", "-dci", "-gi", str(gid), "-ci", "3")
    assert rc == 6
    assert f"compute instance ID  3 from GPU  0 GPU instance ID {gid:>2}: Not Found" in out
    assert smi(library_file, "mig", "-i", "0", "-dci", "-gi", str(gid))[0] == 0
    assert smi(library_file, "mig", "-i", "0", "-dgi", "-gi", str(gid))[0] == 0
