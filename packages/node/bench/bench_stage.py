"""Benchmark the Python side of the engine: rendering, re-staging and the launcher's start.

Each figure is printed beside a baseline measured in the same run, so the ratio holds on
any machine:

- render (8 and 64 GPUs) beside loading the profile alone;
- re-stage (runtime reused) beside writing the state file alone, with and without the driver
  root, plus one first stage;
- a launcher's start (``/bin/sh`` + loader + interpreter, module
  ``nvml_mock_node.surfaces_hook --help``: a launcher imports a package's ``__main__``)
  beside the same interpreter started directly, and beside the host interpreter's
  ``python3 -I -c pass`` (the real binary, no version-manager shim).

Run: ``python packages/node/bench/bench_stage.py [--rounds N]`` (needs the built library).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.profiles import load_profile
from nvml_mock_engine.render import render_text
from nvml_mock_node.runtime import loader_name
from nvml_mock_node.stage import StageOptions, launcher_script, stage, write_atomic


def measure(func: Callable[[], object], rounds: int) -> tuple[float, float]:
    """p50 and p99 wall time of *func* in milliseconds."""
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        func()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    p99 = samples[min(len(samples) - 1, round(0.99 * (len(samples) - 1)))]
    return statistics.median(samples), p99


def row(label: str, figures: tuple[float, float], baseline: tuple[float, float] | None) -> None:
    ratio = f"{figures[0] / baseline[0]:6.1f}x" if baseline else "       "
    print(f"{label:48} p50 {figures[0]:8.3f} ms  p99 {figures[1]:8.3f} ms  {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=50)
    rounds = parser.parse_args().rounds

    config8 = resolve_config(profile="h100", node="bench")
    config64 = resolve_config(profile="gb200", count=64, node="bench")
    base = measure(lambda: load_profile("h100"), rounds)
    row("baseline: load_profile(h100)", base, None)
    row("render 8 GPUs (h100)", measure(lambda: render_text(config8), rounds), base)
    row("render 64 GPUs (gb200)", measure(lambda: render_text(config64), rounds), base)

    with tempfile.TemporaryDirectory() as tmp:
        overlay = Path(tmp) / "overlay"
        options = StageOptions(devices=False)
        first = measure(lambda: stage(overlay, config8, options), 1)
        text = render_text(config8).encode()
        state_only = measure(lambda: write_atomic(Path(tmp) / "state", text), rounds)
        row("baseline: write the state file atomically", state_only, None)
        row(
            "re-stage 8 GPUs (runtime reused)",
            measure(lambda: stage(overlay, config8, options), rounds),
            state_only,
        )
        plain = StageOptions(devices=False, driver_root=False)
        bare = Path(tmp) / "bare"
        stage(bare, config8, plain)
        row(
            "re-stage 8 GPUs, no driver root (usr/, proc/, sys/)",
            measure(lambda: stage(bare, config8, plain), rounds),
            state_only,
        )
        row("first stage (runtime built)", first, state_only)

        runtime = overlay / "runtime"
        loader = loader_name(runtime)
        probe = overlay / "probe"
        probe_text = launcher_script(
            "probe", "nvml_mock_node.surfaces_hook", loader=loader, mount_path=str(overlay)
        )
        probe.write_text(probe_text)
        probe.chmod(0o755)
        direct = [
            str(runtime / "lib" / loader),
            "--library-path",
            str(runtime / "lib"),
            str(runtime / "bin" / "python3"),
            "-I",
            "-m",
            "nvml_mock_node.surfaces_hook",
            "--help",
        ]
        host = os.path.realpath(sys.executable)
        host_pass = measure(lambda: subprocess.run([host, "-I", "-c", "pass"], check=True), rounds)
        row("baseline: host python3 -I -c pass (binary)", host_pass, None)
        runtime_direct = measure(
            lambda: subprocess.run(direct, check=True, stdout=subprocess.DEVNULL), rounds
        )
        row("runtime interpreter via its loader, no shell", runtime_direct, host_pass)
        row(
            "launcher (/bin/sh -> loader -> interpreter)",
            measure(
                lambda: subprocess.run(
                    [str(probe), "--help"], check=True, stdout=subprocess.DEVNULL
                ),
                rounds,
            ),
            host_pass,
        )


if __name__ == "__main__":
    main()
