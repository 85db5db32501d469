"""Re-recording with NVIDIA's binaries gives the stored fixtures again.

Needs the components' binaries (``NVML_MOCK_KWOK_BIN_DIR``: nvidia-device-plugin and
gpu-feature-discovery at least), root for the private mount namespace, and, for the DRA
driver's slices, an API server (``NVML_MOCK_KWOK_KUBECONFIG``). Skipped without them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import field_diff
from nvml_mock_kwok.cli import EXIT_OK, main
from nvml_mock_kwok.kubelet import Advertised, decode_fields
from nvml_mock_kwok.truth import load_truth

BIN = os.environ.get("NVML_MOCK_KWOK_BIN_DIR")
KUBECONFIG = os.environ.get("NVML_MOCK_KWOK_KUBECONFIG")


def test_decodes_a_device_list() -> None:
    device = b"\x0a\x03ab0\x12\x07Healthy"
    bad = b"\x0a\x03ab1\x12\x09Unhealthy"
    message = b"\x0a" + bytes([len(device)]) + device + b"\x0a" + bytes([len(bad)]) + bad
    fields = decode_fields(message)
    assert [n for n, _ in fields] == [1, 1]
    listed = Advertised("nvidia.com/gpu", {"ab0": "Healthy", "ab1": "Unhealthy"})
    assert (listed.capacity, listed.allocatable) == (2, 1)


@pytest.mark.skipif(not BIN, reason="NVML_MOCK_KWOK_BIN_DIR (NVIDIA's component binaries) unset")
@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"),
    reason="recording needs root and unshare for a private mount namespace",
)
@pytest.mark.parametrize("profile", ["gb200", "l40s"])
def test_rerecording_gives_the_fixture(profile: str, tmp_path: Path) -> None:
    out = tmp_path / f"{profile}.json"
    argv = ["record", "--profile", profile, "--bin-dir", str(BIN), "-o", str(out)]
    if KUBECONFIG:
        argv += ["--kubeconfig", KUBECONFIG]
    assert main(argv) == EXIT_OK
    got = json.loads(out.read_text())
    want = dict(load_truth(profile).data)
    keys = ["devicePlugin", "gfd", "identity", "components"]
    if KUBECONFIG:
        keys += ["resourceSlices", "faults"]
    else:
        # without an API server the DRA drivers do not run, so neither their slices nor
        # their versions are recorded
        want["faults"]["xid79"].pop("resourceSlices", None)
        assert field_diff(got["faults"], want["faults"]) == []
        want["components"] = {
            name: build
            for name, build in want["components"].items()
            if name not in ("gpu-kubelet-plugin", "compute-domain-kubelet-plugin")
        }
    for key in keys:
        assert field_diff(got[key], want[key]) == [], key
