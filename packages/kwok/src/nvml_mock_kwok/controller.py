"""One process that plays the scenario document on every fake node.

It watches the topology service's scenarios (``/v1/scenarios`` and each scenario's picked
nodes), keeps the run schedule the node agent keeps (start, duration, repeat), and when a run
starts or ends on a fake node makes the changes NVIDIA's components would make
(:mod:`nvml_mock_kwok.faults`) through the Kubernetes API, then reports the run's state for the
node to the service (``applied``, ``cleared``, ``excluded`` for a node whose labels do not
match), as a real node's agent does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote

from nvml_mock_live.scenario_api import NodeScenario
from nvml_mock_live.scenarios import Scenario

from nvml_mock_kwok.errors import KwokError
from nvml_mock_kwok.faults import (
    GpuFault,
    allocatable_with,
    condition_with,
    faults_of,
    pick_gpus,
    run_window,
    slices_with,
)
from nvml_mock_kwok.fleet import FakeNode
from nvml_mock_kwok.identity import Identity
from nvml_mock_kwok.kube import ApiError, Kube
from nvml_mock_kwok.objects import NodeOptions, identity_for, node_object, slice_name, slice_specs
from nvml_mock_kwok.truth import Truth

__all__ = ["Controller", "FleetNode"]

logger = logging.getLogger(__name__)

TICK: Final = 0.1


@dataclass
class FleetNode:
    """A fake node as the controller keeps it."""

    node: FakeNode
    truth: Truth
    identity: Identity
    labels: Mapping[str, str]
    specs: Mapping[str, list[dict[str, Any]]]
    faults: set[GpuFault] = field(default_factory=set)


@dataclass
class _Run:
    revision: int
    run: int
    state: str
    gpus: list[int]
    applied_ms: int | None = None
    cleared_ms: int | None = None
    latency_ms: int | None = None


def _now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Controller:
    """Plays scenarios on the fake nodes of one fleet."""

    def __init__(
        self,
        kube: Kube,
        service: Kube,
        nodes: Iterable[tuple[FakeNode, Truth]],
        options: NodeOptions,
        *,
        interval: float = 1.0,
        workers: int = 32,
    ) -> None:
        self.kube = kube
        self.service = service
        self.options = options
        self.interval = interval
        self.fleet: dict[str, FleetNode] = {}
        for node, truth in nodes:
            obj = node_object(truth, node, options)
            self.fleet[node.name] = FleetNode(
                node,
                truth,
                identity_for(truth, node),
                obj["metadata"]["labels"],
                slice_specs(truth, node),
            )
        self.scenarios: dict[str, tuple[NodeScenario, Scenario, list[str]]] = {}
        self.runs: dict[tuple[str, str], _Run] = {}
        self._pool = ThreadPoolExecutor(max_workers=workers)
        self._stop = threading.Event()
        self._listed_at = 0.0
        self._revisions: dict[str, int] = {}

    def stop(self) -> None:
        """Ask :meth:`run` to return."""
        self._stop.set()

    def refresh(self) -> None:
        """Read the service's scenarios, and the picked nodes of each new version."""
        listing = self.service.request("GET", "/v1/scenarios")
        seen: set[str] = set()
        for summary in listing.get("scenarios") or ():
            name, revision = summary["name"], int(summary["revision"])
            seen.add(name)
            if self._revisions.get(name) == revision and name in self.scenarios:
                continue
            detail = self.service.request(
                "GET", f"/v1/scenarios/{quote(name, safe='')}", ok_missing=True
            )
            if detail is None:
                continue
            entry = NodeScenario.model_validate(
                {
                    "name": name,
                    "revision": detail["revision"],
                    "startMs": detail["startMs"],
                    "scenario": detail["scenario"],
                }
            )
            picked = [n["node"] for n in detail.get("nodes") or () if n["node"] in self.fleet]
            self.scenarios[name] = (entry, entry.parsed(), picked)
            self._revisions[name] = revision
            logger.info("scenario %s revision %d: %d fake node(s)", name, revision, len(picked))
        for gone in set(self.scenarios) - seen:
            del self.scenarios[gone]
            self._revisions.pop(gone, None)

    def _labels_match(self, scenario: Scenario, node: FleetNode) -> bool:
        return all(node.labels.get(k) == v for k, v in scenario.selector.labels.items())

    def step(self, now_ms: int) -> int:
        """Start and end the runs due at ``now_ms``; returns how many nodes changed."""
        changed: dict[str, list[tuple[str, _Run]]] = {}
        live: set[tuple[str, str]] = set()
        for name, (entry, scenario, picked) in self.scenarios.items():
            for node_name in picked:
                key = (name, node_name)
                live.add(key)
                node = self.fleet[node_name]
                prev = self.runs.get(key)
                if not self._labels_match(scenario, node):
                    if prev is None or prev.state != "excluded":
                        run = self.runs[key] = _Run(entry.revision, 0, "excluded", [])
                        changed.setdefault(node_name, []).append((name, run))
                    continue
                window = run_window(entry, scenario, now_ms)
                if window is not None:
                    number, start, _ = window
                    if (
                        prev is None
                        or prev.state != "applied"
                        or (prev.revision, prev.run) != (entry.revision, number)
                    ):
                        gpus = pick_gpus(scenario, node_name, node.identity.gpu_uuids)
                        run = self.runs[key] = _Run(
                            entry.revision,
                            number,
                            "applied",
                            gpus,
                            applied_ms=now_ms,
                            latency_ms=max(0, now_ms - start),
                        )
                        changed.setdefault(node_name, []).append((name, run))
                elif prev is not None and prev.state == "applied":
                    prev.state, prev.cleared_ms = "cleared", now_ms
                    changed.setdefault(node_name, []).append((name, prev))
        for key in set(self.runs) - live:
            run = self.runs.pop(key)
            if run.state == "applied":
                run.state = "cleared"
                changed.setdefault(key[1], [])
        if not changed:
            return 0
        futures = [self._pool.submit(self._write, n, reports) for n, reports in changed.items()]
        for future in futures:
            future.result()
        return len(changed)

    def _faults(self, node_name: str) -> set[GpuFault]:
        faults: set[GpuFault] = set()
        for (name, node), run in self.runs.items():
            if node == node_name and run.state == "applied" and name in self.scenarios:
                faults.update(faults_of(self.scenarios[name][1], run.gpus))
        return faults

    def _write(self, node_name: str, reports: list[tuple[str, _Run]]) -> None:
        node = self.fleet[node_name]
        faults = self._faults(node_name)
        try:
            if faults != node.faults:
                self._publish(node, faults)
                node.faults = faults
            if reports:
                self._report(node, reports)
        except KwokError as exc:
            logger.error("node %s: %s", node_name, exc)

    def _publish(self, node: FleetNode, faults: set[GpuFault]) -> None:
        now = _now_text()
        uuids = node.identity.gpu_uuids
        status = {
            "status": {
                "allocatable": allocatable_with(node.truth, self.options.strategy, faults),
                "conditions": [condition_with(faults, uuids, now)],
            }
        }
        self.kube.patch(
            f"/api/v1/nodes/{node.node.name}", status, kind="strategic", subresource="status"
        )
        for driver, specs in slices_with(node.truth, node.specs, uuids, faults, now).items():
            for index, spec in enumerate(specs):
                name = slice_name(node.node.name, driver, index)
                self.kube.patch(
                    f"/apis/resource.k8s.io/v1/resourceslices/{name}",
                    {"spec": {"devices": spec.get("devices") or []}},
                )

    def _report(self, node: FleetNode, reports: list[tuple[str, _Run]]) -> None:
        uuids = node.identity.gpu_uuids
        entries = []
        for name, run in reports:
            entry: dict[str, Any] = {
                "name": name,
                "revision": run.revision,
                "state": run.state,
                "run": run.run,
                "gpus": [uuids[i] for i in run.gpus],
            }
            for key, value in (
                ("appliedMs", run.applied_ms),
                ("clearedMs", run.cleared_ms),
                ("latencyMs", run.latency_ms),
            ):
                if value is not None:
                    entry[key] = value
            entries.append(entry)
        body = {"revision": max(r.revision for _, r in reports), "scenarios": entries}
        path = f"/v1/nodes/{quote(node.node.name, safe='')}/scenarios/status"
        for _ in range(30):
            try:
                self.service.request("POST", path, body)
                return
            except ApiError as exc:
                if exc.status != 429:
                    raise
                time.sleep(0.5)
        raise KwokError(f"the topology service kept refusing {node.node.name}'s report (429)")

    def run(self) -> None:
        """Refresh and step until :meth:`stop`."""
        while not self._stop.is_set():
            mono = time.monotonic()
            if mono - self._listed_at >= self.interval:
                try:
                    self.refresh()
                except KwokError as exc:
                    logger.warning("topology service: %s", exc)
                self._listed_at = mono
            self.step(time.time_ns() // 1_000_000)
            self._stop.wait(TICK)
        self._pool.shutdown(wait=True)
