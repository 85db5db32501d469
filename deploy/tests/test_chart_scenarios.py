"""The scenario values: the ConfigMap the service follows, the write token, the node agent.

What the chart renders must be what the service accepts (the protocol's own parser reads
it here), and a malformed scenario is refused at install by the schema.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import helm_python as helm
import pytest
from conftest import DEMO_TOPOLOGY, NAMESPACE, REPO_ROOT, RenderFn
from manifests import container, env_of, mounts_of
from nvml_mock_live.scenarios import parse_scenarios

ITEMS = [
    {
        "name": "xid-79-half",
        "selector": {"percent": 50, "seed": 1, "cliques": [0, 1]},
        "gpus": {"count": 1},
        "apply": {"xid": 79, "fault": "fallen-off-bus"},
        "duration": "10m",
    },
    {"name": "busy", "apply": {"util": "steady 90", "set": {"temperature_c": 80}}},
]


def values(**scenarios: Any) -> dict[str, Any]:
    return {"topology": DEMO_TOPOLOGY, "scenarios": {"enabled": True, "items": ITEMS, **scenarios}}


def test_items_become_a_document_the_service_accepts(render: RenderFn) -> None:
    rendered = render(values())
    text = rendered.get("ConfigMap", "nvml-mock-scenarios")["data"]["scenarios.yaml"]
    document = parse_scenarios(text, "ConfigMap nvml-mock-scenarios")
    assert [s.name for s in document.scenarios] == ["xid-79-half", "busy"]
    assert document.scenarios[0].duration_ms == 600_000
    # rendered as JSON (which is YAML too), the service's fast path for big selectors
    assert json.loads(text)["version"] == 1


def test_a_set_file_document_is_used_as_it_is(render: RenderFn) -> None:
    text = "version: 1\nscenarios:\n  - {name: from-file, apply: {xid: 48}}\n"
    rendered = render(values(document=text))
    served = rendered.get("ConfigMap", "nvml-mock-scenarios")["data"]["scenarios.yaml"]
    assert [s.name for s in parse_scenarios(served).scenarios] == ["from-file"]


def test_the_service_follows_the_file_and_holds_the_write_token(render: RenderFn) -> None:
    rendered = render(values())
    deployment = rendered.get("Deployment", "nvml-mock-topology")
    service = container(deployment, "topology-service")
    env = env_of(service)
    assert env["NVML_MOCK_TOPOLOGY_SCENARIOS_FILE"] == "/etc/nvml-mock/scenarios/scenarios.yaml"
    assert env["NVML_MOCK_TOPOLOGY_WRITE_TOKEN_FILE"] == "/etc/nvml-mock/scenario-token/token"
    mounts = mounts_of(deployment, service)
    mount, volume = mounts["/etc/nvml-mock/scenarios"]
    assert "subPath" not in mount and volume["configMap"]["name"] == "nvml-mock-scenarios"
    _, token = mounts["/etc/nvml-mock/scenario-token"]
    assert token["secret"]["secretName"] == "nvml-mock-scenario-token"
    secret = rendered.get("Secret", "nvml-mock-scenario-token")
    assert len(base64.b64decode(secret["data"]["token"])) == 40
    # The service reloads scenarios in place; a rollout would fix every `start: now` afresh.
    annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
    assert not any("scenario" in key for key in annotations)


def test_the_staging_daemonset_runs_the_agent(render: RenderFn) -> None:
    rendered = render(values(agent={"probePort": 9191, "nodeLabels": {"pool": "a", "b": "c"}}))
    daemonset = rendered.get("DaemonSet", "nvml-mock")
    agent = container(daemonset, "agent")
    assert agent["command"] == ["nvml-mock-engine"] and agent["args"] == ["agent"]
    env = env_of(agent)
    assert env["NVML_MOCK_TOPOLOGY_URL"] == f"http://nvml-mock-topology.{NAMESPACE}.svc:8090"
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVML_MOCK_AGENT_PROBE_ADDR"] == ":9191"
    assert env["NVML_MOCK_AGENT_NODE_LABELS"] == "b=c,pool=a"
    assert env["NVML_MOCK_AGENT_TOKEN_FILE"] == "/etc/nvml-mock/scenario-token/token"
    assert agent["readinessProbe"]["httpGet"]["path"] == "/readyz"
    mounts = mounts_of(daemonset, agent)
    assert mounts["/var/lib/nvml-mock"][1]["hostPath"]["path"] == "/var/lib/nvml-mock"
    assert agent["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert (
        env_of(container(daemonset, "stage"))["NVML_MOCK_OVERLAY_HOST_PATH"]
        == (env["NVML_MOCK_OVERLAY_HOST_PATH"])
    )


def test_the_agents_command_line_takes_what_the_chart_renders(render: RenderFn) -> None:
    # the engine's own parser with the node's commands, from source, as in test_dockerfile
    sources = [str(REPO_ROOT / "packages" / p / "src") for p in ("nvml-engine", "node")]
    sys.path[:0] = sources
    try:
        from nvml_mock_engine import cli
        from nvml_mock_node.commands import AGENT
    finally:
        for source in sources:
            sys.path.remove(source)
    agent = container(render(values()).get("DaemonSet", "nvml-mock"), "agent")
    environ = {k: v for k, v in env_of(agent).items() if isinstance(v, str)}
    environ["NODE_NAME"] = "worker-0"
    settings = cli.parse_settings(agent["command"][1:] + agent["args"], environ, (AGENT,))
    assert settings.topology_url == environ["NVML_MOCK_TOPOLOGY_URL"]
    assert settings.probe_addr == ("0.0.0.0", 8091)
    assert str(settings.applied_path) == "/var/lib/nvml-mock/config/scenarios.applied.json"


def test_an_existing_secret_is_used_and_none_is_made(render: RenderFn) -> None:
    rendered = render(values(writeToken={"existingSecret": "my-token"}))
    assert ("Secret", "nvml-mock-scenario-token") not in rendered.objects
    _, token = mounts_of(
        rendered.get("DaemonSet", "nvml-mock"),
        container(rendered.get("DaemonSet", "nvml-mock"), "agent"),
    )["/etc/nvml-mock/scenario-token"]
    assert token["secret"]["secretName"] == "my-token"


def test_off_by_default_and_without_the_topology_service(render: RenderFn) -> None:
    """Scenarios off: no ConfigMap, no token, and an agent that takes no scenario but still
    keeps the node's MIG-dependent surfaces true (every staged node needs that)."""
    for given in ({}, {"scenarios": {"enabled": True, "items": ITEMS}}):
        rendered = render(given)
        assert ("ConfigMap", "nvml-mock-scenarios") not in rendered.objects
        daemonset = rendered.get("DaemonSet", "nvml-mock")
        spec = daemonset["spec"]["template"]["spec"]
        assert [c["name"] for c in spec["containers"]] == ["stage", "agent"]
        agent = container(daemonset, "agent")
        env = env_of(agent)
        assert "NVML_MOCK_TOPOLOGY_URL" not in env and "NVML_MOCK_AGENT_TOKEN_FILE" not in env
        assert env["NVML_MOCK_OVERLAY_HOST_PATH"] == "/var/lib/nvml-mock"
        assert "/etc/nvml-mock/scenario-token" not in mounts_of(daemonset, agent)
        assert "scenario-token" not in [v["name"] for v in spec["volumes"]]


