"""Benchmark: scenarios for 10,000 nodes on one uvicorn worker.

Builds the 10,000-node topology of ``bench_identity.py`` and a scenario document that
selects every node, starts the service (one worker, the write API on) and measures, in
one run:

1. identity lookup latency at a fixed rate (open loop, as ``bench_identity.py``), first
   alone, then while 10,000 agents report their scenario status (one POST each, as fast
   as 64 connections send them); p50/p99 before and during (target: p99 within +10 %);
2. 10,000 scenario watchers, one per node: the service's resident memory while they
   wait (target <= 300 MB), then the document is rewritten (the scenario changes for
   every node) and the time from the write to each watcher's new answer is printed as
   p50/p99/max (target p99 <= 2 s).

Needs nothing beyond the packages. Run:
``python bench/bench_scenarios.py [--rate 1000] [--seconds 5] [--watchers 10000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_identity import (
    NODES,
    _read_response,
    fixed_rate,
    free_port,
    rss_mb,
    topology,
    wait_for_port,
)

TOKEN = "bench-token"


def scenarios(pattern: str) -> str:
    return json.dumps(
        {
            "version": 1,
            "scenarios": [
                {"name": "load", "apply": {"util": pattern}, "duration": "1h"},
                {"name": "xid-tenth", "selector": {"percent": 10, "seed": 1}, "apply": {"xid": 79}},
            ],
        }
    )


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def reports(
    port: int, nodes: list[str], revision: int, rate: float, concurrency: int = 64
) -> float:
    """One status report per node (10,000 agents) at ``rate`` per second (0: as fast as
    ``concurrency`` connections go)."""
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    refused = 0

    async def agent() -> None:
        nonlocal refused
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while True:
            node = await queue.get()
            if node is None:
                break
            body = json.dumps(
                {
                    "revision": 1,
                    "scenarios": [
                        {
                            "name": "load",
                            "revision": revision,
                            "state": "applied",
                            "gpus": ["GPU-00000000-0000-0000-0000-000000000000"],
                            "appliedMs": int(time.time() * 1000),
                            "latencyMs": 120,
                        }
                    ],
                }
            ).encode()
            writer.write(
                f"POST /v1/nodes/{node}/scenarios/status HTTP/1.1\r\nHost: bench\r\n"
                f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            status, _ = await _read_response(reader)
            refused += status != 200
        writer.close()

    started = time.perf_counter()
    agents = [asyncio.create_task(agent()) for _ in range(concurrency)]
    for i, node in enumerate(nodes):
        if rate:
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        queue.put_nowait(node)
    for _ in agents:
        queue.put_nowait(None)
    await asyncio.gather(*agents)
    if refused:
        raise RuntimeError(f"{refused} reports were refused")
    return time.perf_counter() - started


def _report_process(port: int, nodes: list[str], revision: int, rate: float, took: Any) -> None:
    took.value = asyncio.run(reports(port, nodes, revision, rate))


async def identity_during_reports(
    port: int, nodes: list[str], rate: int, seconds: float, *, revision: int, report_rate: float
) -> tuple[list[float], float]:
    """Identity latency measured here while another process plays the 10,000 agents, so
    the load generator's own loop is not what slows down."""
    took = multiprocessing.Value("d", 0.0)
    agents = multiprocessing.Process(
        target=_report_process, args=(port, nodes, revision, report_rate, took)
    )
    lookups = asyncio.create_task(fixed_rate(port, nodes, rate, seconds))
    await asyncio.sleep(0.3)
    agents.start()
    latencies = await lookups
    await asyncio.to_thread(agents.join)
    if agents.exitcode != 0:
        raise RuntimeError(f"the agents' process exited {agents.exitcode}")
    return latencies, float(took.value)


