"""The scenario document: validation with named errors, and deterministic selection."""

from __future__ import annotations

from pathlib import Path

import pytest
from nvml_mock_live.scenario_api import NodeScenario, NodeScenarios
from nvml_mock_live.scenarios import (
    ScenarioError,
    gpu_rank,
    parse_duration_ms,
    parse_scenarios,
    read_scenarios_file,
)
from nvml_mock_protocol.topology import parse_topology

TOPOLOGY = parse_topology(
    """
version: 1
domains:
  - name: domain-a
    uuid: 00000000-0000-0000-0000-0000000000ab
    cliques:
      - {id: 0, nodes: [node-1, node-2, node-3, node-4]}
      - {id: 1, nodes: [node-5, node-6, node-7, node-8, node-9, node-10]}
  - name: domain-b
    uuid: 00000000-0000-0000-0000-0000000000ff
    cliques:
      - {id: 1, nodes: [node-11, node-12]}
"""
)


def one(body: str) -> str:
    return "version: 1\nscenarios:\n" + body


def test_a_full_scenario_reads_back_as_written() -> None:
    doc = parse_scenarios(
        one(
            """
  - name: xid-79
    selector: {nodes: ["node-*"], domains: [domain-a], cliques: [1], labels: {pool: a},
               percent: 50, seed: 7}
    gpus: {count: 1}
    apply: {fault: fallen-off-bus, xid: 79, util: steady 90, period: 30s,
            set: {temperature_c: 91}}
    start: 2026-12-01T14:00:00Z
    duration: 10m
    repeat: {every: 1h, times: 3}
"""
        )
    )
    scenario = doc.scenarios[0]
    assert scenario.duration_ms == 600_000
    assert scenario.repeat is not None and scenario.repeat.every_ms == 3_600_000
    assert scenario.start_ms(0) == 1_796_133_600_000
    assert scenario.to_data()["gpus"] == {"count": 1}
    assert scenario.selector.labels == {"pool": "a"}


def test_every_problem_is_reported_at_once_with_the_scenario_named() -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenarios(
            one(
                """
  - name: broken
    selector: {nodes: [Worker], percent: 0}
    gpus: [0, x]
    apply: {}
    start: 2026-12-01
  - name: Upper
    apply: {fault: Lost, set: {Temp: 3}, util: loud}
"""
            ),
            "scenarios.yaml",
        )
    text = str(caught.value)
    assert "invalid scenario document scenarios.yaml" in text
    for expected in (
        "scenarios[0] 'broken'.selector.nodes[0]: node pattern 'Worker'",
        "scenarios[0] 'broken'.selector.percent",
        "scenarios[0] 'broken'.gpus: GPU 'x' is neither an index nor a GPU UUID",
        "scenarios[0] 'broken'.apply: apply names nothing",
        "scenarios[0] 'broken'.start: start 2026-12-01 is a date",
        "scenarios[1] 'Upper'.name: scenario name 'Upper'",
        "fault 'Lost' is not a fault recipe",
        "live key 'Temp' is not a live key",
    ):
        assert expected in text, expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("  - {name: a, apply: {xid: 1}}\n  - {name: a, apply: {xid: 2}}\n", "used twice"),
        ("  - {name: a, apply: {xid: 1}, repeat: {every: 1m}}\n", "repeat needs a duration"),
        (
            "  - {name: a, apply: {xid: 1}, duration: 1h, repeat: {every: 1m}}\n",
            "must be longer than the duration",
        ),
        ("  - {name: a, apply: {xid: 1}, start: '2026-12-01T14:00:00'}\n", "no time zone"),
        ("  - {name: a, apply: {xid: 1}, duration: soon}\n", "is not a duration"),
        ("  - {name: a, apply: {period: 1s, set: {temperature_c: 1}}}\n", "period is the util"),
        ("  - {name: a, apply: {xid: 0}}\n", "apply.xid"),
        ("  - {name: a, apply: {xid: 1}, gpus: {count: 0}}\n", "gpus.count"),
        ("  - {name: a, apply: {xid: 1}, colour: red}\n", "colour: unknown key"),
    ],
)
def test_refusals_name_what_is_wrong(body: str, expected: str) -> None:
    with pytest.raises(ScenarioError, match=expected):
        parse_scenarios(one(body))


def test_version_and_shape_are_checked() -> None:
    with pytest.raises(ScenarioError, match="version 2"):
        parse_scenarios("version: 2\nscenarios: []\n")
    with pytest.raises(ScenarioError, match="empty"):
        parse_scenarios("")
    with pytest.raises(ScenarioError, match="duplicate key"):
        parse_scenarios("version: 1\nversion: 1\n")
    with pytest.raises(ScenarioError, match="more than 50 values"):
        parse_scenarios(
            "a: &a [1, 2, 3, 4, 5, 6, 7, 8]\nb: [*a, *a, *a, *a, *a, *a, *a]\n", max_items=50
        )


