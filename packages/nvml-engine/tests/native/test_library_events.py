"""Event sets: the device plugin's health-check loop depends on waits that really block."""

from __future__ import annotations

import ctypes
import threading
import time
from functools import partial
from typing import Any

import pytest
from conftest import StateWriter, in_forked_child, race_frees

NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_TIMEOUT = 10
HEALTH_EVENTS = 0x8 | 0x2 | 0x1  # Xid, DBE, SBE: what the device plugin registers


def test_health_check_sequence(nvml: Any) -> None:
    event_set = nvml.nvmlEventSetCreate()
    for index in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByUUID(
            nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(index))
        )
        supported = nvml.nvmlDeviceGetSupportedEventTypes(h)
        assert supported & HEALTH_EVENTS == HEALTH_EVENTS
        nvml.nvmlDeviceRegisterEvents(h, HEALTH_EVENTS & supported, event_set)
    start = time.monotonic()
    with pytest.raises(nvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait(event_set, 300)
    assert time.monotonic() - start >= 0.3
    nvml.nvmlEventSetFree(event_set)


def test_wait_zero_returns_timeout_at_once(nvml: Any) -> None:
    event_set = nvml.nvmlEventSetCreate()
    with pytest.raises(nvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait(event_set, 0)
    nvml.nvmlEventSetFree(event_set)


def test_no_ecc_events_without_ecc(pynvml: Any, write_state: StateWriter) -> None:
    write_state(count=1, ecc_enabled=0, ecc_supported=0)
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetSupportedEventTypes(h) & 0x3 == 0
    event_set = pynvml.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceRegisterEvents(h, HEALTH_EVENTS, event_set)
    pynvml.nvmlDeviceRegisterEvents(h, 0x8, event_set)
    pynvml.nvmlEventSetFree(event_set)


def test_free_wakes_a_waiter(nvml: Any, cnvml: ctypes.CDLL) -> None:
    event_set = ctypes.c_void_p()
    assert cnvml.nvmlEventSetCreate(ctypes.byref(event_set)) == 0
    data = ctypes.create_string_buffer(64)
    result: list[int] = []
    waiter = threading.Thread(
        target=lambda: result.append(cnvml.nvmlEventSetWait_v2(event_set, data, 60_000))
    )
    start = time.monotonic()
    waiter.start()
    time.sleep(0.2)
    assert cnvml.nvmlEventSetFree(event_set) == 0
    waiter.join(10)
    assert not waiter.is_alive()
    assert result == [NVML_ERROR_TIMEOUT]
    assert time.monotonic() - start < 30


def test_bad_arguments(nvml: Any, cnvml: ctypes.CDLL) -> None:
    data = ctypes.create_string_buffer(64)
    bogus = ctypes.create_string_buffer(128)
    assert cnvml.nvmlEventSetWait_v2(None, data, 10) == NVML_ERROR_INVALID_ARGUMENT
    assert cnvml.nvmlEventSetWait_v2(bogus, data, 10) == NVML_ERROR_INVALID_ARGUMENT
    assert cnvml.nvmlEventSetFree(None) == NVML_ERROR_INVALID_ARGUMENT


def test_a_freed_handle_names_no_set(nvml: Any, cnvml: ctypes.CDLL) -> None:
    """A stale handle (a second free, a wait or a registration after the free) is refused
    with INVALID_ARGUMENT; the library looks handles up rather than reading freed memory."""
    event_set = nvml.nvmlEventSetCreate()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.nvmlDeviceRegisterEvents(h, 0x8, event_set)
    nvml.nvmlEventSetFree(event_set)
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlEventSetFree(event_set)
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlEventSetWait(event_set, 0)
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceRegisterEvents(h, 0x8, event_set)
    # the sets still held answer as before
    other = nvml.nvmlEventSetCreate()
    with pytest.raises(nvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait(other, 0)
    nvml.nvmlEventSetFree(other)


def test_calls_racing_a_free(nvml: Any, cnvml: ctypes.CDLL) -> None:
    """Threads wait on a set in a loop while it is freed: every call answers TIMEOUT (it took
    the set first) or INVALID_ARGUMENT (it came after), and the free returns."""
    data = ctypes.create_string_buffer(64)
    for _ in range(20):
        event_set = ctypes.c_void_p()
        assert cnvml.nvmlEventSetCreate(ctypes.byref(event_set)) == 0
        wait = partial(cnvml.nvmlEventSetWait_v2, event_set, data, 1)
        answers = race_frees([wait] * 4, [partial(cnvml.nvmlEventSetFree, event_set)])
        for mine in answers:
            assert set(mine[:-1]) <= {NVML_ERROR_TIMEOUT}
            assert mine[-1] == NVML_ERROR_INVALID_ARGUMENT


def test_a_forked_child_frees_a_set_a_parent_thread_waits_on(nvml: Any, cnvml: ctypes.CDLL) -> None:
    """fork() copies the set but not the thread waiting on it: the child's wait and free
    answer at once instead of waiting for a waiter it does not have."""
    event_set = ctypes.c_void_p()
    assert cnvml.nvmlEventSetCreate(ctypes.byref(event_set)) == 0
    data = ctypes.create_string_buffer(64)
    waiter = threading.Thread(target=cnvml.nvmlEventSetWait_v2, args=(event_set, data, 60_000))
    waiter.start()
    time.sleep(0.2)  # inside its wait

    def child() -> str:
        buf = ctypes.create_string_buffer(64)
        waited = cnvml.nvmlEventSetWait_v2(event_set, buf, 10)
        return f"{waited} {cnvml.nvmlEventSetFree(event_set)}"

    assert in_forked_child(child) == f"{NVML_ERROR_TIMEOUT} 0"
    assert cnvml.nvmlEventSetFree(event_set) == 0  # the parent's set and waiter are untouched
    waiter.join(10)
    assert not waiter.is_alive()
