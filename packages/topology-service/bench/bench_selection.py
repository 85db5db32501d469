"""Benchmark: a scenario reload whose selector lists 100,000 node names, step by step.

Times, in one run, the whole reload path of the service for a 1.1 MB document listing
100,000 node names (and the same as JSON): reading the file, parsing and validating it,
selecting the nodes, building every node's entry and each scenario's revision on top of
the snapshot served before, and publishing it (``ScenarioStore.prepare`` and
``commit``: the status tally, waking the watchers), then the first answer of one node.
A refused document (one bad name among the 100,000) is timed too: a refusal must be as
quick as an acceptance.

Baselines, measured in the same run on the same bytes: a plain ``yaml.load`` with
libyaml's ``CSafeLoader`` and a plain ``json.loads``, which are what parsing costs before
anything this project does. Prints p50/p99 over ``--repeat`` loads, with the load average.
Run: ``python bench/bench_selection.py [--repeat 7]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from nvml_mock_live.scenarios import ScenarioError, read_scenarios_file
from nvml_mock_protocol.topology import TopologyDocument
from nvml_mock_topology.scenarios import ScenarioStore
from nvml_mock_topology.store import TopologyStore

COUNT = 100_000


def names(count: int, bad: int | None = None) -> list[str]:
    return [f"node-{i:05d}" if i != bad else "Node-Bad" for i in range(count)]


def yaml_document(count: int, *, xid: int = 79, bad: int | None = None) -> str:
    scenario = (
        f"{{name: big, selector: {{nodes: [{','.join(names(count, bad))}]}}, "
        f"apply: {{xid: {xid}}}}}"
    )
    return f"version: 1\nscenarios:\n  - {scenario}\n"


def json_document(count: int, *, xid: int = 79) -> str:
    scenario = {"name": "big", "selector": {"nodes": names(count)}, "apply": {"xid": xid}}
    return json.dumps({"version": 1, "scenarios": [scenario]})


def document(count: int) -> str:
    """The YAML document (kept for callers of the earlier bench)."""
    return yaml_document(count)


def quantiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:8.1f} ms   p99 {p99 * 1000:8.1f} ms"


def timed(samples: list[float], step: Callable[[], object]) -> object:
    start = time.perf_counter()
    result = step()
    samples.append(time.perf_counter() - start)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    topology = TopologyStore.from_document(TopologyDocument(version=1))
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for kind, text in (
            ("yaml", yaml_document(COUNT)),
            ("yaml-changed", yaml_document(COUNT, xid=48)),
            ("json", json_document(COUNT)),
            ("yaml-refused", yaml_document(COUNT, bad=COUNT // 2)),
        ):
            files[kind] = Path(tmp) / f"{kind}.yaml"
            files[kind].write_text(text)
        size = files["yaml"].stat().st_size
        print(f"document: {size:,} bytes of YAML, {COUNT:,} names")
        rows: dict[str, list[float]] = {}

        def row(name: str) -> list[float]:
            return rows.setdefault(name, [])

        for _ in range(args.repeat):
            raw = files["yaml"].read_text()
            timed(row("baseline: yaml.load (CSafeLoader)"), lambda: yaml.load(raw, yaml.CSafeLoader))
            raw_json = files["json"].read_text()
            timed(row("baseline: json.loads"), lambda: json.loads(raw_json))
            store = ScenarioStore.start(topology)
            total = time.perf_counter()
            doc = timed(row("yaml: read, parse, validate"), lambda: read_scenarios_file(files["yaml"]))
            prepared = timed(row("yaml: select, entries, revisions"), lambda: store.prepare(doc, "f"))
            timed(row("yaml: publish (tally, wake)"), lambda: store.commit(prepared))  # type: ignore[arg-type]
            row("yaml: whole reload").append(time.perf_counter() - total)
            timed(row("first answer of one node"), lambda: store.snapshot.answer("node-04242"))
            total = time.perf_counter()
            changed = read_scenarios_file(files["yaml-changed"])
            store.commit(store.prepare(changed, "f"))
            row("yaml: reload of a changed scenario").append(time.perf_counter() - total)
            store = ScenarioStore.start(topology)
            total = time.perf_counter()
            doc = read_scenarios_file(files["json"])
            store.commit(store.prepare(doc, "f"))
            row("json: whole reload").append(time.perf_counter() - total)
            start = time.perf_counter()
            try:
                read_scenarios_file(files["yaml-refused"])
            except ScenarioError:
                pass
            else:
                raise SystemExit("the document with a bad name was accepted")
            row("yaml: refusal (one bad name)").append(time.perf_counter() - start)
        for name, samples in rows.items():
            print(f"{name:38} {quantiles(samples)}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
