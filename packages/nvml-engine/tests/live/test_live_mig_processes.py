"""Allocation records that hold MIG devices, read through nvidia-ml-py bound to the real library.

A record names, per GPU it holds, the MIG devices (GPU / compute instance ids) it holds there;
the process is listed on the parent GPU with those ids, and its memory counts on that MIG
device and on the parent. A process holds its MIG device as on a real driver: the compute and
GPU instance it runs on cannot be destroyed (NVML_ERROR_IN_USE) until its record goes. The ids
are the record's, listed as given even for an instance that no longer exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mig_board import split_board
from nvml_mock_live import MIG_HOLDINGS_MAX, Allocation, AllocationError, LiveLayer
from smi_fixtures.helpers import smi

GiB = 1 << 30
NO_INSTANCE = 0xFFFFFFFF
NVML_PROCESS_MODE_COMPUTE = 0


@pytest.fixture
def node(pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, library_file: Path) -> Any:
    """A two-GPU H100 node with GPU 0 in MIG mode holding two 1g.10gb MIG devices (GI/CI ids
    as the library gives them), and the live file opened for writing records."""
    live_file, gpu = split_board(pynvml, monkeypatch, tmp_path, "mig-node")
    with LiveLayer.open(live_file, library=library_file) as records:
        yield gpu, records


def mig_device(pynvml: Any, gpu: Any, index: int) -> tuple[Any, int, int]:
    handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, index)
    gi: int = pynvml.nvmlDeviceGetGpuInstanceId(handle)
    ci: int = pynvml.nvmlDeviceGetComputeInstanceId(handle)
    return handle, gi, ci


def used(pynvml: Any, handle: Any) -> int:
    info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert info.free == info.total - info.used - info.reserved
    value: int = info.used
    return value


def listed(pynvml: Any, gpu: Any) -> list[tuple[int, int, int, int]]:
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)  # the _v3 entry point
    return [(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId) for p in procs]


def test_a_mig_holding_is_listed_on_the_parent_with_its_ids_and_counts_on_that_device(
    pynvml: Any, node: Any
) -> None:
    gpu, records = node
    first, gi, ci = mig_device(pynvml, gpu, 0)
    second, _, _ = mig_device(pynvml, gpu, 1)
    parent_before = used(pynvml, gpu)
    records.put(
        Allocation("c1", pid=4242, gpus=(0,), used_memory_bytes=3 * GiB, mig=((0, gi, ci),))
    )
    assert listed(pynvml, gpu) == [(4242, 3 * GiB, gi, ci)]
    detail = pynvml.nvmlDeviceGetRunningProcessDetailList(
        gpu, pynvml.nvmlProcessDetailList_v1, NVML_PROCESS_MODE_COMPUTE
    )
    assert [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in detail] == [(4242, gi, ci)]
    assert used(pynvml, first) == 3 * GiB
    assert used(pynvml, second) == 0
    v1 = pynvml.nvmlDeviceGetMemoryInfo(first)
    assert (v1.used, v1.free) == (3 * GiB, v1.total - 3 * GiB)
    assert used(pynvml, gpu) == parent_before + 3 * GiB
    assert records.list()[0].mig == ((0, gi, ci),)
    records.remove("c1")
    assert listed(pynvml, gpu) == []
    assert used(pynvml, first) == 0


def test_a_record_holding_a_mig_device_and_a_whole_gpu_lists_each_its_way(
    pynvml: Any, node: Any
) -> None:
    gpu, records = node
    whole = pynvml.nvmlDeviceGetHandleByIndex(1)
    _, gi0, ci0 = mig_device(pynvml, gpu, 0)
    _, gi1, ci1 = mig_device(pynvml, gpu, 1)
    records.put(
        Allocation(
            "c2", pid=7, gpus=(0, 1), used_memory_bytes=GiB, mig=((0, gi0, ci0), (0, gi1, ci1))
        )
    )
    assert listed(pynvml, gpu) == [(7, GiB, gi0, ci0), (7, GiB, gi1, ci1)]
    assert listed(pynvml, whole) == [(7, GiB, NO_INSTANCE, NO_INSTANCE)]


def test_the_memory_a_mig_device_shows_is_capped_at_its_size(pynvml: Any, node: Any) -> None:
    gpu, records = node
    first, gi, ci = mig_device(pynvml, gpu, 0)
    total = pynvml.nvmlDeviceGetMemoryInfo(first).total
    records.put(
        Allocation("big", pid=1, gpus=(0,), used_memory_bytes=total + GiB, mig=((0, gi, ci),))
    )
    assert used(pynvml, first) == total


def test_a_record_naming_a_destroyed_instance_keeps_the_ids_it_was_given(
    pynvml: Any, node: Any
) -> None:
    gpu, records = node
    _, gi, ci = mig_device(pynvml, gpu, 1)
    instance = pynvml.nvmlDeviceGetGpuInstanceById(gpu, gi)
    pynvml.nvmlComputeInstanceDestroy(pynvml.nvmlGpuInstanceGetComputeInstanceById(instance, ci))
    pynvml.nvmlGpuInstanceDestroy(instance)
    records.put(Allocation("c3", pid=99, gpus=(0,), used_memory_bytes=GiB, mig=((0, gi, ci),)))
    assert pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0) is not None
    assert listed(pynvml, gpu) == [(99, GiB, gi, ci)]
    assert records.list()[0].mig == ((0, gi, ci),)


def in_use(pynvml: Any, call: Any, *args: Any) -> None:
    with pytest.raises(pynvml.NVMLError) as caught:
        call(*args)
    assert caught.value.value == pynvml.NVML_ERROR_IN_USE


def test_an_instance_a_process_runs_on_cannot_be_destroyed_until_it_goes(
    pynvml: Any, node: Any
) -> None:
    gpu, records = node
    _, gi, ci = mig_device(pynvml, gpu, 1)
    _, other_gi, other_ci = mig_device(pynvml, gpu, 0)
    records.put(Allocation("c5", pid=77, gpus=(0,), used_memory_bytes=GiB, mig=((0, gi, ci),)))
    instance = pynvml.nvmlDeviceGetGpuInstanceById(gpu, gi)
    compute = pynvml.nvmlGpuInstanceGetComputeInstanceById(instance, ci)
    in_use(pynvml, pynvml.nvmlComputeInstanceDestroy, compute)
    in_use(pynvml, pynvml.nvmlGpuInstanceDestroy, instance)  # its compute instance is still there
    assert mig_device(pynvml, gpu, 1)[1:] == (gi, ci)
    # the idle instance beside it goes as before
    idle = pynvml.nvmlDeviceGetGpuInstanceById(gpu, other_gi)
    pynvml.nvmlComputeInstanceDestroy(pynvml.nvmlGpuInstanceGetComputeInstanceById(idle, other_ci))
    pynvml.nvmlGpuInstanceDestroy(idle)
    records.remove("c5")
    pynvml.nvmlComputeInstanceDestroy(compute)
    pynvml.nvmlGpuInstanceDestroy(instance)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)


def test_a_gpu_instance_a_record_names_is_held_with_no_compute_instance_left(
    pynvml: Any, node: Any
) -> None:
    gpu, records = node
    _, gi, ci = mig_device(pynvml, gpu, 0)
    instance = pynvml.nvmlDeviceGetGpuInstanceById(gpu, gi)
    pynvml.nvmlComputeInstanceDestroy(pynvml.nvmlGpuInstanceGetComputeInstanceById(instance, ci))
    records.put(Allocation("c6", pid=78, gpus=(0,), mig=((0, gi, ci),)))
    in_use(pynvml, pynvml.nvmlGpuInstanceDestroy, instance)
    records.remove("c6")
    pynvml.nvmlGpuInstanceDestroy(instance)


def test_a_mig_device_handle_lists_the_processes_on_that_device_with_their_ids(
    pynvml: Any, node: Any
) -> None:
    gpu, records = node
    first, gi0, ci0 = mig_device(pynvml, gpu, 0)
    second, gi1, ci1 = mig_device(pynvml, gpu, 1)
    records.put(Allocation("a", pid=11, gpus=(0,), used_memory_bytes=GiB, mig=((0, gi0, ci0),)))
    records.put(Allocation("b", pid=12, gpus=(0,), used_memory_bytes=2 * GiB, mig=((0, gi1, ci1),)))
    assert listed(pynvml, first) == [(11, GiB, gi0, ci0)]
    assert listed(pynvml, second) == [(12, 2 * GiB, gi1, ci1)]
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses_v2(second)] == [12]
    records.remove("a")
    assert listed(pynvml, first) == []


def test_the_work_alike_refuses_to_destroy_an_instance_in_use_as_nvidia_smi_does(
    pynvml: Any, node: Any, library_file: Path
) -> None:
    gpu, records = node
    _, gi, ci = mig_device(pynvml, gpu, 0)
    records.put(Allocation("c7", pid=79, gpus=(0,), mig=((0, gi, ci),)))
    rc, out = smi(library_file, "mig", "-i", "0", "-gi", str(gi), "-ci", str(ci), "-dci")
    assert rc != 0
    assert "Unable to destroy compute instance" in out
    assert "In use by another client" in out
    rc, out = smi(library_file, "mig", "-i", "0", "-gi", str(gi), "-dgi")
    assert rc != 0
    assert "In use by another client" in out
    records.remove("c7")
    rc, out = smi(library_file, "mig", "-i", "0", "-gi", str(gi), "-ci", str(ci), "-dci")
    assert rc == 0, out
    assert "Successfully destroyed compute instance" in out


@pytest.mark.parametrize(
    ("mig", "why"),
    [
        (((1, 1, 0),), "not one of gpus"),
        (((0, 256, 0),), "instance ids are in 0..255"),
        (((0, 1, 0), (0, 1, 0)), "named twice"),
        (tuple((0, i, 0) for i in range(MIG_HOLDINGS_MAX + 1)), "at most"),
        (((0, 1),), "(gpu, gpu instance, compute instance)"),
    ],
)
def test_a_bad_mig_holding_is_refused_naming_it(
    node: Any, mig: tuple[tuple[int, ...], ...], why: str
) -> None:
    _, records = node
    with pytest.raises(AllocationError, match="mig=") as caught:
        records.put(Allocation("bad", pid=1, gpus=(0,), mig=mig))  # type: ignore[arg-type]
    assert why in str(caught.value)
    assert records.list() == []


def test_the_work_alike_shows_one_process_row_per_mig_device_with_its_ids(
    pynvml: Any, node: Any, library_file: Path
) -> None:
    gpu, records = node
    _, gi0, ci0 = mig_device(pynvml, gpu, 0)
    _, gi1, ci1 = mig_device(pynvml, gpu, 1)
    records.put(
        Allocation(
            "c4", pid=4242, gpus=(0,), used_memory_bytes=GiB, mig=((0, gi0, ci0), (0, gi1, ci1))
        )
    )
    rc, out = smi(library_file)
    assert rc == 0
    rows = [line.split() for line in out.splitlines() if "4242" in line]
    assert [row[1:6] for row in rows] == [
        ["0", str(gi0), str(ci0), "4242", "C"],
        ["0", str(gi1), str(ci1), "4242", "C"],
    ]
    assert all(row[-2] == "1024MiB" for row in rows)
