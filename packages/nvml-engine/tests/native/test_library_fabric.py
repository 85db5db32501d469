"""Fabric (ComputeDomain) identity: v1, ...V in both layouts, v4, and the env override."""

from __future__ import annotations

import ctypes
import uuid
from typing import Any

import pytest
from conftest import CLUSTER_UUID, StateWriter, gpu_entry
from nvml_structs import FABRIC_V3, FabricV3

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25


def fabric_v1(pynvml: Any, handle: Any) -> Any:
    info = pynvml.c_nvmlGpuFabricInfo_t()
    pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    return info


def fabric_v2(pynvml: Any, handle: Any) -> Any:
    info = pynvml.c_nvmlGpuFabricInfoV_t()
    info.version = pynvml.nvmlGpuFabricInfo_v2
    pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
    return info


def test_v1_and_v2_agree(nvml: Any) -> None:
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    v1 = fabric_v1(nvml, handle)
    v2 = fabric_v2(nvml, handle)
    assert bytes(v1.clusterUuid) == bytes(v2.clusterUuid) == uuid.UUID(int=1).bytes
    assert v1.state == v2.state == 3
    assert v1.status == v2.status == 0
    assert v1.cliqueId == v2.cliqueId == 0
    assert v2.healthMask == 0x1AA


def test_fabric_identity_from_env(
    pynvml: Any, write_state: StateWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_state(count=4, fabric_state=1)
    monkeypatch.setenv("MOCK_FABRIC_CLUSTER_UUID", CLUSTER_UUID.upper())
    monkeypatch.setenv("MOCK_FABRIC_CLIQUE_ID", "7")
    pynvml.nvmlInit()
    for index in range(4):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        for info in (fabric_v1(pynvml, handle), fabric_v2(pynvml, handle)):
            assert str(uuid.UUID(bytes=bytes(info.clusterUuid))) == CLUSTER_UUID
            assert info.cliqueId == 7
            assert info.state == 3  # completed, whatever the state said
            assert info.status == 0


def test_env_leaves_gpus_without_fabric_alone(
    pynvml: Any, write_state: StateWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_state(gpus=[gpu_entry(0), gpu_entry(1, fabric_attached=0)])
    monkeypatch.setenv("MOCK_FABRIC_CLUSTER_UUID", CLUSTER_UUID)
    pynvml.nvmlInit()
    assert fabric_v1(pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)).cliqueId == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fabric_v1(pynvml, pynvml.nvmlDeviceGetHandleByIndex(1))
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fabric_v2(pynvml, pynvml.nvmlDeviceGetHandleByIndex(1))


def test_v3_layout_by_version_word(nvml: Any, cnvml: ctypes.CDLL) -> None:
    handle = nvml.nvmlDeviceGetHandleByIndex(1)
    info = FabricV3(version=FABRIC_V3)
    assert cnvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info)) == 0
    assert bytes(info.clusterUuid) == uuid.UUID(int=1).bytes
    assert (info.state, info.healthMask, info.healthSummary) == (3, 0x1AA, 1)


def test_v2_request_does_not_write_past_36_bytes(nvml: Any, cnvml: ctypes.CDLL) -> None:
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    buf = (ctypes.c_ubyte * 64)(*([0xEE] * 64))
    ctypes.c_uint.from_buffer(buf).value = nvml.nvmlGpuFabricInfo_v2
    assert cnvml.nvmlDeviceGetGpuFabricInfoV(handle, buf) == 0
    assert bytes(buf[36:]) == b"\xee" * 28


@pytest.mark.parametrize("version", [0, 1, 0x02000028, 0x03000024, 0x04000028])
def test_bad_version_word(nvml: Any, cnvml: ctypes.CDLL, version: int) -> None:
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    info = FabricV3(version=version)
    assert (
        cnvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
        == NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    )


@pytest.mark.parametrize(
    ("mask", "summary"),
    [(0, 0), (0x1AA, 1), (0x1A9, 3), (0x1A6, 2), (0x19A, 2), (0x16A, 2), (0x2AA, 2)],
)
def test_health_summary_follows_the_mask(
    pynvml: Any, write_state: StateWriter, cnvml: ctypes.CDLL, mask: int, summary: int
) -> None:
    write_state(count=1, fabric_health_mask=hex(mask))
    pynvml.nvmlInit()
    info = FabricV3(version=FABRIC_V3)
    assert (
        cnvml.nvmlDeviceGetGpuFabricInfoV(pynvml.nvmlDeviceGetHandleByIndex(0), ctypes.byref(info))
        == 0
    )
    assert (info.healthMask, info.healthSummary) == (mask, summary)


def test_64_gpus_share_the_env_identity(
    pynvml: Any, write_state: StateWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_state(count=64)
    monkeypatch.setenv("MOCK_FABRIC_CLUSTER_UUID", CLUSTER_UUID)
    monkeypatch.setenv("MOCK_FABRIC_CLIQUE_ID", "4294967295")
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 64
    uuids = set()
    for index in range(64):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        assert pynvml.nvmlDeviceGetIndex(handle) == index
        uuids.add(pynvml.nvmlDeviceGetUUID(handle))
        info = fabric_v2(pynvml, handle)
        assert (str(uuid.UUID(bytes=bytes(info.clusterUuid))), info.cliqueId) == (
            CLUSTER_UUID,
            4294967295,
        )
    assert len(uuids) == 64


class Clique(ctypes.Structure):
    _fields_ = [("type", ctypes.c_ubyte), ("id", ctypes.c_uint)]


class FabricV4(ctypes.Structure):
    """nvmlGpuFabricInfo_v4_t (NVML 13.5): the clique list form, no version word."""

    _fields_ = [
        ("clusterUuid", ctypes.c_ubyte * 16),
        ("status", ctypes.c_uint),
        ("cliques", Clique * 64),
        ("numCliques", ctypes.c_uint),
        ("state", ctypes.c_uint),
        ("healthMask", ctypes.c_uint),
        ("healthSummary", ctypes.c_ubyte),
    ]


def test_v4_lists_the_clique(
    pynvml: Any, write_state: StateWriter, cnvml: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_state(count=1)
    monkeypatch.setenv("MOCK_FABRIC_CLIQUE_ID", "9")
    pynvml.nvmlInit()
    info = FabricV4()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert cnvml.nvmlDeviceGetGpuFabricInfo_v4(h, ctypes.byref(info)) == 0
    assert (info.numCliques, info.cliques[0].id, info.state, info.healthSummary) == (1, 9, 3, 1)
