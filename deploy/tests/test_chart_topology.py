"""The topology values: the document the service reads, rejection at install time, and what rolls.

A malformed topology must fail ``helm install``, naming what is wrong, instead of a
topology service that refuses its ConfigMap later. Field rules are in values.schema.json;
the rules that span entries (a node in one clique, unique names, uuids and clique ids) are
checked by the chart's template. Both are held against the protocol package's own model,
which the topology service uses: whatever the chart renders, the service accepts, and what
the model refuses, the chart refuses too.
"""

from __future__ import annotations

import copy
from typing import Any

import helm_python as helm
import pytest
import yaml
from conftest import DEMO_TOPOLOGY, NAMESPACE, RenderFn
from manifests import container, env_of, mounts_of, pod_spec
from nvml_mock_protocol.topology import (
    CLIQUE_ID_MAX,
    TopologyError,
    parse_topology,
    validate_topology_data,
)


def _domain(**changes: Any) -> dict[str, Any]:
    domain = copy.deepcopy(DEMO_TOPOLOGY["domains"][0])
    domain.update(changes)
    return domain


def _clique(**changes: Any) -> dict[str, Any]:
    clique: dict[str, Any] = {"id": 0, "nodes": ["worker-0"]}
    clique.update(changes)
    return clique


def _document(rendered_text: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(rendered_text)
    return data


def test_configmap_holds_version_1_and_the_domains(render: RenderFn) -> None:
    rendered = render({"topology": DEMO_TOPOLOGY})
    configmap = rendered.get("ConfigMap", "nvml-mock-topology")
    assert set(configmap["data"]) == {"topology.yaml"}
    text = configmap["data"]["topology.yaml"]
    assert text.startswith("version: 1\n")
    assert _document(text) == {"version": 1, "domains": DEMO_TOPOLOGY["domains"]}

    document = parse_topology(text, source="ConfigMap nvml-mock-topology")
    placement = document.placement("worker-2")
    assert placement is not None
    assert (placement.domain, placement.cluster_uuid, placement.clique_id) == (
        "node-wide-domain",
        "00000000-0000-0000-0000-0000000000cd",
        1,
    )
    assert set(document.node_index()) == {"worker-0", "worker-1", "worker-2", "worker-3"}


def test_configmap_is_mounted_where_the_service_reads_it(render: RenderFn) -> None:
    rendered = render({"topology": DEMO_TOPOLOGY})
    deployment = rendered.get("Deployment", "nvml-mock-topology")
    service = container(deployment, "topology-service")
    env = env_of(service)
    mount, volume = mounts_of(deployment, service)["/etc/nvml-mock/topology"]
    assert mount["readOnly"] is True
    # A directory mount, not subPath: kubelet then updates the file in place and the
    # service's reload sees it even without a rollout.
    assert "subPath" not in mount
    assert volume["configMap"]["name"] == "nvml-mock-topology"
    assert env["NVML_MOCK_TOPOLOGY_FILE"] == "/etc/nvml-mock/topology/topology.yaml"
    assert env["NVML_MOCK_TOPOLOGY_PORT"] == "8090"
    assert env["NVML_MOCK_TOPOLOGY_HOST"] == "0.0.0.0"
    assert env["NVML_MOCK_TOPOLOGY_MAX_WATCH"] == "60"
    assert "NVML_MOCK_TOPOLOGY_ALLOW_EMPTY" not in env
    assert service["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert service["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    security = pod_spec(deployment)["securityContext"]
    assert security["runAsNonRoot"] is True
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_an_empty_topology_is_served_on_purpose(render: RenderFn) -> None:
    rendered = render({"topology": {"enabled": True, "domains": []}})
    text = rendered.get("ConfigMap", "nvml-mock-topology")["data"]["topology.yaml"]
    assert _document(text) == {"version": 1, "domains": []}
    assert parse_topology(text).node_index() == {}
    deployment = rendered.get("Deployment", "nvml-mock-topology")
    assert (
        env_of(container(deployment, "topology-service"))["NVML_MOCK_TOPOLOGY_ALLOW_EMPTY"]
        == "true"
    )


def test_values_file_numbers_render_as_integers(render: RenderFn) -> None:
    # `helm -f` parses numbers as floats; the document must still carry integers, up to uint32.
    rendered = render(
        yaml_text=f"""
topology:
  enabled: true
  domains:
    - name: Rack A (row 3)
      uuid: 00000000-0000-0000-0000-0000000000AB
      cliques:
        - id: {CLIQUE_ID_MAX}
          nodes: [node-1.example.com]
        - id: 0
          nodes: ["0123"]
"""
    )
    text = rendered.get("ConfigMap", "nvml-mock-topology")["data"]["topology.yaml"]
    assert f"- id: {CLIQUE_ID_MAX}\n" in text
    document = parse_topology(text)
    placement = document.placement("node-1.example.com")
    assert placement is not None
    assert placement.clique_id == CLIQUE_ID_MAX
    assert placement.domain == "Rack A (row 3)"
    assert placement.cluster_uuid == "00000000-0000-0000-0000-0000000000ab"
    assert document.placement("0123") is not None


def _topology_with(domains: list[Any]) -> dict[str, Any]:
    return {"topology": {"enabled": True, "domains": domains}}


BAD_TOPOLOGIES: dict[str, tuple[list[Any], str]] = {
    "uuid not hex": ([_domain(uuid="00000000-0000-0000-0000-00000000zzzz")], "uuid"),
    "uuid too short": ([_domain(uuid="0000-0000")], "uuid"),
    "uuid not a string": ([_domain(uuid=12345)], "uuid"),
    "clique id negative": ([_domain(cliques=[_clique(id=-1)])], "id"),
    "clique id past uint32": ([_domain(cliques=[_clique(id=CLIQUE_ID_MAX + 1)])], "id"),
    "clique id a string": ([_domain(cliques=[_clique(id="0")])], "id"),
    "clique id fractional": ([_domain(cliques=[_clique(id=1.5)])], "id"),
    "node name uppercase": ([_domain(cliques=[_clique(nodes=["Worker-0"])])], "nodes"),
    "node name underscore": ([_domain(cliques=[_clique(nodes=["worker_0"])])], "nodes"),
    "node name trailing dash": ([_domain(cliques=[_clique(nodes=["worker-"])])], "nodes"),
    "node name empty": ([_domain(cliques=[_clique(nodes=[""])])], "nodes"),
    "node name too long": ([_domain(cliques=[_clique(nodes=["a" * 254])])], "nodes"),
    "domain name blank": ([_domain(name="  ")], "name"),
    "domain name control char": ([_domain(name="rack\n1")], "name"),
    "missing name": ([{k: v for k, v in _domain().items() if k != "name"}], "name"),
    "missing uuid": ([{k: v for k, v in _domain().items() if k != "uuid"}], "uuid"),
    "missing clique id": ([_domain(cliques=[{"nodes": ["worker-0"]}])], "id"),
    "unknown domain key": ([_domain(uid="x")], "uid"),
    "unknown clique key": ([_domain(cliques=[_clique(node=["worker-1"])])], "node"),
    "domains not a list": ({"name": "x"}, "domains"),  # type: ignore[dict-item]
    "node in two cliques": (
        [_domain(cliques=[_clique(id=0, nodes=["a"]), _clique(id=1, nodes=["b", "a"])])],
        'node "a"',
    ),
    "node in two domains": (
        [
            _domain(name="one", cliques=[_clique(nodes=["a"])]),
            _domain(
                name="two",
                uuid="00000000-0000-0000-0000-0000000000ef",
                cliques=[_clique(nodes=["a"])],
            ),
        ],
        'node "a"',
    ),
    "node twice in a clique": ([_domain(cliques=[_clique(nodes=["a", "a"])])], 'node "a"'),
    "clique id twice": (
        [_domain(cliques=[_clique(id=3, nodes=["a"]), _clique(id=3, nodes=["b"])])],
        "clique id 3",
    ),
    "domain name twice": (
        [_domain(), _domain(uuid="00000000-0000-0000-0000-0000000000ef", cliques=[])],
        "node-wide-domain",
    ),
    "uuid twice, any case": (
        [
            _domain(),
            _domain(name="other", uuid="00000000-0000-0000-0000-0000000000CD", cliques=[]),
        ],
        "uuid",
    ),
}

# Keys the protocol model defaults when absent; the chart still wants them written out,
# because a missing one in a values file is almost always a typo.
CHART_ONLY_REQUIRED = {
    "missing cliques": [{k: v for k, v in _domain().items() if k != "cliques"}],
    "missing nodes": [_domain(cliques=[{"id": 0}])],
}


@pytest.mark.parametrize("case", sorted(BAD_TOPOLOGIES))
def test_install_refuses_a_malformed_topology(chart: helm.Chart, case: str) -> None:
    domains, needle = BAD_TOPOLOGIES[case]
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError)) as caught:
        chart.render(_topology_with(domains), name="nvml-mock", namespace=NAMESPACE)
    message = str(caught.value)
    assert "topology" in message
    assert needle in message, message


