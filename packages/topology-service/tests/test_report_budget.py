"""The report budget: past it, agents' reports are refused cheaply (429 + Retry-After)
and booked later slots, and the status counts stay right while reports stream in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from nvml_mock_topology.report_budget import RETRY_AFTER_MAX_SECONDS, ReportBudget
from test_scenarios import files, report, start

__all__ = ["files"]  # the fixture, used by name


class Clock:
    """A clock the test moves by hand (the budget's only input besides the calls)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_takes_its_rate_and_books_the_rest_later() -> None:
    clock = Clock()
    budget = ReportBudget(10, clock)
    assert [budget.take() for _ in range(10)] == [0] * 10  # one second's burst
    waits = [budget.take() for _ in range(30)]
    # Refused reports are booked 1/10 s apart: 10 per second of Retry-After.
    assert waits == [1] * 10 + [2] * 10 + [3] * 10
    assert budget.refused == 30
    clock.now += 0.5
    assert [budget.take() for _ in range(5)] == [0] * 5  # refilled at the rate
    assert budget.take() == 3  # after the slots already booked


def test_booking_starts_over_past_the_longest_retry_after() -> None:
    clock = Clock()
    budget = ReportBudget(1, clock)
    budget.take()
    waits = [budget.take() for _ in range(RETRY_AFTER_MAX_SECONDS + 5)]
    assert max(waits) <= RETRY_AFTER_MAX_SECONDS
    assert waits[-1] < RETRY_AFTER_MAX_SECONDS


def test_no_budget_takes_everything() -> None:
    budget = ReportBudget(0)
    assert all(budget.take() == 0 for _ in range(10_000))


def _body(revision: int, node_state: str = "applied") -> dict[str, Any]:
    return {
        "revision": 1,
        "scenarios": [{"name": "hot-clique-1", "revision": revision, "state": node_state}],
    }


def test_reports_past_the_budget_are_answered_429_with_retry_after(
    files: dict[str, Path],
) -> None:
    with start(files, report_rate=2) as server:
        revision = httpx.get(f"{server.url}/v1/scenarios/hot-clique-1").json()["revision"]
        # The budget refills as time passes (2 a second), so a slow machine may see a third
        # taken: what is asserted is that the burst is taken, the rest refused, and counted.
        answers = [report(server, "worker-3", _body(revision)) for _ in range(20)]
        codes = [a.status_code for a in answers]
        assert codes[:2] == [200, 200] and 429 in codes[2:]
        busy = next(a for a in answers if a.status_code == 429)
        assert int(busy.headers["retry-after"]) >= 1
        assert "report budget" in busy.json()["detail"]
        # A refused report is not taken, and the refusals are counted.
        metrics = httpx.get(f"{server.url}/metrics").text
        assert "nvml_mock_topology_scenario_reports_throttled_total" in metrics
        throttled = next(
            line
            for line in metrics.splitlines()
            if line.startswith("nvml_mock_topology_scenario_reports_throttled_total")
        )
        assert float(throttled.split()[1]) == codes.count(429)
        # Counters are named as the topology's own: "_total" on the wire.
        taken = codes.count(200)
        assert f"nvml_mock_topology_scenario_reports_total {taken:.1f}" in metrics
        assert "nvml_mock_topology_scenario_reload_failures_total 0.0" in metrics
        assert "nvml_mock_topology_scenario_reloads_total" in metrics
        # The token is still checked first: a stranger learns nothing about the budget.
        assert report(server, "worker-3", _body(revision), token="guess").status_code == 403


def test_status_counts_follow_reports_and_document_changes(
    files: dict[str, Path],
) -> None:
    with start(files) as server:
        url = f"{server.url}/v1/scenarios/hot-clique-1"
        revision = httpx.get(url).json()["revision"]
        report(server, "worker-3", _body(revision))
        report(server, "worker-3", _body(revision, "cleared"))  # replaces, not adds
        report(server, "worker-4", _body(revision, "failed"))
        report(server, "worker-9", _body(revision))  # not picked: shown, not pending
        states = httpx.get(url).json()["states"]
        assert states == {"pending": 0, "applied": 1, "cleared": 1, "failed": 1, "excluded": 0}
        metrics = httpx.get(f"{server.url}/metrics").text
        assert "nvml_mock_topology_scenario_nodes_applied 1.0" in metrics
        assert "nvml_mock_topology_scenario_nodes_failed 1.0" in metrics
        # A changed definition is a new revision: the old reports no longer count.
        text = files["scenarios"].read_text().replace("temperature_c: 91", "temperature_c: 92")
        scratch = files["scenarios"].with_suffix(".tmp")
        scratch.write_text(text)
        scratch.replace(files["scenarios"])
        assert (
            httpx.get(
                f"{server.url}/v1/nodes/worker-3/scenarios",
                params={"revision": revision, "wait": 5},
            ).status_code
            == 200
        )
        detail = httpx.get(url).json()
        assert detail["revision"] != revision
        assert detail["states"]["pending"] == 2 and detail["states"]["applied"] == 0
        assert (
            "nvml_mock_topology_scenario_nodes_failed 0.0"
            in httpx.get(f"{server.url}/metrics").text
        )
