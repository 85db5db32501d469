"""The work-alike inside an ``NVIDIA_VISIBLE_DEVICES`` view: GPU 0 of the view is the GPU the
view names, for ``-r`` and for the bus id a lost GPU is named by, as in every other view.

The node has four GPUs (bus ids ``18`` to ``1B``); the view ``2,3`` shows board GPUs 2 and 3
as GPUs 0 and 1, as the NVIDIA container toolkit numbers them inside a container. The library
reads the variable at ``nvmlInit``, so each run in this process sees the view.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import nvml_mock_live as live
import pytest
from conftest import StateWriter
from nvml_mock_live import Allocation
from smi_fixtures.helpers import smi

GiB = 1 << 30


@pytest.fixture
def layer(write_state: StateWriter, monkeypatch: pytest.MonkeyPatch) -> Iterator[live.LiveLayer]:
    state = write_state(4)
    path = live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "2,3")
    with live.LiveLayer.open(path, state=state) as opened:
        for gpu in range(4):
            opened.set(gpu, {"temperature_c": 90 + gpu})
        yield opened


def hot(layer: live.LiveLayer) -> list[int]:
    """The board GPUs whose live temperature is still set (not reset)."""
    return [gpu for gpu in range(4) if layer.values(gpu)]


def test_reset_of_view_gpu_0_resets_the_board_gpu_the_view_names(
    library_file: Path, layer: live.LiveLayer
) -> None:
    assert smi(library_file, "-r", "-i", "0") == (
        0,
        "GPU 00000000:1A:00.0 was successfully reset.\n",
    )
    assert hot(layer) == [0, 1, 3]
    rc, out = smi(library_file, "-r", "-i", "GPU-01000100-1111-2222-3333-000000000003")
    assert (rc, out) == (0, "GPU 00000000:1B:00.0 was successfully reset.\n")
    assert hot(layer) == [0, 1]


def test_reset_of_every_gpu_resets_the_view_only(library_file: Path, layer: live.LiveLayer) -> None:
    assert smi(library_file, "--gpu-reset") == (
        0,
        "GPU 00000000:1A:00.0 was successfully reset.\n"
        "GPU 00000000:1B:00.0 was successfully reset.\n"
        "All done.\n",
    )
    assert hot(layer) == [0, 1]


def test_reset_cannot_name_a_gpu_outside_the_view(
    library_file: Path, layer: live.LiveLayer
) -> None:
    for ident in ("2", "GPU-01000100-1111-2222-3333-000000000000", "00000000:18:00.0"):
        assert smi(library_file, "-r", "-i", ident) == (6, "No devices were found\n"), ident
    assert hot(layer) == [0, 1, 2, 3]


def test_reset_in_a_view_refuses_the_gpu_a_container_holds(
    library_file: Path, layer: live.LiveLayer
) -> None:
    layer.put(Allocation("c1", pid=4242, gpus=(2,), used_memory_bytes=GiB))
    rc, out = smi(library_file, "-r", "-i", "0")
    assert rc == 255
    assert out.splitlines()[1] == "  GPU 00000000:1A:00.0: In use by another client"
    assert smi(library_file, "-r", "-i", "1")[0] == 0  # board GPU 3 holds nothing
    assert hot(layer) == [0, 1, 2]


def test_a_lost_gpu_in_a_view_is_named_by_its_own_bus_id(
    library_file: Path, layer: live.LiveLayer
) -> None:
    layer.set(3, {"gpu_lost": 1})
    lost = (
        "Unable to determine the device handle for GPU0000:1B:00.0: GPU is lost.  "
        "Reboot the system to recover this GPU"
    )
    rc, out = smi(library_file, "-L")
    assert rc == 15
    assert out.splitlines() == [
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-01000100-1111-2222-3333-000000000002)",
        lost,
    ]
    assert smi(library_file) == (15, lost + "\n")
    assert smi(library_file, "-q", "-i", "1") == (15, lost + "\n")
    # and -r brings it back, found by its place in the view
    assert smi(library_file, "-r", "-i", "1") == (
        0,
        "GPU 00000000:1B:00.0 was successfully reset.\n",
    )
    assert hot(layer) == [0, 1, 2]
