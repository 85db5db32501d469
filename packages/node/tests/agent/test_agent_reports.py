"""How the agent's reports reach a busy service: spread after a change, deferred on 429
as the service's ``Retry-After`` says, and sent again after the service was away."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import nvml_mock_live as live
from test_agent import (
    START,
    T0,
    AgentFactory,
    Clock,
    Service,
    make_agent,
    node,
    scenarios,
    service,
    sync,
    values,
)

__all__ = ["make_agent", "node", "service"]  # fixtures, used by name

HOT = f"{{name: hot, apply: {{set: {{temperature_c: 91}}}}, start: '{START}', duration: 60s}}"


def _state(server: Service, name: str) -> str:
    detail = server.get("/v1/scenarios/hot")
    return next(n["state"] for n in detail["nodes"] if n["node"] == name)


def _throttled(server: Service) -> float:
    import urllib.request

    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    line = next(
        row
        for row in text.splitlines()
        if row.startswith("nvml_mock_topology_scenario_reports_throttled_total")
    )
    return float(line.split()[1])


def test_a_report_over_the_budget_waits_for_retry_after(
    node: dict[str, Path], make_agent: AgentFactory
) -> None:
    with Service(scenarios(HOT), node["token"], report_rate=1) as server:
        clock = Clock(T0 + 1000)
        first = make_agent(server.url, clock)
        second = make_agent(server.url, clock, name="node-2")
        sync(first)
        assert _state(server, "node-1") == "applied"
        sync(second)  # the budget's one token is spent: 429
        assert _state(server, "node-2") == "pending" and _throttled(server) == 1
        before = time.monotonic()
        second.report()  # asked again at once: the agent waits as it was told
        assert _throttled(server) == 1
        assert second._report_after >= before + 0.9  # Retry-After >= 1 s, plus jitter


def test_a_change_is_reported_after_a_random_delay_under_the_spread(
    service: Service, node: dict[str, Path], make_agent: AgentFactory
) -> None:
    agent = make_agent(service.url, Clock(T0 + 1000), report_spread=3600)
    sync(agent)
    assert agent.outcomes["hot"].state == "applied"
    assert _state(service, "node-1") == "pending"  # not yet told
    assert agent._report_due is not None and agent._report_due > time.monotonic()


def test_the_status_is_sent_again_to_a_service_that_came_back(
    node: dict[str, Path], make_agent: AgentFactory
) -> None:
    clock = Clock(T0 + 1000)
    first = Service(scenarios(HOT), node["token"])
    with first:
        port = int(first.url.rsplit(":", 1)[1])
        agent = make_agent(first.url, clock)
        sync(agent)
        assert _state(first, "node-1") == "applied"
    with contextlib.suppress(OSError):
        agent.watch_once(0)
    assert not agent.connected
    with Service(scenarios(HOT), node["token"], port=port) as second:
        # The new process knows no status; the agent tells it again, though nothing
        # changed on the node.
        assert _state(second, "node-1") == "pending"
        sync(agent)
        assert _state(second, "node-1") == "applied"


def test_a_service_restart_does_not_fire_a_start_now_scenario_again(
    node: dict[str, Path], make_agent: AgentFactory
) -> None:
    now_hot = "{name: hot, apply: {set: {temperature_c: 91}}, start: now, duration: 60s}"
    first = Service(scenarios(now_hot), node["token"])
    with first:
        port = int(first.url.rsplit(":", 1)[1])
        clock = Clock(time.time_ns() // 1_000_000 + 1000)
        agent = make_agent(first.url, clock)
        sync(agent)
        assert values(node, 0) == {"temperature_c": 91}
        assert agent.served is not None
        started = agent.served.scenarios[0].start_ms
        clock.ms = started + 60_000
        sync(agent)
        assert values(node, 0) == {} and agent.outcomes["hot"].state == "cleared"
    with contextlib.suppress(OSError):
        agent.watch_once(0)
    time.sleep(0.01)  # the new process resolves "now" later than the first did
    with Service(scenarios(now_hot), node["token"], port=port) as second:
        answer = second.get("/v1/nodes/node-1/scenarios")["scenarios"][0]
        assert answer["startMs"] > started
        sync(agent)
        # Same definition, same revision: the run that ended stays ended, on its own start.
        assert values(node, 0) == {} and agent.outcomes["hot"].state == "cleared"
        assert agent.served is not None and agent.served.scenarios[0].start_ms == started


def test_gpus_picked_by_uuid_and_an_unknown_uuid_fails_with_it_named(
    node: dict[str, Path], make_agent: AgentFactory
) -> None:
    with live.LiveLayer.open(node["live"], writable=False) as layer:
        second = layer.board[1].uuid
    text = scenarios(
        f"{{name: by-uuid, gpus: ['{second}'], apply: {{set: {{temperature_c: 88}}}}}}",
        "{name: no-such, gpus: ['GPU-00000000-dead-beef-0000-000000000000'], apply: {xid: 79}}",
    )
    with Service(text, node["token"]) as running:
        agent = make_agent(running.url, Clock(time.time_ns() // 1_000_000 + 1000))
        sync(agent)
        assert values(node, 0) == {} and values(node, 1) == {"temperature_c": 88}
        applied = running.get("/v1/scenarios/by-uuid")["nodes"][0]
        assert applied["state"] == "applied" and applied["gpus"] == [second]
        failed = running.get("/v1/scenarios/no-such")["nodes"][0]
        assert failed["state"] == "failed"
        assert "GPU-00000000-dead-beef-0000-000000000000" in failed["reason"]
