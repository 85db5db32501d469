"""A writer changing live values beside 16 reader threads in two processes: never a torn value.

``native/tsan/live_stress.c`` forks into two processes that each nvmlInit on one state and
its live file and run 8 reader threads; the parent's writer thread maps the file and calls
the library's ``nvml_mock_live_write`` in a loop, setting memory used to ``k * (2^32 + 1)``
(both halves equal) and both utilization rates to one value in each write, and clearing
them every 16th. A reader that sees unequal halves, a memory sum that does not add up, or
two different rates from one nvmlDeviceGetUtilizationRates call counts a torn value. On
the other half of the GPUs the same loop puts and removes process records
(``nvml_mock_live_proc_write``) while the readers there list compute processes and their
utilization samples: an entry whose memory or utilization is not its pid's is torn. The
writer makes at least WRITES writes and goes on until every reader has seen a change, so
the counts below do not depend on how the threads are scheduled. Built here with the
system compiler against the shipped library (always) and with the library sources under
ThreadSanitizer (when clang's TSan runtime is present), where any race report fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import SYSTEM, gpu_entry, render_state, require_thread_sanitizer

TSAN_DIR = Path(__file__).resolve().parents[2] / "native" / "tsan"
GPUS = 8
WRITES = 20000
SUMMARY = re.compile(
    r"^(?P<verdict>ok|FAILED) processes=(?P<processes>\d+) threads=(?P<threads>\d+) "
    r"gpus=(?P<gpus>\d+) writes=(?P<writes>\d+) reads=(?P<reads>\d+) "
    r"changes=(?P<changes>\d+) records=(?P<records>\d+) listed=(?P<listed>\d+) "
    r"torn=(?P<torn>\d+)$",
    re.MULTILINE,
)


@pytest.fixture
def state_file(tmp_path: Path) -> Path:
    # utilization rates that differ on the board, so a reader tells the cleared pair apart
    gpus: list[Mapping[str, Any]] = [
        gpu_entry(i, util_gpu_pct=3, util_mem_pct=1) for i in range(GPUS)
    ]
    path = tmp_path / "state.nvmlmock"
    path.write_text(render_state(SYSTEM, gpus))
    return path


def make(target: str, state: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOCK_")}
    args = [
        f"STATE={state}",
        f"LIVE={state.parent / 'live.nvmlmock'}",
        f"WRITES={WRITES}",
        f"PYTHON={sys.executable}",
        *(f"{k}={v}" for k, v in extra.items()),
    ]
    return subprocess.run(
        ["make", "-s", "-C", str(TSAN_DIR), target, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def assert_never_torn(proc: subprocess.CompletedProcess[str]) -> None:
    report = proc.stdout[-4000:] + proc.stderr[-8000:]
    assert "ThreadSanitizer" not in proc.stderr, report
    match = SUMMARY.search(proc.stdout)
    assert match is not None, report
    assert proc.returncode == 0 and match["verdict"] == "ok", report
    assert int(match["torn"]) == 0, report
    assert (int(match["processes"]), int(match["threads"]), int(match["gpus"])) == (2, 16, GPUS)
    assert int(match["writes"]) >= WRITES, report
    # every one of the 16 readers read and saw the values change (the program checks each)
    assert int(match["reads"]) >= 16 and int(match["changes"]) >= 16, report
    # half the GPUs held process records that were put and removed as often, and were listed
    assert int(match["records"]) == int(match["writes"]) and int(match["listed"]) > 0, report


def test_live_writer_beside_sixteen_readers_plain_build(
    library_file: Path, state_file: Path
) -> None:
    proc = make("live-plain", state_file, LIB=str(library_file), CC=os.environ.get("CC", "cc"))
    assert_never_torn(proc)


def test_live_writer_beside_sixteen_readers_under_thread_sanitizer(state_file: Path) -> None:
    require_thread_sanitizer(TSAN_DIR)
    assert_never_torn(make("live-check", state_file))
