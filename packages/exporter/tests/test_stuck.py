"""A stuck NVML call never blocks /metrics: its GPU is left out until the call returns.

The mock library has no call that hangs, so the one call is made to hang here: the
exporter's collector runs in this process, over the real library and nvidia-ml-py, with
``nvmlDeviceGetClockInfo`` for GPU 1 wrapped to wait on an event. Everything else (the
collector's threads, its watchdog, the HTTP server) is the exporter's own.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Node, get, parse
from nvml_mock_exporter.collector import Collector, Labels
from nvml_mock_exporter.counters import CountersFile
from nvml_mock_exporter.server import MetricsServer
from nvml_mock_exporter.xid import XidWatcher


@pytest.fixture
def nvml(node: Node, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    ctypes.CDLL(str(node.library), mode=ctypes.RTLD_GLOBAL)
    import pynvml

    monkeypatch.setenv("MOCK_NVML_CONFIG", str(node.state))
    pynvml.nvmlInit()
    yield pynvml
    pynvml.nvmlShutdown()


def test_a_stuck_call_leaves_its_gpu_out_and_metrics_keep_coming(
    nvml: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nvml_mock_exporter.readings import discover

    gpus = discover()
    stuck_handle = ctypes.cast(gpus[1].handle, ctypes.c_void_p).value
    release = threading.Event()
    entered = threading.Event()
    real = nvml.nvmlDeviceGetClockInfo

    def clock_info(handle: Any, kind: int) -> int:
        if ctypes.cast(handle, ctypes.c_void_p).value == stuck_handle and not release.is_set():
            entered.set()
            release.wait(60)
        result: int = real(handle, kind)
        return result

    xids = XidWatcher(gpus, 300)
    collector = Collector(
        gpus=gpus,
        counters=CountersFile.open(None),
        xids=xids,
        pods=None,
        labels=Labels("hostname", "node-a", "580", "", 300000),
        interval=0.1,
        nvml_timeout=0.5,
    )
    collector.start()
    server = MetricsServer(("127.0.0.1", 0), collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        deadline = time.monotonic() + 30
        while collector.collections == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        monkeypatch.setattr(nvml, "nvmlDeviceGetClockInfo", clock_info)
        assert entered.wait(30)
        deadline = time.monotonic() + 30
        while 1 not in collector.stuck and time.monotonic() < deadline:
            time.sleep(0.02)
        assert collector.stuck == {1}
        seen = collector.collections
        while collector.collections < seen + 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        status, text = get(url + "/metrics", timeout=5)
        assert status == 200
        temps = {s.labels["gpu"] for s in parse(text).of("DCGM_FI_DEV_GPU_TEMP")}
        assert temps == {str(i) for i in range(8) if i != 1}
        status, why = get(url + "/health", timeout=5)
        assert (status, why.strip()) == (200, "ok; NVML calls stuck on GPU 1, left out")
        release.set()
        while collector.stuck and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not collector.stuck
        while time.monotonic() < deadline:
            text = get(url + "/metrics", timeout=5)[1]
            if 'DCGM_FI_DEV_GPU_TEMP{gpu="1"' in text:
                break
            time.sleep(0.05)
        assert 'DCGM_FI_DEV_GPU_TEMP{gpu="1"' in text
    finally:
        release.set()
        collector.stop()
        server.shutdown()
        server.server_close()
