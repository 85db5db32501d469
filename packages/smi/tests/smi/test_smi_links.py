"""``nvlink -e``, ``nvlink -gt d|r``, ``topo -p2p`` and the line of a GPU without NVLink, against
real output (``smi_fixtures/links``), each value read back through NVML (nvidia-ml-py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from smi_fixtures.helpers import render_profile, smi

LINKS = Path(__file__).resolve().parents[1] / "smi_fixtures" / "links"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def shape(text: str) -> list[str]:
    """``text`` with the GPU identity and the numbers abstracted: the layout alone."""
    text = re.sub(r"^GPU \d+: .*$", "GPU n: NAME (UUID: U)", text, flags=re.M)
    return re.sub(r"\d+", "9", text).splitlines()


@pytest.fixture
def h100(library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = render_profile("h100", 8, tmp_path / "state.nvmlmock")
    live.create(tmp_path / live.LIVE_FILE_NAME, live.read_board(state))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    return tmp_path / live.LIVE_FILE_NAME


@pytest.fixture
def gpu0(pynvml: Any, h100: Path) -> Iterator[Any]:
    pynvml.nvmlInit()
    try:
        yield pynvml.nvmlDeviceGetHandleByIndex(0)
    finally:
        pynvml.nvmlShutdown()


def test_error_counters_in_the_real_layout(
    library_file: Path, h100: Path, pynvml: Any, gpu0: Any
) -> None:
    with live.LiveLayer.open(h100) as layer:
        layer.set(0, {"nvlink_down_mask": 0b10, "nvlink_crc_errors": 7, "nvlink_replay_errors": 3})
    rc, out = smi(library_file, "nvlink", "-e", "-i", "0")
    assert rc == 0, out
    real = (LINKS / "nvlink-e-h100.txt").read_text()
    assert shape(out)[: len(shape(real))] == shape(real)
    blocks = out.split("\n\n")
    count = pynvml.nvmlDeviceGetFieldValues(gpu0, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT])[0]
    assert len(blocks) == count.value.uiVal  # every link NVML counts, a blank line between
    crc = pynvml.nvmlDeviceGetNvLinkErrorCounter(gpu0, 1, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)
    replay = pynvml.nvmlDeviceGetNvLinkErrorCounter(gpu0, 1, pynvml.NVML_NVLINK_ERROR_DL_REPLAY)
    assert (crc, replay) == (7, 3)
    assert "\t Link 1: CRC Errors: 7\n" in out and "\t Link 1: Replay Errors: 3\n" in out
    assert "\t Link 0: CRC Errors: 0\n" in out


def test_throughput_counters_per_link(
    library_file: Path, h100: Path, pynvml: Any, gpu0: Any
) -> None:
    for kind, labels, first in (
        ("d", ("Data Tx", "Data Rx"), 138),
        ("r", ("Raw Tx", "Raw Rx"), 140),
    ):
        rc, out = smi(library_file, "nvlink", "-gt", kind, "-i", "0")
        assert rc == 0, out
        lines = out.splitlines()
        assert lines[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
        assert len(lines) == 1 + 2 * 18
        for link in range(18):
            tx, rx = lines[1 + 2 * link], lines[2 + 2 * link]
            assert re.fullmatch(rf"\t Link {link}: {labels[0]}: \d+ KiB", tx)
            assert re.fullmatch(rf"\t Link {link}: {labels[1]}: \d+ KiB", rx)
        value = pynvml.nvmlDeviceGetFieldValues(gpu0, [(first, 0)])[0]
        assert lines[1] == f"\t Link 0: {labels[0]}: {value.value.ullVal} KiB"
    assert smi(library_file, "nvlink", "-gt", "x")[0] == 2
    assert smi(library_file, "nvlink", "-gt")[0] == 2


def test_p2p_matrix_and_legend(library_file: Path, h100: Path) -> None:
    real = (LINKS / "topo-p2p-r-8gpu.txt").read_text()
    for kind in "rwnap":
        rc, out = smi(library_file, "topo", "-p2p", kind)
        assert rc == 0, out
        assert ANSI.sub("", out).rstrip("\n") == real.rstrip("\n"), kind
        assert out.startswith("\t\x1b[4mGPU0\t")  # the header row underlined, as in topo -m
    rc, out = smi(library_file, "topo", "-p2p", "r", "-i", "0,3")
    assert ANSI.sub("", out).splitlines()[:3] == ["\tGPU0\tGPU1", " GPU0\tX\tOK", " GPU1\tOK\tX"]
    assert smi(library_file, "topo", "-p2p", "q")[0] == 2
    assert smi(library_file, "topo", "-m", "-p2p", "r")[0] == 2


def test_a_board_without_nvlink_says_so_in_every_nvlink_view(
    library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "MOCK_NVML_CONFIG", str(render_profile("l40s", 1, tmp_path / "state.nvmlmock"))
    )
    real = (LINKS / "nvlink-s-no-nvlink.txt").read_text()
    for args in (("-s",), ("-c",), ("-e",), ("-gt", "d"), ("-gt", "r")):
        rc, out = smi(library_file, "nvlink", *args)
        assert rc == 0, args
        assert shape(out) == shape(real), args
        assert out.startswith("GPU 0: NVIDIA L40S (UUID: GPU-")


def test_topo_closest_cpu_of_one_gpu(library_file: Path, h100: Path) -> None:
    """``NUMA IDs of closest CPU: N``, the line scripts parse to bind with ``numactl``."""
    assert smi(library_file, "topo", "-C", "-i", "1") == (0, "NUMA IDs of closest CPU: 0\n")
    assert smi(library_file, "topo", "--get-numa-id-of-nearby-cpu", "-i", "0")[0] == 0
    assert smi(library_file, "topo", "-C")[0] == 2  # one GPU, named by -i
    assert smi(library_file, "topo", "-C", "-i", "0,1")[0] == 2
    assert smi(library_file, "topo", "-C", "-i", "9") == (6, "No devices were found\n")


def test_topo_nearest_gpus_at_each_level(library_file: Path, h100: Path, pynvml: Any) -> None:
    """Each level lists the GPUs whose common PCIe ancestor with the one asked about is that
    close or closer (as NVML says pair by pair), never the GPU itself."""
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
    ancestor = [pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[2], h) for h in handles]
    pynvml.nvmlShutdown()
    seen = set()
    for level, nvml_level in zip("012345", (0, 10, 20, 30, 40, 50), strict=True):
        rc, out = smi(library_file, "topo", "-n", level, "-i", "2")
        assert rc == 0
        want = [f"GPU{i}" for i in range(8) if i != 2 and ancestor[i] <= nvml_level]
        assert out.splitlines() == want, level
        seen.add(len(want))
    assert len(seen) > 1 and max(seen) == 7  # the levels differ; the widest finds every GPU
    assert smi(library_file, "topo", "-n", "6", "-i", "0")[0] == 2
    assert smi(library_file, "topo", "-n", "3")[0] == 2


def test_topo_matrix_refuses_an_id(library_file: Path, h100: Path) -> None:
    assert smi(library_file, "topo", "-m", "-i", "0") == (
        2,
        "The -i command line argument must be used in conjunction with -n or -p.\n",
    )
