"""The live layer's fuzz corpus, replayed through the real built library without libFuzzer.

``native/fuzz/fuzz_live.c`` turns each input into a live file beside a fixed 2-GPU state
(its first byte picks how: values, overlays of the header or records, truncation, raw
bytes, an odd sequence counter, damaged process records), inits, and checks every live
getter on both GPUs against the value the bytes predict; a broken invariant traps. Here it
is compiled with the system compiler and ``native/fuzz/standalone_main.c`` against the
shipped library, and run over ``native/fuzz/seeds-live`` and every
``native/fuzz/regressions/live-*`` input: one process per input (so a failure names its
input) and all of them in one process (as a campaign runs them, re-initialising over one
file that keeps changing). With clang's
libFuzzer runtime at hand, the ASan/UBSan fuzz build replays them too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[2] / "native" / "fuzz"
BUILD = Path(__file__).resolve().parents[2] / "native" / "build" / "fuzz"
SEEDS = sorted(p for p in (FUZZ / "seeds-live").iterdir() if p.is_file())
REGRESSIONS = sorted(p for p in (FUZZ / "regressions").glob("live-*") if p.is_file())
INPUTS = SEEDS + REGRESSIONS
MODES = 8  # first input byte % 8 (fuzz_live.c), below 0x80
PROCESS_MODES = (
    4  # first input byte >> 5 from 0x80 on: records or raw overlay, high as written or raw
)


def mode(first: int) -> str:
    """The mode an input's first byte picks, as fuzz_live.c reads it."""
    return f"process-{(first >> 5) & 3}" if first & 0x80 else f"file-{first % MODES}"


def compiler() -> str:
    return os.environ.get("CC", "cc")


@pytest.fixture(scope="module")
def harness(library_file: Path) -> Path:
    """fuzz_live.c + standalone_main.c, built with the system compiler against the library."""
    if shutil.which(compiler()) is None:
        pytest.skip(f"no C compiler ({compiler()}) to build the live fuzz harness")
    proc = subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(FUZZ),
            "plain-live",
            f"LIB={library_file}",
            f"CC={compiler()}",
            f"PYTHON={sys.executable}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return BUILD / "fuzz_live-plain"


def run(harness: Path, inputs: list[Path], **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MOCK_")}
    return subprocess.run(
        [str(harness), *map(str, inputs)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_seed_corpus_covers_every_mode() -> None:
    modes = {mode(p.read_bytes()[0]) for p in SEEDS if p.stat().st_size > 0}
    assert modes == {f"file-{m}" for m in range(MODES)} | {
        f"process-{m}" for m in range(PROCESS_MODES)
    }


@pytest.mark.parametrize("live_input", INPUTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_input_keeps_every_invariant(harness: Path, live_input: Path) -> None:
    proc = run(harness, [live_input])
    assert proc.returncode == 0, f"{live_input.name}: exit {proc.returncode}\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip() == "ok inputs=1", proc.stdout


def test_all_inputs_in_one_process(harness: Path) -> None:
    """One file rewritten in place under one process that re-initialises for each input: the
    library's mapping cache and its per-init reasons must follow every change of the file."""
    proc = run(harness, INPUTS)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == f"ok inputs={len(INPUTS)}", proc.stdout


def test_a_wrong_live_answer_is_caught(harness: Path, tmp_path: Path) -> None:
    """The harness is not a no-op: a library whose temperature ignores the live layer and its
    bounds (interposed here) dies on the first input that sets the temperature."""
    shim = tmp_path / "wrong_temperature.c"
    shim.write_text(
        textwrap.dedent(
            """
            int nvmlDeviceGetTemperature(void *device, int sensor, unsigned int *temp);
            int nvmlDeviceGetTemperature(void *device, int sensor, unsigned int *temp)
            {
                (void)device;
                (void)sensor;
                *temp = 201; /* above the key's declared 0..200 */
                return 0;
            }
            """
        )
    )
    lib = tmp_path / "wrong_temperature.so"
    built = subprocess.run(
        [compiler(), "-shared", "-fPIC", "-o", str(lib), str(shim)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    seed = FUZZ / "seeds-live" / "values-every-key-both-gpus"
    # a trapped harness leaves its state directory behind: keep it under tmp_path
    proc = run(harness, [seed], LD_PRELOAD=str(lib), TMPDIR=str(tmp_path))
    assert proc.returncode == -signal.SIGILL, (proc.returncode, proc.stderr[-2000:])
    assert "invariant broken" in proc.stderr and "temperature_c" in proc.stderr, proc.stderr


def test_a_wrong_process_list_is_caught(harness: Path, tmp_path: Path) -> None:
    """The process checks are not a no-op either: a library that lists no compute process
    dies on the first input with a record on the GPU."""
    shim = tmp_path / "no_processes.c"
    shim.write_text(
        textwrap.dedent(
            """
            typedef unsigned int uint;
            int nvmlDeviceGetComputeRunningProcesses_v3(void *device, uint *count, void *infos);
            int nvmlDeviceGetComputeRunningProcesses_v3(void *device, uint *count, void *infos)
            {
                (void)device;
                (void)infos;
                *count = 0;
                return 0;
            }
            """
        )
    )
    lib = tmp_path / "no_processes.so"
    built = subprocess.run(
        [compiler(), "-shared", "-fPIC", "-o", str(lib), str(shim)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    seed = FUZZ / "seeds-live" / "proc-one-record-both-gpus"
    proc = run(harness, [seed], LD_PRELOAD=str(lib), TMPDIR=str(tmp_path))
    assert proc.returncode == -signal.SIGILL, (proc.returncode, proc.stderr[-2000:])
    assert "invariant broken" in proc.stderr and "count == n" in proc.stderr, proc.stderr


def test_inputs_under_sanitizers() -> None:
    """With clang's libFuzzer runtime at hand, every input through the ASan/UBSan fuzz build."""
    if shutil.which(os.environ.get("FUZZ_CC", "clang")) is None:
        pytest.skip("clang (libFuzzer) is not installed")
    proc = subprocess.run(
        ["make", "-s", "-C", str(FUZZ), "replay-live", f"PYTHON={sys.executable}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0 and "fuzzer" in proc.stderr and "cannot find" in proc.stderr:
        pytest.skip(f"clang has no libFuzzer runtime: {proc.stderr[-500:]}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stderr.count("Executed ") == len(INPUTS), proc.stderr[-4000:]