def test_the_agent_without_scenarios_starts_on_what_the_chart_renders(render: RenderFn) -> None:
    sources = [str(REPO_ROOT / "packages" / p / "src") for p in ("nvml-engine", "node")]
    sys.path[:0] = sources
    try:
        from nvml_mock_engine import cli
        from nvml_mock_node.commands import AGENT
    finally:
        for source in sources:
            sys.path.remove(source)
    agent = container(render({}).get("DaemonSet", "nvml-mock"), "agent")
    environ = {k: v for k, v in env_of(agent).items() if isinstance(v, str)}
    settings = cli.parse_settings(agent["command"][1:] + agent["args"], environ, (AGENT,))
    assert settings.topology_url == ""
    assert str(settings.live_path) == "/var/lib/nvml-mock/config/live.nvmlmock"


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ({"name": "No_Caps", "apply": {"xid": 1}}, "name"),
        ({"name": "a"}, "apply"),
        ({"name": "a", "apply": {}}, "apply"),
        ({"name": "a", "apply": {"xid": 0}}, "xid"),
        ({"name": "a", "apply": {"xid": 1}, "selector": {"percent": 0}}, "percent"),
        ({"name": "a", "apply": {"xid": 1}, "gpus": {"count": 0}}, "gpus"),
        ({"name": "a", "apply": {"xid": 1}, "colour": "red"}, "colour"),
    ],
)
def test_install_refuses_a_malformed_scenario(
    chart: helm.Chart, item: dict[str, Any], needle: str
) -> None:
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError)) as caught:
        chart.render(
            {"topology": DEMO_TOPOLOGY, "scenarios": {"enabled": True, "items": [item]}},
            name="nvml-mock",
            namespace=NAMESPACE,
        )
    assert "scenarios" in str(caught.value) and needle in str(caught.value), str(caught.value)
