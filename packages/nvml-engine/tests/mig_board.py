"""The MIG board the allocation tests share: a two-GPU H100 node whose GPU 0 is split into two
1g.10gb MIG devices through nvidia-ml-py, as a MIG manager would split it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.render import render_text


def split_board(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, node: str
) -> tuple[Path, Any]:
    """Write the board for *node* under *tmp_path* with its live file, point the library at
    it, and split GPU 0 (GI/CI ids as the library gives them): the live file and GPU 0."""
    state = tmp_path / "state.nvmlmock"
    state.write_text(render_text(resolve_config(node=node, profile="h100", count=2)))
    live_file = live.create(tmp_path / live.LIVE_FILE_NAME, live.read_board(state))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    pynvml.nvmlInit()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceSetMigMode(gpu, pynvml.NVML_DEVICE_MIG_ENABLE)
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    for _ in range(2):
        gi = pynvml.nvmlDeviceCreateGpuInstance(gpu, info.id)
        ci_info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 0)
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
    return live_file, gpu
