"""Benchmark: identity lookups against one uvicorn worker, side by side with nginx.

Builds a 10,000-node topology document, starts the service (one uvicorn worker,
as deployed) and nginx (one worker process) serving the very same identity
bodies as static JSON files, and measures both in the same run:

1. throughput: ``wrk`` with random node paths, printed per server with the ratio
   service / nginx (target >= 0.3);
2. latency at a fixed 2,000 requests/s from an open-loop load generator (the
   latency of each request counts from when it was *due*, so a stall is not
   hidden by the generator waiting for it), printed as p50/p99/max (target
   p99 <= 10 ms);
3. 5,000 concurrent watchers: every watcher waits on its own node, the document
   is then rewritten (every node moves to a new cluster UUID), and the time until
   the last watcher has its new identity is printed (target <= 2 s) with the
   service's resident memory while they wait (target <= 300 MB).

Needs ``wrk`` and ``nginx`` on PATH (Debian: ``apt-get install wrk nginx``).
Run: ``python bench/bench_identity.py [--duration 10] [--watchers 5000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NODES = 10_000
DOMAINS = 10
CLIQUES_PER_DOMAIN = 10


def topology(nodes: list[str], uuid_prefix: str) -> dict[str, object]:
    per_domain = len(nodes) // DOMAINS
    per_clique = per_domain // CLIQUES_PER_DOMAIN
    return {
        "version": 1,
        "domains": [
            {
                "name": f"domain-{d}",
                "uuid": f"{uuid_prefix}-0000-0000-0000-{d:012x}",
                "cliques": [
                    {
                        "id": c,
                        "nodes": nodes[
                            d * per_domain + c * per_clique : d * per_domain + (c + 1) * per_clique
                        ],
                    }
                    for c in range(CLIQUES_PER_DOMAIN)
                ],
            }
            for d in range(DOMAINS)
        ],
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for_port(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of ``pid`` in MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


@contextmanager
def service(topology_file: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    command = [
        sys.executable,
        "-m",
        "nvml_mock_topology",
        "--topology-file",
        str(topology_file),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "info",
    ]
    process = subprocess.Popen(command)
    try:
        wait_for_port(port)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(15)


@contextmanager
def nginx(root: Path, workdir: Path, port: int) -> Iterator[None]:
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    conf = workdir / "nginx.conf"
    conf.write_text(
        f"""
worker_processes 1;
daemon off;
pid {workdir}/nginx.pid;
error_log {workdir}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    default_type application/json;
    types {{ }}
    client_body_temp_path {workdir}/body;
    proxy_temp_path {workdir}/proxy;
    fastcgi_temp_path {workdir}/fastcgi;
    uwsgi_temp_path {workdir}/uwsgi;
    scgi_temp_path {workdir}/scgi;
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{ try_files $uri =404; }}
    }}
}}
"""
    )
    process = subprocess.Popen([binary, "-c", str(conf), "-p", str(workdir)])
    try:
        wait_for_port(port)
        yield
    finally:
        process.send_signal(signal.SIGQUIT)
        process.wait(15)


def run_wrk(url: str, paths_lua: Path, duration: int, connections: int) -> tuple[float, str]:
    """Requests/s and wrk's latency line from a ``wrk`` run with random node paths."""
    output = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{duration}s",
            "--latency",
            "-s",
            str(paths_lua),
            url,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    match = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if match is None or "Non-2xx" in output or "Socket errors" in output:
        raise RuntimeError(f"wrk run was not clean:\n{output}")
    latency = re.search(r"Latency\s+(\S+)\s+(\S+)\s+(\S+)", output)
    p99 = re.search(r"99%\s+(\S+)", output)
    summary = f"mean {latency.group(1) if latency else '?'}, p99 {p99.group(1) if p99 else '?'}"
    return float(match.group(1)), summary


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    body = await reader.readexactly(length) if length else b""
    return status, body