@pytest.mark.parametrize("case", sorted(BAD_TOPOLOGIES))
def test_what_the_chart_refuses_the_service_refuses_too(case: str) -> None:
    domains, _ = BAD_TOPOLOGIES[case]
    with pytest.raises(TopologyError):
        validate_topology_data({"version": 1, "domains": domains})


@pytest.mark.parametrize("case", sorted(CHART_ONLY_REQUIRED))
def test_chart_requires_keys_the_model_defaults(chart: helm.Chart, case: str) -> None:
    domains = CHART_ONLY_REQUIRED[case]
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.render(_topology_with(domains), name="nvml-mock", namespace=NAMESPACE)
    assert "missing" in str(caught.value)


GOOD_TOPOLOGIES: dict[str, list[dict[str, Any]]] = {
    "demo": DEMO_TOPOLOGY["domains"],
    "uppercase uuid": [_domain(uuid="ABCDEF00-0000-0000-0000-0000000000CD")],
    "free-form domain name": [_domain(name="Rack A / row 3 ☃")],
    "dotted node names": [_domain(cliques=[_clique(nodes=["ip-10-0-0-1.ec2.internal", "n"])])],
    "uint32 edges": [
        _domain(cliques=[_clique(id=0, nodes=["a"]), _clique(id=CLIQUE_ID_MAX, nodes=["b"])])
    ],
    "empty clique and domain": [
        _domain(cliques=[_clique(nodes=[])]),
        _domain(name="spare", uuid="00000000-0000-0000-0000-0000000000ef", cliques=[]),
    ],
    "many domains": [
        _domain(
            name=f"d{i}",
            uuid=f"00000000-0000-0000-0000-{i:012x}",
            cliques=[_clique(id=c, nodes=[f"n{i}-{c}-{k}" for k in range(4)]) for c in range(3)],
        )
        for i in range(20)
    ],
}


