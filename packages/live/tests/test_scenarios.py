"""The scenario document: validation with named errors, and deterministic selection."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest
from nvml_mock_live.scenario_api import NodeScenario, NodeScenarios
from nvml_mock_live.scenarios import (
    NameMatcher,
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


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("{percent: 0}", "selector.percent: 0 (int) is not above 0"),
        ("{percent: 250}", "selector.percent: 250 (int) is above the maximum 100"),
        ("{seed: -1}", "selector.seed: -1 (int) is below the minimum 0"),
        ("{seed: 9223372036854775808}", "is above the maximum 9223372036854775807"),
        ("{cliques: [4294967296]}", "(clique ids are unsigned 32-bit)"),
    ],
)
def test_bound_refusals_give_each_field_its_own_range(selector: str, expected: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenarios(one(f"  - {{name: a, selector: {selector}, apply: {{xid: 1}}}}\n"))
    assert expected in str(caught.value)
    if "clique" not in expected:
        assert "clique" not in str(caught.value)


GLOBS = ("node-*", "node-1?", "w[0-9]*", "*-gpu", "x", "node-[!1]*", "[a-c]*z", "*")


@pytest.mark.parametrize("patterns", [GLOBS[:1], GLOBS[1:4], GLOBS[4:7], GLOBS, ("a", "b")])
def test_the_name_index_matches_what_fnmatch_matches(patterns: tuple[str, ...]) -> None:
    nodes = [
        *(f"node-{n}" for n in range(30)),
        "w1",
        "w",
        "w9x",
        "a-gpu",
        "x",
        "xx",
        "abz",
        "dz",
        "a",
        "",
    ]
    matcher = NameMatcher(patterns)
    want = [n for n in nodes if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    assert matcher.select(nodes) == want
    assert [n for n in nodes if matcher.matches(n)] == want


def test_a_selector_of_100000_names_picks_by_lookup() -> None:
    """4,000 names took 1.8 s and 100,000 over 2.5 minutes when every pattern was tried on
    every node; each literal name is now a lookup (the figures: bench/bench_selection.py
    in the topology service)."""
    names = [f"node-{i:05d}" for i in range(100_000)]
    text = one(
        f"  - {{name: big, selector: {{nodes: [{','.join(names)}]}}, apply: {{xid: 79}}}}\n"
        "  - {name: some, selector: {nodes: ['node-0000*', 'node-9999?']}, apply: {xid: 48}}\n"
    )
    assert 1_000_000 < len(text) < 1_200_000
    picked = parse_scenarios(text).select(TOPOLOGY)
    assert picked["big"] == frozenset(names)
    assert picked["some"] == {f"node-{i:05d}" for i in (*range(10), *range(99990, 100_000))}


def test_a_node_is_told_its_scenario_without_every_other_node_name() -> None:
    doc = parse_scenarios(
        one(
            "  - {name: a, selector: {nodes: [n1, n2], labels: {pool: x}, percent: 50, "
            "seed: 4}, apply: {xid: 1}}\n"
        )
    )
    data = doc.scenarios[0].to_node_data()
    assert data["selector"] == {"labels": {"pool": "x"}, "seed": 4}
    assert doc.scenarios[0].to_data()["selector"]["nodes"] == ["n1", "n2"]


def test_a_hundred_thousand_names_are_checked_at_once_and_each_bad_one_named() -> None:
    """The selector's names are checked by one expression over all of them; a list with bad
    names is refused naming each one and its place, as the check of each name does."""
    import json

    names = [f"node-{i:05d}" for i in range(100_000)]
    bad = [*names[:50_000], "Node-X", *names[50_000:99_998], "", "a" * 254]

    def text(nodes: list[str]) -> str:
        scenario = {"name": "big", "selector": {"nodes": nodes}, "apply": {"xid": 79}}
        return json.dumps({"version": 1, "scenarios": [scenario]})

    accepted = parse_scenarios(text(names))
    assert accepted.scenarios[0].selector.nodes == tuple(names)
    assert accepted.select(TOPOLOGY)["big"] == frozenset(names)
    with pytest.raises(ScenarioError) as caught:
        parse_scenarios(text(bad))
    report = str(caught.value)
    for place, shown in ((50_000, "'Node-X'"), (99_999, "''"), (100_000, "'aaaa")):
        assert f"selector.nodes[{place}]: node pattern {shown}" in report, report[:2000]
    assert "3 problem(s)" in report
