"""Allocation records in the live layer: processes, used memory and utilization per GPU.

Written through the protocol package's writer core (as the NRI plugin writes them) and
through :class:`LiveLayer`, read through unmodified nvidia-ml-py bound to the real
library, in this process and in child processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from nvml_mock_live import Allocation, AllocationError, LiveLayer, LiveLayerError
from nvml_mock_live import _layout as _live_layout
from nvml_mock_live.allocations import pack, with_process

GiB = 1 << 30
NO_INSTANCE = 0xFFFFFFFF
NVML_PROCESS_MODE_COMPUTE = 0
NVML_PROCESS_MODE_GRAPHICS = 1
STEADY = 1


@pytest.fixture
def records(live_state: Path, library_file: Path) -> Any:
    with LiveLayer.open(live_state.parent / live.LIVE_FILE_NAME, library=library_file) as opened:
        yield opened


def used(pynvml: Any, handle: Any) -> int:
    info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert info.free == info.total - info.used - info.reserved
    value: int = info.used
    return value


def test_a_record_is_a_compute_process_with_its_memory_on_its_gpu_only(
    pynvml: Any, records: LiveLayer
) -> None:
    pynvml.nvmlInit()
    held, other = pynvml.nvmlDeviceGetHandleByIndex(1), pynvml.nvmlDeviceGetHandleByIndex(0)
    board = used(pynvml, held)
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(held) == []
    records.put(Allocation("c1", pid=4242, gpus=(1,), used_memory_bytes=20 * GiB, pod="train"))
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(held)
    assert [(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId) for p in procs] == [
        (4242, 20 * GiB, NO_INSTANCE, NO_INSTANCE)
    ]
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(other) == []
    assert pynvml.nvmlDeviceGetGraphicsRunningProcesses(held) == []
    assert used(pynvml, held) == board + 20 * GiB
    assert used(pynvml, other) == board
    v1 = pynvml.nvmlDeviceGetMemoryInfo(held)
    assert v1.used + v1.free == v1.total
    detail = pynvml.nvmlDeviceGetRunningProcessDetailList(
        held, pynvml.nvmlProcessDetailList_v1, NVML_PROCESS_MODE_COMPUTE
    )
    assert [(p.pid, p.usedGpuMemory, p.gpuInstanceId) for p in detail] == [
        (4242, 20 * GiB, NO_INSTANCE)
    ]
    graphics = pynvml.nvmlDeviceGetRunningProcessDetailList(
        held, pynvml.nvmlProcessDetailList_v1, NVML_PROCESS_MODE_GRAPHICS
    )
    assert graphics == []
    assert records.remove("c1") is True
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(held) == []
    assert used(pynvml, held) == board
    assert records.remove("c1") is False


def test_two_containers_sharing_a_gpu_sum_memory_and_utilization(
    pynvml: Any, records: LiveLayer
) -> None:
    pynvml.nvmlInit()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    board = used(pynvml, gpu)
    records.put(
        Allocation(
            "a", pid=10, gpus=(0,), used_memory_bytes=4 * GiB, util_pattern=STEADY, util_level=30
        )
    )
    records.put(
        Allocation(
            "b", pid=11, gpus=(0, 1), used_memory_bytes=6 * GiB, util_pattern=STEADY, util_level=50
        )
    )
    assert sorted(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)) == [10, 11]
    assert used(pynvml, gpu) == board + 10 * GiB
    assert pynvml.nvmlDeviceGetUtilizationRates(gpu).gpu == 80
    samples = pynvml.nvmlDeviceGetProcessUtilization(gpu, 0)
    assert sorted((s.pid, s.smUtil) for s in samples) == [(10, 30), (11, 50)]
    info = pynvml.nvmlDeviceGetProcessesUtilizationInfo(gpu, 0)
    assert sorted((s.pid, s.smUtil) for s in info) == [(10, 30), (11, 50)]
    # the sum is capped at 100
    records.put(
        Allocation(
            "a", pid=10, gpus=(0,), used_memory_bytes=4 * GiB, util_pattern=STEADY, util_level=90
        )
    )
    assert pynvml.nvmlDeviceGetUtilizationRates(gpu).gpu == 100
    assert [a.container_id for a in records.list()] == ["a", "b"]


def test_used_memory_is_capped_at_what_the_board_leaves_free(
    pynvml: Any, records: LiveLayer
) -> None:
    pynvml.nvmlInit()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    records.put(Allocation("big", pid=1, gpus=(0,), used_memory_bytes=(1 << 64) - 1))
    records.put(Allocation("more", pid=2, gpus=(0,), used_memory_bytes=1 << 63))
    info = pynvml.nvmlDeviceGetMemoryInfo(gpu, version=pynvml.nvmlMemory_v2)
    assert info.used == info.total - info.reserved
    assert info.free == 0


def test_replace_all_keeps_exactly_the_given_records(pynvml: Any, records: LiveLayer) -> None:
    pynvml.nvmlInit()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(1)
    records.put(Allocation("gone", pid=1, gpus=(1,), used_memory_bytes=GiB))
    records.put(Allocation("kept", pid=2, gpus=(1,), used_memory_bytes=GiB))
    records.replace_all(
        [
            Allocation("kept", pid=2, gpus=(1,), used_memory_bytes=2 * GiB),
            Allocation("new", pid=3, gpus=(1,), used_memory_bytes=GiB),
        ]
    )
    procs = {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)}
    assert procs == {2: 2 * GiB, 3: GiB}
    records.replace_all([])
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(gpu) == []
    assert records.list() == []


@pytest.mark.parametrize(
    ("alloc", "message"),
    [
        (Allocation("", pid=1, gpus=(0,)), "container_id=''"),
        (Allocation("x", pid=1, gpus=()), "at least one GPU"),
        (Allocation("x", pid=1, gpus=(2,)), "GPU 2 is not one of this node's 0..1"),
        (Allocation("x", pid=-1, gpus=(0,)), "pid=-1"),
        (Allocation("x", pid=1, gpus=(0,), util_level=101), "util_level=101"),
        (Allocation("x", pid=1, gpus=(0,), pod="p" * 248), "at most 247 bytes"),
    ],
)
def test_a_bad_allocation_is_refused_naming_the_field_and_nothing_is_written(
    records: LiveLayer, alloc: Allocation, message: str
) -> None:
    with pytest.raises(AllocationError, match=message):
        records.put(alloc)
    assert records.list() == []


def test_a_full_region_is_an_error_not_a_silent_drop(records: LiveLayer) -> None:
    slots = _live_layout.LIVE_PROCESS_SLOTS
    records.replace_all(Allocation(f"c{i}", pid=i, gpus=(0,)) for i in range(slots))
    with pytest.raises(AllocationError, match=f"no free process record \\({slots} slots"):
        records.put(Allocation("one-more", pid=1, gpus=(0,)))
    assert len(records.list()) == slots
    records.put(Allocation("c7", pid=77, gpus=(1,)))  # replacing one needs no free slot
    assert [a.pid for a in records.list() if a.container_id == "c7"] == [77]


def test_a_library_of_another_layout_or_missing_is_named(live_state: Path, tmp_path: Path) -> None:
    with pytest.raises(LiveLayerError, match="cannot load the mock library"):
        LiveLayer.open(live_state.parent / live.LIVE_FILE_NAME, library=tmp_path / "nope.so")


def test_the_engine_layer_offers_the_same_records(pynvml: Any, layer: live.LiveLayer) -> None:
    pynvml.nvmlInit()
    layer.put(Allocation("e", pid=5, gpus=(0,), used_memory_bytes=GiB))
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)] == [5]


def test_a_writer_in_one_process_reaches_a_reader_in_another(
    live_state: Path, library_file: Path
) -> None:
    path = live_state.parent / live.LIVE_FILE_NAME
    writer = textwrap.dedent(
        f"""
        from nvml_mock_live import Allocation, LiveLayer
        with LiveLayer.open({str(path)!r}, library={str(library_file)!r}) as f:
            f.put(Allocation("x", pid=999, gpus=(1,), used_memory_bytes={3 * GiB}))
        """
    )
    subprocess.run([sys.executable, "-c", writer], check=True)
    reader = textwrap.dedent(
        f"""
        import ctypes, pynvml
        ctypes.CDLL({str(library_file)!r}, mode=ctypes.RTLD_GLOBAL)
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(1)
        print([(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)])
        """
    )
    env = {"MOCK_NVML_CONFIG": str(live_state), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", reader], check=True, capture_output=True, text=True, env=env
    )
    assert done.stdout.strip() == f"[(999, {3 * GiB})]"


def test_the_work_alike_shows_the_records_in_its_process_table_and_query(
    library_file: Path, live_state: Path
) -> None:
    from smi_fixtures.helpers import smi

    pid = os.getpid()
    uuid = live.read_board(live_state)[1].uuid
    with LiveLayer.open(live_state.parent / live.LIVE_FILE_NAME, library=library_file) as records:
        records.put(Allocation("c1", pid=pid, gpus=(1,), used_memory_bytes=2 * GiB))
        rc, out = smi(library_file, "--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv")
        assert rc == 0
        assert out.splitlines() == [
            "pid, used_gpu_memory [MiB], gpu_uuid",
            f"{pid}, 2048 MiB, {uuid}",
        ]
        rc, out = smi(library_file)
        assert rc == 0
        rows = [line for line in out.splitlines() if f" {pid} " in line]
        assert len(rows) == 1 and " C " in rows[0] and "2048MiB" in rows[0], out
        assert "No running processes found" not in out
        records.remove("c1")
    rc, out = smi(library_file, "--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv")
    assert out.splitlines() == ["pid, used_gpu_memory [MiB], gpu_uuid"]


def test_inside_a_visible_view_a_record_shows_on_its_board_gpu(
    live_state: Path, library_file: Path
) -> None:
    """A container that sees only board GPU 1 (as its index 0) sees that GPU's processes."""
    path = live_state.parent / live.LIVE_FILE_NAME
    with LiveLayer.open(path, library=library_file) as records:
        records.put(Allocation("x", pid=31, gpus=(1,), used_memory_bytes=GiB))
    reader = textwrap.dedent(
        f"""
        import ctypes, pynvml
        ctypes.CDLL({str(library_file)!r}, mode=ctypes.RTLD_GLOBAL)
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        print(pynvml.nvmlDeviceGetCount(), [p.pid for p in procs])
        """
    )
    env = {
        "MOCK_NVML_CONFIG": str(live_state),
        "NVIDIA_VISIBLE_DEVICES": "1",
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, "-c", reader], check=True, capture_output=True, text=True, env=env
    )
    assert done.stdout.strip() == "1 [31]"


