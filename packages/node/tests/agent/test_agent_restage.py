"""The agent's record of what it applied survives re-staging (the staging pod re-stages
on every restart) on a real staged overlay: no run fires twice, none is forgotten."""

from __future__ import annotations

import json
from pathlib import Path

import nvml_mock_live as live
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.settings import AgentSettings
from nvml_mock_node.agent import Agent
from nvml_mock_node.stage import StageOptions, stage
from test_agent import TOKEN, Clock, Service, scenarios, soon, sync

__all__: list[str] = []


def _values(live_file: Path, gpu: int) -> dict[str, int]:
    with live.LiveLayer.open(live_file, writable=False) as layer:
        return layer.values(gpu)


def test_three_restages_during_one_run_and_a_clear_while_the_service_is_down(
    tmp_path: Path, library: Path
) -> None:
    overlay = tmp_path / "overlay"
    config = resolve_config(profile="h100", count=2, node="node-1")

    def restage() -> None:
        stage(overlay, config, StageOptions(runtime=False, library=library, devices=False))

    restage()
    token = tmp_path / "token"
    token.write_text(TOKEN)
    live_file = overlay / "config" / live.LIVE_FILE_NAME  # what the chart's agent is given
    text = scenarios(
        "{name: hot-now, apply: {set: {temperature_c: 88}, xid: 43}, start: now, duration: 10m}"
    )
    clock = Clock(soon())

    def agent(url: str) -> Agent:
        settings = AgentSettings(
            live_file=live_file,
            topology_url=url,
            node="node-1",
            token_file=token,
            probe_addr=None,
            report_spread=0,
        )
        return Agent(settings, clock=clock)

    with Service(text, token) as service:
        first = agent(service.url)
        sync(first)
        assert first.metrics.applies == 1
        assert _values(live_file, 0) == {"temperature_c": 88}
        with live.LiveLayer.open(live_file, writable=False) as layer:
            events = len(layer.events())
        for _ in range(3):  # the staging pod restarts: a re-stage, then a new agent
            restage()
            clock.ms += 60_000
            again = agent(service.url)
            sync(again)
            assert again.metrics.applies == 0, "the run fired again after a re-stage"
            assert again.outcomes["hot-now"].state == "applied"
            with live.LiveLayer.open(live_file, writable=False) as layer:
                assert len(layer.events()) == events, "the Xid was sent again"
        record = overlay / ".nvml-mock" / "scenarios.applied.json"
        assert [r["name"] for r in json.loads(record.read_text())["applied"]] == ["hot-now"]
    # The run ends while the service is down, and the node is re-staged meanwhile.
    restage()
    clock.ms += 10 * 60_000
    down = agent("http://127.0.0.1:9")
    down.step()
    assert down.metrics.clears == 1
    assert _values(live_file, 0) == {} and _values(live_file, 1) == {}
