"""Xid events, as DCGM sees them: the last one latched per GPU, and counts over a window.

A thread waits on one NVML event set registered for ``nvmlEventTypeXidCriticalError`` on
every GPU (``nvmlEventSetWait_v2``, half a second at a time so that it stops promptly). The
mock library wakes every waiter on the node when ``nvml-mock-ctl`` writes an Xid, so an Xid
is here within one wait of being injected, and in the next collection's series.

``DCGM_FI_DEV_XID_ERRORS`` is the value of the last Xid a GPU reported, and it stays there
(it latches): DCGM keeps a field's last value until a new one arrives, so a dashboard still
shows Xid 79 long after the GPU fell off the bus. ``DCGM_EXP_XID_ERRORS_COUNT`` counts each
Xid per GPU over the last ``window`` seconds, as dcgm-exporter's Xid collector does.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, Final

import pynvml

from nvml_mock_exporter.readings import Gpu

__all__ = ["XidWatcher"]

logger = logging.getLogger(__name__)
_WAIT_MS: Final = 500


def _address(handle: Any) -> int:
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


class XidWatcher:
    """Waits for Xid events on the GPUs given; thread-safe readers of what it saw."""

    def __init__(self, gpus: Iterable[Gpu], window_s: float) -> None:
        self.window_s = window_s
        self._lock = threading.Lock()
        self._last: dict[int, int] = {}
        self._recent: deque[tuple[float, int, int]] = deque()
        self._by_handle: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._set: Any = None
        self._gpus = list(gpus)

    def start(self) -> None:
        """Register the event set and start waiting; GPUs that refuse are logged and skipped."""
        try:
            self._set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            logger.warning("no NVML event set (%s): Xids are not reported", exc)
            return
        for gpu in self._gpus:
            try:
                pynvml.nvmlDeviceRegisterEvents(
                    gpu.handle, pynvml.nvmlEventTypeXidCriticalError, self._set
                )
            except pynvml.NVMLError as exc:
                logger.warning("GPU %d reports no Xid events (%s)", gpu.index, exc)
                continue
            self._by_handle[_address(gpu.handle)] = gpu.index
        self._thread = threading.Thread(target=self._run, name="xid-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * _WAIT_MS / 1000)
        if self._set is not None and (self._thread is None or not self._thread.is_alive()):
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(self._set)
            self._set = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait_v2(self._set, _WAIT_MS)
            except pynvml.NVMLError_Timeout:
                continue
            except pynvml.NVMLError as exc:
                logger.warning("waiting for Xid events failed (%s); retrying", exc)
                self._stop.wait(_WAIT_MS / 1000)
                continue
            if data.eventType != pynvml.nvmlEventTypeXidCriticalError:
                continue
            gpu = self._by_handle.get(_address(data.device))
            if gpu is None:
                continue
            self.record(gpu, int(data.eventData))

    def record(self, gpu: int, xid: int) -> None:
        """Latch *xid* for *gpu* and count it in the window."""
        logger.info("GPU %d reported Xid %d", gpu, xid, extra={"gpu": gpu, "xid": xid})
        with self._lock:
            self._last[gpu] = xid
            self._recent.append((time.monotonic(), gpu, xid))

    def last(self, gpu: int) -> int | None:
        """The last Xid *gpu* reported, None before its first."""
        with self._lock:
            return self._last.get(gpu)

    def counts(self, gpu: int) -> dict[int, int]:
        """Xid -> how many times *gpu* reported it within the window."""
        horizon = time.monotonic() - self.window_s
        with self._lock:
            while self._recent and self._recent[0][0] < horizon:
                self._recent.popleft()
            found: dict[int, int] = {}
            for _, g, xid in self._recent:
                if g == gpu:
                    found[xid] = found.get(xid, 0) + 1
            return found

    def all_counts(self) -> dict[int, dict[int, int]]:
        """Every GPU's counts within the window, at once (one pass for a collection)."""
        horizon = time.monotonic() - self.window_s
        with self._lock:
            while self._recent and self._recent[0][0] < horizon:
                self._recent.popleft()
            found: dict[int, dict[int, int]] = {}
            for _, g, xid in self._recent:
                per = found.setdefault(g, {})
                per[xid] = per.get(xid, 0) + 1
            return found