def test_records_a_writer_left_mid_write_cost_a_reader_no_wait_after_the_first_scan(
    live_state: Path, library_file: Path, tmp_path: Path
) -> None:
    """A writer that dies mid-write leaves its record's sequence counter odd for good. Readers
    give up on such a record (it is not listed), but giving up takes waits (sched_yield, a
    whole time slice each on a busy node): a region of such records must cost them once in
    all, not once per record on every call. Counted with sched_yield interposed."""
    path = live_state.parent / live.LIVE_FILE_NAME
    stuck = 32
    with LiveLayer.open(path, library=library_file) as f:
        for i in range(stuck + 1):
            f.put(Allocation(f"c{i}", pid=100 + i, gpus=(0,), used_memory_bytes=GiB))
    with path.open("r+b") as raw:  # every record but the last: its writer died mid-write
        for slot in range(stuck):
            raw.seek(
                _live_layout.LIVE_PROCESSES_OFFSET + slot * _live_layout.LIVE_PROCESS_RECORD_BYTES
            )
            seq = int.from_bytes(raw.read(8), "little")
            raw.seek(-8, os.SEEK_CUR)
            raw.write((seq | 1).to_bytes(8, "little"))
    shim = tmp_path / "count_yields.c"
    shim.write_text(
        textwrap.dedent(
            """
            #include <stdio.h>
            static unsigned long yields;
            int sched_yield(void) { yields++; return 0; }
            __attribute__((destructor)) static void report(void)
            {
                fprintf(stderr, "yields=%lu\\n", yields);
            }
            """
        )
    )
    lib = tmp_path / "count_yields.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(shim)], check=True)
    calls = 100
    reader = textwrap.dedent(
        f"""
        import ctypes, pynvml
        ctypes.CDLL({str(library_file)!r}, mode=ctypes.RTLD_GLOBAL)
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        for _ in range({calls}):
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        print([p.pid for p in procs])
        """
    )
    env = {"MOCK_NVML_CONFIG": str(live_state), "PATH": "/usr/bin:/bin", "LD_PRELOAD": str(lib)}
    done = subprocess.run(
        [sys.executable, "-c", reader], check=True, capture_output=True, text=True, env=env
    )
    assert done.stdout.strip() == f"[{100 + stuck}]"
    yields = int(done.stderr.strip().rsplit("yields=", 1)[1])
    # at most one scan's retry budget (LIVE_READ_TRIES = 64) in all; 32 records x 60 waits x
    # 100 calls before
    assert yields <= 64, done.stderr