async def watchers(
    port: int, pid: int, nodes: list[str], path: Path
) -> tuple[list[float], float, float, int]:
    connections = []
    for start in range(0, len(nodes), 500):
        batch = nodes[start : start + 500]
        connections += await asyncio.gather(
            *(asyncio.open_connection("127.0.0.1", port) for _ in batch)
        )
    revisions = []
    for (_, writer), node in zip(connections, nodes, strict=True):
        writer.write(f"GET /v1/nodes/{node}/scenarios HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
    for reader, _ in connections:
        _, body = await _read_response(reader)
        revisions.append(json.loads(body)["revision"])
    before, _ = rss_mb(pid)
    done_at: list[float] = []
    changed = 0

    async def watch(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, node: str, revision: int
    ) -> None:
        nonlocal changed
        writer.write(
            f"GET /v1/nodes/{node}/scenarios?revision={revision}&wait=60 HTTP/1.1\r\n"
            "Host: bench\r\n\r\n".encode()
        )
        status, body = await _read_response(reader)
        done_at.append(time.perf_counter())
        if status == 200 and json.loads(body)["revision"] != revision:
            changed += 1

    tasks = [
        asyncio.create_task(watch(r, w, n, rev))
        for (r, w), n, rev in zip(connections, nodes, revisions, strict=True)
    ]
    await asyncio.sleep(5)  # every watch reaches the server and waits there
    waiting, _ = rss_mb(pid)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(scenarios("sine 80"))
    written = time.perf_counter()
    os.replace(tmp, path)
    await asyncio.wait_for(asyncio.gather(*tasks), 90)
    for _, writer in connections:
        writer.close()
    print(f"  service RSS: {before:.0f} MB before the watches, {waiting:.0f} MB with them")
    return [t - written for t in done_at], before, waiting, changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1000, help="identity lookups per second")
    parser.add_argument("--seconds", type=float, default=5, help="seconds per latency phase")
    parser.add_argument("--watchers", type=int, default=NODES, help="scenario watchers")
    parser.add_argument(
        "--report-rates",
        default="0,2000,1000",
        help="agents' reports per second, one phase each (0: as fast as they go)",
    )
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    nodes = [f"node-{i:05d}.rack-{i % 40:02d}.example.com" for i in range(NODES)]
    with tempfile.TemporaryDirectory(prefix="scenario-bench-") as tmp:
        work = Path(tmp)
        (work / "topology.json").write_text(json.dumps(topology(nodes, "00000000")))
        scenario_file = work / "scenarios.json"
        scenario_file.write_text(scenarios("busy"))
        (work / "token").write_text(TOKEN)
        port = free_port()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nvml_mock_topology",
                "--topology-file",
                str(work / "topology.json"),
                "--scenarios-file",
                str(scenario_file),
                "--write-token-file",
                str(work / "token"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--poll-interval",
                "1",
                "--log-level",
                "warning",
            ]
        )
        try:
            wait_for_port(port)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/scenarios") as answer:
                listing = json.load(answer)
            revision = next(s["revision"] for s in listing["scenarios"] if s["name"] == "load")
            print(f"identity lookups at {args.rate}/s, {args.seconds:g} s, alone:")
            alone = asyncio.run(fixed_rate(port, nodes, args.rate, args.seconds))
            print(f"  p50 {statistics.median(alone):.2f} ms, p99 {percentile(alone, 0.99):.2f} ms")
            for report_rate in (float(r) for r in args.report_rates.split(",")):
                pace = f"at {report_rate:g}/s" if report_rate else "as fast as they go"
                seconds = (
                    max(args.seconds, NODES / report_rate + 1) if report_rate else args.seconds
                )
                print(f"the same while {NODES} agents report their status, {pace}:")
                during, took = asyncio.run(
                    identity_during_reports(
                        port, nodes, args.rate, seconds, revision=revision, report_rate=report_rate
                    )
                )
                print(
                    f"  p50 {statistics.median(during):.2f} ms, "
                    f"p99 {percentile(during, 0.99):.2f} ms "
                    f"({NODES} reports in {took:.2f} s)"
                )
            print(f"{args.watchers} scenario watchers, then the document changes for every node:")
            delays, _, _, changed = asyncio.run(
                watchers(port, process.pid, nodes[: args.watchers], scenario_file)
            )
            print(
                f"  {changed} of {len(delays)} got the change; from the write: p50 "
                f"{statistics.median(delays):.2f} s, p99 {percentile(delays, 0.99):.2f} s, "
                f"max {max(delays):.2f} s"
            )
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
