"""NVLink and topology: what aligned allocation and `topo -m` read."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest
from conftest import StateWriter, gpu_entry

SWITCHES = "00000000:05:00.0,00000000:06:00.0"


@pytest.fixture
def eight(pynvml: Any, write_state: StateWriter) -> Any:
    """Two boards of four GPUs on two NUMA nodes; board 0 links its GPUs over NVSwitch."""
    gpus = [
        gpu_entry(
            i,
            gpu_group=i // 4,
            nvlink_count=18 if i < 4 else 0,
            nvlink_remote_bus_ids=SWITCHES if i < 4 else "",
        )
        for i in range(8)
    ]
    write_state(gpus=gpus)
    pynvml.nvmlInit()
    return pynvml


def handles(nvml: Any) -> list[Any]:
    return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]


def test_common_ancestor_for_every_pair(eight: Any) -> None:
    hs = handles(eight)
    levels = [[eight.nvmlDeviceGetTopologyCommonAncestor(a, b) for b in hs] for a in hs]
    for i in range(8):
        for j in range(8):
            if i == j:
                expected = eight.NVML_TOPOLOGY_INTERNAL
            elif i // 4 == j // 4:
                expected = eight.NVML_TOPOLOGY_MULTIPLE
            else:
                expected = eight.NVML_TOPOLOGY_SYSTEM  # numa nodes 0 and 1
            assert levels[i][j] == expected, (i, j)


def test_nearest_gpus(eight: Any) -> None:
    hs = handles(eight)
    near = eight.nvmlDeviceGetTopologyNearestGpus(hs[1], eight.NVML_TOPOLOGY_MULTIPLE)
    assert sorted(eight.nvmlDeviceGetIndex(h) for h in near) == [0, 2, 3]
    every = eight.nvmlDeviceGetTopologyNearestGpus(hs[1], eight.NVML_TOPOLOGY_SYSTEM)
    assert len(every) == 7


def test_gpu_set_of_a_cpu(eight: Any) -> None:
    on_cpu_60 = eight.nvmlSystemGetTopologyGpuSet(60)
    assert sorted(eight.nvmlDeviceGetIndex(h) for h in on_cpu_60) == [4, 5, 6, 7]


def test_device_lists_refuse_a_count_without_an_array(eight: Any, cnvml: ctypes.CDLL) -> None:
    h1 = handles(eight)[1]
    for count, expected in ((0, eight.NVML_SUCCESS), (3, eight.NVML_ERROR_INVALID_ARGUMENT)):
        n = ctypes.c_uint(count)
        rc = cnvml.nvmlDeviceGetTopologyNearestGpus(
            h1, eight.NVML_TOPOLOGY_MULTIPLE, ctypes.byref(n), None
        )
        assert (rc, n.value) == (expected, 3 if count == 0 else count)
        n = ctypes.c_uint(count)
        assert cnvml.nvmlSystemGetTopologyGpuSet(60, ctypes.byref(n), None) == expected


def test_cpu_and_memory_affinity(eight: Any) -> None:
    hs = handles(eight)
    mask = eight.nvmlDeviceGetCpuAffinity(hs[0], 4)
    assert mask[0] == (1 << 56) - 1  # CPUs 0-55
    assert mask[1] == ((1 << 16) - 1) << 48  # CPUs 112-127 ...
    assert mask[2] == (1 << 40) - 1  # ... 128-167
    assert mask[3] == 0
    assert list(
        eight.nvmlDeviceGetCpuAffinityWithinScope(hs[0], 4, eight.NVML_AFFINITY_SCOPE_NODE)
    ) == list(mask)
    assert list(eight.nvmlDeviceGetMemoryAffinity(hs[5], 1, eight.NVML_AFFINITY_SCOPE_NODE)) == [2]


def test_nvlink_state_and_remote(eight: Any, cnvml: ctypes.CDLL) -> None:
    h0, h4 = handles(eight)[0], handles(eight)[4]
    for link in range(18):
        assert eight.nvmlDeviceGetNvLinkState(h0, link) == eight.NVML_FEATURE_ENABLED
        assert eight.nvmlDeviceGetNvLinkVersion(h0, link) == 6
        assert (
            eight.nvmlDeviceGetNvLinkCapability(h0, link, eight.NVML_NVLINK_CAP_P2P_SUPPORTED) == 1
        )
        remote = eight.nvmlDeviceGetNvLinkRemotePciInfo(h0, link)
        assert remote.busId == ("00000000:05:00.0" if link == 0 else "00000000:06:00.0")
        assert (
            eight.nvmlDeviceGetNvLinkRemoteDeviceType(h0, link)
            == eight.NVML_NVLINK_DEVICE_TYPE_SWITCH
        )
    with pytest.raises(eight.NVMLError_InvalidArgument):
        eight.nvmlDeviceGetNvLinkState(h0, 18)
    with pytest.raises(eight.NVMLError_NotSupported):
        eight.nvmlDeviceGetNvLinkState(h4, 0)
    assert (
        eight.nvmlDeviceGetP2PStatus(h0, handles(eight)[1], eight.NVML_P2P_CAPS_INDEX_NVLINK) == 0
    )
    assert eight.nvmlDeviceGetP2PStatus(h0, h4, eight.NVML_P2P_CAPS_INDEX_NVLINK) != 0


def test_remote_gpu_peer(pynvml: Any, write_state: StateWriter) -> None:
    gpus = [
        gpu_entry(0, nvlink_count=4, nvlink_remote_bus_ids="00000000:19:00.0"),
        gpu_entry(1, nvlink_count=4, nvlink_remote_bus_ids="00000000:18:00.0"),
    ]
    write_state(gpus=gpus)
    pynvml.nvmlInit()
    h0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h0, 3)
    assert remote.busId == "00000000:19:00.0"
    assert remote.pciDeviceId == 0x233010DE
    assert pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(h0, 0) == pynvml.NVML_NVLINK_DEVICE_TYPE_GPU


def test_old_remote_pci_entry_point_writes_52_bytes(eight: Any, cnvml: ctypes.CDLL) -> None:
    buf = (ctypes.c_ubyte * 96)(*([0xEE] * 96))
    assert cnvml.nvmlDeviceGetNvLinkRemotePciInfo(handles(eight)[0], 1, buf) == 0
    assert bytes(buf[:16]).rstrip(b"\0") == b"0000:06:00.0"
    assert bytes(buf[52:]) == b"\xee" * 44


def test_remote_pci_entry_points_refuse_a_null_buffer(eight: Any, cnvml: ctypes.CDLL) -> None:
    h0 = handles(eight)[0]
    for symbol in ("nvmlDeviceGetNvLinkRemotePciInfo", "nvmlDeviceGetNvLinkRemotePciInfo_v2"):
        rc = getattr(cnvml, symbol)(h0, 1, None)
        assert rc == eight.NVML_ERROR_INVALID_ARGUMENT, symbol
