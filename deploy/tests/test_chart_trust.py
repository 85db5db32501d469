"""The chart's side of the trust boundary, as Helm renders it.

Where the mock may run (never on a node labelled as a real GPU node), who may opt in to
device nodes (only the allow-listed namespaces), what the stager may do with its token (patch
its own node's two labels), how both DaemonSets are confined (RuntimeDefault seccomp, bounded
resources) and who may reach the topology service when the NetworkPolicy is on.

Scheduling is checked by evaluating the rendered node affinity the way the scheduler does
(terms ORed, expressions ANDed, ``NotIn`` true for a missing label) against example nodes,
so the tests hold what the affinity means, not how it is spelled.
"""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
from conftest import DEMO_TOPOLOGY, NAMESPACE, RenderFn
from manifests import container, env_of, pod_spec

DAEMONSETS = ("nvml-mock", "nvml-mock-nri")
STAGED = "nvml-mock.nvidia.com/staged"
GPU_PRESENT = "nvidia.com/gpu.present"
PCI_NVIDIA = "feature.node.kubernetes.io/pci-10de.present"
FAKE = "nvml-mock.nvidia.com/fake"


def _expression_holds(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op!r} not modelled by this test")


def schedulable(owner: dict[str, Any], name: str, labels: dict[str, str]) -> bool:
    """Whether the DaemonSet's required node affinity and nodeSelector admit this node."""
    spec = pod_spec(owner)
    if any(labels.get(k) != v for k, v in spec.get("nodeSelector", {}).items()):
        return False
    required = (
        spec.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required is None:
        return True
    for term in required["nodeSelectorTerms"]:
        fields_ok = all(
            _expression_holds(f, {"metadata.name": name}) for f in term.get("matchFields", [])
        )
        if fields_ok and all(
            _expression_holds(e, labels) for e in term.get("matchExpressions", [])
        ):
            return True
    return False


NODES: dict[str, tuple[dict[str, str], bool]] = {
    "plain node": ({}, True),
    "staged by the mock": ({GPU_PRESENT: "true", STAGED: "true"}, True),
    "real GPU node (operator label)": ({GPU_PRESENT: "true"}, False),
    "real GPU node (NFD PCI label)": ({PCI_NVIDIA: "true"}, False),
    "real GPU node the mock once staged": (
        {GPU_PRESENT: "true", STAGED: "true", PCI_NVIDIA: "true"},
        False,
    ),
    "labels present but false": ({GPU_PRESENT: "false", PCI_NVIDIA: "false"}, True),
    # what nvml-mock-kwok puts on a fake node (GFD's labels among them, no staged label)
    "fake node of nvml-mock-kwok": (
        {"type": "kwok", FAKE: "true", "nvidia.com/gpu.product": "NVIDIA-GB200"},
        False,
    ),
    "any KWOK node": ({"type": "kwok"}, False),
    "fake node that looks staged": ({GPU_PRESENT: "true", STAGED: "true", FAKE: "true"}, False),
}


@pytest.mark.parametrize("node", sorted(NODES))
def test_both_daemonsets_stay_off_real_gpu_nodes_by_default(render: RenderFn, node: str) -> None:
    labels, expected = NODES[node]
    rendered = render()
    for name in DAEMONSETS:
        assert schedulable(rendered.get("DaemonSet", name), "n1", labels) is expected, name


def test_without_node_labelling_the_gpu_label_always_means_a_real_gpu(render: RenderFn) -> None:
    rendered = render({"nodeLabels": {"gpuPresent": False}})
    ds = rendered.get("DaemonSet", "nvml-mock")
    assert not schedulable(ds, "n1", {GPU_PRESENT: "true", STAGED: "true"})
    assert schedulable(ds, "n1", {})


def test_own_affinity_is_combined_with_the_real_gpu_exclusion(render: RenderFn) -> None:
    rendered = render(
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "pool", "operator": "In", "values": ["a"]}
                                ]
                            },
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": ["n9"]}
                                ]
                            },
                        ]
                    }
                },
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
            }
        }
    )
    for name in DAEMONSETS:
        ds = rendered.get("DaemonSet", name)
        assert "podAntiAffinity" in pod_spec(ds)["affinity"]
        assert schedulable(ds, "n1", {"pool": "a"})
        assert schedulable(ds, "n9", {})
        assert not schedulable(ds, "n1", {})
        assert not schedulable(ds, "n1", {"pool": "a", PCI_NVIDIA: "true"})
        assert not schedulable(ds, "n9", {GPU_PRESENT: "true"})
        assert schedulable(ds, "n9", {GPU_PRESENT: "true", STAGED: "true"})


