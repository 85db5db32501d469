"""Prometheus metrics of one plugin instance, in a registry of its own.

A registry per instance (not the process-global default) keeps two plugins in
one test process, or a plugin beside other libraries, from sharing counters.
The names are the plugin's public monitoring contract and are listed in the
README; label values are closed sets (the skip reasons, the device refusals, the
topology error kinds)
so the series count stays fixed.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from nvml_mock_nri.adjust import DeviceRefusal, SkipReason

PREFIX: Final = "nvml_mock_nri"

TOPOLOGY_ERROR_KINDS: Final = ("connect", "timeout", "http_status", "bad_response")

LATENCY_BUCKETS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    5.0,
)


class CreateContainerSeries:
    """The two series every CreateContainer moves: the injections counter and the latency
    histogram, kept as plain numbers and turned into metrics when scraped.

    prometheus_client's own Counter and Histogram take a lock per change and walk the
    buckets in Python: some 8 µs of a cached CreateContainer's 35 µs, as the runtime sees
    it (the caches are cold by the next container). Only the NRI connection's thread writes
    these (one connection at a time); a scrape reads them whole or one call behind.
    """

    __slots__ = ("_counts", "_created", "_sum", "injections")

    def __init__(self) -> None:
        self.injections = 0
        """Containers that received the overlay (``nvml_mock_nri_injections_total``)."""
        self._counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self._sum = 0.0
        self._created = time.time()

    def observe(self, seconds: float) -> None:
        """Count one CreateContainer that took *seconds*."""
        self._counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self._sum += seconds

    @property
    def calls(self) -> int:
        """CreateContainer calls observed."""
        return sum(self._counts)

    def collect(self) -> Iterator[Metric]:
        """The series in prometheus_client's shapes (the same names and samples as its own
        Counter and Histogram would give)."""
        injections = CounterMetricFamily(
            f"{PREFIX}_injections",
            "Containers that received the overlay.",
            value=self.injections,
            created=self._created,
        )
        counts, total = list(self._counts), self._sum
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*LATENCY_BUCKETS, float("inf")), counts, strict=True):
            running += count
            buckets.append((_bound_text(bound), float(running)))
        latency = HistogramMetricFamily(
            f"{PREFIX}_create_container_seconds",
            "Time the plugin spent answering CreateContainer.",
            buckets=buckets,
            sum_value=total,
        )
        created = GaugeMetricFamily(
            f"{PREFIX}_create_container_seconds_created",
            "Time the plugin spent answering CreateContainer.",
            value=self._created,
        )
        return iter((injections, latency, created))


def _bound_text(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class Metrics:
    """Every series the plugin exports."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.create = CreateContainerSeries()
        """Injections and CreateContainer latency (see :class:`CreateContainerSeries`)."""
        self.registry.register(self.create)
        self.skips = Counter(
            f"{PREFIX}_skips",
            "Containers left untouched, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.device_injections = Counter(
            f"{PREFIX}_device_injections",
            "Opted-in containers that received mock devices, by mode (raw, cdi).",
            ["mode"],
            registry=self.registry,
        )
        self.devices_suppressed = Counter(
            f"{PREFIX}_devices_suppressed",
            "Opted-in containers that got no mock devices because they already had NVIDIA ones.",
            registry=self.registry,
        )
        self.devices_refused = Counter(
            f"{PREFIX}_devices_refused",
            "Opted-in containers that got no device nodes, by reason (namespace_not_allowed, "
            "real_driver).",
            ["reason"],
            registry=self.registry,
        )
        self.imex_channel_injections = Counter(
            f"{PREFIX}_imex_channel_injections",
            "Containers opted in to IMEX channels that received them.",
            registry=self.registry,
        )
        self.imex_channels_refused = Counter(
            f"{PREFIX}_imex_channels_refused",
            "Containers opted in to IMEX channels that got none, by reason "
            "(namespace_not_allowed, real_driver).",
            ["reason"],
            registry=self.registry,
        )
        self.real_driver = Gauge(
            f"{PREFIX}_real_driver_present",
            "1 while a real NVIDIA driver is seen on the node (device nodes and IMEX channels "
            "are refused).",
            registry=self.registry,
        )
        self.errors = Counter(
            f"{PREFIX}_create_container_errors",
            "CreateContainer calls that failed inside the plugin.",
            registry=self.registry,
        )
        self.in_flight = Gauge(
            f"{PREFIX}_create_container_in_flight",
            "CreateContainer calls being answered now.",
            registry=self.registry,
        )
        self.identity_revision = Gauge(
            f"{PREFIX}_identity_revision",
            "Topology revision of the node identity in use (-1 while unknown).",
            registry=self.registry,
        )
        self.identity_known = Gauge(
            f"{PREFIX}_identity_known",
            "1 once the topology service has answered for this node (identity or no clique).",
            registry=self.registry,
        )
        self.fabric_member = Gauge(
            f"{PREFIX}_fabric_member",
            "1 while the node belongs to a ComputeDomain (fabric env is injected).",
            registry=self.registry,
        )
        self.topology_errors = Counter(
            f"{PREFIX}_topology_errors",
            "Failed requests to the topology service, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.registered = Gauge(
            f"{PREFIX}_registered",
            "1 while registered with the container runtime, configured, and the event loop "
            "is not stalled past the wedge threshold.",
            registry=self.registry,
        )
        self.synchronized = Gauge(
            f"{PREFIX}_synchronized",
            "1 once the runtime's Synchronize has been answered on this connection.",
            registry=self.registry,
        )
        self.allocations_recorded = Counter(
            f"{PREFIX}_allocations_recorded",
            "Running containers whose GPU allocation was recorded in the live layer.",
            registry=self.registry,
        )
        self.allocations_removed = Counter(
            f"{PREFIX}_allocations_removed",
            "Allocation records removed when their container stopped or was removed.",
            registry=self.registry,
        )
        self.allocation_errors = Counter(
            f"{PREFIX}_allocation_errors",
            "Life-cycle events whose allocation record could not be written (the live layer "
            "was missing, unusable or full); the container was not affected.",
            registry=self.registry,
        )
        self.allocations_limited = Counter(
            f"{PREFIX}_allocations_limited",
            "Containers recorded with less than they named, or not at all: GPUs they declared "
            "without being given them that another container was given, or a pod past its "
            "record limit.",
            registry=self.registry,
        )
        self.unknown_devices_refused = Counter(
            f"{PREFIX}_unknown_devices_refused",
            "Containers whose creation failed because their own NVIDIA_VISIBLE_DEVICES names a "
            "GPU the node lacks (as the NVIDIA container toolkit fails them).",
            registry=self.registry,
        )
        self.loop_lag = Gauge(
            f"{PREFIX}_event_loop_lag_seconds",
            "Seconds since the event loop last ran its heartbeat.",
            registry=self.registry,
        )
        # Every label value exists from the start, so a series reads 0 instead of missing.
        self._skip_children = {reason: self.skips.labels(reason.value) for reason in SkipReason}
        for kind in TOPOLOGY_ERROR_KINDS:
            self.topology_errors.labels(kind)
        for mode in ("raw", "cdi"):
            self.device_injections.labels(mode)
        for refusal in DeviceRefusal:
            self.devices_refused.labels(refusal.value)
            self.imex_channels_refused.labels(refusal.value)
        self.identity_revision.set(-1)

    def skip(self, reason: SkipReason) -> None:
        """Count one skipped container."""
        self._skip_children[reason].inc()

    def render(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)