@pytest.mark.parametrize("case", sorted(GOOD_TOPOLOGIES))
def test_every_accepted_topology_parses_as_the_service_reads_it(
    render: RenderFn, case: str
) -> None:
    domains = GOOD_TOPOLOGIES[case]
    rendered = render(_topology_with(domains))
    text = rendered.get("ConfigMap", "nvml-mock-topology")["data"]["topology.yaml"]
    document = parse_topology(text)
    expected = validate_topology_data({"version": 1, "domains": domains})
    assert document == expected
    assert document.node_index() == expected.node_index()


def _pod_templates(rendered: Any) -> dict[tuple[str, str], Any]:
    return {
        key: obj["spec"]["template"]
        for key, obj in rendered.objects.items()
        if key[0] in ("DaemonSet", "Deployment")
    }


def test_a_topology_change_rolls_only_the_topology_service(render: RenderFn) -> None:
    before = render({"topology": DEMO_TOPOLOGY})
    rebound = copy.deepcopy(DEMO_TOPOLOGY)
    rebound["domains"] = [
        {
            "name": "rebinder",
            "uuid": "00000000-0000-0000-0000-0000000000ff",
            "cliques": [{"id": 99, "nodes": ["worker-0", "worker-1", "worker-2", "worker-3"]}],
        }
    ]
    after = render({"topology": rebound})

    old, new = _pod_templates(before), _pod_templates(after)
    assert set(old) == set(new)
    changed = {key for key in old if old[key] != new[key]}
    # The plugins follow the service through their watch; rolling them would leave every
    # node briefly without injection for nothing.
    assert changed == {("Deployment", "nvml-mock-topology")}
    annotation = "checksum/topology"
    old_sum = old[("Deployment", "nvml-mock-topology")]["metadata"]["annotations"][annotation]
    new_sum = new[("Deployment", "nvml-mock-topology")]["metadata"]["annotations"][annotation]
    assert old_sum != new_sum

    # The same document written differently in values renders the same: no roll.
    reordered = yaml.safe_load(yaml.safe_dump(DEMO_TOPOLOGY, sort_keys=True))
    again = _pod_templates(render({"topology": reordered}))
    assert again == old