def test_the_exclusion_can_be_retuned_or_turned_off(render: RenderFn) -> None:
    tuned = render({"realGpuNodes": {"labels": ["example.com/real-gpu"]}})
    ds = tuned.get("DaemonSet", "nvml-mock")
    assert not schedulable(ds, "n1", {"example.com/real-gpu": "true"})
    assert schedulable(ds, "n1", {PCI_NVIDIA: "true"})

    # without the real-GPU exclusion the fake-node one stays
    real_off = render({"realGpuNodes": {"avoid": False}})
    for name in DAEMONSETS:
        ds = real_off.get("DaemonSet", name)
        assert schedulable(ds, "n1", {GPU_PRESENT: "true"})
        assert not schedulable(ds, "n1", {"type": "kwok"})

    both_off = {"realGpuNodes": {"avoid": False}, "fakeNodes": {"avoid": False}}
    off = render(both_off)
    for name in DAEMONSETS:
        assert "affinity" not in pod_spec(off.get("DaemonSet", name))
    assert "affinity" not in pod_spec(
        render({**both_off, "affinity": {}}).get("DaemonSet", "nvml-mock")
    )


def test_every_daemonset_stays_off_fake_nodes(render: RenderFn) -> None:
    """In a mixed cluster KWOK plays a pod bound to a fake node as Running without starting
    it: on a real node with fake ones beside it, the chart's DaemonSets (the exporter too)
    once counted a pod per fake node, and the exporter's Service listed their addresses."""
    rendered = render({"exporter": {"enabled": True}})
    names = [n for kind, n in rendered.objects if kind == "DaemonSet"]
    assert set(names) == {*DAEMONSETS, "nvidia-dcgm-exporter"}
    staged = {GPU_PRESENT: "true", STAGED: "true"}
    for name in names:
        ds = rendered.get("DaemonSet", name)
        assert schedulable(ds, "worker", staged), name
        assert not schedulable(ds, "kwok-gpu-00000", {**staged, "type": "kwok"}), name
        assert not schedulable(ds, "kwok-gpu-00000", {FAKE: "true"}), name


def test_the_fake_node_labels_can_be_retuned(render: RenderFn) -> None:
    # Helm merges a map of values into the default one; null removes a default key
    added = render({"fakeNodes": {"labels": {"example.com/simulated": "yes"}}})
    ds = added.get("DaemonSet", "nvml-mock-nri")
    assert not schedulable(ds, "n1", {"example.com/simulated": "yes"})
    assert not schedulable(ds, "n1", {"type": "kwok"})
    tuned = render({"fakeNodes": {"labels": {"example.com/simulated": "yes", "type": None}}})
    ds = tuned.get("DaemonSet", "nvml-mock-nri")
    assert not schedulable(ds, "n1", {"example.com/simulated": "yes"})
    assert schedulable(ds, "n1", {"example.com/simulated": "no", "type": "kwok"})
    with pytest.raises(helm.HelmValuesError):
        render({"fakeNodes": {"labels": {"type": 3}}})


def test_the_stager_sets_the_label_that_tells_its_gpu_label_apart(render: RenderFn) -> None:
    env = env_of(container(render().get("DaemonSet", "nvml-mock"), "stage"))
    labels = dict(item.split("=", 1) for item in env["NVML_MOCK_NODE_LABELS"].split(","))
    assert labels == {GPU_PRESENT: "true", STAGED: "true"}


def test_device_opt_in_is_allowed_in_no_namespace_by_default(render: RenderFn) -> None:
    env = env_of(container(render().get("DaemonSet", "nvml-mock-nri"), "nri-plugin"))
    assert env["NVML_MOCK_DEVICE_NAMESPACES"] == ""
    listed = render({"nri": {"deviceNamespaces": ["gpu-tests", "ci"]}})
    env = env_of(container(listed.get("DaemonSet", "nvml-mock-nri"), "nri-plugin"))
    assert env["NVML_MOCK_DEVICE_NAMESPACES"] == "gpu-tests,ci"


