"""Devices through the runtime work-alike equal NVML's, for both CUDA majors.

Every check runs rtclient (linked against NVIDIA's libcudart, the work-alike preloaded) and
nvidia-ml-py in processes of their own on a rendered node.
"""

from __future__ import annotations

from typing import Any

import pytest

NVML_DEVICES = """
import json
import pynvml as n

n.nvmlInit()
out = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    pci = n.nvmlDeviceGetPciInfo(h)
    out.append({
        "name": n.nvmlDeviceGetName(h),
        "uuid": n.nvmlDeviceGetUUID(h).split("-", 1)[1],
        "bus": f"{pci.domain:04X}:{pci.bus:02X}:{pci.device:02X}.0",
        "memory": n.nvmlDeviceGetMemoryInfo(h).total,
        "cc": list(n.nvmlDeviceGetCudaComputeCapability(h)),
        "sms": n.nvmlDeviceGetAttributes_v2(h).multiprocessorCount,
    })
print(json.dumps(out))
"""


@pytest.mark.parametrize("major", [13, 12])
def test_devices_equal_nvml(node: Any, run_client: Any, cuda_runtime: Any, major: int) -> None:
    got = run_client(node, major, "identity")
    want = node.run(NVML_DEVICES)
    assert got["library"] == str(cuda_runtime / f"libcudart.so.{major}"), "NVIDIA's runtime ran"
    assert got["runtime"] // 1000 == major
    assert got["driver"] == 13000
    assert got["count"] == len(want) == 8
    for device, nvml in zip(got["devices"], want, strict=True):
        assert device["name"] == nvml["name"]
        assert device["uuid"] == nvml["uuid"]
        assert device["bus"] == nvml["bus"]
        assert device["memory"] == nvml["memory"]
        assert device["cc"] == nvml["cc"] == [device["major_attr"], device["cc"][1]]
        assert device["sms"] == device["sms_attr"] == nvml["sms"]
        bus = int(nvml["bus"].split(":")[1], 16)
        assert device["pci"] == [0, bus, 0]
        assert device["warp"] == 32 and device["max_threads"] == 1024 and device["l2"] > 0
    assert [d["bus_back"] for d in got["devices"]] == list(range(8))


@pytest.mark.parametrize(
    ("visible", "indices"),
    [("3,1", [3, 1]), ("7", [7]), ("2,banana,5", [2]), ("-1", [])],
)
def test_cuda_visible_devices_by_index(
    node: Any, run_client: Any, visible: str, indices: list[int]
) -> None:
    want = node.run(NVML_DEVICES)
    got = run_client(node, 13, "identity", CUDA_VISIBLE_DEVICES=visible)
    if not indices:
        assert got["failed"] == "cudaGetDeviceCount(&count)"
        assert got["error"]["name"] == "cudaErrorNoDevice"
        return
    assert [d["uuid"] for d in got["devices"]] == [want[i]["uuid"] for i in indices]


def test_cuda_visible_devices_by_uuid(node: Any, run_client: Any) -> None:
    want = node.run(NVML_DEVICES)
    visible = f"GPU-{want[6]['uuid']},GPU-{want[0]['uuid']}"
    got = run_client(node, 13, "identity", CUDA_VISIBLE_DEVICES=visible)
    assert [d["uuid"] for d in got["devices"]] == [want[6]["uuid"], want[0]["uuid"]]


def test_runtime_13_refuses_a_cuda_12_driver(make_node: Any, run_client: Any) -> None:
    """The a100 profile's driver is 570 (CUDA 12.8): the 13 runtime refuses it, the 12 runs."""
    node = make_node(profile="a100", count=2)
    refused = run_client(node, 13, "identity")
    assert refused["failed"] == "cudaGetDeviceCount(&count)"
    assert refused["error"]["name"] == "cudaErrorInsufficientDriver"
    assert "supports CUDA 12.8" in refused["error"]["string"]
    assert "libcudart.so.13" in refused["error"]["string"]
    works = run_client(node, 12, "identity")
    assert works["driver"] == 12080 and works["count"] == 2


def test_without_a_driver_every_call_says_so(node: Any, run_client: Any, tmp_path: Any) -> None:
    """No libcuda.so.1 on the library path and none beside the runtime: a clear error."""
    import shutil

    lonely = tmp_path / "lonely" / "cuda-runtime"
    lonely.mkdir(parents=True)
    from nvml_mock_cuda.library import driver_path

    shutil.copy(driver_path().parent / "cuda-runtime" / "libcudart.so.13", lonely)
    got = run_client(
        node,
        13,
        "identity",
        preload=False,
        LD_PRELOAD=str(lonely / "libcudart.so.13"),
        LD_LIBRARY_PATH=str(node.nvml.parent),
    )
    assert got["error"]["name"] == "cudaErrorInsufficientDriver"
    assert "no libcuda.so.1 could be loaded" in got["error"]["string"]


def test_driver_found_beside_the_runtime(node: Any, run_client: Any) -> None:
    """The overlay's layout (lib/cuda-runtime/ below lib/libcuda.so.1) needs no library path."""
    got = run_client(node, 13, "identity", LD_LIBRARY_PATH=str(node.nvml.parent))
    assert got["count"] == 8


def test_each_thread_has_its_own_device(node: Any, run_client: Any) -> None:
    got = run_client(node, 13, "threads")
    assert [(w["device"], w["seen"], w["error"], w["ok"]) for w in got["workers"]] == [
        (i, i, 0, 1) for i in range(8)
    ]
    assert got["main_device"] == 0
