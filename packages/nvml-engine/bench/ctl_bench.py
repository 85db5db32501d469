"""Wall time of ``nvml-mock-ctl status`` and ``xid`` beside the bare interpreter, same run.

Renders an 8-GPU H100 state with a fresh live layer beside it in a temporary directory, then
runs, interleaved (one of each in turn, so every command meets the same load): ``python3 -c
pass`` (the same interpreter of the same environment: the baseline), ``status``, ``xid -i 0
79`` and ``status --json``, each through the installed console script exactly as a user runs
it, and the full command line's ``status`` (``nvml_mock_engine.ctl_cli``, argparse) for
reference. Bytecode caches are written, as for an installed tool. Prints p50 / p99 of the wall
time and their ratio to the baseline's for each round and for all rounds together, with the
load average, and the p50 of each run's CPU time (user + system, the child's own), which a
loaded machine disturbs less than the wall time.
Target (README): ``status`` and ``xid`` <= 1.5x ``python3 -c pass``.

    python bench/ctl_bench.py [--runs 30] [--rounds 3] [--busy N] [--before PACKAGES]

``--busy N`` runs N busy loops (one per core to saturate) during the measurement: the
loaded figure. ``--before PACKAGES`` adds ``status`` and ``xid`` of another checkout's code
(its ``packages/`` directory, its sources put first on ``PYTHONPATH``, the same interpreter and
library), interleaved with the rest: a before/after in one run.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct))]


def _console_script() -> str:
    beside = Path(sys.executable).parent / "nvml-mock-ctl"
    found = str(beside) if beside.is_file() else shutil.which("nvml-mock-ctl")
    if found is None:
        raise SystemExit("no nvml-mock-ctl console script installed beside this interpreter")
    return found


def _table(title: str, times: dict[str, list[float]], cpu: dict[str, list[float]]) -> None:
    base50 = statistics.median(times["python3 -c pass"])
    base99 = percentile(times["python3 -c pass"], 0.99)
    cpu50 = statistics.median(cpu["python3 -c pass"])
    print(f"{title}   (load {os.getloadavg()[0]:.1f})")
    print(
        f"  {'command':<22} {'p50 ms':>8} {'p99 ms':>8} {'p50 x':>6} {'p99 x':>6}"
        f" {'cpu p50':>8} {'cpu x':>6}"
    )
    for name, values in times.items():
        p50, p99 = statistics.median(values), percentile(values, 0.99)
        used = statistics.median(cpu[name])
        ratios = f"{p50 / base50:6.2f} {p99 / base99:6.2f} {used * 1e3:8.1f} {used / cpu50:6.2f}"
        print(f"  {name:<22} {p50 * 1e3:8.1f} {p99 * 1e3:8.1f} {ratios}")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs of each command per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="busy loops during the measurement")
    parser.add_argument("--before", type=Path, help="another checkout's packages/ directory")
    args = parser.parse_args()

    import nvml_mock_live as live

    script = _console_script()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed tool runs from bytecode caches
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            state = Path(tmp) / "state.nvmlmock"
            render = ["render", "--profile", "h100", "-o", str(state)]
            subprocess.run(
                [sys.executable, "-m", "nvml_mock_engine", *render],
                check=True,
                capture_output=True,
            )
            live_file = live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))
            env["NVML_MOCK_LOCK_DIR"] = str(Path(tmp) / "locks")
            where = ["--live-file", str(live_file)]
            full = "import sys; from nvml_mock_engine.ctl_cli import main; sys.exit(main())"
            commands = {
                "python3 -c pass": [sys.executable, "-c", "pass"],
                "status": [script, *where, "status"],
                "xid -i 0 79": [script, *where, "xid", "-i", "0", "79"],
                "status --json": [script, *where, "status", "--json"],
                "status (full CLI)": [sys.executable, "-c", full, *where, "status"],
            }
            environments = {name: env for name in commands}
            if args.before is not None:
                old = "import sys; from nvml_mock_engine.ctl import main; sys.exit(main())"
                sources = ("protocol", "live", "nvml-engine", "topology-service")
                before_env = dict(env)
                before_env["PYTHONPATH"] = os.pathsep.join(
                    str(args.before / name / "src") for name in sources
                )
                for name, verb in (
                    ("status", ["status"]),
                    ("xid -i 0 79", ["xid", "-i", "0", "79"]),
                ):
                    commands[f"{name} (before)"] = [sys.executable, "-c", old, *where, *verb]
                    environments[f"{name} (before)"] = before_env
            for name, argv in commands.items():  # warm the caches, write the bytecode
                subprocess.run(argv, env=environments[name], check=True, stdout=subprocess.DEVNULL)
            every: dict[str, list[float]] = {name: [] for name in commands}
            every_cpu: dict[str, list[float]] = {name: [] for name in commands}
            print(f"{sys.executable}, {args.runs} runs x {args.rounds} rounds, {args.busy} busy")
            for round_ in range(1, args.rounds + 1):
                times: dict[str, list[float]] = {name: [] for name in commands}
                cpu: dict[str, list[float]] = {name: [] for name in commands}
                for _ in range(args.runs):
                    for name, argv in commands.items():
                        cpu_before = _children_cpu()
                        started = time.perf_counter()
                        subprocess.run(
                            argv, env=environments[name], check=True, stdout=subprocess.DEVNULL
                        )
                        times[name].append(time.perf_counter() - started)
                        cpu[name].append(_children_cpu() - cpu_before)
                _table(f"round {round_}", times, cpu)
                for name, values in times.items():
                    every[name].extend(values)
                    every_cpu[name].extend(cpu[name])
            _table("all rounds", every, every_cpu)
    finally:
        for loop in busy:
            loop.kill()
            loop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
