"""The driver API's surface: every function cuda.h declares is exported, cuGetProcAddress
answers by name, version and stream mode, cuGetExportTable refuses, CUDA_VISIBLE_DEVICES and
NVML's visible set pick the devices, and numba-cuda finds the GPUs. Real clients only, each
in a process of its own."""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

UUIDS = """
import json
from cuda.bindings import driver as d
err = d.cuInit(0)[0]
out = {"init": err.name, "uuids": []}
if err == d.CUresult.CUDA_SUCCESS:
    for i in range(d.cuDeviceGetCount()[1]):
        out["uuids"].append(bytes(d.cuDeviceGetUuid(d.cuDeviceGet(i)[1])[1].bytes).hex())
print(json.dumps(out))
"""

NVML_UUIDS = """
import json
import pynvml as n
n.nvmlInit()
print(json.dumps([n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(i))
                  for i in range(n.nvmlDeviceGetCount())]))
"""


def _hex(uuid: str) -> str:
    return uuid.split("-", 1)[1].replace("-", "")


def _declared(include: Path) -> set[str]:
    """Every function cuda.h declares, as the real driver exports them (all versions)."""
    text = subprocess.run(
        ["cc", "-E", "-P", "-D__CUDA_API_VERSION_INTERNAL", f"-I{include}", "-x", "c", "-"],
        input="#include <cuda.h>\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    flat = " ".join(text.split())
    return set(
        re.findall(
            r"(?:^|;|\}) ?(?:extern )?(?:__attribute__\(\(deprecated\)\) )?CUresult (cu\w+) ?\(",
            flat,
        )
    )


def _cuda_include() -> Path:
    import importlib.metadata as metadata

    files = metadata.files("nvidia-cuda-runtime") or []
    header = next(f for f in files if str(f).endswith("include/cuda.h"))
    return Path(str(header.locate())).parent


def test_every_declared_function_is_exported(cuda_driver: Path) -> None:
    declared = _declared(_cuda_include())
    assert len(declared) > 600
    lib = ctypes.CDLL(str(cuda_driver))
    missing = sorted(name for name in declared if not hasattr(lib, name))
    assert missing == []
    # an unmodelled one answers NOT_SUPPORTED (801), touching nothing it was given
    assert lib.cuGraphCreate(None, 0) == 801


def test_cuda_visible_devices(node: Any) -> None:
    nvml = [_hex(u) for u in node.run(NVML_UUIDS)]
    gpu3 = node.run(NVML_UUIDS)[3]

    def visible(value: str) -> tuple[str, list[str]]:
        result = node.run(UUIDS, CUDA_VISIBLE_DEVICES=value)
        return result["init"], result["uuids"]

    assert visible("2,0") == ("CUDA_SUCCESS", [nvml[2], nvml[0]])
    assert visible(f"{gpu3[:12]},1") == ("CUDA_SUCCESS", [nvml[3], nvml[1]])
    assert visible(gpu3) == ("CUDA_SUCCESS", [nvml[3]])
    # the first entry that names no device ends the list; what came before stays
    assert visible("1,garbage,2") == ("CUDA_SUCCESS", [nvml[1]])
    assert visible("0,8,1") == ("CUDA_SUCCESS", [nvml[0]])
    assert visible("4,4,5") == ("CUDA_SUCCESS", [nvml[4]])
    assert visible("GPU-") == ("CUDA_ERROR_NO_DEVICE", [])
    assert visible("") == ("CUDA_ERROR_NO_DEVICE", [])
    assert visible("-1") == ("CUDA_ERROR_NO_DEVICE", [])
    assert visible("\x01\xff,0") == ("CUDA_ERROR_NO_DEVICE", [])


def test_the_visible_set_is_nvmls(node: Any) -> None:
    nvml = [_hex(u) for u in node.run(NVML_UUIDS)]
    result = node.run(UUIDS, NVIDIA_VISIBLE_DEVICES="5,6")
    assert result == {"init": "CUDA_SUCCESS", "uuids": [nvml[5], nvml[6]]}
    assert node.run(UUIDS, NVIDIA_VISIBLE_DEVICES="6", CUDA_VISIBLE_DEVICES="0")["uuids"] == [
        nvml[6]
    ]


def test_no_live_file_and_a_corrupt_one_are_cuda_answers(node: Any) -> None:
    node.live.unlink()
    assert node.run(UUIDS)["init"] == "CUDA_SUCCESS"  # the board layer alone
    node.live.write_bytes(b"\x00garbage" * 100)
    corrupt = node.run(UUIDS)
    assert corrupt["init"] in ("CUDA_SUCCESS", "CUDA_ERROR_NO_DEVICE")
    node.state.write_text("not a state\n")
    assert node.run(UUIDS)["init"] == "CUDA_ERROR_NO_DEVICE"


def test_get_proc_address_by_name_version_and_stream(cuda_driver: Path, node: Any) -> None:
    result = node.run(
        """
import ctypes, json
from cuda.bindings import driver as d
d.cuInit(0)
lib = ctypes.CDLL("libcuda.so.1")
F = d.CUdriverProcAddress_flags
def ask(name, version, flags=F.CU_GET_PROC_ADDRESS_DEFAULT):
    # through ctypes: the status comes back with an error too
    fn, status = ctypes.c_void_p(), ctypes.c_int(-1)
    err = lib.cuGetProcAddress_v2(
        name.encode(), ctypes.byref(fn), version, ctypes.c_uint64(int(flags)), ctypes.byref(status)
    )
    found = d.CUdriverProcAddressQueryResult(status.value).name
    return [d.CUresult(err).name, found, fn.value or 0]
addr = lambda name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
print(json.dumps({
    "alloc_new": ask("cuMemAlloc", 13000)[2] == addr("cuMemAlloc_v2"),
    "alloc_old": ask("cuMemAlloc", 2000)[2] == addr("cuMemAlloc"),
    "ctx_12": ask("cuCtxCreate", 12000)[2] == addr("cuCtxCreate_v3"),
    "ptds": ask("cuMemcpyHtoD", 13000, F.CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)[2]
        == addr("cuMemcpyHtoD_v2_ptds"),
    "legacy": ask("cuMemcpyHtoD", 13000, F.CU_GET_PROC_ADDRESS_LEGACY_STREAM)[2]
        == addr("cuMemcpyHtoD_v2"),
    "too_old": ask("cuMemAlloc", 1000)[:2],
    "unknown": ask("cuNoSuchFunction", 13000),
    "export_table": d.cuGetExportTable(d.CUuuid())[0].name,
}))
"""
    )
    assert result == {
        "alloc_new": True,
        "alloc_old": True,
        "ctx_12": True,
        "ptds": True,
        "legacy": True,
        "too_old": ["CUDA_ERROR_NOT_FOUND", "CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT"],
        "unknown": ["CUDA_ERROR_NOT_FOUND", "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND", 0],
        "export_table": "CUDA_ERROR_NOT_SUPPORTED",
    }


def test_numba_cuda_sees_the_gpus_and_their_memory(node: Any) -> None:
    result = node.run(
        """
import json
from numba import cuda
gpus = [(g.id, g.name if isinstance(g.name, str) else g.name.decode(), list(g.compute_capability))
        for g in cuda.gpus]
with cuda.gpus[1]:
    free, total = cuda.current_context().get_memory_info()
    arr = cuda.to_device(bytearray(b"numba" * 1000))
    back = bytes(arr.copy_to_host())
print(json.dumps({"available": cuda.is_available(), "gpus": gpus, "total": total,
                  "copied": back == b"numba" * 1000}))
"""
    )
    assert result["available"] is True
    assert [g[0] for g in result["gpus"]] == list(range(8))
    assert {tuple(g[2]) for g in result["gpus"]} == {(9, 0)}
    assert result["gpus"][0][1] == "NVIDIA H100 80GB HBM3"
    assert result["total"] == 85520809984
    assert result["copied"] is True


@pytest.mark.parametrize("value", ["noop-meaningless-results", None])
def test_a_launch_fails_with_a_string_unless_switched_to_noop(node: Any, value: str | None) -> None:
    env = {"MOCK_CUDA_LAUNCH": value} if value else {}
    result = node.run(
        """
import json
from cuda.bindings import driver as d
d.cuInit(0)
ctx = d.cuCtxCreate(None, 0, d.cuDeviceGet(0)[1])[1]
ptx = b'''.version 8.0
.target sm_90
.address_size 64
.visible .entry scale(.param .u64 p) { ret; }
'''
err, mod = d.cuModuleLoadData(ptx)
err2, fn = d.cuModuleGetFunction(mod, b"scale")
missing = d.cuModuleGetFunction(mod, b"nope")[0].name
launch = d.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0)[0]
print(json.dumps({"load": err.name, "get": err2.name, "missing": missing,
                  "launch": launch.name, "string": d.cuGetErrorString(launch)[1].decode(),
                  "garbage": d.cuModuleLoadData(b"\\x00garbage image")[0].name}))
""",
        **env,
    )
    assert result["load"] == result["get"] == "CUDA_SUCCESS"
    assert result["missing"] == "CUDA_ERROR_NOT_FOUND"
    assert result["garbage"] == "CUDA_ERROR_INVALID_IMAGE"
    if value:
        assert result["launch"] == "CUDA_SUCCESS"
    else:
        assert result["launch"] == "CUDA_ERROR_NOT_SUPPORTED"
        assert "nvml-mock" in result["string"] and "no kernels" in result["string"]


def test_nvml_finds_each_cuda_device_by_its_pci_bus_id(node: Any) -> None:
    """PyTorch's out-of-memory message asks NVML for the GPU at CUDA's PCI bus id."""
    result = node.run(
        """
import json
import pynvml as n
from cuda.bindings import driver as d
d.cuInit(0)
n.nvmlInit()
pairs = []
for i in range(d.cuDeviceGetCount()[1]):
    dev = d.cuDeviceGet(i)[1]
    bus = d.cuDeviceGetPCIBusId(16, dev)[1].split(b"\\0")[0].decode()
    mine = bytes(d.cuDeviceGetUuid(dev)[1].bytes).hex()
    theirs = n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByPciBusId(bus))
    pairs.append([mine, theirs.split("-", 1)[1].replace("-", "")])
print(json.dumps(pairs))
""",
        CUDA_VISIBLE_DEVICES="3,1",
    )
    assert len(result) == 2
    assert all(mine == theirs for mine, theirs in result)
