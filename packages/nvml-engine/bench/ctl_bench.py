"""Wall time of ``nvml-mock-ctl status`` and ``xid`` beside the bare interpreter, same run.

Renders an 8-GPU H100 state with a fresh live layer beside it in a temporary directory, then
alternates ``python -c pass``, ``status`` and ``xid -i 0 79`` (each started as the console
script starts it: the module imported, then ``main()``), and prints p50 / p99 of each and the
p50 ratio to the bare interpreter. Target (README): each verb <= 1.5x ``python -c pass``.

    python bench/ctl_bench.py [--runs 40]
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


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()

    import nvml_mock_live as live

    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state.nvmlmock"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "nvml_mock_engine",
                "render",
                "--profile",
                "h100",
                "-o",
                str(state),
            ],
            check=True,
            capture_output=True,
        )
        live_file = live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed tool runs from bytecode caches
        ctl = [
            sys.executable,
            "-c",
            "import sys; from nvml_mock_engine.ctl import main; sys.exit(main())",
        ]
        ctl += ["--live-file", str(live_file)]
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "status": [*ctl, "status"],
            "xid": [*ctl, "xid", "-i", "0", "79"],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for argv in commands.values():  # warm the caches
            subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
        for _ in range(args.runs):
            for name, argv in commands.items():
                started = time.perf_counter()
                subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
                times[name].append(time.perf_counter() - started)
    base = statistics.median(times["python -c pass"])
    print(
        f"{'command':<16} {'p50 ms':>8} {'p99 ms':>8} {'ratio':>6}"
        f"   (load {os.getloadavg()[0]:.1f})"
    )
    for name, values in times.items():
        p50 = statistics.median(values)
        print(
            f"{name:<16} {p50 * 1e3:8.1f} {percentile(values, 0.99) * 1e3:8.1f} {p50 / base:5.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
