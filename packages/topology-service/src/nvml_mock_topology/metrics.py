"""Prometheus metrics of the topology service.

Request counts and latencies are ordinary collectors updated per request (with
label children resolved once, so the hot path pays a dictionary lookup). The
state of the topology (revision, nodes, watchers, reloads and their failures)
is read from the store and the file follower at scrape time by a custom
collector, so it can never disagree with what is being served. Each app has its
own registry, so several apps (tests) can live in one process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from nvml_mock_topology.source import TopologyFile
from nvml_mock_topology.store import TopologyStore

__all__ = ["ENDPOINTS", "Metrics"]

PREFIX: Final = "nvml_mock_topology"
ENDPOINTS: Final = (
    "identity",
    "identity_watch",
    "scenarios",
    "scenarios_watch",
    "scenario_report",
    "scenario_status",
    "topology",
    "healthz",
    "readyz",
    "metrics",
    "docs",
    "other",
)
"""Values of the ``endpoint`` label (route templates, never raw paths)."""
_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 60)


class _StateCollector(Collector):
    def __init__(self, store: TopologyStore, follower: TopologyFile | None) -> None:
        self.store = store
        self.follower = follower

    def collect(self) -> Iterator[Metric]:
        snapshot = self.store.snapshot
        status = self.store.status
        yield GaugeMetricFamily(
            f"{PREFIX}_revision", "Revision of the topology being served", value=snapshot.revision
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_nodes",
            "Nodes placed in a clique by the served topology",
            value=snapshot.node_count,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_domains",
            "ComputeDomains in the served topology",
            value=len(snapshot.document.domains),
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_watchers", "Watch requests waiting for a change", value=self.store.watching
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_reload_failing",
            "1 while the newest version of the topology file is refused (the last good one serves)",
            value=0 if status.ok else 1,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_last_reload_attempt_timestamp_seconds",
            "When the topology file was last loaded or refused",
            value=status.at,
        )
        reloads = self.follower.reloads if self.follower else 0
        failures = self.follower.failures if self.follower else 0
        yield CounterMetricFamily(
            f"{PREFIX}_reloads", "Reloads that published a changed topology", value=reloads
        )
        yield CounterMetricFamily(
            f"{PREFIX}_reload_failures",
            "Versions of the topology file that were refused (invalid, unreadable or missing)",
            value=failures,
        )


class Metrics:
    """The metrics of one app, in a registry of their own."""

    def __init__(self, store: TopologyStore, follower: TopologyFile | None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            f"{PREFIX}_requests",
            "HTTP requests answered, by endpoint and status code",
            ["endpoint", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            f"{PREFIX}_request_duration_seconds",
            "Time to answer an HTTP request, by endpoint (watches include their wait)",
            ["endpoint"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_StateCollector(store, follower))
        self._latency_children = {e: self.latency.labels(e) for e in ENDPOINTS}
        self._request_children: dict[tuple[str, int], Counter] = {}

    def observe(self, endpoint: str, code: int, seconds: float) -> None:
        """Count one answered request and its latency."""
        child = self._request_children.get((endpoint, code))
        if child is None:
            child = self.requests.labels(endpoint, str(code))
            self._request_children[(endpoint, code)] = child
        child.inc()
        self._latency_children[endpoint].observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
