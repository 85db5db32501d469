"""Benchmark: scenarios for 10,000 nodes on one uvicorn worker.

Builds the 10,000-node topology of ``bench_identity.py`` and a scenario document that
selects every node, starts the service (one worker, the write API on, ``--report-rate``
from ``--report-budget``) and measures, in one run:

1. identity lookup latency at a fixed rate (open loop, as ``bench_identity.py``) alone,
   then while 10,000 agents report their status (as fast as 64 connections go; a 429 is
   retried after its ``Retry-After`` plus a jitter under a second, as the agent does),
   until every report is taken;
2. interleaved (before and after in the same run, under the same machine load): the
   lookups run throughout while the agents send ``--interleaved-rate`` new reports per
   second in every other 0.5 s window only; p50/p99 of each group, ``--repeat`` times;
3. 10,000 scenario watchers, one per node: the service's resident memory while they
   wait (target <= 300 MB), then the document is rewritten (the scenario changes for
   every node) and the time from the write to each watcher's new answer is printed as
   p50/p99/max (target p99 <= 2 s).

Needs nothing beyond the packages. Run:
``python bench/bench_scenarios.py [--rate 1000] [--watchers 10000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_identity import (
    NODES,
    _read_response,
    connect_and_look_up,
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


def _report_body(revision: int) -> bytes:
    return json.dumps(
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


async def _report(
    port: int,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    node: str,
    revision: int,
) -> tuple[int, dict[str, str], asyncio.StreamReader, asyncio.StreamWriter]:
    """Send one report (on a new connection when the service closed the idle one)."""
    body = _report_body(revision)
    request = (
        f"POST /v1/nodes/{node}/scenarios/status HTTP/1.1\r\nHost: bench\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    for _ in range(3):
        try:
            writer.write(request)
            status, headers = await _read_head(reader)
            return status, headers, reader, writer
        except (ConnectionError, asyncio.IncompleteReadError):
            writer.close()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
    raise RuntimeError("the service keeps closing the agents' connections")


async def _report_as_agent(
    port: int,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    node: str,
    revision: int,
    *,
    again: Callable[[str], None],
    jitter: random.Random,
) -> tuple[bool, asyncio.StreamReader, asyncio.StreamWriter]:
    """Report ``node`` once, as the agent does: a 429 hands the node to ``again`` after its
    ``Retry-After`` plus a jitter under a second. Returns whether it was taken (False: 429),
    and the connection to go on with; any other answer than 200 stops the bench."""
    status, headers, reader, writer = await _report(port, reader, writer, node, revision)
    if status == 429:
        delay = int(headers.get("retry-after", "1")) + jitter.random()
        asyncio.get_running_loop().call_later(delay, again, node)
        return False, reader, writer
    if status != 200:
        raise RuntimeError(f"a report was answered {status}")
    return True, reader, writer


async def reports(
    port: int, nodes: list[str], revision: int, rate: float, concurrency: int = 64
) -> tuple[float, int]:
    """One status report per node (10,000 agents) at ``rate`` per second (0: as fast as
    ``concurrency`` connections go). A report answered 429 is sent again after its
    ``Retry-After`` plus a jitter under a second, as the agent does. Returns the seconds
    until every report was taken, and how many answers were 429."""
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    throttled = taken = 0
    all_taken = asyncio.Event()
    jitter = random.Random(7)

    async def agent() -> None:
        nonlocal throttled, taken
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while True:
            node = await queue.get()
            if node is None:
                break
            ok, reader, writer = await _report_as_agent(
                port, reader, writer, node, revision, again=queue.put_nowait, jitter=jitter
            )
            if not ok:
                throttled += 1
                continue
            taken += 1
            if taken == len(nodes):
                all_taken.set()
        writer.close()

    started = time.perf_counter()
    agents = [asyncio.create_task(agent()) for _ in range(concurrency)]
    for i, node in enumerate(nodes):
        if rate:
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        queue.put_nowait(node)
    await all_taken.wait()
    took = time.perf_counter() - started
    for _ in agents:
        queue.put_nowait(None)
    await asyncio.gather(*agents)
    return took, throttled


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """An answer's status and headers (its body read and dropped)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    await reader.readexactly(int(headers.get("content-length", "0")))
    return int(lines[0].split()[1]), headers


def _report_process(
    port: int, nodes: list[str], *, revision: int, rate: float, took: Any, throttled: Any
) -> None:
    took.value, throttled.value = asyncio.run(reports(port, nodes, revision, rate))


