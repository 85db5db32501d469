"""Benchmark: the CPU of one collection and one scrape of a 64-GPU node, and the exporter's RSS.

    python bench/scrape_bench.py [ITERATIONS]

Renders a 64-GPU H100 node with a live layer, every GPU under a moving utilization pattern
and two allocations (so pods, GPM and the moving values are all exercised), then:

- in this process, over the real mock library and nvidia-ml-py: the thread CPU time of one
  collection of every default family (NVML reads, health, pod labels, rendering), p50/p99,
  beside the same collector's empty collection (no GPU) as the same-run baseline;
- a real exporter process (``python -m nvml_mock_exporter``): the process CPU time one
  ``GET /metrics`` costs it (its /proc/PID/stat before and after a batch of scrapes), beside
  ``GET /health`` on the same server as the baseline, and its resident set (VmRSS, VmHWM)
  after the scrapes.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

GPUS = 64


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def render(root: Path) -> tuple[Path, Path]:
    import nvml_mock_live as live
    from nvml_mock_engine.config import resolve_config
    from nvml_mock_engine.render import render_text
    from nvml_mock_live import Allocation

    state = root / "state.nvmlmock"
    state.write_text(render_text(resolve_config(node="bench", profile="h100", count=GPUS)))
    live_path = root / live.LIVE_FILE_NAME
    live.create(live_path, live.read_board(state))
    now = int(time.time() * 1000)
    with live.LiveLayer.open(live_path) as layer:
        for gpu in range(GPUS):
            layer.set(gpu, {"util_pattern": 4, "util_pattern_epoch_ms": now})
        for i, gpus in enumerate(((0, 1), (2,))):
            layer.put(
                Allocation(
                    container_id=f"bench-{i}",
                    pid=1000 + i,
                    gpus=gpus,
                    pod=f"pod-{i}",
                    namespace="bench",
                    container_name="main",
                )
            )
    return state, live_path


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def in_process(state: Path, live_path: Path, iterations: int) -> None:
    from nvml_mock_engine.library import library_path

    ctypes.CDLL(str(library_path()), mode=ctypes.RTLD_GLOBAL)
    os.environ["MOCK_NVML_CONFIG"] = str(state)
    import pynvml
    from nvml_mock_exporter.collector import Collector, Labels
    from nvml_mock_exporter.counters import CountersFile
    from nvml_mock_exporter.pods import PodRecords, loaded_library
    from nvml_mock_exporter.readings import discover
    from nvml_mock_exporter.xid import XidWatcher

    pynvml.nvmlInit()
    gpus = discover()
    labels = Labels("hostname", "bench", "580", "", 300000)

    def collector(with_gpus: bool) -> Collector:
        return Collector(
            gpus=gpus if with_gpus else [],
            counters=CountersFile.open(None),
            xids=XidWatcher([], 300),
            pods=PodRecords(live_path, loaded_library()),
            labels=labels,
            interval=30,
            nvml_timeout=10,
        )

    full, empty = collector(True), collector(False)
    full.collect()  # the first GPM sample; every later one yields the profiling families
    time.sleep(0.15)  # the next sample in a later telemetry quantum (100 ms)
    text = full.collect() or b""
    series = sum(1 for line in text.splitlines() if not line.startswith(b"#"))
    times: dict[str, list[float]] = {"empty": [], "full": []}
    for _ in range(iterations):
        for name, c in (("empty", empty), ("full", full)):
            start = time.thread_time()
            c.collect()
            times[name].append((time.thread_time() - start) * 1000)
    print(
        f"collection of {len(gpus)} GPUs, every default family: {series} series, {len(text)} bytes"
    )
    for name in ("empty", "full"):
        t = times[name]
        print(
            f"  {name:5}: p50 {statistics.median(t):7.3f} ms CPU  p99 {percentile(t, 0.99):7.3f} ms"
        )
    pynvml.nvmlShutdown()


def process(state: Path, root: Path, iterations: int) -> None:
    from nvml_mock_engine.library import library_path

    env = dict(
        os.environ,
        LD_LIBRARY_PATH=str(library_path().parent),
        MOCK_NVML_CONFIG=str(state),
        NODE_NAME="bench",
    )
    port = 19000 + os.getpid() % 1000
    proc = subprocess.Popen(
        [sys.executable, "-m", "nvml_mock_exporter", "--host", "127.0.0.1", "--port", str(port),
         "--collect-interval", "3600", "--log-level", "warning"],
        env=env,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.05)
        batch = 50  # the kernel counts process CPU in clock ticks (10 ms): batches resolve it
        for path in ("/health", "/metrics"):
            per: list[float] = []
            for _ in range(max(3, iterations // batch)):
                before = cpu_of(proc.pid)
                for _ in range(batch):
                    with urllib.request.urlopen(url + path, timeout=10) as r:
                        r.read()
                per.append((cpu_of(proc.pid) - before) / batch * 1000)
            print(
                f"  GET {path:8}: p50 {statistics.median(per):7.3f} ms CPU  "
                f"p99 {percentile(per, 0.99):7.3f} ms (exporter process, {batch}-scrape batches)"
            )
        status = Path(f"/proc/{proc.pid}/status").read_text()
        rss = {
            line.split(":")[0]: line.split()[1]
            for line in status.splitlines()
            if line.startswith("Vm")
        }
        rss_mib, peak_mib = int(rss["VmRSS"]) / 1024, int(rss["VmHWM"]) / 1024
        print(f"  exporter RSS {rss_mib:.1f} MiB (peak {peak_mib:.1f} MiB)")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        state, live_path = render(root)
        in_process(state, live_path, iterations)
        process(state, root, iterations)


if __name__ == "__main__":
    main()
