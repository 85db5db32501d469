"""The service ends on SIGTERM whatever its files are doing.

A follower waiting with ``asyncio.wait_for(event.wait(), poll)`` drops, on Python 3.11, a
cancellation that lands as the wait completes: with a file changing a few loop steps before
the shutdown, the follower outlived it and the process ignored SIGTERM. The 200 trials run
the follower in-process (a file write, then the cancellation 0 to 4 loop steps later, each
step a real inotify round through the selector), which is where the race lives and what
makes 200 of them quick; a real process is then stopped with SIGTERM while a writer swaps
its topology and scenario files as fast as it can, a few times.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from conftest import document, serving, write_atomically
from nvml_mock_topology.source import follow

TRIALS = 200
GRACE_SECONDS = 10.0
"""The documented bound after SIGTERM with ``--drain-seconds 0``: at most 10 s for requests
in flight (README, "Configuration")."""


async def test_the_follower_ends_when_cancelled_as_a_change_lands(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text("a")
    ended = 0
    for trial in range(TRIALS):
        checks = 0

        async def check() -> None:
            nonlocal checks
            checks += 1
            await asyncio.sleep(0)

        task = asyncio.create_task(follow(path, 0.005, check, lambda exc: None))
        for _ in range(3):
            await asyncio.sleep(0)
        write_atomically(path, f"trial {trial}")
        for _ in range(trial % 5):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=2)
        assert task in done, f"trial {trial}: the follower ignored its cancellation"
        assert task.cancelled()
        ended += 1
    assert ended == TRIALS


def _churn(paths: list[Path], stop: threading.Event) -> None:
    generation = 0
    while not stop.is_set():
        generation += 1
        for path in paths:
            nodes = [f"node-{generation % 7}", f"node-{generation % 7 + 10}"]
            write_atomically(path, document(c0=nodes))
            os.utime(path)


def test_a_real_process_ends_within_its_grace_time_while_its_files_change(
    tmp_path: Path,
) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(document())
    for run in range(5):
        stop = threading.Event()
        writer = threading.Thread(target=_churn, args=([path], stop), daemon=True)
        with serving("--topology-file", str(path), "--poll-interval", "0.01") as (process, _):
            writer.start()
            try:
                time.sleep(0.3 + 0.1 * run)
                sent = time.monotonic()
                process.send_signal(signal.SIGTERM)
                try:
                    code = process.wait(GRACE_SECONDS + 5)
                except subprocess.TimeoutExpired:
                    code = None
                took = time.monotonic() - sent
            finally:
                stop.set()
                writer.join(10)
        assert code == 0, f"run {run}: still running {took:.1f}s after SIGTERM"
        assert took <= GRACE_SECONDS, f"run {run}: ended {took:.1f}s after SIGTERM"
