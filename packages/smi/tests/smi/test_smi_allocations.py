"""The work-alike over allocation records: a GPU a container holds is busy for ``-r`` and
shows its process in ``pmon``, as a GPU with a running CUDA process does on a real node.

The records go in through :class:`LiveLayer`, as the NRI plugin writes them; the
work-alike reads them back through the real library only (NVML's process lists).

The refusal's text and exit code are the real tool's, as public reports of it show
(NVIDIA/mig-parted#181 for several GPUs, NVIDIA/NVSentinel#1690 for one, both with exit 255).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import nvml_mock_live as live
import pytest
from conftest import StateWriter
from nvml_mock_live import UTIL_PATTERNS, Allocation, LiveLayer
from smi_fixtures.helpers import smi

GiB = 1 << 30
IN_USE = (
    " currently being used by one or more other processes (e.g., Fabric Manager, CUDA"
    " application, graphics application such as an X server, or a monitoring application such"
    " as another instance of nvidia-smi). Please first kill all processes using {these} and all"
    " compute applications running in the system."
)


@pytest.fixture
def records(write_state: StateWriter) -> Iterator[LiveLayer]:
    state = write_state(3)
    path = live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))
    with live.LiveLayer.open(path, state=state) as layer:
        yield layer


def test_reset_refuses_a_gpu_a_container_holds_until_the_record_is_gone(
    library_file: Path, records: LiveLayer
) -> None:
    records.put(Allocation("c1", pid=4242, gpus=(1,), used_memory_bytes=20 * GiB, pod="train"))
    rc, out = smi(library_file, "-r", "-i", "1")
    assert rc == 255
    assert out == (
        "The following GPUs could not be reset:\n"
        "  GPU 00000000:19:00.0: In use by another client\n"
        "\n"
        "1 device is" + IN_USE.format(these="this device") + "\n"
    )
    assert smi(library_file, "-r", "-i", "0") == (
        0,
        "GPU 00000000:18:00.0 was successfully reset.\n",
    )
    assert records.remove("c1") is True
    assert smi(library_file, "-r", "-i", "1") == (
        0,
        "GPU 00000000:19:00.0 was successfully reset.\n",
    )


def test_reset_of_every_gpu_names_each_busy_one(library_file: Path, records: LiveLayer) -> None:
    records.put(Allocation("c1", pid=4242, gpus=(0, 2), used_memory_bytes=GiB))
    rc, out = smi(library_file, "--gpu-reset")
    assert rc == 255
    assert out == (
        "The following GPUs could not be reset:\n"
        "  GPU 00000000:18:00.0: In use by another client\n"
        "  GPU 00000000:1A:00.0: In use by another client\n"
        "\n"
        "2 devices are" + IN_USE.format(these="these devices") + "\n"
    )
    records.replace_all([])
    rc, out = smi(library_file, "--gpu-reset")
    assert rc == 0 and out.endswith("All done.\n")


def test_pmon_shows_each_record_as_a_compute_process(
    library_file: Path, records: LiveLayer
) -> None:
    steady = UTIL_PATTERNS["steady"]
    records.put(
        Allocation(
            "c1",
            pid=4242,
            gpus=(1,),
            used_memory_bytes=20 * GiB,
            util_pattern=steady,
            util_level=30,
        )
    )
    rc, out = smi(library_file, "pmon", "-c", "1", "-s", "um")
    assert rc == 0
    rows = [line.split() for line in out.splitlines()[2:]]
    assert rows == [
        ["0", *["-"] * 11],
        # pid, type C, sm/mem/enc/dec from the record's pattern, no jpg/ofa, fb in MB, no ccpm;
        # the process is not one of this node's: its name is unknown, printed as "-"
        ["1", "4242", "C", "30", rows[1][4], "0", "0", "-", "-", "20480", "-", "-"],
        ["2", *["-"] * 11],
    ]
    assert int(rows[1][4]) > 0  # the memory share the pattern gives


def test_pmon_names_a_process_it_can_see(library_file: Path, records: LiveLayer) -> None:
    records.put(Allocation("c1", pid=os.getpid(), gpus=(2,), used_memory_bytes=GiB))
    rc, out = smi(library_file, "pmon", "-c", "1", "-i", "2")
    assert rc == 0
    row = out.splitlines()[2]
    # the invoked program's name (argv[0], without its directory), at most 15 characters
    argv0 = Path("/proc/self/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    comm = argv0.rsplit("/", 1)[-1][:15]
    assert row.split()[:3] == ["2", str(os.getpid()), "C"]
    assert row.split()[-1] == comm
