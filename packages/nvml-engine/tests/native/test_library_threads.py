"""Concurrent callers: lock-free queries and reference-counted init from many threads.

ctypes releases the GIL around foreign calls, so these threads really run the library in
parallel.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from conftest import StateWriter

THREADS = 16
ROUNDS = 300


class MemoryV2(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_ulonglong) if n != "version" else (n, ctypes.c_uint)
        for n in ("version", "total", "reserved", "free", "used")
    ]


def run_threads(target: Any) -> list[BaseException]:
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_parallel_queries_agree(pynvml: Any, write_state: StateWriter, cnvml: ctypes.CDLL) -> None:
    write_state(count=8)
    pynvml.nvmlInit()
    expected = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(8)]

    def query(i: int) -> None:
        handle = ctypes.c_void_p()
        uuid = ctypes.create_string_buffer(96)
        mem = MemoryV2(version=0x02000028)
        for r in range(ROUNDS):
            index = (i + r) % 8
            assert cnvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == 0
            assert cnvml.nvmlDeviceGetUUID(handle, uuid, 96) == 0
            assert uuid.value.decode() == expected[index]
            assert cnvml.nvmlDeviceGetMemoryInfo_v2(handle, ctypes.byref(mem)) == 0
            assert mem.free + mem.used + mem.reserved == mem.total

    assert run_threads(query) == []


def test_parallel_init_and_shutdown_balance(
    pynvml: Any, write_state: StateWriter, cnvml: ctypes.CDLL
) -> None:
    write_state(count=2)
    assert cnvml.nvmlInit_v2() == 0  # hold one reference throughout

    def churn(i: int) -> None:
        count = ctypes.c_uint()
        for _ in range(ROUNDS):
            assert cnvml.nvmlInitWithFlags(0) == 0
            assert cnvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
            assert count.value == 2
            assert cnvml.nvmlShutdown() == 0

    assert run_threads(churn) == []
    assert cnvml.nvmlShutdown() == 0
    assert cnvml.nvmlShutdown() == 1  # every reference was released exactly once