def test_a_record_a_writer_left_mid_write_is_skipped_and_its_slot_reused(
    pynvml: Any, records: LiveLayer, live_state: Path
) -> None:
    """A writer killed inside its write leaves one record with an odd sequence counter. The
    other records stay listed and writable (the plugin and ``nvml-mock-ctl`` go on), and the
    next put takes the abandoned slot, which heals it."""
    records.put(Allocation("a", pid=1, gpus=(0,), used_memory_bytes=GiB))
    records.put(Allocation("b", pid=2, gpus=(0,), used_memory_bytes=GiB))
    path = live_state.parent / live.LIVE_FILE_NAME
    with path.open("r+b") as raw:  # record 0 ("a"): its writer died mid-write
        raw.seek(_live_layout.LIVE_PROCESSES_OFFSET)
        seq = int.from_bytes(raw.read(8), "little")
        raw.seek(_live_layout.LIVE_PROCESSES_OFFSET)
        raw.write((seq | 1).to_bytes(8, "little"))
    assert [a.container_id for a in records.list()] == ["b"]
    pynvml.nvmlInit()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)] == [2]
    records.put(Allocation("c", pid=3, gpus=(0,), used_memory_bytes=GiB))
    assert [a.container_id for a in records.list()] == ["c", "b"]  # slot 0 again, whole
    assert sorted(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)) == [2, 3]
    assert records.remove("b") is True and [a.pid for a in records.list()] == [3]


