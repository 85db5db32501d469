"""Benchmark: a scenario whose selector lists many node names, read and served.

Times, in one run, each step of a scenario reload for a 1.1 MB document listing 100,000
node names (parse and validate, select, build every node's answer) against a baseline
of the same run: selection the old way (every pattern tried on every known node with
``fnmatch``) for 4,000 names, the size at which it took 1.8 s. Prints p50/p99 over
``--repeat`` runs. Run: ``python bench/bench_selection.py [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import statistics
import time

from nvml_mock_live.scenarios import parse_scenarios
from nvml_mock_protocol.topology import TopologyDocument
from nvml_mock_topology.scenarios import build_scenario_snapshot


def document(count: int) -> str:
    names = ",".join(f"node-{i:05d}" for i in range(count))
    scenario = f"{{name: big, selector: {{nodes: [{names}]}}, apply: {{xid: 79}}}}"
    return f"version: 1\nscenarios:\n  - {scenario}\n"


def old_select(patterns: tuple[str, ...]) -> int:
    known = set(patterns)
    return sum(1 for n in known if any(fnmatch.fnmatchcase(n, p) for p in patterns))


def quantiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:8.1f} ms   p99 {p99 * 1000:8.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"load: {os.getloadavg()}")
    text = document(100_000)
    print(f"document: {len(text):,} bytes, 100,000 names")
    topology = TopologyDocument(version=1)
    steps: dict[str, list[float]] = {"parse": [], "select": [], "answers": [], "total": []}
    baseline: list[float] = []
    small = parse_scenarios(document(4_000)).scenarios[0].selector.nodes
    for _ in range(args.repeat):
        start = time.perf_counter()
        doc = parse_scenarios(text)
        parsed = time.perf_counter()
        doc.select(topology)
        selected = time.perf_counter()
        build_scenario_snapshot(doc, topology, 1, None, source=None)
        built = time.perf_counter()
        steps["parse"].append(parsed - start)
        steps["select"].append(selected - parsed)
        steps["answers"].append(built - selected)  # selects again, then every answer
        steps["total"].append(built - start - (selected - parsed))
        start = time.perf_counter()
        old_select(small)
        baseline.append(time.perf_counter() - start)
    for step, samples in steps.items():
        print(f"100,000 names {step:8}  {quantiles(samples)}")
    print(f"baseline: old selection of 4,000 names  {quantiles(baseline)}")


if __name__ == "__main__":
    main()
