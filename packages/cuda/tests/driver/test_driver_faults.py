"""Faults reach CUDA: a fault written with nvml-mock-ctl, as an operator writes it, fails the
next call on that GPU in a running process (and every later one: the real driver's errors of
this kind are sticky), while the process's other GPU keeps working. Exclusive-process compute
mode keeps a second process off a GPU."""

from __future__ import annotations

import json
from typing import Any

import pytest

HOLDER = """
import json, sys
from cuda.bindings import driver as d
d.cuInit(0)
ctxs = []
for i in (0, 1):
    ctx = d.cuCtxCreate(None, 0, d.cuDeviceGet(i)[1])[1]
    d.cuMemAlloc(1 << 20)
    d.cuCtxPopCurrent()
    ctxs.append(ctx)
def on(i, call):
    d.cuCtxPushCurrent(ctxs[i])
    try:
        result = call()
    finally:
        d.cuCtxPopCurrent()
    err = result[0] if isinstance(result, tuple) else result
    return err.name
def round():
    return {
        "gpu0_alloc": on(0, lambda: d.cuMemAlloc(1 << 20)),
        "gpu0_sync": on(0, d.cuCtxSynchronize),
        "gpu1_alloc": on(1, lambda: d.cuMemAlloc(1 << 20)),
        "gpu1_sync": on(1, d.cuCtxSynchronize),
    }
print(json.dumps(round()), flush=True)
sys.stdin.readline()
after = round()
after["again"] = round()["gpu0_sync"]
err = getattr(d.CUresult, after["gpu0_alloc"])
after["string"] = d.cuGetErrorString(err)[1].decode()
print(json.dumps(after), flush=True)
"""


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("fallen-off-bus", "CUDA_ERROR_LAUNCH_FAILED"),
        ("lost", "CUDA_ERROR_LAUNCH_FAILED"),
        ("ecc-uncorrectable", "CUDA_ERROR_ECC_UNCORRECTABLE"),
    ],
)
def test_a_fault_fails_the_next_call_on_its_gpu_only(node: Any, fault: str, error: str) -> None:
    with node.start(HOLDER) as holder:
        try:
            assert holder.stdout is not None and holder.stdin is not None
            before = json.loads(holder.stdout.readline())
            assert set(before.values()) == {"CUDA_SUCCESS"}
            node.ctl("fail", fault, "-i", "0")
            holder.stdin.write("go\n")
            holder.stdin.flush()
            line = holder.stdout.readline()
            assert line, holder.stderr.read() if holder.stderr else ""
            after = json.loads(line)
        finally:
            holder.kill()
            holder.wait(timeout=30)
    assert after["gpu0_alloc"] == after["gpu0_sync"] == after["again"] == error
    assert after["gpu1_alloc"] == after["gpu1_sync"] == "CUDA_SUCCESS"
    assert "nvml-mock" in after["string"]


EXCLUSIVE = """
import json
from cuda.bindings import driver as d
d.cuInit(0)
out = {}
for i in (0, 1):
    err, ctx = d.cuCtxCreate(None, 0, d.cuDeviceGet(i)[1])
    out[str(i)] = err.name
print(json.dumps(out))
"""


def test_exclusive_process_mode_keeps_a_second_process_off(node: Any) -> None:
    node.ctl("set", "-i", "0,1", "compute_mode=3")  # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    assert node.run(EXCLUSIVE) == {"0": "CUDA_SUCCESS", "1": "CUDA_SUCCESS"}
    node.ctl("alloc", "--gpus", "0", "--pid", "4242", "--memory", "1Gi", "--id", "other")
    assert node.run(EXCLUSIVE) == {"0": "CUDA_ERROR_DEVICE_UNAVAILABLE", "1": "CUDA_SUCCESS"}
    node.ctl("set", "-i", "1", "compute_mode=2")  # NVML_COMPUTEMODE_PROHIBITED
    assert node.run(EXCLUSIVE)["1"] == "CUDA_ERROR_DEVICE_UNAVAILABLE"


def test_a_lost_gpu_is_no_device_for_a_new_process(node: Any) -> None:
    node.ctl("fail", "lost", "-i", "2")
    result = node.run(
        """
import json
from cuda.bindings import driver as d
print(json.dumps([d.cuInit(0)[0].name, d.cuDeviceGetCount()[1]]))
"""
    )
    assert result == ["CUDA_SUCCESS", 7]
