"""The state's GPU sections: the quick reader of one key is the lenient reader, projected."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nvml_mock_live import LiveLayerError, read_board
from nvml_mock_live.state_text import gpu_sections, gpu_values, read_gpu_uuids

LINES = st.sampled_from(
    [
        "[gpu 0]",
        "[gpu 12]",
        "[system]",
        "[gpux]",
        "uuid=GPU-a",
        " uuid = GPU-b ",
        "uuid=",
        "uuid",
        "#uuid=GPU-c",
        "x=uuid",
        "uuidx=GPU-d",
        "name=H100",
        "",
        "\r",
        " [gpu 3]",
        "[gpu uuid=GPU-e]",
        "uuid=uuid=GPU-f",
        "uuid=GPU-\u00e9",
        "\x0c",
        "\u2028",
        "[",
    ]
)


@given(st.lists(LINES, max_size=30), st.sampled_from(["\n", "\r\n", "\r"]))
def test_one_key_is_the_sections_projection(lines: list[str], newline: str) -> None:
    text = newline.join(lines)
    assert gpu_values(text, "uuid") == [gpu.get("uuid", "") for gpu in gpu_sections(text)]


def test_read_gpu_uuids_refuses_as_read_board_refuses(tmp_path: Path) -> None:
    state = tmp_path / "state.nvmlmock"
    state.write_text("[system]\ndevice_count=2\n[gpu 0]\nuuid=GPU-0\n[gpu 1]\nuuid=GPU-1\n")
    assert read_gpu_uuids(state) == [gpu.uuid for gpu in read_board(state)] == ["GPU-0", "GPU-1"]
    for text in ("[gpu 0]\nname=x\n", "".join(f"[gpu {i}]\nuuid=GPU-{i}\n" for i in range(65))):
        state.write_text(text)
        with pytest.raises(LiveLayerError) as quick:
            read_gpu_uuids(state)
        with pytest.raises(LiveLayerError) as board:
            read_board(state)
        assert str(quick.value) == str(board.value)
        assert "not a board state the live layer can follow" in str(quick.value)
    with pytest.raises(LiveLayerError, match="cannot read the board state"):
        read_gpu_uuids(tmp_path / "missing")
