"""The node agent against a real topology service (uvicorn) and a real live layer.

The agent runs on a clock the tests set, so "on time" is checked at the exact
millisecond a run starts and ends, without sleeping through durations.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from conftest import StateWriter
from nvml_mock_engine import faults
from nvml_mock_engine.settings import AgentSettings
from nvml_mock_live.scenarios import parse_scenarios
from nvml_mock_node.agent import Agent, serve_probes
from nvml_mock_protocol.topology import parse_topology
from nvml_mock_topology.api import create_app
from nvml_mock_topology.scenarios import ScenarioStore, WriteAccess
from nvml_mock_topology.store import TopologyStore
from nvml_mock_topology.testing import ThreadedServer

T0 = 1_796_133_600_000  # 2026-12-01T14:00:00Z, in ms
START = "2026-12-01T14:00:00Z"
TOKEN = "agent-token"
TOPOLOGY = parse_topology(
    "version: 1\ndomains:\n  - name: demo\n    uuid: 00000000-0000-0000-0000-0000000000ab\n"
    "    cliques:\n      - {id: 0, nodes: [node-1, node-2]}\n"
)


class Service(ThreadedServer):
    """A real topology service with a scenario store, on a free loopback port."""

    def __init__(
        self, scenarios: str, token_file: Path, *, report_rate: float = 0, port: int = 0
    ) -> None:
        self.topology = TopologyStore.from_document(TOPOLOGY)
        self.scenarios = ScenarioStore.start(self.topology, parse_scenarios(scenarios))
        access = WriteAccess(token_file)
        access.load()
        app = create_app(
            self.topology, scenarios=self.scenarios, write_access=access, report_rate=report_rate
        )
        super().__init__(app, port=port)

    def __enter__(self) -> Service:
        super().__enter__()
        return self

    def replace(self, scenarios: str) -> None:
        self.call(self.scenarios.replace, parse_scenarios(scenarios))

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.load(response)


def scenarios(*entries: str) -> str:
    return "version: 1\nscenarios:\n" + "".join(f"  - {e}\n" for e in entries)


def soon() -> int:
    """A moment just after now: ``start: now`` is resolved by the service on the real clock."""
    return time.time_ns() // 1_000_000 + 1000


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


@pytest.fixture
def node(write_state: StateWriter, tmp_path: Path) -> dict[str, Path]:
    state = write_state()
    layer = live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))
    token = tmp_path / "token"
    token.write_text(TOKEN)
    return {"state": state, "live": layer, "token": token}


AgentFactory = Callable[..., Agent]


@pytest.fixture
def make_agent(node: dict[str, Path]) -> AgentFactory:
    def make(url: str, clock: Clock, **extra: Any) -> Agent:
        settings = AgentSettings(
            live_file=node["live"],
            topology_url=url,
            node=extra.pop("name", "node-1"),
            token_file=node["token"],
            probe_addr=None,
            report_spread=extra.pop("report_spread", 0),
            **extra,
        )
        return Agent(settings, clock=clock)

    return make


def values(node: dict[str, Path], gpu: int) -> dict[str, int]:
    with live.LiveLayer.open(node["live"], writable=False) as layer:
        return layer.values(gpu)


def sync(agent: Agent) -> None:
    """One fetch, one step, one report: what the agent's loop does on a change."""
    agent.watch_once(0)
    agent.step()
    agent.report()


@pytest.fixture
def service(node: dict[str, Path]) -> Iterator[Service]:
    with Service(
        scenarios(
            f"{{name: hot, apply: {{set: {{temperature_c: 91}}}}, start: '{START}', duration: 60s}}"
        ),
        node["token"],
    ) as running:
        yield running


