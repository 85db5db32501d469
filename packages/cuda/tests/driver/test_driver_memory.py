"""Memory the node sees, through NVIDIA's cuda-bindings in processes of their own: an
allocation shows under its PID in another process's NVML and goes when the process is
killed; an allocation record lowers CUDA's free memory; copies and memsets are exact; bad
pointers get CUDA errors."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

PRELUDE = """
import json, os, sys
from cuda.bindings import driver as d
R = d.CUresult
def ok(result):
    err, *values = result if isinstance(result, tuple) else (result,)
    assert err == R.CUDA_SUCCESS, err
    return values[0] if len(values) == 1 else values
def code(result):
    err = result[0] if isinstance(result, tuple) else result
    return err.name
ok(d.cuInit(0))
dev = ok(d.cuDeviceGet(0))
ctx = ok(d.cuCtxCreate(None, 0, dev))
"""

NVML_PROCESSES = """
import json
import pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex({gpu})
print(json.dumps([[p.pid, p.usedGpuMemory] for p in n.nvmlDeviceGetComputeRunningProcesses(h)]))
"""

GIB = 1 << 30


def _processes(node: Any, gpu: int = 0) -> list[list[int]]:
    result: list[list[int]] = node.run(NVML_PROCESSES.format(gpu=gpu))
    return result


def test_an_allocation_shows_under_its_pid_and_goes_after_sigkill(node: Any) -> None:
    code = (
        PRELUDE
        + """
ptr = ok(d.cuMemAlloc(3 << 30))
print(json.dumps({"pid": os.getpid()}), flush=True)
sys.stdin.read()
"""
    )
    with node.start(code) as holder:
        _watch_killed(node, holder)


def _watch_killed(node: Any, holder: Any) -> None:
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line, holder.stderr.read() if holder.stderr else ""
        pid = json.loads(line)["pid"]
        assert [pid, 3 * GIB] in _processes(node)
        assert all(p != pid for p, _ in _processes(node, gpu=1))
        os.kill(pid, signal.SIGKILL)
        holder.wait(timeout=30)
        deadline = time.monotonic() + 20
        while any(p == pid for p, _ in _processes(node)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(p != pid for p, _ in _processes(node))
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_freeing_removes_the_process_and_exit_removes_it_too(node: Any) -> None:
    result = node.run(
        PRELUDE
        + """
import pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
pids = lambda: [[p.pid, p.usedGpuMemory] for p in n.nvmlDeviceGetComputeRunningProcesses(h)]
a = ok(d.cuMemAlloc(1 << 30))
b = ok(d.cuMemAlloc(1 << 29))
both = pids()
ok(d.cuMemFree(a))
one = pids()
ok(d.cuMemFree(b))
print(json.dumps({"pid": os.getpid(), "both": both, "one": one, "none": pids()}))
"""
    )
    assert result["both"] == [[result["pid"], 3 << 29]]
    assert result["one"] == [[result["pid"], 1 << 29]]
    assert result["none"] == []


def test_an_allocation_record_lowers_cuda_free_memory(node: Any) -> None:
    probe = (
        PRELUDE
        + """
free, total = ok(d.cuMemGetInfo())
print(json.dumps({"free": free, "total": total}))
"""
    )
    before = node.run(probe)
    node.ctl("alloc", "--gpus", "0", "--pid", "4242", "--memory", "20Gi", "--id", "job-a")
    after = node.run(probe)
    assert after["total"] == before["total"]
    assert before["free"] - after["free"] == 20 * GIB
    # and past what is free, an allocation fails as on a full GPU
    over = node.run(
        PRELUDE
        + f"""
print(json.dumps(code(d.cuMemAlloc({after["free"]} + 1))))
"""
    )
    assert over == "CUDA_ERROR_OUT_OF_MEMORY"


def test_copies_and_memsets_are_exact(node: Any) -> None:
    result = node.run(
        PRELUDE
        + """
import random
data = bytes(random.Random(7).randrange(256) for _ in range(1 << 20))
a = ok(d.cuMemAlloc(len(data)))
b = ok(d.cuMemAlloc(len(data)))
ok(d.cuMemcpyHtoD(a, data, len(data)))
ok(d.cuMemcpyDtoD(b, a, len(data)))
back = bytearray(len(data))
ok(d.cuMemcpyDtoH(back, b, len(data)))
same = bytes(back) == data
stream = ok(d.cuStreamCreate(0))
ok(d.cuMemsetD32Async(a, 0xDEADBEEF, 1024, stream))
ok(d.cuMemsetD16(int(a) + 4096, 0x1234, 8))
ok(d.cuMemsetD8(int(a) + 8192, 0x7F, 3))
ok(d.cuStreamSynchronize(stream))
out = bytearray(8192 + 3)
ok(d.cuMemcpyDtoHAsync(out, a, len(out), stream))
ok(d.cuStreamSynchronize(stream))
print(json.dumps({
    "same": same,
    "d32": bytes(out[:4096]) == (0xDEADBEEF).to_bytes(4, "little") * 1024,
    "d16": bytes(out[4096:4112]) == (0x1234).to_bytes(2, "little") * 8,
    "rest": bytes(out[4112:8192]) == data[4112:8192],
    "d8": bytes(out[8192:]) == b"\\x7f" * 3,
}))
"""
    )
    assert result == {"same": True, "d32": True, "d16": True, "rest": True, "d8": True}


def test_bad_pointers_and_handles_get_cuda_errors(node: Any) -> None:
    result = node.run(
        PRELUDE
        + """
