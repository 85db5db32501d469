"""The plain-read copies of ``nvml_mock_live.plain_reads`` (what ``nvml-mock-ctl status``
shows without loading the library) equal the library's own sequence-locked copies, leave out
what the library leaves out, and give up on a record a dead writer left mid-write."""

from __future__ import annotations

import ctypes
import struct
from typing import Any

import nvml_mock_live as live
from nvml_mock_live import _layout as layout
from nvml_mock_live import library
from nvml_mock_live.allocations import unpack
from nvml_mock_live.header import record_offset
from nvml_mock_live.plain_reads import gpu_snapshot, process_record


def test_a_gpu_copy_is_the_librarys(layer: Any) -> None:
    layer.set(1, {"temperature_c": 91, "power_usage_mw": 350_000, "ecc_volatile_corrected": 3})
    layer.set(0, {"temperature_c": 40})
    for gpu in (0, 1):
        rc, mask, slots = library.snapshot(layer.lib, layer.address(), gpu)
        assert rc == 0
        assert gpu_snapshot(layer._map, gpu) == (tuple(mask), tuple(slots))


def test_a_process_copy_is_the_librarys_and_free_slots_are_none(layer: Any) -> None:
    layer.put(live.Allocation("a", pid=11, gpus=(0,), pod="p"))
    layer.put(live.Allocation("b", pid=22, gpus=(1,)))
    layer.remove("a")
    out = ctypes.create_string_buffer(layout.LIVE_PROCESS_RECORD_BYTES)
    for slot in range(3):
        rc = layer.lib.nvml_mock_live_proc_read(
            layer.address(), layout.LIVE_TOTAL_BYTES, slot, ctypes.addressof(out), len(out)
        )
        record = process_record(layer._map, slot)
        assert (record is not None) == (rc == 1)
        if record is not None:
            assert record == out.raw
    assert [unpack(r).pid for s in range(3) if (r := process_record(layer._map, s))] == [22]


def test_a_record_left_mid_write_is_not_taken(layer: Any) -> None:
    layer.set(0, {"temperature_c": 55})
    layer.put(live.Allocation("a", pid=11, gpus=(0,)))
    seq_at = record_offset(0) + layout.LIVE_RECORD_SEQ
    (seq,) = struct.unpack_from("<Q", layer._map, seq_at)
    struct.pack_into("<Q", layer._map, seq_at, seq | 1)
    proc_at = layout.LIVE_PROCESSES_OFFSET
    (pseq,) = struct.unpack_from("<Q", layer._map, proc_at)
    struct.pack_into("<Q", layer._map, proc_at, pseq | 1)
    assert gpu_snapshot(layer._map, 0) is None
    assert process_record(layer._map, 0) is None
    assert gpu_snapshot(layer._map, 1) is not None