def test_applies_at_the_start_and_clears_at_the_end(
    service: Service, node: dict[str, Path], make_agent: AgentFactory
) -> None:
    clock = Clock(T0 - 1)
    agent = make_agent(service.url, clock)
    sync(agent)
    assert values(node, 0) == {} and agent.outcomes["hot"].state == "pending"
    clock.ms = T0
    sync(agent)
    assert values(node, 0) == {"temperature_c": 91} and values(node, 1) == {"temperature_c": 91}
    detail = service.get("/v1/scenarios/hot")
    assert [(n["node"], n["state"]) for n in detail["nodes"]] == [
        ("node-1", "applied"),
        ("node-2", "pending"),
    ]
    assert len(detail["nodes"][0]["gpus"]) == 2
    clock.ms = T0 + 59_999
    sync(agent)
    assert values(node, 0) == {"temperature_c": 91}
    clock.ms = T0 + 60_000
    sync(agent)
    assert values(node, 0) == {} and values(node, 1) == {}
    assert service.get("/v1/scenarios/hot")["states"]["cleared"] == 1


def test_a_restart_clears_what_ended_meanwhile_even_with_the_service_down(
    service: Service, node: dict[str, Path], make_agent: AgentFactory
) -> None:
    clock = Clock(T0 + 1000)
    sync(make_agent(service.url, clock))
    assert values(node, 1) == {"temperature_c": 91}
    clock.ms = T0 + 120_000  # the agent was down past the run's end
    restarted = make_agent("http://127.0.0.1:9", clock)  # nothing listens there
    with pytest.raises(OSError):
        restarted.watch_once(0)
    restarted.step()
    assert values(node, 0) == {} and values(node, 1) == {}
    status, body = restarted.readiness()
    assert status == 503 and body["status"] == "service-unreachable"
    assert "keeping the last scenarios (revision" in body["detail"]


def test_with_the_service_down_the_last_scenarios_keep_their_schedule(
    service: Service, node: dict[str, Path], make_agent: AgentFactory
) -> None:
    clock = Clock(T0 - 5000)
    agent = make_agent(service.url, clock)
    sync(agent)
    assert agent.readiness()[0] == 200
    service.__exit__()
    with pytest.raises(OSError):
        agent.watch_once(0)
    assert agent.readiness()[0] == 503
    clock.ms = T0
    agent.step()
    assert values(node, 0) == {"temperature_c": 91}
    clock.ms = T0 + 60_000
    agent.step()
    assert values(node, 0) == {}


def test_a_removed_scenario_is_cleared_at_once(
    service: Service, node: dict[str, Path], make_agent: AgentFactory
) -> None:
    clock = Clock(T0)
    agent = make_agent(service.url, clock)
    sync(agent)
    assert values(node, 0) == {"temperature_c": 91}
    service.replace(scenarios("{name: other, selector: {nodes: [node-2]}, apply: {xid: 13}}"))
    sync(agent)
    assert values(node, 0) == {} and "hot" not in agent.outcomes


def test_a_refused_value_fails_with_the_reason_and_writes_nothing(
    node: dict[str, Path], make_agent: AgentFactory
) -> None:
    # what only the node can judge: the service validated names and declared bounds already
    text = scenarios(
        "{name: too-many, gpus: [7], apply: {xid: 48}}",
        "{name: too-full, apply: {set: {memory_used_bytes: 1000000000000000}, xid: 79}}",
    )
    with Service(text, node["token"]) as running:
        agent = make_agent(running.url, Clock(soon()))
        sync(agent)
        many = running.get("/v1/scenarios/too-many")["nodes"][0]
        assert many["state"] == "failed" and "is not a GPU of this node" in many["reason"]
        full = running.get("/v1/scenarios/too-full")["nodes"][0]
        assert full["state"] == "failed" and "the board's room" in full["reason"]
        assert values(node, 0) == {}
        with live.LiveLayer.open(node["live"], writable=False) as layer:
            assert layer.events() == []  # the Xid of a refused scenario is not sent either


