"""How long a lost IMEX peer takes to show: four work-alike daemons of one config on
loopback addresses; per round one peer is killed (SIGKILL) or stopped (SIGSTOP, a
partition) and node 0's command service is polled until its domain state is DEGRADED, then
the peer comes back and the time to UP is measured too. The baseline, measured in the same run, is
one status round trip of the command service (the polling's resolution).

    python packages/imex/bench/imex_degraded.py [ROUNDS]
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def free(addresses: list[str], port: int) -> bool:
    for address in addresses:
        with socket.socket() as sock:
            try:
                sock.bind((address, port))
            except OSError:
                return False
    return True


def status(address: str, port: int) -> str:
    with socket.create_connection((address, port), timeout=3) as sock:
        sock.sendall(b'{"t":"status"}\n')
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return str(json.loads(data)["status"]["domain"])


def until(address: str, port: int, want: str, limit: float = 30.0) -> float:
    start = time.perf_counter()
    while True:
        try:
            if status(address, port) == want:
                return time.perf_counter() - start
        except OSError:
            pass
        if time.perf_counter() - start > limit:
            raise SystemExit(f"{address} not {want} within {limit}s")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    rng = random.Random()
    while True:
        base = f"127.{rng.randint(1, 254)}.{rng.randint(1, 254)}"
        addresses = [f"{base}.{i}" for i in range(1, 5)]
        port = rng.randint(20000, 45000)
        if free(addresses, port) and free(addresses, port + 5):
            break
    work = Path(tempfile.mkdtemp(prefix="imex-bench-"))
    (work / "nodes.cfg").write_text("".join(f"{a}\n" for a in addresses))
    config = work / "imex.cfg"
    config.write_text(
        f"DAEMONIZE=0\nSERVER_PORT={port}\nIMEX_NODE_CONFIG_FILE={work / 'nodes.cfg'}\n"
        f"IMEX_CMD_ENABLED=1\nIMEX_CMD_PORT={port + 5}\nLOG_LEVEL=1\n"
    )
    cmd = port + 5

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nvml_mock_imex.imexd", "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return proc

    procs = []
    for i in range(4):
        procs.append(start())
        until(addresses[i], cmd, "DEGRADED" if i < 3 else "UP")
    until(addresses[0], cmd, "UP")
    baseline = []
    for _ in range(200):
        t = time.perf_counter()
        status(addresses[0], cmd)
        baseline.append(time.perf_counter() - t)
    killed, stopped, back = [], [], []
    try:
        for _ in range(rounds):
            procs[3].send_signal(signal.SIGKILL)
            procs[3].wait()
            killed.append(until(addresses[0], cmd, "DEGRADED"))
            t = time.perf_counter()
            procs[3] = start()
            until(addresses[0], cmd, "UP")
            back.append(time.perf_counter() - t)
            procs[2].send_signal(signal.SIGSTOP)
            stopped.append(until(addresses[0], cmd, "DEGRADED"))
            procs[2].send_signal(signal.SIGCONT)
            until(addresses[0], cmd, "UP")
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()
    print(f"rounds {rounds}, load {os.getloadavg()[0]:.2f}")
    for name, values in [
        ("baseline: one status round trip", baseline),
        ("killed peer -> DEGRADED", killed),
        ("stopped peer -> DEGRADED", stopped),
        ("restarted peer -> UP (incl. start-up)", back),
    ]:
        print(
            f"{name:<42} p50 {statistics.median(values) * 1000:8.1f} ms"
            f"  p99 {pct(values, 0.99) * 1000:8.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
