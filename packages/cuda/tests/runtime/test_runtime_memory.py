"""Memory through the runtime work-alike: exact copies, the node sees it, out of memory as on a
real node. rtclient runs with the work-alike preloaded; NVML is read by nvidia-ml-py in
another process, as nvidia-smi and the exporter read it."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

MIB = 1 << 20

NVML_PROCESSES = """
import json
import pynvml as n

n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex({index})
print(json.dumps([[p.pid, p.usedGpuMemory] for p in n.nvmlDeviceGetComputeRunningProcesses(h)]))
"""

# rtclient's cudaPointerAttributes.type values (enum cudaMemoryType)
UNREGISTERED, HOST, DEVICE = 0, 1, 2


@pytest.mark.parametrize("major", [13, 12])
def test_copies_are_exact_in_every_direction(node: Any, run_client: Any, major: int) -> None:
    got = run_client(node, major, "memory", "2", str(64 * MIB))
    assert got.get("failed") is None, got
    assert got["h2d2h"] and got["set_d2d"] and got["async"] and got["peer"] and got["pinned"]
    assert got["current"] == 2
    assert got["query"] == 0 and got["elapsed_ms"] >= 0
    # both allocations come out of what NVML says is free, and go back
    assert got["free_before"] - got["free_allocated"] >= 2 * 64 * MIB
    assert got["free_after"] == got["free_before"]
    assert got["free_before"] <= got["total"]
    assert got["types"] == {"device": DEVICE, "peer": DEVICE, "host": UNREGISTERED, "pinned": HOST}
    assert got["devices"] == {"device": 2, "peer": 3}


def _nvml_processes(node: Any, index: int) -> list[list[int]]:
    result: list[list[int]] = node.run(NVML_PROCESSES.replace("{index}", str(index)))
    return result


def test_an_allocation_is_listed_by_nvml_under_the_pid(
    node: Any, rt_client: Any, cuda_runtime: Any
) -> None:
    """256 MiB held on GPU 1 shows in another process's NVML under the holder's PID, and is
    gone once the holder is killed (SIGKILL: no cleanup of its own runs)."""
    with subprocess.Popen(
        [str(rt_client[13]), "hold", "1", str(256 * MIB)],
        env=node.env(LD_PRELOAD=str(cuda_runtime / "libcudart.so.13")),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert json.loads(line) == {"pid": proc.pid, "ready": True}, line
            listed = dict(map(tuple, _nvml_processes(node, 1)))
            assert listed.get(proc.pid, 0) >= 256 * MIB, listed
            assert proc.pid not in dict(map(tuple, _nvml_processes(node, 0)))
        finally:
            proc.kill()
            proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while proc.pid in dict(map(tuple, _nvml_processes(node, 1))):
        assert time.monotonic() < deadline, "the killed process is still listed"
        time.sleep(0.2)


@pytest.mark.parametrize("major", [13, 12])
def test_out_of_memory_as_on_a_real_node(node: Any, run_client: Any, major: int) -> None:
    got = run_client(node, major, "oom", "0")
    assert got["malloc"]["name"] == "cudaErrorMemoryAllocation"
    assert got["malloc"]["string"].startswith("out of memory")
    assert got["null"] is True
    assert got["last"]["code"] == 2 and got["cleared"]["code"] == 0
    assert got["after"]["code"] == 0, "a failed allocation must leave the device usable"


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("fallen-off-bus", "cudaErrorLaunchFailure"),
        ("ecc-uncorrectable", "cudaErrorECCUncorrectable"),
    ],
)
def test_a_fault_fails_the_next_runtime_call_on_its_gpu_only(
    node: Any, rt_client: Any, cuda_runtime: Any, fault: str, error: str
) -> None:
    """The live layer's fault reaches a running program through the runtime, with the
    driver's sentence; the other GPU keeps working."""
    with subprocess.Popen(
        [str(rt_client[13]), "probe"],
        env=node.env(LD_PRELOAD=str(cuda_runtime / "libcudart.so.13")),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdin is not None
            before = json.loads(proc.stdout.readline())
            assert before["gpu0"]["code"] == before["gpu1"]["code"] == 0, before
            node.ctl("fail", fault, "-i", "0")
            proc.stdin.write("go\n")
            proc.stdin.flush()
            after = json.loads(proc.stdout.readline())
        finally:
            proc.kill()
            proc.wait(timeout=30)
    assert after["gpu0"]["name"] == after["gpu0_again"]["name"] == error
    assert "nvml-mock" in after["gpu0"]["string"], "the driver's sentence is passed on"
    assert after["gpu1"]["code"] == 0


@pytest.mark.parametrize("major", [13, 12])
def test_stream_ordered_allocation_from_the_default_pool(
    node: Any, run_client: Any, major: int
) -> None:
    """The default pool counts what is allocated through it and keeps nothing back."""
    got = run_client(node, major, "pool")
    assert got.get("failed") is None, got
    assert got["same"] == 1 and got["distinct"] == 1
    assert got["threshold"] == 1 << 30
    assert got["used"] == 4 * MIB and got["high"] == 4 * MIB and got["after"] == 0
    assert got["high_reset"] == 0 and got["copy"] == 1
    assert got["other_device_pool"]["name"] == "cudaErrorNotSupported"
    assert got["high_nonzero"]["name"] == "cudaErrorInvalidValue"
    assert got["foreign_pool"]["name"] == "cudaErrorInvalidValue"