def test_a_put_keeps_one_record_per_container_and_a_remove_frees_every_copy(
    records: LiveLayer, live_state: Path
) -> None:
    """Two slots holding one container id (a copy an old writer or a hand edit left): a put
    rewrites the first in place and frees the other, a remove frees all of them, and ids no
    record can hold remove nothing."""
    records.put(Allocation("dup", pid=1, gpus=(0,)))
    records.put(Allocation("other", pid=2, gpus=(1,)))
    size = _live_layout.LIVE_PROCESS_RECORD_BYTES
    path = live_state.parent / live.LIVE_FILE_NAME
    with path.open("r+b") as raw:  # copy slot 0 ("dup") into slot 2, and let readers see it
        raw.seek(_live_layout.LIVE_PROCESSES_OFFSET)
        first = raw.read(size)
        raw.seek(_live_layout.LIVE_PROCESSES_OFFSET + 2 * size)
        raw.write(first)
        raw.seek(_live_layout.LIVE_HEADER_FIELDS["process_high"][1])
        raw.write((3).to_bytes(4, "little"))
    assert [a.container_id for a in records.list()] == ["dup", "other", "dup"]
    records.put(Allocation("dup", pid=9, gpus=(1,)))
    assert [(a.container_id, a.pid) for a in records.list()] == [("dup", 9), ("other", 2)]
    assert records.remove("other") is True and records.remove("other") is False
    for impossible in ("", "x" * _live_layout.LIVE_PROCESS_FIELDS["container_id"][2], "a\0b"):
        assert records.remove(impossible) is False
    assert [a.pid for a in records.list()] == [9]
    assert records.remove("dup") is True and records.list() == []


def test_a_record_packed_before_the_start_takes_its_process_alone(records: LiveLayer) -> None:
    """The NRI plugin packs a record at StartContainer and adds the PID at PostStart: the
    record read back is the packed one with only its PID and start time changed."""
    derived = Allocation("w", pid=0, gpus=(2,), used_memory_bytes=GiB, pod="p", start_time_ms=5)
    records.put_record(with_process(pack(derived, 8), 4242, 1_700_000_000_000))
    (back,) = records.list()
    assert back == Allocation(
        "w", pid=4242, gpus=(2,), used_memory_bytes=GiB, pod="p", start_time_ms=1_700_000_000_000
    )
    for pid, start in ((-1, 0), (1 << 32, 0), (1, -1), (1, 1 << 64)):
        with pytest.raises(AllocationError, match="must be an integer"):
            with_process(pack(derived, 8), pid, start)
