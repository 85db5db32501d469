"""The per-thread answers of the hot per-GPU calls (``native/src/answers.h``): used memory,
utilization and the process list are kept by each thread until the live file is written.

These tests read a value, change the file behind the reader's back in every way a writer can
(a write, a record a writer left mid-write, its repair without a generation bump, an armed
fault that counts calls, a re-init over another state) and check the next call sees it:
through unmodified nvidia-ml-py bound to the real library and the real writer.
"""

from __future__ import annotations

import struct
import threading
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from conftest import StateWriter, gpu_entry
from nvml_mock_live import Allocation, LiveLayer
from nvml_mock_live import _layout as _live_layout

GiB = 1 << 30
BOARD_USED = 1048576  # conftest's gpu_entry
TRIGGER_AFTER_CALLS = 1


def used(pynvml: Any, handle: Any) -> int:
    info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert info.free == info.total - info.used - info.reserved
    value: int = info.used
    return value


def pids(pynvml: Any, handle: Any) -> list[int]:
    return sorted(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle))


def _set_seq_odd(path: Path, gpu: int) -> None:
    """Leave GPU record `gpu` as a writer that died mid-write does: its counter odd, in the
    file the reader maps (same inode), and no generation bump (the write never finished)."""
    at = _live_layout.LIVE_RECORDS_OFFSET + gpu * _live_layout.LIVE_RECORD_BYTES
    with path.open("r+b") as raw:
        raw.seek(at + _live_layout.LIVE_RECORD_SEQ)
        seq = struct.unpack("<Q", raw.read(8))[0]
        raw.seek(at + _live_layout.LIVE_RECORD_SEQ)
        raw.write(struct.pack("<Q", seq | 1))


def test_every_kept_answer_moves_with_the_next_write(pynvml: Any, live_state: Path) -> None:
    path = live_state.parent / live.LIVE_FILE_NAME
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert used(pynvml, handle) == BOARD_USED  # kept by this thread from here on
    assert pids(pynvml, handle) == []
    with LiveLayer.open(path) as layer:
        layer.set(0, {"memory_used_bytes": 3 * GiB, "util_gpu_pct": 40, "util_mem_pct": 9})
        assert used(pynvml, handle) == 3 * GiB
        rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
        assert (rates.gpu, rates.memory) == (40, 9)
        layer.put(Allocation("c1", pid=77, gpus=(0,), used_memory_bytes=2 * GiB))
        assert used(pynvml, handle) == 5 * GiB
        assert pids(pynvml, handle) == [77]
        layer.set(0, {"util_gpu_pct": 55})  # a write of another key of the same record
        assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu == 55
        assert layer.remove("c1") is True
        assert pids(pynvml, handle) == []
        assert used(pynvml, handle) == 3 * GiB


def test_a_write_on_another_gpu_leaves_this_ones_answers_right(
    pynvml: Any, layer: LiveLayer
) -> None:
    pynvml.nvmlInit()
    first, second = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    layer.set(0, {"memory_used_bytes": 2 * GiB})
    assert (used(pynvml, first), used(pynvml, second)) == (2 * GiB, BOARD_USED)
    layer.set(1, {"memory_used_bytes": 4 * GiB})
    assert (used(pynvml, first), used(pynvml, second)) == (2 * GiB, 4 * GiB)


def test_a_record_repaired_without_a_generation_bump_answers_the_board_again(
    pynvml: Any, live_state: Path
) -> None:
    """A writer that died mid-write moves no generation, and the repair (the next writer
    clears the record and makes its counter even again) moves none either: the record's own
    counter is part of what a kept answer is checked against."""
    path = live_state.parent / live.LIVE_FILE_NAME
    with LiveLayer.open(path) as layer:
        layer.set(0, {"memory_used_bytes": 6 * GiB, "util_gpu_pct": 70})
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert used(pynvml, handle) == 6 * GiB
    assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu == 70
    _set_seq_odd(path, 0)
    assert used(pynvml, handle) == BOARD_USED  # the torn record is not read
    with LiveLayer.open(path) as repaired:  # the next writer repairs the record
        assert repaired.values(0) == {}
    assert used(pynvml, handle) == BOARD_USED
    assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu == 0


def test_an_armed_value_counts_every_call_and_applies_once_fired(
    pynvml: Any, layer: LiveLayer
) -> None:
    """An armed key's trigger counts reads of it: an answer kept across calls would hide
    them, so armed keys are read on every call."""
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    layer.set(0, {"fault_trigger": TRIGGER_AFTER_CALLS, "fault_trigger_param": 3})
    layer.set(0, {"memory_used_bytes": 7 * GiB, "util_gpu_pct": 100}, armed=True)
    assert [used(pynvml, handle) for _ in range(2)] == [BOARD_USED, BOARD_USED]
    seen = [used(pynvml, handle) for _ in range(3)]
    assert seen[-1] == 7 * GiB and seen[-2] == 7 * GiB
    assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu == 100


def test_each_thread_sees_a_write_another_thread_made_after_it_read(
    pynvml: Any, layer: LiveLayer
) -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    seen: list[int] = []
    ready = threading.Event()
    go = threading.Event()

    def reader() -> None:
        seen.append(used(pynvml, handle))
        ready.set()
        go.wait(timeout=30)
        seen.append(used(pynvml, handle))

    thread = threading.Thread(target=reader)
    thread.start()
    assert ready.wait(timeout=30)
    assert used(pynvml, handle) == BOARD_USED
    layer.set(0, {"memory_used_bytes": 8 * GiB})
    go.set()
    thread.join(timeout=30)
    assert seen == [BOARD_USED, 8 * GiB]
    assert used(pynvml, handle) == 8 * GiB


def test_a_re_init_over_another_state_answers_its_board(
    pynvml: Any, write_state: StateWriter, live_state: Path
) -> None:
    """Same live file, same generation, another board behind it: the init cycle is part of
    the key."""
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert used(pynvml, handle) == BOARD_USED
    pynvml.nvmlShutdown()
    write_state(gpus=[gpu_entry(i, memory_used_bytes=(i + 1) * GiB) for i in range(2)])
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert used(pynvml, handle) == GiB


@pytest.mark.parametrize("count", [0, 3])
def test_the_kept_process_list_keeps_nvmls_size_protocol(
    pynvml: Any, cnvml: Any, layer: LiveLayer, count: int
) -> None:
    import ctypes

    for i in range(count):
        layer.put(Allocation(f"c{i}", pid=100 + i, gpus=(0,), used_memory_bytes=GiB))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    fn = cnvml.nvmlDeviceGetComputeRunningProcesses_v3
    for _ in range(2):  # the first call fills the thread's copy, the second answers from it
        n = ctypes.c_uint(0)
        rc = fn(handle, ctypes.byref(n), None)
        assert (rc, n.value) == ((7, count) if count else (0, 0))  # INSUFFICIENT_SIZE
        assert pids(pynvml, handle) == [100 + i for i in range(count)]