buf = bytearray(64)
a = ok(d.cuMemAlloc(4096))
out = {
    "null_dst": code(d.cuMemcpyHtoD(0, buf, 64)),
    "foreign_dst": code(d.cuMemcpyHtoD(0x1000, buf, 64)),
    "past_end": code(d.cuMemcpyHtoD(int(a) + 4090, buf, 64)),
    "misaligned_d16": code(d.cuMemsetD16(int(a) + 1, 0, 4)),
    "misaligned_d32": code(d.cuMemsetD32(int(a) + 2, 0, 4)),
    "free_inside": code(d.cuMemFree(int(a) + 8)),
    "zero_size": code(d.cuMemAlloc(0)),
}
ok(d.cuMemFree(a))
out["double_free"] = code(d.cuMemFree(a))
out["use_after_free"] = code(d.cuMemcpyDtoH(buf, a, 64))
out["forged_stream"] = code(d.cuStreamSynchronize(d.CUstream(0x12345678)))
s = ok(d.cuStreamCreate(0))
ok(d.cuStreamDestroy(s))
out["destroyed_stream"] = code(d.cuStreamQuery(s))
e = ok(d.cuEventCreate(0))
ok(d.cuEventDestroy(e))
out["destroyed_event"] = code(d.cuEventRecord(e, 0))
out["attr_unknown_ptr"] = code(d.cuPointerGetAttribute(
    d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 0x1000))
ok(d.cuCtxDestroy(ctx))
out["after_destroy_alloc"] = code(d.cuMemAlloc(64))
out["push_destroyed"] = code(d.cuCtxPushCurrent(ctx))
out["forged_ctx"] = code(d.cuCtxPushCurrent(d.CUcontext(0x12345678)))
print(json.dumps(out))
"""
    )
    assert result == {
        "null_dst": "CUDA_ERROR_INVALID_VALUE",
        "foreign_dst": "CUDA_ERROR_INVALID_VALUE",
        "past_end": "CUDA_ERROR_INVALID_VALUE",
        "misaligned_d16": "CUDA_ERROR_INVALID_VALUE",
        "misaligned_d32": "CUDA_ERROR_INVALID_VALUE",
        "free_inside": "CUDA_ERROR_INVALID_VALUE",
        "zero_size": "CUDA_ERROR_INVALID_VALUE",
        "double_free": "CUDA_ERROR_INVALID_VALUE",
        "use_after_free": "CUDA_ERROR_INVALID_VALUE",
        "forged_stream": "CUDA_ERROR_INVALID_HANDLE",
        "destroyed_stream": "CUDA_ERROR_INVALID_HANDLE",
        "destroyed_event": "CUDA_ERROR_INVALID_HANDLE",
        "attr_unknown_ptr": "CUDA_ERROR_INVALID_VALUE",
        "after_destroy_alloc": "CUDA_ERROR_CONTEXT_IS_DESTROYED",
        "push_destroyed": "CUDA_ERROR_INVALID_CONTEXT",
        "forged_ctx": "CUDA_ERROR_INVALID_CONTEXT",
    }


def test_pointer_attributes_and_events(node: Any) -> None:
    result = node.run(
        PRELUDE
        + """
A = d.CUpointer_attribute
a = ok(d.cuMemAlloc(1 << 20))
host = ok(d.cuMemAllocHost(4096))
start = ok(d.cuEventCreate(0))
end = ok(d.cuEventCreate(0))
ok(d.cuEventRecord(start, 0))
ok(d.cuEventRecord(end, 0))
ok(d.cuEventSynchronize(end))
print(json.dumps({
    "type": int(ok(d.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, int(a) + 100))),
    "host_type": int(ok(d.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, host))),
    "ordinal": ok(d.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a)),
    "start": int(ok(d.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, int(a) + 100)))
        == int(a),
    "size": ok(d.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_RANGE_SIZE, int(a) + 100)),
    "range": [int(x) for x in ok(d.cuMemGetAddressRange(int(a) + 5))] == [int(a), 1 << 20],
    "elapsed": ok(d.cuEventElapsedTime(start, end)) >= 0,
}))
"""
    )
    assert result == {
        "type": 2,  # CU_MEMORYTYPE_DEVICE
        "host_type": 1,  # CU_MEMORYTYPE_HOST
        "ordinal": 0,
        "start": True,
        "size": 1 << 20,
        "range": True,
        "elapsed": True,
    }