@pytest.mark.parametrize("bad", [["Not_A_Namespace"], "default", [""], ["ci", "ci"]])
def test_device_namespaces_must_be_namespace_names(render: RenderFn, bad: Any) -> None:
    with pytest.raises(helm.HelmValuesError, match="deviceNamespaces"):
        render({"nri": {"deviceNamespaces": bad}})


def test_the_stager_may_patch_only_its_own_node_labels(render: RenderFn) -> None:
    rendered = render()
    role = rendered.get("ClusterRole", f"nvml-mock-{NAMESPACE}-node-labeler")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}]
    name = f"nvml-mock-{NAMESPACE}-own-node-labels"
    policy = rendered.get("ValidatingAdmissionPolicy", name)
    binding = rendered.get("ValidatingAdmissionPolicyBinding", name)
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
    ]
    (condition,) = spec["matchConditions"]
    assert condition["expression"] == (
        f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:nvml-mock-staging"'
    )
    rules = " ".join(v["expression"] for v in spec["validations"])
    assert "request.userInfo.extra['authentication.kubernetes.io/node-name']" in rules
    assert "object.metadata.name" in rules
    allowed = {v["name"]: v["expression"] for v in spec["variables"]}["allowed"]
    assert allowed == f'["{GPU_PRESENT}","{STAGED}"]'

    unrestricted = render({"nodeLabels": {"ownNodeOnly": False}})
    assert "ValidatingAdmissionPolicy" not in unrestricted.kinds()
    unlabelled = render({"nodeLabels": {"gpuPresent": False}})
    assert not {k for k in unlabelled.kinds() if "Policy" in k or "Role" in k}


@pytest.mark.parametrize("name", DAEMONSETS)
def test_both_daemonsets_run_under_the_runtime_default_seccomp_profile(
    render: RenderFn, name: str
) -> None:
    spec = pod_spec(render().get("DaemonSet", name))
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for item in spec["containers"]:
        assert item["securityContext"]["privileged"] is False
        assert item["securityContext"].get("seccompProfile") is None, "the pod's profile holds"


def test_every_container_has_requests_and_limits(render: RenderFn) -> None:
    rendered = render({"topology": DEMO_TOPOLOGY})
    workloads = [
        obj for (kind, _), obj in rendered.objects.items() if kind in ("DaemonSet", "Deployment")
    ]
    assert len(workloads) == 3
    for owner in workloads:
        for item in pod_spec(owner)["containers"] + pod_spec(owner).get("initContainers", []):
            resources = item.get("resources", {})
            for part in ("requests", "limits"):
                assert set(resources.get(part, {})) == {"cpu", "memory"}, (
                    owner["metadata"]["name"],
                    item["name"],
                    part,
                )


def test_the_network_policy_is_off_by_default(render: RenderFn) -> None:
    assert "NetworkPolicy" not in render({"topology": DEMO_TOPOLOGY}).kinds()
    off_service = render({"topology": {"enabled": False, "networkPolicy": {"enabled": True}}})
    assert "NetworkPolicy" not in off_service.kinds()


def test_the_network_policy_admits_the_plugins_and_the_listed_peers(render: RenderFn) -> None:
    scraper = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    rendered = render(
        {"topology": {**DEMO_TOPOLOGY, "networkPolicy": {"enabled": True, "from": [scraper]}}}
    )
    policy = rendered.get("NetworkPolicy", "nvml-mock-topology")
    deployment = rendered.get("Deployment", "nvml-mock-topology")
    plugin_pods = rendered.get("DaemonSet", "nvml-mock-nri")["spec"]["template"]["metadata"]
    topology_pods = deployment["spec"]["template"]["metadata"]
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    selected = spec["podSelector"]["matchLabels"]
    assert selected.items() <= topology_pods["labels"].items()
    (rule,) = spec["ingress"]
    ports = {p["name"] for p in container(deployment, "topology-service")["ports"]}
    assert [p["port"] for p in rule["ports"]] == ["http"] and "http" in ports
    plugins, extra = rule["from"]
    assert set(plugins) == {"podSelector"}, "same namespace only"
    assert plugins["podSelector"]["matchLabels"].items() <= plugin_pods["labels"].items()
    staging_pods = rendered.get("DaemonSet", "nvml-mock")["spec"]["template"]["metadata"]
    assert not plugins["podSelector"]["matchLabels"].items() <= staging_pods["labels"].items()
    assert extra == scraper
