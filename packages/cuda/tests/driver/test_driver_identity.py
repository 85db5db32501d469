"""Identity through the driver API equals NVML's, for every profile: the same devices in the
same order, names, UUIDs, PCI ids, memory, compute capability, SMs, clocks and driver
version, each read by a real client (cuda-bindings, nvidia-ml-py) in a process of its own."""

from __future__ import annotations

from typing import Any

import pytest
from driver_clients import CUDA_IDENTITY, NVML_IDENTITY
from nvml_mock_engine.profiles import profile_names

PROFILES = sorted(profile_names())


@pytest.mark.parametrize("profile", PROFILES)
def test_identity_equals_nvml(make_node: Any, profile: str) -> None:
    node = make_node(profile=profile, count=2)
    cuda = node.run(CUDA_IDENTITY)
    nvml = node.run(NVML_IDENTITY)
    assert cuda["version"] == nvml["version"] >= 12000
    assert len(cuda["devices"]) == len(nvml["devices"]) == 2
    for got, want in zip(cuda["devices"], nvml["devices"], strict=True):
        for key, value in want.items():
            assert got[key] == value, f"{profile} {key}"
        # the attributes NVML does not carry come from the profile's declaration
        assert got["warp"] == 32
        assert got["l2"] > 0