def test_durations() -> None:
    assert parse_duration_ms("500ms") == 500
    assert parse_duration_ms("1h30m") == 5_400_000
    assert parse_duration_ms("90") == 90_000
    assert parse_duration_ms(60) == 60_000
    for bad in ("", "0s", "1d", "m", "400 days"):
        with pytest.raises(ValueError, match=r"duration|above 0"):
            parse_duration_ms(bad)


def test_selection_by_names_domains_and_cliques() -> None:
    doc = parse_scenarios(
        one(
            """
  - {name: by-name, selector: {nodes: ["node-1", "node-1?"]}, apply: {xid: 1}}
  - {name: by-clique, selector: {cliques: [1]}, apply: {xid: 1}}
  - {name: by-both, selector: {domains: [domain-a], cliques: [1]}, apply: {xid: 1}}
  - {name: outside, selector: {nodes: [elsewhere]}, apply: {xid: 1}}
"""
        )
    )
    picked = doc.select(TOPOLOGY)
    assert picked["by-name"] == {"node-1", "node-10", "node-11", "node-12"}
    assert picked["by-clique"] == {f"node-{n}" for n in (5, 6, 7, 8, 9, 10, 11, 12)}
    assert picked["by-both"] == {f"node-{n}" for n in (5, 6, 7, 8, 9, 10)}
    assert picked["outside"] == {"elsewhere"}  # named literally: known though not placed


def test_percent_picks_an_exact_share_the_same_way_every_time() -> None:
    text = one(
        "  - {name: half, selector: {cliques: [0], percent: 50, seed: 3}, apply: {xid: 79}}\n"
    )
    first = parse_scenarios(text).select(TOPOLOGY)["half"]
    assert len(first) == 2 and first <= {"node-1", "node-2", "node-3", "node-4"}
    for _ in range(3):
        assert parse_scenarios(text).select(TOPOLOGY)["half"] == first
    other_seeds = {
        parse_scenarios(text.replace("seed: 3", f"seed: {seed}")).select(TOPOLOGY)["half"]
        for seed in range(20)
    }
    assert len(other_seeds) > 1  # the seed is what picks
    ten = one("  - {name: ten, selector: {percent: 10}, apply: {xid: 79}}\n")
    assert len(parse_scenarios(ten).select(TOPOLOGY)["ten"]) == 2  # ceil(10% of 12)


def test_unknown_nodes_are_picked_by_their_own_hash() -> None:
    doc = parse_scenarios(
        one(
            "  - {name: some, selector: {nodes: ['gpu-*'], percent: 30, seed: 1},"
            " apply: {xid: 1}}\n"
        )
    )
    scenario = doc.scenarios[0]
    picked = [n for n in (f"gpu-{i}" for i in range(1000)) if doc.picks_unknown(scenario, n)]
    assert 230 < len(picked) < 370
    assert not doc.picks_unknown(scenario, "cpu-1")
    assert picked == [
        n for n in (f"gpu-{i}" for i in range(1000)) if doc.picks_unknown(scenario, n)
    ]


def test_gpu_rank_is_deterministic() -> None:
    assert gpu_rank(1, "a", "node-1", 0) == gpu_rank(1, "a", "node-1", 0)
    assert gpu_rank(1, "a", "node-1", 0) != gpu_rank(2, "a", "node-1", 0)


def test_file_reading_is_bounded_and_refuses_special_files(tmp_path: Path) -> None:
    path = tmp_path / "scenarios.yaml"
    path.write_text(one("  - {name: a, apply: {xid: 1}}\n"))
    assert read_scenarios_file(path).scenarios[0].name == "a"
    with pytest.raises(ScenarioError, match="larger than the limit"):
        read_scenarios_file(path, max_bytes=10)
    with pytest.raises(ScenarioError, match="scenario file is a character device"):
        read_scenarios_file("/dev/null")
    with pytest.raises(FileNotFoundError):
        read_scenarios_file(tmp_path / "missing.yaml")


def test_node_scenarios_wire_form_round_trips() -> None:
    scenario = parse_scenarios(
        one("  - {name: a, apply: {xid: 79}, gpus: [0, GPU-abc]}\n")
    ).scenarios[0]
    wire = NodeScenarios(
        node="node-1",
        revision=5,
        scenarios=(NodeScenario(name="a", revision=5, startMs=9, scenario=scenario.to_data()),),
    )
    back = NodeScenarios.model_validate_json(wire.model_dump_json(by_alias=True))
    assert back.scenarios[0].start_ms == 9
    assert back.scenarios[0].parsed() == scenario
