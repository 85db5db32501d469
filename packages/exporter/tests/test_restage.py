"""A node staged again under a running exporter: it serves the new GPUs, not the old ones.

The node is staged with the engine's own ``nvml-mock-engine stage`` into an overlay, and
the exporter reads it through the overlay's paths, as the chart's exporter does; the node
is then re-staged with another profile and GPU count while the exporter runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Exporter, Node, get, parse


def _stage(overlay: Path, profile: str, count: int) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nvml_mock_engine",
            "stage",
            "--profile",
            profile,
            "--count",
            str(count),
            "--node",
            "node-a",
            "--no-devices",
            "--imex-channels",
            "0",
            str(overlay),
        ],
        env={k: v for k, v in os.environ.items() if not k.startswith(("MOCK_", "NVML_MOCK_"))},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def staged(tmp_path: Path) -> Node:
    overlay = tmp_path / "overlay"
    _stage(overlay, "h100", 8)
    config = overlay / "config"
    return Node(
        overlay,
        config / "state.nvmlmock",
        config / "live.nvmlmock",
        overlay / "lib" / "libnvidia-ml.so.1",
        8,
    )


def _uuids(text: str) -> dict[str, str]:
    return {s.labels["gpu"]: s.labels["UUID"] for s in parse(text).of("DCGM_FI_DEV_GPU_TEMP")}


def test_a_re_staged_node_is_served_with_its_new_gpus(
    staged: Node, run_exporter: Callable[..., Exporter]
) -> None:
    exporter = run_exporter(on=staged)
    before = _uuids(exporter.wait_for(lambda t: 'DCGM_FI_DEV_GPU_TEMP{gpu="7"' in t))
    assert len(before) == 8
    _stage(staged.root, "gb200", 4)
    text = exporter.wait_for(lambda t: "GB200" in t and "H100" not in t, timeout=60)
    exposition = parse(text)
    after = _uuids(text)
    assert sorted(after) == ["0", "1", "2", "3"]
    assert not set(after.values()) & set(before.values())
    assert {s.labels["modelName"] for s in exposition.of("DCGM_FI_DEV_GPU_TEMP")} == {
        "NVIDIA GB200"
    }
    assert get(exporter.url + "/health")[0] == 200
    # the Xid watch follows too: an Xid on a new GPU reaches its series
    staged.ctl("xid", "48", "-i", "2")
    exporter.wait_for(
        lambda t: any(s.value == 48 for s in parse(t).of("DCGM_FI_DEV_XID_ERRORS", gpu="2"))
    )
    # and back: the exporter follows every re-stage, not only the first
    _stage(staged.root, "h100", 8)
    text = exporter.wait_for(lambda t: 'DCGM_FI_DEV_GPU_TEMP{gpu="7"' in t and "GB200" not in t)
    assert _uuids(text) == before
    assert exporter.proc.poll() is None
    assert "Traceback" not in exporter.log.read_text()
