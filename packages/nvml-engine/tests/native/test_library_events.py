"""Event sets: the device plugin's health-check loop depends on waits that really block."""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any

import pytest
from conftest import StateWriter

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
