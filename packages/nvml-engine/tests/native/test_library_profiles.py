"""Every packaged profile, rendered by the engine, through the discovery paths of real clients.

The device plugin's discovery and aligned allocation, gpu-feature-discovery's clique label
and the DRA driver's fabric checks each need specific calls to succeed (or to fail only in
the ways those clients tolerate); this walks them for each profile at 64 GPUs and at the
profile's own node size.
"""

from __future__ import annotations

import contextlib
import ctypes
import uuid
from pathlib import Path
from typing import Any

import pytest
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.profiles import profile_names
from nvml_mock_engine.render import render_text

NVML_NVLINK_MAX_LINKS = 36
TOLERATED_LINK_ERRORS = ("NVMLError_NotSupported", "NVMLError_InvalidArgument")
CLUSTER = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def load(pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **settings: Any) -> Any:
    config = resolve_config(node="profile-reader", **settings)
    path = tmp_path / "state.nvmlmock"
    path.write_text(render_text(config))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(path))
    pynvml.nvmlInit()
    return config


def fabric_pair(pynvml: Any, handle: Any) -> tuple[Any, Any]:
    v1 = pynvml.c_nvmlGpuFabricInfo_t()
    pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(v1))
    v2 = pynvml.c_nvmlGpuFabricInfoV_t()
    v2.version = pynvml.nvmlGpuFabricInfo_v2
    pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(v2))
    return v1, v2


@pytest.mark.parametrize("count", [None, 64])
@pytest.mark.parametrize("profile", profile_names())
def test_discovery_paths(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, profile: str, count: int | None
) -> None:
    monkeypatch.setenv("MOCK_FABRIC_CLUSTER_UUID", CLUSTER)
    monkeypatch.setenv("MOCK_FABRIC_CLIQUE_ID", "3")
    config = load(pynvml, monkeypatch, tmp_path, profile=profile, count=count)
    n = pynvml.nvmlDeviceGetCount()
    assert n == config.count
    assert pynvml.nvmlSystemGetDriverVersion() == config.driver_version
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
    cliques = set()
    for index, h in enumerate(handles):
        # device plugin BuildDevice
        gpu_uuid = pynvml.nvmlDeviceGetUUID(h)
        assert pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)) == index
        pci = pynvml.nvmlDeviceGetPciInfo(h)
        by_bus = pynvml.nvmlDeviceGetHandleByPciBusId(pci.busIdLegacy)
        assert pynvml.nvmlDeviceGetIndex(by_bus) == index
        assert pynvml.nvmlDeviceGetMinorNumber(h) >= 0
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        assert mem.free + mem.used == mem.total > 0
        assert pynvml.nvmlDeviceGetCudaComputeCapability(h) == config.profile.cuda_cc
        with contextlib.suppress(pynvml.NVMLError_NotSupported):
            assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]
        # feature discovery / DRA compute-domain plugin
        if config.fabric is None:
            with pytest.raises(pynvml.NVMLError_NotSupported):
                fabric_pair(pynvml, h)
        else:
            v1, v2 = fabric_pair(pynvml, h)
            assert bytes(v1.clusterUuid) == bytes(v2.clusterUuid) == uuid.UUID(CLUSTER).bytes
            assert (v1.state, v1.status, v1.cliqueId) == (v2.state, v2.status, v2.cliqueId)
            assert (v1.state, v1.status) == (3, 0)
            cliques.add(v1.cliqueId)
        # aligned allocation: every link answers or fails in a tolerated way
        for link in range(NVML_NVLINK_MAX_LINKS):
            try:
                pynvml.nvmlDeviceGetNvLinkState(h, link)
                remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link)
                assert remote.busId
            except pynvml.NVMLError as error:
                assert type(error).__name__ in TOLERATED_LINK_ERRORS
    assert cliques <= {3}
    for a in handles[:8]:
        for b in handles:
            assert pynvml.nvmlDeviceGetTopologyCommonAncestor(a, b) in (0, 10, 20, 30, 40, 50)


@pytest.mark.parametrize("profile", profile_names())
def test_health_check_loop(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, profile: str
) -> None:
    load(pynvml, monkeypatch, tmp_path, profile=profile)
    event_set = pynvml.nvmlEventSetCreate()
    for index in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        mask = pynvml.nvmlDeviceGetSupportedEventTypes(h) & 0xB
        pynvml.nvmlDeviceRegisterEvents(h, mask, event_set)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(event_set, 20)
    pynvml.nvmlEventSetFree(event_set)
