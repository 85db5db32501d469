"""The local demo's metrics act: one GPU's series under dcgm-exporter's names, before and
after a fault.

A real ``nvml-mock-exporter`` process reads one node's GPUs through the staged overlay's mock
library (as the chart's DaemonSet does on a cluster); ``nvml-mock-ctl`` then makes GPU 0 of
that node overheat and report an Xid, and the exporter's next collection shows both, in the
families a dashboard and an alert rule read.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from cluster import Node, Process, free_port, http_get, wait_until

FAMILIES = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_EXP_GPU_HEALTH_STATUS",
)
XID = 43


class _Demo(Protocol):
    work: Path
    overlay: Path
    nodes: list[Node]
    verdicts: Any

    def act(self, title: str) -> None: ...

    def live_of(self, node: Node) -> Path: ...

    async def ctl(self, node: Node, *args: str) -> tuple[int, str]: ...


def say(text: str) -> None:
    print(text, flush=True)


def gpu_series(text: str, gpu: str = "0") -> dict[str, str]:
    """Family -> value of one GPU's series (the health family: its ALL watch)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("#") or f'{{gpu="{gpu}",' not in line:
            continue
        head, _, value = line.rpartition(" ")
        name = head.split("{", 1)[0]
        if name == "DCGM_EXP_GPU_HEALTH_STATUS":
            if 'health_watch="ALL"' not in head:
                continue
            code = head.split('health_error_code="', 1)[1].split('"', 1)[0]
            value = f"{value} ({code})"
        if name in FAMILIES:
            found[name] = value
    return found


def show(title: str, series: Mapping[str, str]) -> None:
    say(f"  {title}:")
    for name in FAMILIES:
        say(f"    {name:<28} {series.get(name, '(none)')}")


async def act_metrics(demo: _Demo) -> None:
    """Start an exporter on one node, print GPU 0's series, fault it, print them again."""
    node = demo.nodes[1] if len(demo.nodes) > 1 else demo.nodes[0]
    demo.act(f"GPU metrics: {node.name}'s GPU 0 under dcgm-exporter's names, before and after")
    port = free_port()
    env = {
        "PATH": "/usr/bin:/bin",
        "LD_LIBRARY_PATH": str(demo.overlay / "lib"),
        "MOCK_NVML_CONFIG": str(demo.overlay / "config" / "state.nvmlmock"),
        "MOCK_NVML_LIVE": str(demo.live_of(node)),
        "NODE_NAME": node.name,
    }
    argv = [sys.executable, "-m", "nvml_mock_exporter", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--collect-interval", "0.5"]
    exporter = await Process.start("exporter", argv, demo.work / "logs" / "exporter.log", env)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        await wait_until("the exporter's first collection", lambda: http_get(url)[0] == 200, 30)
        before = gpu_series(http_get(url)[1])
        say(f"  nvml-mock-exporter on {node.name}: {url}")
        show("before", before)
        # the board's own hot reading: its slowdown threshold and a little more
        await demo.ctl(node, "fail", "thermal", "-i", "0")
        await demo.ctl(node, "xid", str(XID), "-i", "0")
        after: dict[str, str] = {}

        def faulted() -> bool:
            after.update(gpu_series(http_get(url)[1]))
            return after.get("DCGM_FI_DEV_XID_ERRORS") == str(XID) and after.get(
                "DCGM_FI_DEV_GPU_TEMP"
            ) != before.get("DCGM_FI_DEV_GPU_TEMP")

        started = time.monotonic()
        with contextlib.suppress(TimeoutError):  # the verdicts below say what is missing
            await wait_until("the fault in the exporter's series", faulted, 20)
        show(f"after ({time.monotonic() - started:.1f}s)", after)
        demo.verdicts.check(
            before.get("DCGM_FI_DEV_XID_ERRORS") == "0"
            and after.get("DCGM_FI_DEV_XID_ERRORS") == str(XID),
            f"{node.name}: DCGM_FI_DEV_XID_ERRORS of GPU 0 went from 0 to {XID}",
        )
        cold, hot = before.get("DCGM_FI_DEV_GPU_TEMP"), after.get("DCGM_FI_DEV_GPU_TEMP")
        demo.verdicts.check(
            cold is not None and hot is not None and int(hot) > int(cold),
            f"{node.name}: DCGM_FI_DEV_GPU_TEMP of GPU 0 went up from {cold} to {hot}",
        )
        demo.verdicts.check(
            after.get("DCGM_EXP_GPU_HEALTH_STATUS", "").startswith(("10 ", "20 ")),
            f"{node.name}: DCGM's health verdict for GPU 0 is no longer a pass "
            f"({after.get('DCGM_EXP_GPU_HEALTH_STATUS')})",
        )
        await demo.ctl(node, "reset", "-i", "0")
    finally:
        await exporter.stop()
