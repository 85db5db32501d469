"""Wall time of the ``nvidia-smi`` work-alike as a process, beside bare interpreter start-up.

Scripts call ``nvidia-smi -L`` and friends in loops, so what matters is the whole process:
interpreter start, imports, loading the library, ``nvmlInit`` on the rendered state, the
NVML calls and the output. Each command runs ``--runs`` times as a fresh process on an
8-GPU H100 node, started as the overlay's launcher starts it (``python -c 'import
nvml_mock_smi.__main__'``), interleaved with ``python -c pass`` so both see the same
machine load; the report gives p50 and p99 per command, its p50 less the baseline p50 (the
tool's own cost), and the targets (``-L`` <= 20 ms, ``-q`` of 8 GPUs <= 40 ms).

``--before SRC`` also times every command with another checkout's ``src`` folder first on
``PYTHONPATH`` (say, an export of the last release), interleaved in the same run, so a change's
cost is read against the same machine load rather than against numbers from another day.

    python packages/smi/bench/smi_bench.py [--runs 40] [--profile h100] [--count 8]
        [--before OLD_CHECKOUT/packages/smi/src]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS_MS = {"-L": 20.0, "-q": 40.0}


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1))))
    return ordered[k]


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    elapsed = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode()}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--profile", default="h100")
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--before", type=Path, help="another checkout's src folder to compare")
    args = parser.parse_args()

    from nvml_mock_engine.library import library_path

    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state.nvmlmock"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "nvml_mock_engine",
                "render",
                "--profile",
                args.profile,
                "--count",
                str(args.count),
                "-o",
                str(state),
            ],
            check=True,
            capture_output=True,
        )
        env = dict(os.environ, MOCK_NVML_CONFIG=str(state), NVML_MOCK_SMI_LIB=str(library_path()))
        # an installed tool runs from bytecode caches; without them every run compiles
        # every module it imports, and the bench would measure the compiler
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        py = [sys.executable]
        # as the overlay's launcher starts the tool (launcher.sh.in, less its -I, which would
        # drop the PYTHONPATH that --before sets); "-L (python -m)" is the runpy route
        tool = [*py, "-c", "import nvml_mock_smi.__main__"]
        commands = {
            "python -c pass": [*py, "-c", "pass"],
            "-L": [*tool, "-L"],
            "-L (python -m)": [*py, "-m", "nvml_mock_smi", "-L"],
            "(table)": tool,
            "-q": [*tool, "-q"],
            "-q -x": [*tool, "-q", "-x"],
            "--query-gpu (10 fields)": [
                *tool,
                "--query-gpu=index,name,uuid,pci.bus_id,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw,fabric.cliqueId",
                "--format=csv",
            ],
        }
        runs: dict[str, tuple[list[str], dict[str, str]]] = {}
        for name, argv in commands.items():
            runs[name] = (argv, env)
            if args.before is not None and name != "python -c pass":
                before = dict(env, PYTHONPATH=str(args.before.resolve()))
                runs[f"{name} (before)"] = (argv, before)
        samples: dict[str, list[float]] = {name: [] for name in runs}
        for argv, run_env in runs.values():
            timed(argv, run_env)  # warm the page cache and write the bytecode caches
        for _ in range(args.runs):
            for name, (argv, run_env) in runs.items():
                samples[name].append(timed(argv, run_env))

    base = statistics.median(samples["python -c pass"])
    print(f"smi_bench: {args.count} x {args.profile}, {args.runs} runs each, {sys.executable}")
    print(f"{'command':<36}{'p50 ms':>9}{'p99 ms':>9}{'p50-base':>10}{'x base':>8}{'target':>9}")
    for name, values in samples.items():
        p50, p99 = statistics.median(values), percentile(values, 99)
        target = None if name.endswith("(before)") else TARGETS_MS.get(name)
        verdict = "" if target is None else f"{'ok' if p50 <= target else 'MISS'} {target:.0f}"
        print(f"{name:<36}{p50:9.1f}{p99:9.1f}{p50 - base:10.1f}{p50 / base:8.2f}{verdict:>9}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
