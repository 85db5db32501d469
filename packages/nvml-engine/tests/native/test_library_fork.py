"""fork() while other threads are inside the library: the child's calls answer, never hang.

fork copies only the calling thread; a lock another thread held at that moment would stay
held in the child for good. Python clients fork workers (multiprocessing, data loaders)
while a monitoring thread keeps calling NVML, so the library takes its locks around a fork.
Real forks from a process whose threads run the real library through ctypes (which
releases the GIL, so they really are inside it when the fork lands).
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any

from conftest import StateWriter, in_forked_child

NVML_ERROR_UNINITIALIZED = 1
FORKS = 60
CHURNERS = 3


def test_forks_while_threads_init_and_shut_down(
    pynvml: Any, write_state: StateWriter, cnvml: ctypes.CDLL
) -> None:
    """Threads keep the init count falling to zero (each init reloads the state under the
    init lock, and a live layer under the binding's lock) and make failing calls (an error
    detail under its lock); every child's init, queries and shutdown answer at once."""
    write_state(count=8)
    stop = threading.Event()
    errors: list[str] = []

    def churn() -> None:
        count = ctypes.c_uint()
        while not stop.is_set():
            rc = cnvml.nvmlInit_v2()
            if rc != 0:
                errors.append(f"init {rc}")
            cnvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
            cnvml.nvmlErrorString(NVML_ERROR_UNINITIALIZED)
            cnvml.nvmlShutdown()

    def child() -> str:
        count = ctypes.c_uint()
        init = cnvml.nvmlInit_v2()
        got = cnvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
        cnvml.nvmlErrorString(NVML_ERROR_UNINITIALIZED)
        return f"{init} {got} {count.value} {cnvml.nvmlShutdown()}"

    threads = [threading.Thread(target=churn) for _ in range(CHURNERS)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.05)
        answers = [in_forked_child(child, timeout=10.0) for _ in range(FORKS)]
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert errors == []
    assert answers == ["0 0 8 0"] * FORKS