async def fixed_rate(port: int, nodes: list[str], rate: int, seconds: float) -> list[float]:
    """Open-loop load at ``rate`` requests/s; latency per request from when it was due (ms)."""
    total = int(rate * seconds)
    connections = 32
    queue: asyncio.Queue[tuple[float, str]] = asyncio.Queue()
    latencies: list[float] = []
    errors = 0

    async def worker() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while True:
            due, node = await queue.get()
            writer.write(f"GET /v1/nodes/{node}/identity HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
            status, _ = await _read_response(reader)
            latencies.append((time.perf_counter() - due) * 1000)
            if status != 200:
                errors += 1
            queue.task_done()

    workers = [asyncio.create_task(worker()) for _ in range(connections)]
    await asyncio.sleep(0.2)
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait((due, random.choice(nodes)))
    await queue.join()
    for task in workers:
        task.cancel()
    if errors:
        raise RuntimeError(f"{errors} requests did not answer 200")
    return latencies


async def connect_and_look_up(
    port: int, nodes: list[str], endpoint: str
) -> tuple[list[tuple[asyncio.StreamReader, asyncio.StreamWriter]], list[int]]:
    """One kept-alive connection per node (opened 500 at a time), each having asked once for
    ``/v1/nodes/{node}/{endpoint}``: the connections, and the revision each answer named,
    from which the watches then start."""
    connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    for start in range(0, len(nodes), 500):
        batch = nodes[start : start + 500]
        connections += await asyncio.gather(
            *(asyncio.open_connection("127.0.0.1", port) for _ in batch)
        )
    for (_, writer), node in zip(connections, nodes, strict=True):
        writer.write(f"GET /v1/nodes/{node}/{endpoint} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
    revisions = []
    for reader, _ in connections:
        _, body = await _read_response(reader)
        revisions.append(json.loads(body)["revision"])
    return connections, revisions


async def watchers(
    port: int, pid: int, nodes: list[str], count: int, *, path: Path, moved: dict[str, object]
) -> tuple[float, float, float, int]:
    """Start ``count`` watches, rewrite the document, time until all have their new identity.

    Returns (seconds from the write to the last answer, RSS MB while waiting, peak RSS MB,
    watchers that got the new identity).
    """
    chosen = random.sample(nodes, count)
    connections, revisions = await connect_and_look_up(port, chosen, "identity")
    done_at: list[float] = []
    got_new = 0

    async def watch(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, node: str, rev: int
    ) -> None:
        nonlocal got_new
        writer.write(
            f"GET /v1/nodes/{node}/identity?revision={rev}&wait=60 HTTP/1.1\r\n"
            "Host: bench\r\n\r\n".encode()
        )
        status, body = await _read_response(reader)
        done_at.append(time.perf_counter())
        if status == 200 and json.loads(body)["clusterUuid"].startswith("11111111"):
            got_new += 1

    tasks = [
        asyncio.create_task(watch(r, w, n, rev))
        for (r, w), n, rev in zip(connections, chosen, revisions, strict=True)
    ]
    await asyncio.sleep(3)  # let every watch reach the server and wait there
    current, _ = rss_mb(pid)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(moved))
    written = time.perf_counter()
    os.replace(tmp, path)
    await asyncio.wait_for(asyncio.gather(*tasks), 70)
    print(f"  first watcher answered {min(done_at) - written:.2f} s after the write")
    _, peak = rss_mb(pid)
    for _, writer in connections:
        writer.close()
    return max(done_at) - written, current, peak, got_new


def bench_throughput(
    work: Path, nodes: list[str], svc_port: int, duration: int, connections: int
) -> None:
    """wrk against the service and nginx serving the same bytes; print both and the ratio."""
    root = work / "static"
    connection = http.client.HTTPConnection("127.0.0.1", svc_port)
    for node in nodes:
        connection.request("GET", f"/v1/nodes/{node}/identity")
        body = connection.getresponse().read()
        target = root / "v1" / "nodes" / node / "identity"
        target.parent.mkdir(parents=True)
        target.write_bytes(body)
    connection.close()
    paths_lua = work / "paths.lua"
    paths_lua.write_text(
        "paths = {"
        + ",".join(f'"/v1/nodes/{n}/identity"' for n in nodes)
        + "}\nrequest = function()\n"
        "  return wrk.format(nil, paths[math.random(#paths)])\nend\n"
    )
    nginx_port = free_port()
    with nginx(root, work, nginx_port):
        print(f"wrk -t1 -c{connections} -d{duration}s, random node paths:")
        ours, ours_latency = run_wrk(
            f"http://127.0.0.1:{svc_port}", paths_lua, duration, connections
        )
        theirs, theirs_latency = run_wrk(
            f"http://127.0.0.1:{nginx_port}", paths_lua, duration, connections
        )
    print(f"  topology service (1 uvicorn worker): {ours:10.0f} req/s  ({ours_latency})")
    print(f"  nginx static files (1 worker):       {theirs:10.0f} req/s  ({theirs_latency})")
    print(f"  ratio service / nginx: {ours / theirs:.2f}  (target >= 0.30)")


def bench_latency(svc_port: int, nodes: list[str], rate: int, duration: int) -> None:
    """Open-loop load at a fixed rate; print p50/p99/max."""
    latencies = asyncio.run(fixed_rate(svc_port, nodes, rate, duration))
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print(
        f"open loop at {rate} req/s for {duration}s ({len(latencies)} requests): "
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {latencies[-1]:.2f} ms (target p99 <= 10 ms)"
    )


def bench_watchers(
    svc_port: int, pid: int, nodes: list[str], count: int, topology_file: Path
) -> None:
    """5,000 watchers; rewrite the document; print fan-out time and RSS."""
    moved = topology(nodes, "11111111")
    spread, current, peak, got_new = asyncio.run(
        watchers(svc_port, pid, nodes, count, path=topology_file, moved=moved)
    )
    print(
        f"{count} concurrent watchers: service RSS {current:.0f} MB while waiting "
        f"(peak {peak:.0f} MB; target <= 300 MB); the changed document reached "
        f"{got_new}/{count} watchers {spread:.2f} s after the file was replaced "
        "(target <= 2 s; includes the file poll, every 1 s)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per measurement")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections")
    parser.add_argument("--rate", type=int, default=2000, help="fixed request rate for p99")
    parser.add_argument("--watchers", type=int, default=5000)
    parser.add_argument(
        "--parts",
        default="throughput,latency,watchers",
        help="comma-separated subset of throughput,latency,watchers",
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    for tool in ("wrk", "nginx"):
        if (
            "throughput" in parts
            and shutil.which(tool) is None
            and not Path(f"/usr/sbin/{tool}").exists()
        ):
            print(f"{tool} is not installed (Debian: apt-get install -y wrk nginx)")
            return 2
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    nodes = [f"node-{i:05d}.rack-{i % 40:02d}.example.com" for i in range(NODES)]
    with tempfile.TemporaryDirectory(prefix="topology-bench-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)  # nginx workers drop privileges and must read the files
        topology_file = work / "topology.json"
        topology_file.write_text(json.dumps(topology(nodes, "00000000")))
        size = len(topology_file.read_bytes())
        print(f"topology: {NODES} nodes in {DOMAINS} domains; {size} bytes; load {os.getloadavg()}")
        svc_port = free_port()
        with service(topology_file, svc_port) as process:
            if "throughput" in parts:
                bench_throughput(work, nodes, svc_port, args.duration, args.connections)
            if "latency" in parts:
                bench_latency(svc_port, nodes, args.rate, args.duration)
            if "watchers" in parts:
                bench_watchers(svc_port, process.pid, nodes, args.watchers, topology_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