async def identity_during_reports(
    port: int, nodes: list[str], rate: int, seconds: float, *, revision: int, report_rate: float
) -> tuple[list[float], float, int]:
    """Identity latency measured here while another process plays the 10,000 agents, so
    the load generator's own loop is not what slows down."""
    took = multiprocessing.Value("d", 0.0)
    throttled = multiprocessing.Value("q", 0)
    agents = multiprocessing.Process(
        target=_report_process,
        args=(port, nodes),
        kwargs={"revision": revision, "rate": report_rate, "took": took, "throttled": throttled},
    )
    lookups = asyncio.create_task(fixed_rate(port, nodes, rate, seconds))
    await asyncio.sleep(0.3)
    agents.start()
    latencies = await lookups
    await asyncio.to_thread(agents.join)
    if agents.exitcode != 0:
        raise RuntimeError(f"the agents' process exited {agents.exitcode}")
    return latencies, float(took.value), int(throttled.value)


WINDOW = 0.5
"""Seconds per window of the interleaved phase: agents send in odd windows only."""
EDGE = 0.05
"""Lookups due this soon after a window changed are left out of both groups."""


async def _interleaved_agents(
    port: int,
    nodes: list[str],
    *,
    revision: int,
    epoch: float,
    until: float,
    rate: float,
    concurrency: int = 64,
) -> tuple[int, int]:
    """10,000 agents, each reporting once per round, ``rate`` new reports per second, in
    the odd windows after ``epoch`` (``time.monotonic``) only; a 429 is retried after its
    ``Retry-After`` plus a jitter under a second. Returns (taken, answered 429)."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    taken = throttled = 0
    jitter = random.Random(7)

    async def arrivals() -> None:
        sent = 0.0  # seconds of "on" time so far
        last = time.monotonic()
        index = 0
        while last < until:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            if int((now - epoch) / WINDOW) % 2 == 1 and now >= epoch:
                before = int(sent * rate)
                sent += now - last
                for _ in range(int(sent * rate) - before):
                    queue.put_nowait(nodes[index % len(nodes)])
                    index += 1
            last = now

    async def agent() -> None:
        nonlocal taken, throttled
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while True:
            node = await queue.get()
            now = time.monotonic()
            if not node or now >= until:
                break
            window = int((now - epoch) / WINDOW)
            if window % 2 == 0:  # a retry due in an "alone" window waits for the next one
                await asyncio.sleep(epoch + (window + 1) * WINDOW - now)
            ok, reader, writer = await _report_as_agent(
                port, reader, writer, node, revision, again=queue.put_nowait, jitter=jitter
            )
            if not ok:
                throttled += 1
                continue
            taken += 1
        writer.close()

    feeder = asyncio.create_task(arrivals())
    workers = [asyncio.create_task(agent()) for _ in range(concurrency)]
    await feeder
    for _ in workers:
        queue.put_nowait("")
    await asyncio.gather(*workers)
    return taken, throttled


def _interleaved_process(port: int, nodes: list[str], **args: Any) -> None:
    out = args.pop("out")
    out[0], out[1] = asyncio.run(_interleaved_agents(port, nodes, **args))


async def tagged_fixed_rate(
    port: int, nodes: list[str], rate: int, seconds: float
) -> list[tuple[float, float]]:
    """Open-loop identity lookups at ``rate``/s: (when due, ``time.monotonic``; latency ms)."""
    queue: asyncio.Queue[tuple[float, str]] = asyncio.Queue()
    results: list[tuple[float, float]] = []
    picker = random.Random(3)

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while True:
            due, node = await queue.get()
            writer.write(f"GET /v1/nodes/{node}/identity HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
            status, _ = await _read_response(reader)
            if status != 200:
                raise RuntimeError(f"an identity lookup was answered {status}")
            results.append((due, (time.monotonic() - due) * 1000))
            queue.task_done()

    workers = [asyncio.create_task(worker()) for _ in range(32)]
    await asyncio.sleep(0.2)
    start = time.monotonic()
    for i in range(int(rate * seconds)):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait((due, picker.choice(nodes)))
    await queue.join()
    for task in workers:
        task.cancel()
    return results


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def interleaved(
    port: int,
    pid: int,
    nodes: list[str],
    *,
    rate: int,
    seconds: float,
    revision: int,
    report_rate: float,
) -> tuple[list[float], list[float], int, int, float]:
    """Lookups in alternating windows, agents reporting in every other one: the same run
    and the same machine load on both sides. Returns (alone ms, during ms, reports taken,
    answered 429, service CPU seconds)."""
    epoch = time.monotonic() + 1.0
    until = epoch + seconds
    out = multiprocessing.Array("q", 2)
    agents = multiprocessing.Process(
        target=_interleaved_process,
        args=(port, nodes),
        kwargs={
            "revision": revision,
            "epoch": epoch,
            "until": until,
            "rate": report_rate,
            "out": out,
        },
    )
    agents.start()
    cpu = cpu_seconds(pid)
    time.sleep(max(0.0, epoch - 0.2 - time.monotonic()))
    lookups = asyncio.run(tagged_fixed_rate(port, nodes, rate, until - time.monotonic()))
    cpu = cpu_seconds(pid) - cpu
    agents.join()
    if agents.exitcode != 0:
        raise RuntimeError(f"the agents' process exited {agents.exitcode}")
    alone: list[float] = []
    during: list[float] = []
    for due, latency in lookups:
        offset = (due - epoch) / WINDOW
        if due < epoch or offset - int(offset) < EDGE / WINDOW:
            continue
        (during if int(offset) % 2 else alone).append(latency)
    return alone, during, int(out[0]), int(out[1]), cpu


async def watchers(
    port: int, pid: int, nodes: list[str], path: Path
) -> tuple[list[float], float, float, int]:
    connections, revisions = await connect_and_look_up(port, nodes, "scenarios")
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
        default="0",
        help="agents' reports per second, one phase each (0: as fast as they go)",
    )
    parser.add_argument(
        "--interleaved", type=float, default=20, help="seconds of the interleaved phase"
    )
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs")
    parser.add_argument(
        "--interleaved-rate",
        type=float,
        default=1000,
        help="new reports per second while the agents send (10,000 agents over 10 s)",
    )
    parser.add_argument(
        "--report-budget",
        type=float,
        default=500,
        help="the service's --report-rate (reports taken per second; 0: all)",
    )
    args = parser.parse_args()
    rates = [float(r) for r in args.report_rates.split(",")]
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
                "--report-rate",
                f"{args.report_budget:g}",
            ]
        )
        try:
            wait_for_port(port)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/scenarios") as answer:
                listing = json.load(answer)
            revision = next(s["revision"] for s in listing["scenarios"] if s["name"] == "load")
            # The lookups last as long as the slowest way the reports can be taken.
            slowest = max(
                [NODES / r for r in (args.report_budget, *rates) if r > 0] or [args.seconds]
            )
            seconds = max(args.seconds, slowest + 1)
            print(f"identity lookups at {args.rate}/s, {seconds:g} s per phase, alone:")
            alone = asyncio.run(fixed_rate(port, nodes, args.rate, seconds))
            print(f"  p50 {statistics.median(alone):.2f} ms, p99 {percentile(alone, 0.99):.2f} ms")
            for report_rate in rates:
                pace = f"at {report_rate:g}/s" if report_rate else "as fast as they go"
                print(f"the same while {NODES} agents report their status, {pace}:")
                during, took, throttled = asyncio.run(
                    identity_during_reports(
                        port, nodes, args.rate, seconds, revision=revision, report_rate=report_rate
                    )
                )
                print(
                    f"  p50 {statistics.median(during):.2f} ms, "
                    f"p99 {percentile(during, 0.99):.2f} ms "
                    f"({percentile(during, 0.99) / percentile(alone, 0.99) - 1:+.0%}; "
                    f"all {NODES} reports taken in {took:.2f} s, {throttled} answers 429)"
                )
            print(
                f"interleaved, {args.interleaved:g} s: lookups at {args.rate}/s throughout, "
                f"{args.interleaved_rate:g} new reports/s in every other {WINDOW:g} s window:"
            )
            for attempt in range(args.repeat):
                alone_ms, during_ms, taken, throttled, cpu = interleaved(
                    port,
                    process.pid,
                    nodes,
                    rate=args.rate,
                    seconds=args.interleaved,
                    revision=revision,
                    report_rate=args.interleaved_rate,
                )
                p99_alone, p99_during = percentile(alone_ms, 0.99), percentile(during_ms, 0.99)
                print(
                    f"  run {attempt + 1}: p50 {statistics.median(alone_ms):.2f} -> "
                    f"{statistics.median(during_ms):.2f} ms, p99 {p99_alone:.2f} -> "
                    f"{p99_during:.2f} ms ({p99_during / p99_alone - 1:+.1%}); "
                    f"{taken} reports taken ({taken / (args.interleaved / 2):.0f}/s while on), "
                    f"{throttled} answered 429; service CPU {cpu:.1f} s"
                )
            print("identity lookups alone again:")
            after = asyncio.run(fixed_rate(port, nodes, args.rate, seconds))
            print(f"  p50 {statistics.median(after):.2f} ms, p99 {percentile(after, 0.99):.2f} ms")
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
