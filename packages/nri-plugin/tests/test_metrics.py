"""The CreateContainer series kept as plain numbers read as prometheus_client's own Counter
and Histogram would: the same names, samples and bucket rule (a value on a bound counts in
that bound's bucket), parsed back from the rendered text by prometheus_client's parser."""

from __future__ import annotations

from nvml_mock_nri.metrics import LATENCY_BUCKETS, Metrics
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families


def samples(text: bytes, family: str) -> dict[tuple[str, str], float]:
    for parsed in text_string_to_metric_families(text.decode()):
        if parsed.name == family:
            return {(s.name, s.labels.get("le", "")): s.value for s in parsed.samples}
    raise AssertionError(f"{family} not rendered")


def test_the_latency_histogram_matches_prometheus_clients_own() -> None:
    observed = [0.00003, 0.0001, 0.0001000001, 0.004, 0.7, 5.0, 9.0]
    metrics = Metrics()
    registry = CollectorRegistry()
    reference = Histogram(
        "nvml_mock_nri_create_container_seconds",
        "Time the plugin spent answering CreateContainer.",
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )
    for seconds in observed:
        metrics.create.observe(seconds)
        reference.observe(seconds)
    ours_text, theirs_text = metrics.render(), generate_latest(registry)
    ours = samples(ours_text, "nvml_mock_nri_create_container_seconds")
    theirs = samples(theirs_text, "nvml_mock_nri_create_container_seconds")
    assert ours == theirs
    for text in (ours_text, theirs_text):
        assert b"\nnvml_mock_nri_create_container_seconds_created " in text
    assert ours[("nvml_mock_nri_create_container_seconds_bucket", "0.0001")] == 2
    assert metrics.create.calls == len(observed)


def test_injections_render_as_a_counter() -> None:
    metrics = Metrics()
    metrics.create.injections += 3
    rendered = samples(metrics.render(), "nvml_mock_nri_injections")
    assert rendered[("nvml_mock_nri_injections_total", "")] == 3
