"""``nvidia-smi nvlink -R``: each link's far end, against real output (``smi_fixtures/links``),
every value read back through NVML (nvidia-ml-py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from smi_fixtures.helpers import render_profile, smi

LINKS = Path(__file__).resolve().parents[1] / "smi_fixtures" / "links"
FI_REMOTE = 146  # NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID
BUS = r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.\d"
LINE = re.compile(rf"^\t Link (\d+): Remote Device ({BUS}): Link (\d+)$")


def shape(text: str) -> list[str]:
    """``text`` with the GPU identity and the numbers abstracted: the layout alone."""
    text = re.sub(r"^GPU \d+: .*$", "GPU n: NAME (UUID: U)", text, flags=re.M)
    return re.sub(r"[0-9A-F]+", "9", text).splitlines()


@pytest.fixture
def h100(library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = render_profile("h100", 8, tmp_path / "state.nvmlmock")
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    return state


def test_remote_links_in_the_real_layout(library_file: Path, h100: Path) -> None:
    rc, out = smi(library_file, "nvlink", "-R", "-i", "0")
    assert rc == 0
    real = (LINKS / "nvlink-R-a100.txt").read_text()
    assert shape(out)[:3] == shape(real)
    assert len(out.splitlines()) == 1 + 18


def test_each_line_is_what_nvml_answers(library_file: Path, h100: Path, pynvml: Any) -> None:
    rc, out = smi(library_file, "nvlink", "--remotelinkinfo")
    assert rc == 0
    pynvml.nvmlInit()
    try:
        blocks = re.split(r"^GPU \d+: .*\n", out, flags=re.M)[1:]
        assert len(blocks) == pynvml.nvmlDeviceGetCount() == 8
        ports: dict[str, set[int]] = {}
        for index, block in enumerate(blocks):
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            for line in block.splitlines():
                match = LINE.match(line)
                assert match, line
                link, bus, far = int(match[1]), match[2], int(match[3])
                assert pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId == bus
                value = pynvml.nvmlDeviceGetFieldValues(h, [(FI_REMOTE, link)])[0]
                assert value.nvmlReturn == pynvml.NVML_SUCCESS
                assert value.value.uiVal == far
                ports.setdefault(bus, set()).add(far)
        # 8 GPUs x 18 links over four switches: every switch port is used once
        assert sum(len(p) for p in ports.values()) == 8 * 18
    finally:
        pynvml.nvmlShutdown()


def test_a_board_without_nvlink_says_so(
    library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(render_profile("t4", 1, tmp_path / "t4.nvmlmock")))
    rc, out = smi(library_file, "nvlink", "-R")
    assert rc == 0
    assert out.splitlines()[1:] == ["Device does not have or support Nvlink"]


def test_one_view_at_a_time(library_file: Path, h100: Path) -> None:
    rc, _ = smi(library_file, "nvlink", "-R", "-e")
    assert rc == 2
