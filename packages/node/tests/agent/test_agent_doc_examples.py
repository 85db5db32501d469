"""Every scenario example of the docs, through the topology service's validation and a node
agent's apply: a document the service accepts is one every agent applies.

The examples are read from the documents themselves (the topology service's README, the kind
demo's README, the chart's values, the local demo), so an example that drifts from the
vocabulary fails here. Selectors and start times are dropped (this node is picked, now): what
is checked is the vocabulary of ``apply`` and the durations, which both sides parse with
``nvml_mock_live.vocabulary``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
import yaml
from nvml_mock_live.errors import LiveValueError
from nvml_mock_live.scenarios import ScenarioError, read_scenarios_file
from nvml_mock_live.vocabulary import parse_utilization_words
from test_agent import AgentFactory, Clock, Service, make_agent, node, soon, sync

__all__ = ["make_agent", "node"]  # the node and agent fixtures, shared with test_agent

ROOT = Path(__file__).resolve().parents[4]


def _markdown_examples(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    blocks += re.findall(r"<<'YAML'\n(.*?)\nYAML\n", text, re.DOTALL)
    return [b for b in blocks if "scenarios:" in b and "apply" in b]


def _values_example() -> str:
    text = (ROOT / "deploy/helm/nvml-mock/values.yaml").read_text(encoding="utf-8")
    match = re.search(r"  # items:\n((?:  #   .*\n)+)", text)
    assert match, "the chart's values lost their scenario example"
    items = "".join(line.replace("  #   ", "  ", 1) + "\n" for line in match.group(1).splitlines())
    return "version: 1\nscenarios:\n" + items


def _demo_example() -> str:
    text = (ROOT / "demo/local/run.py").read_text(encoding="utf-8")
    match = re.search(r'SCENARIO_YAML = f"""\\\n(.*?)"""', text, re.DOTALL)
    assert match, "the local demo lost its scenario"
    return match.group(1).replace("{{", "{").replace("}}", "}").replace("{SCENARIO}", "demo")


EXAMPLES = {
    **{
        f"{path}#{i}": body
        for path in ("packages/topology-service/README.md", "demo/kind/README.md")
        for i, body in enumerate(_markdown_examples(ROOT / path))
    },
    "deploy/helm/nvml-mock/values.yaml": _values_example(),
    "demo/local/run.py": _demo_example(),
    # the cases: a composite period, a decimal one
    "sine-period": "version: 1\nscenarios:\n  - {name: s, apply: {util: sine 80, period: 1m30s}}\n",
    "decimal-period": "version: 1\nscenarios:\n  - {name: d, apply: {util: burst, period: 1.5s}}\n",
}


def test_the_docs_have_examples() -> None:
    assert len(EXAMPLES) >= 6
    assert any("fallen-off-bus" in body for body in EXAMPLES.values())


def _for_this_node(body: str) -> str:
    document: dict[str, Any] = yaml.safe_load(body)
    for scenario in document["scenarios"]:
        scenario.pop("selector", None)
        scenario.pop("start", None)
        scenario.pop("repeat", None)
    return yaml.safe_dump(document)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_documented_scenario_is_accepted_and_applied(
    name: str, node: dict[str, Path], make_agent: AgentFactory, tmp_path: Path
) -> None:
    source = tmp_path / "scenarios.yaml"
    source.write_text(EXAMPLES[name], encoding="utf-8")
    document = read_scenarios_file(source)  # the service's own reading of its file
    text = _for_this_node(EXAMPLES[name])
    with Service(text, node["token"]) as running:
        agent = make_agent(running.url, Clock(soon()))
        sync(agent)
        for scenario in document.scenarios:
            row = running.get(f"/v1/scenarios/{scenario.name}")["nodes"][0]
            assert row["state"] == "applied", (name, scenario.name, row)
    with live.LiveLayer.open(node["live"], writable=False) as layer:
        assert any(layer.values(g) for g in range(layer.gpu_count)) or layer.events()


@pytest.mark.parametrize(
    ("apply", "words"),
    [
        ("{util: loud}", "loud"),
        ("{util: steady}", "steady"),
        ("{util: busy 50}", "busy 50"),
        ("{util: sine 80, period: soon}", None),
        ("{fault: no-such-fault}", None),
        ("{set: {temprature_c: 91}}", None),
        ("{set: {temperature_c: 100000}}", None),
    ],
)
def test_what_the_service_refuses_no_agent_parser_accepts(
    apply: str, words: str | None, tmp_path: Path
) -> None:
    source = tmp_path / "scenarios.yaml"
    source.write_text(f"version: 1\nscenarios:\n  - {{name: x, apply: {apply}}}\n")
    with pytest.raises(ScenarioError):
        read_scenarios_file(source)
    if words is not None:
        with pytest.raises(LiveValueError):
            parse_utilization_words(words)
