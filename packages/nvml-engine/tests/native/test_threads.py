"""16 C threads on the library at once: right answers always, no data race under TSan.

``native/tsan/threads.c`` drives init/shutdown reference counting (with one reference
held, then with the count falling to zero and the state reloading), handles, identity,
memory, fabric info v1 and V, NVLink, field values, lookups and event sets with short
waits from 16 threads, and compares every answer with a single-threaded snapshot; then
all 16 block on one event set that is freed under them (they must wake at once), and
all 16 fail init on a corrupt state at once while reading the reason back. With a live
layer, 16 threads read GPUs under a busy utilization pattern while the main thread rewrites
its seed and temperature lag (utilization stays busy's, energy only grows); on a fresh live
layer, 16 threads wait for the Xids the main thread writes to the event ring (12 on their
own sets, each receiving every event in order; 4 sharing one set, freed under them), and
one reads a GPU whose gpu_lost key is toggled meanwhile; then 8 wait for Xids armed behind
a call-count trigger that 4 other threads' reads fire. It is
built here twice: with the system compiler against the shipped library (always), and
with the library sources under ThreadSanitizer (when clang's TSan runtime is present).
The counts it reports are checked against what the program must have done, so a run
that skipped work cannot pass.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SYSTEM, gpu_entry, render_state, require_thread_sanitizer

TSAN_DIR = Path(__file__).resolve().parents[2] / "native" / "tsan"
THREADS = 16
WAIT_EVERY = 25
GPUS = 8
SUMMARY = re.compile(
    r"^(?P<verdict>ok|FAILED) threads=(?P<threads>\d+) rounds=(?P<rounds>\d+) gpus=(?P<gpus>\d+) "
    r"calls=(?P<calls>\d+) timeouts=(?P<timeouts>\d+) mismatches=(?P<mismatches>\d+)$",
    re.MULTILINE,
)
CHECKS_PER_ROUND = 17  # init, count, handle, 12 per device, error string, shutdown
EVENT_CHECKS = {1: 5, 2: 4}  # create, register, wait (+ shared-set wait in phase 1), free
FAILING_CHECKS_PER_ROUND = 3  # phase 3: failing init, its error string, shutdown
FREE_UNDER_WAITERS_CHECKS = (
    THREADS + 5
)  # each blocked wait; init, create, free, wake time, shutdown
FREE_ROUNDS = 40  # a set and GPM samples freed under callers using them in a loop
# init, a handle, shutdown; per round for the set and for each odd thread's sample: create,
# free, a second free and a call on the stale handle
FREE_UNDER_CALLERS_CHECKS = 3 + 4 * (1 + THREADS // 2) * FREE_ROUNDS
FREE_LINE = re.compile(
    r"^free rounds=(?P<rounds>\d+) calls=(?P<calls>\d+) ended=(?P<ended>\d+)$", re.MULTILINE
)
MAIN_CHECKS = 6
# phase 4 (a utilization pattern on the real clock): init, handle, 20 x (utilization, energy,
# temperature), shutdown per round; two pattern writes per GPU first; the main thread's
# rewrites (4 per round)
PATTERN_CHECKS_PER_ROUND = 3 + 20 * 3
PATTERN_SETUP_CHECKS_PER_GPU = 2
PATTERN_WRITES_PER_ROUND = 4
# the live phase: Xids through the event ring, a GPU lost and found under a reader
LIVE_EVENTS = 200
OWN_WAITERS = 12  # create, register, a wait per event, free
SHARED_WAITERS = 4  # the events between them, then one wait each that the free ends
LIVE_MAIN_CHECKS = 7  # init, 2 handles, create and register the shared set, free it, shutdown
LIVE = re.compile(
    r"^live events=(?P<events>\d+) delivered=(?P<delivered>\d+) "
    r"reads=(?P<reads>\d+) lost=(?P<lost>\d+)$",
    re.MULTILINE,
)
# the armed phase: Xids armed behind an after-calls trigger that four callers' reads fire
ARMED_EVENTS = 4
ARMED_WAITERS = 8  # create, register, a wait per event, free
ARMED_AFTER = 40
# init, a handle, the trigger's write, the armed value's, each event written, shutdown
ARMED_MAIN_CHECKS = 5 + ARMED_EVENTS
ARMED = re.compile(
    r"^armed events=(?P<events>\d+) waiters=(?P<waiters>\d+) "
    r"delivered=(?P<delivered>\d+) calls=(?P<calls>\d+)$",
    re.MULTILINE,
)


def expected_counts(rounds: int) -> tuple[int, int]:
    """(checked calls, timeouts) a complete run of ``rounds`` per thread and phase makes."""
    event_rounds = sum(
        sum(1 for r in range(rounds) if r % WAIT_EVERY == t % WAIT_EVERY) for t in range(THREADS)
    )
    calls = MAIN_CHECKS + sum(
        THREADS * rounds * CHECKS_PER_ROUND + event_rounds * EVENT_CHECKS[phase] for phase in (1, 2)
    )
    calls += THREADS * rounds * FAILING_CHECKS_PER_ROUND + FREE_UNDER_WAITERS_CHECKS
    calls += FREE_UNDER_CALLERS_CHECKS
    calls += (
        GPUS * PATTERN_SETUP_CHECKS_PER_GPU
        + THREADS * rounds * PATTERN_CHECKS_PER_ROUND
        + rounds * PATTERN_WRITES_PER_ROUND
    )
    calls += LIVE_MAIN_CHECKS + 2 * LIVE_EVENTS  # each event written and each toggle of gpu_lost
    calls += OWN_WAITERS * (LIVE_EVENTS + 3) + LIVE_EVENTS + SHARED_WAITERS
    calls += ARMED_MAIN_CHECKS + ARMED_WAITERS * (ARMED_EVENTS + 3)
    timeouts = event_rounds * 2 + event_rounds + THREADS + SHARED_WAITERS
    return calls, timeouts


@pytest.fixture
def state_file(tmp_path: Path) -> Path:
    gpus = [gpu_entry(i, nvlink_count=i + 2, fabric_attached=i % 2) for i in range(GPUS)]
    path = tmp_path / "threads.nvmlmock"
    path.write_text(render_state(SYSTEM, gpus))
    return path


def make(target: str, state: Path, rounds: int, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOCK_")}
    env.update(
        PYTHON=sys.executable,
        MOCK_FABRIC_CLUSTER_UUID="0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
        MOCK_FABRIC_CLIQUE_ID="4242",
    )
    args = [f"STATE={state}", f"ROUNDS={rounds}", *(f"{k}={v}" for k, v in extra.items())]
    return subprocess.run(
        ["make", "-s", "-C", str(TSAN_DIR), target, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def assert_complete_run(proc: subprocess.CompletedProcess[str], rounds: int) -> None:
    report = proc.stdout[-4000:] + proc.stderr[-8000:]
    assert proc.returncode == 0, report
    assert "ThreadSanitizer" not in proc.stderr, report
    match = SUMMARY.search(proc.stdout)
    assert match is not None, report
    calls, timeouts = expected_counts(rounds)
    assert match["verdict"] == "ok" and int(match["mismatches"]) == 0, report
    assert (int(match["threads"]), int(match["rounds"]), int(match["gpus"])) == (
        THREADS,
        rounds,
        GPUS,
    )
    assert (int(match["calls"]), int(match["timeouts"])) == (calls, timeouts), report
    free_line = FREE_LINE.search(proc.stdout)
    assert free_line is not None, report
    # every caller of every round was ended by the free, and answered on the live set before
    assert int(free_line["rounds"]) == FREE_ROUNDS, report
    assert int(free_line["ended"]) == THREADS * FREE_ROUNDS, report
    assert int(free_line["calls"]) >= THREADS * FREE_ROUNDS, report
    live_line = LIVE.search(proc.stdout)
    assert live_line is not None, report
    assert int(live_line["events"]) == int(live_line["delivered"]) == LIVE_EVENTS, report
    assert int(live_line["reads"]) > 0 and int(live_line["lost"]) <= int(live_line["reads"]), report
    armed = ARMED.search(proc.stdout)
    assert armed is not None, report
    assert (int(armed["events"]), int(armed["waiters"])) == (ARMED_EVENTS, ARMED_WAITERS), report
    assert int(armed["delivered"]) == ARMED_EVENTS * ARMED_WAITERS, report
    assert int(armed["calls"]) > ARMED_AFTER, report


def test_sixteen_threads_plain_build(library_file: Path, state_file: Path) -> None:
    rounds = 300
    proc = make(
        "run-plain", state_file, rounds, LIB=str(library_file), CC=os.environ.get("CC", "cc")
    )
    assert_complete_run(proc, rounds)


def test_sixteen_threads_under_thread_sanitizer(state_file: Path) -> None:
    require_thread_sanitizer(TSAN_DIR)
    rounds = 150
    assert_complete_run(make("check", state_file, rounds), rounds)