def test_faults_xids_patterns_and_gpu_picks_go_through_the_engines_recipes(
    node: dict[str, Path], make_agent: AgentFactory
) -> None:
    text = scenarios(
        "{name: off-bus, gpus: {count: 1}, selector: {seed: 4}, apply: {fault: fallen-off-bus}}",
        "{name: busy, gpus: [1], apply: {util: steady 90}}",
        "{name: pool-b, selector: {labels: {pool: b}}, apply: {xid: 48}}",
    )
    with Service(text, node["token"]) as running:
        agent = make_agent(running.url, Clock(soon()), node_labels={"pool": "a"})
        sync(agent)
        lost = [g for g in (0, 1) if values(node, g).get("gpu_lost") == 1]
        assert len(lost) == 1
        again = make_agent(running.url, Clock(soon()), name="node-1")
        assert again.applied["off-bus"].uuids == agent.applied["off-bus"].uuids  # same seed
        assert values(node, 1)["util_pattern_level"] == 90
        with live.LiveLayer.open(node["live"], writable=False) as layer:
            xids = [(e.gpu, e.data) for e in layer.events() if e.event_type == faults.EVENT_XID]
        assert xids == [(lost[0], 79)]  # not 48: pool-b is for other labels
        assert running.get("/v1/scenarios/pool-b")["nodes"][0]["state"] == "excluded"


def test_overlapping_scenarios_end_cleanly(node: dict[str, Path], make_agent: AgentFactory) -> None:
    text = scenarios(
        f"{{name: long, apply: {{set: {{temperature_c: 80}}}}, start: '{START}', duration: 10m}}",
        f"{{name: short, apply: {{set: {{temperature_c: 95, power_usage_mw: 500000}}}}, "
        f"start: '{START}', duration: 1m}}",
    )
    with Service(text, node["token"]) as running:
        clock = Clock(T0)
        agent = make_agent(running.url, clock)
        sync(agent)
        assert values(node, 0)["power_usage_mw"] == 500000
        clock.ms = T0 + 60_000
        sync(agent)
        assert values(node, 0) == {"temperature_c": 80}  # the long one's value is back
        clock.ms = T0 + 600_000
        sync(agent)
        assert values(node, 0) == {}


def test_repeats_run_again(node: dict[str, Path], make_agent: AgentFactory) -> None:
    text = scenarios(
        f"{{name: blink, apply: {{set: {{gpu_lost: true}}}}, start: '{START}', duration: 10s, "
        "repeat: {every: 1m, times: 2}}"
    )
    with Service(text, node["token"]) as running:
        clock = Clock(T0)
        agent = make_agent(running.url, clock)
        seen = []
        for offset in (0, 10_000, 60_000, 70_000, 120_000):
            clock.ms = T0 + offset
            sync(agent)
            seen.append(values(node, 0).get("gpu_lost", 0))
        assert seen == [1, 0, 1, 0, 0]
        assert running.get("/v1/scenarios/blink")["nodes"][0]["run"] == 1


def test_probes_tell_the_truth(service: Service, make_agent: AgentFactory) -> None:
    agent = make_agent(service.url, Clock(T0))
    server = serve_probes(agent, ("127.0.0.1", 0))
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(base + "/readyz", timeout=5)
        assert caught.value.code == 503  # nothing from the service yet
        caught.value.close()
        sync(agent)
        with urllib.request.urlopen(base + "/readyz", timeout=5) as response:
            assert json.load(response)["applied"] == ["hot"]
        with urllib.request.urlopen(base + "/metrics", timeout=5) as response:
            text = response.read().decode()
        assert "nvml_mock_agent_scenarios_active 1" in text
        assert "nvml_mock_agent_apply_latency_seconds_count 1" in text
    finally:
        server.shutdown()
        server.server_close()


def test_the_agent_command_applies_scenarios(node: dict[str, Path], tmp_path: Path) -> None:
    import subprocess
    import sys

    text = scenarios("{name: now-hot, apply: {set: {temperature_c: 88}}, duration: 1h}")
    with Service(text, node["token"]) as running:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nvml_mock_engine",
                "agent",
                "--topology-url",
                running.url,
                "--node",
                "node-2",
                "--live-file",
                str(node["live"]),
                "--token-file",
                str(node["token"]),
                "--probe-addr",
                "",
            ],
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(200):
                if values(node, 0).get("temperature_c") == 88:
                    break
                time.sleep(0.05)
            assert values(node, 0) == {"temperature_c": 88}
            for _ in range(100):
                if running.get("/v1/scenarios/now-hot")["states"]["applied"] == 1:
                    break
                time.sleep(0.05)
            assert running.get("/v1/scenarios/now-hot")["states"]["applied"] == 1
        finally:
            process.terminate()
            assert process.wait(10) == 0
    saved = json.loads((node["live"].parent / "scenarios.applied.json").read_text())
    assert [run["name"] for run in saved["applied"]] == ["now-hot"]


