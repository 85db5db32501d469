"""How long one check-fabric run takes, against the interpreter's own start-up.

check-fabric runs once per workload container start (and per demo node), so the
figure that matters is the wall time of a whole process: interpreter start,
imports, nvmlInit on the mock, one fabric call per GPU, output. The baseline is
measured in the same run: a bare ``python -c pass`` and ``python -c "import
pynvml"`` on the same interpreter, so the ratios say what check-fabric itself adds.

    python bench/run_time.py [--runs 40] [--profile gb200]

Needs nvml-mock-engine (the mock library and ``nvml-mock-engine render``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1))))
    return ordered[rank]


def _time(argv: list[str], env: dict[str, str], runs: int, ok: set[int]) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, check=False)
        samples.append((time.perf_counter() - start) * 1000)
        if done.returncode not in ok:
            raise SystemExit(f"{argv} exited {done.returncode}: {done.stderr.decode()}")
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--profile", default="gb200")
    args = parser.parse_args()

    from nvml_mock_engine import library_path

    engine = shutil.which("nvml-mock-engine") or str(
        Path(sys.executable).parent / "nvml-mock-engine"
    )
    env = dict(os.environ, LD_LIBRARY_PATH=str(Path(library_path()).parent))
    env.update(MOCK_FABRIC_CLUSTER_UUID="00000000-0000-0000-0000-0000000000cd")
    env.update(MOCK_FABRIC_CLIQUE_ID="1")
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        states = {}
        for count in (4, 64):
            state = Path(tmp) / f"{count}.nvmlmock"
            subprocess.run(
                [
                    engine,
                    "render",
                    "--profile",
                    args.profile,
                    "--count",
                    str(count),
                    "-o",
                    str(state),
                ],
                check=True,
                capture_output=True,
            )
            states[count] = str(state)
        cases: list[tuple[str, list[str], int]] = [
            ("python -c pass (baseline)", [py, "-c", "pass"], 4),
            ("python -c 'import pynvml'", [py, "-c", "import pynvml"], 4),
            ("check-fabric, 4 GPUs", [py, "-m", "check_fabric"], 4),
            ("check-fabric --json, 4 GPUs", [py, "-m", "check_fabric", "--json"], 4),
            ("check-fabric, 64 GPUs", [py, "-m", "check_fabric"], 64),
        ]
        results = []
        for name, argv, count in cases:
            case_env = dict(env, MOCK_NVML_CONFIG=states[count])
            _time(argv, case_env, 3, {0})  # warm the page cache
            results.append((name, _time(argv, case_env, args.runs, {0})))

    base = statistics.median(results[0][1])
    print(f"{'case':32} {'p50 ms':>8} {'p99 ms':>8} {'p50 / baseline':>15}")
    for name, samples in results:
        p50, p99 = statistics.median(samples), _percentile(samples, 99)
        print(f"{name:32} {p50:8.1f} {p99:8.1f} {p50 / base:15.2f}")
    print(f"({args.runs} runs each, profile {args.profile}, {sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
