"""Benchmark: a scenario reload whose selector lists 100,000 node names, step by step.

Times, in one run, the whole reload path of the service for a 1.1 MB document listing
100,000 node names: reading the file, parsing and validating it, selecting the nodes,
building every node's entry and each scenario's revision on top of the snapshot served
before, and publishing it (``ScenarioStore.prepare`` and ``commit``: the status tally,
waking the watchers), then the first answer of one node. The same document is timed as
flow-style YAML (``nodes: [a, b, ...]``), as block-style YAML (one ``- name`` per line,
what Helm's ``toYaml`` renders from ``scenarios.items``) and as JSON, and a refusal (one
bad name among the 100,000) is timed too: a refusal must be as quick as an acceptance.

Baselines, measured in the same run on the same bytes: a plain ``yaml.load`` with
libyaml's ``CSafeLoader`` and a plain ``json.loads``, what parsing costs before anything
this project does. Prints p50/p99 of the wall time and the p50 of the CPU time (which
tells the cost apart from other processes' load) over ``--repeat`` loads, with the load
average. Run: ``python bench/bench_selection.py [--repeat 7]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import yaml
from nvml_mock_live.scenarios import ScenarioError, read_scenarios_file
from nvml_mock_protocol.topology import TopologyDocument
from nvml_mock_topology.scenarios import ScenarioStore
from nvml_mock_topology.store import TopologyStore

COUNT = 100_000


def names(count: int, bad: int | None = None) -> list[str]:
    return [f"node-{i:05d}" if i != bad else "Node-Bad" for i in range(count)]


def flow_document(count: int, *, xid: int = 79, bad: int | None = None) -> str:
    scenario = (
        f"{{name: big, selector: {{nodes: [{','.join(names(count, bad))}]}}, "
        f"apply: {{xid: {xid}}}}}"
    )
    return f"version: 1\nscenarios:\n  - {scenario}\n"


def block_document(count: int) -> str:
    listed = "".join(f"    - {name}\n" for name in names(count))
    return (
        "version: 1\nscenarios:\n- name: big\n  selector:\n    nodes:\n"
        f"{listed}  apply:\n    xid: 79\n"
    )


def json_document(count: int) -> str:
    scenario = {"name": "big", "selector": {"nodes": names(count)}, "apply": {"xid": 79}}
    return json.dumps({"version": 1, "scenarios": [scenario]})


def document(count: int) -> str:
    """The flow-style YAML document (kept for callers of the earlier bench)."""
    return flow_document(count)


class Row:
    """Wall and CPU time samples of one step."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self._wall = self._cpu = 0.0

    def start(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def stop(self) -> None:
        self.wall.append(time.perf_counter() - self._wall)
        self.cpu.append(time.process_time() - self._cpu)

    def line(self) -> str:
        ordered = sorted(self.wall)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        return (
            f"wall p50 {statistics.median(ordered) * 1000:7.1f} ms  p99 {p99 * 1000:7.1f} ms"
            f"   cpu p50 {statistics.median(self.cpu) * 1000:7.1f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    topology = TopologyStore.from_document(TopologyDocument(version=1))
    rows: dict[str, Row] = {}

    def row(name: str) -> Row:
        return rows.setdefault(name, Row())

    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for kind, text in (
            ("flow", flow_document(COUNT)),
            ("flow-changed", flow_document(COUNT, xid=48)),
            ("block", block_document(COUNT)),
            ("json", json_document(COUNT)),
            ("refused", flow_document(COUNT, bad=COUNT // 2)),
        ):
            files[kind] = Path(tmp) / f"{kind}.yaml"
            files[kind].write_text(text)
        print(f"document: {files['flow'].stat().st_size:,} bytes of YAML, {COUNT:,} names")
        for _ in range(args.repeat):
            for kind, loader in (
                ("flow", "yaml.load"),
                ("block", "yaml.load"),
                ("json", "json.loads"),
            ):
                raw = files[kind].read_text()
                step = row(f"baseline: {loader} of {kind}")
                step.start()
                if loader == "json.loads":
                    json.loads(raw)
                else:
                    yaml.load(raw, Loader=yaml.CSafeLoader)
                step.stop()
            for kind in ("flow", "block", "json"):
                store = ScenarioStore.start(topology)
                whole = row(f"{kind}: whole reload")
                whole.start()
                step = row(f"{kind}: read, parse, validate")
                step.start()
                document_read = read_scenarios_file(files[kind])
                step.stop()
                step = row(f"{kind}: select, entries, revisions")
                step.start()
                prepared = store.prepare(document_read, "f")
                step.stop()
                step = row(f"{kind}: publish (tally, wake)")
                step.start()
                store.commit(prepared)
                step.stop()
                whole.stop()
            step = row("first answer of one node")
            step.start()
            store.snapshot.answer("node-04242")
            step.stop()
            step = row("flow: reload of a changed scenario")
            step.start()
            store.commit(store.prepare(read_scenarios_file(files["flow-changed"]), "f"))
            step.stop()
            step = row("flow: refusal (one bad name)")
            step.start()
            try:
                read_scenarios_file(files["refused"])
            except ScenarioError:
                pass
            else:
                raise SystemExit("the document with a bad name was accepted")
            step.stop()
    for name, samples in rows.items():
        print(f"{name:36} {samples.line()}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