def test_ctl_scenario_lists_shows_and_reports_status(
    service: Service, make_agent: AgentFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    from nvml_mock_engine import ctl

    sync(make_agent(service.url, Clock(T0)))
    capsys.readouterr()
    assert ctl.main(["scenario", "list", "--url", service.url]) == 0
    listing = capsys.readouterr().out
    assert "hot" in listing and "2026-12-01T14:00:00Z" in listing
    row = next(line for line in listing.splitlines() if line.startswith("hot "))
    assert row.split()[2:5] == ["2", "1", "1"]  # nodes, pending, applied
    assert ctl.main(["scenario", "show", "hot", "--url", service.url]) == 0
    assert '"temperature_c": 91' in capsys.readouterr().out
    assert ctl.main(["scenario", "status", "hot", "--url", service.url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:2] == ["node-1", "applied"] and "GPU-" in lines[1]
    assert lines[2].split()[:2] == ["node-2", "pending"]
    assert ctl.main(["scenario", "status", "nope", "--url", service.url]) == 1
    assert "no scenario named 'nope'" in capsys.readouterr().err
    assert ctl.main(["scenario", "list", "--url", "http://127.0.0.1:9"]) == 1
    assert "cannot reach the topology service" in capsys.readouterr().err
    assert ctl.main(["scenario", "list"]) == 2


def test_the_readme_lists_the_agents_flags() -> None:
    from nvml_mock_engine.settings import AGENT_OPTIONS
    from nvml_mock_protocol import settings as s

    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    for row in s.table_rows(AGENT_OPTIONS, AgentSettings()):
        assert row in readme


def test_the_agent_keeps_the_mig_capability_files_true(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A MIG layout changed through the library (here by nvidia-smi) reaches the driver
    root's ``capabilities/gpu<N>/mig/`` files by the running agent, with nothing else told."""
    import subprocess
    import sys

    from nvml_mock_engine.config import resolve_config
    from nvml_mock_node.stage import StageOptions, stage
    from smi_fixtures.helpers import smi

    proc = tmp_path / "host-proc"
    proc.mkdir()
    (proc / "devices").write_text("Character devices:\n  1 mem\n\nBlock devices:\n")
    monkeypatch.setenv("NVML_MOCK_HOST_PROC_ROOT", str(proc))
    monkeypatch.setenv("NVML_MOCK_HOST_SYS_ROOT", str(tmp_path / "host-sys"))
    overlay = tmp_path / "o"
    config = resolve_config(profile="h100", count=2, node="node-1")
    stage(overlay, config, StageOptions(runtime=False, library=library, devices=False))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(overlay / "config" / "state.nvmlmock"))
    assert smi(library, "-i", "1", "-mig", "1")[0] == 0
    mig = overlay / "proc" / "driver" / "nvidia" / "capabilities" / "gpu1" / "mig"
    token = tmp_path / "token"
    token.write_text(TOKEN)
    with Service("version: 1\nscenarios: []\n", token) as running:
        process = subprocess.Popen(
            [sys.executable, "-m", "nvml_mock_engine", "agent", "--topology-url", running.url,
             "--node", "node-1", "--live-file", str(overlay / "config" / "live.nvmlmock"),
             "--token-file", str(token), "--probe-addr", ""],
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:

            def until(wanted: list[str]) -> list[str]:
                for _ in range(200):
                    found = sorted(str(p.relative_to(mig)) for p in mig.rglob("access"))
                    if found == wanted:
                        break
                    time.sleep(0.05)
                return found

            rc, _ = smi(library, "mig", "-i", "1", "-cgi", "9", "-C")
            assert rc == 0
            assert until(["gi2/access", "gi2/ci0/access"]) == ["gi2/access", "gi2/ci0/access"]
            assert smi(library, "mig", "-i", "1", "-dci")[0] == 0
            assert until(["gi2/access"]) == ["gi2/access"]
            assert smi(library, "mig", "-i", "1", "-dgi")[0] == 0
            assert until([]) == []
        finally:
            process.terminate()
            assert process.wait(10) == 0