def test_changes_elsewhere_do_not_roll_the_topology_service(render: RenderFn) -> None:
    base = {"topology": DEMO_TOPOLOGY}
    before = _pod_templates(render(base))
    for change in (
        {"gpu": {"profile": "gb200", "count": 4}},
        {"nri": {"deviceInjectionMode": "cdi", "excludedNamespaces": ["ci"]}},
        {"image": {"tag": "9.9.9"}},
    ):
        after = _pod_templates(render({**base, **change}))
        changed = {key for key in before if before[key] != after[key]}
        assert ("Deployment", "nvml-mock-topology") not in changed, change
        assert changed, change


def test_disabling_topology_clears_the_plugin_url(render: RenderFn) -> None:
    rendered = render({"topology": {"enabled": False, "domains": DEMO_TOPOLOGY["domains"]}})
    env = env_of(container(rendered.get("DaemonSet", "nvml-mock-nri"), "nri-plugin"))
    assert env["NVML_MOCK_TOPOLOGY_URL"] == ""
    assert ("ConfigMap", "nvml-mock-topology") not in rendered.objects


def test_watches_stay_on_one_replica(render: RenderFn) -> None:
    rendered = render({"topology": {**DEMO_TOPOLOGY, "replicas": 3}})
    assert rendered.get("Deployment", "nvml-mock-topology")["spec"]["replicas"] == 3
    # Revisions are per replica: a watch bounced between replicas would never block.
    assert rendered.get("Service", "nvml-mock-topology")["spec"]["sessionAffinity"] == "ClientIP"


def test_connection_limits_reach_the_service(render: RenderFn) -> None:
    defaults = env_of(
        container(
            render({"topology": DEMO_TOPOLOGY}).get("Deployment", "nvml-mock-topology"),
            "topology-service",
        )
    )
    assert defaults["NVML_MOCK_TOPOLOGY_HEADER_TIMEOUT"] == "10"
    assert defaults["NVML_MOCK_TOPOLOGY_KEEP_ALIVE_TIMEOUT"] == "5"
    assert defaults["NVML_MOCK_TOPOLOGY_MAX_CONNECTIONS"] == "32768"
    # From a values file (numbers parsed as floats): a million stays a whole number.
    rendered = render(
        yaml_text="""
topology:
  enabled: true
  headerTimeoutSeconds: 2.5
  keepAliveTimeoutSeconds: 30
  maxConnections: 1000000
"""
    )
    env = env_of(container(rendered.get("Deployment", "nvml-mock-topology"), "topology-service"))
    assert env["NVML_MOCK_TOPOLOGY_HEADER_TIMEOUT"] == "2.5"
    assert env["NVML_MOCK_TOPOLOGY_KEEP_ALIVE_TIMEOUT"] == "30"
    assert env["NVML_MOCK_TOPOLOGY_MAX_CONNECTIONS"] == "1000000"


@pytest.mark.parametrize(
    "values",
    [{"headerTimeoutSeconds": 0}, {"keepAliveTimeoutSeconds": "5s"}, {"maxConnections": 0}],
)
def test_connection_limits_are_checked_by_the_schema(
    render: RenderFn, values: dict[str, Any]
) -> None:
    with pytest.raises(helm.HelmValuesError):
        render({"topology": {"enabled": True, **values}})
