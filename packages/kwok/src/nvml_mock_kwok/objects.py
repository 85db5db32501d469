"""The Kubernetes objects of a fake node: its Node, its ResourceSlices, and KWOK's Stages.

Everything NVIDIA's components would publish comes from recorded truth, rewritten for the
node's identity (:func:`nvml_mock_kwok.identity.rewrite`): GFD's labels, the device plugin's
capacity and allocatable under the chosen MIG strategy, and the DRA driver's slices. What no
NVIDIA component publishes (CPU, memory, pods: the machine's) comes from the options.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from nvml_mock_kwok.fleet import FakeNode
from nvml_mock_kwok.identity import Identity, node_identity, rewrite
from nvml_mock_kwok.truth import Truth

__all__ = [
    "FAKE_LABEL",
    "KWOK_ANNOTATION",
    "PROFILE_ANNOTATION",
    "NodeOptions",
    "node_object",
    "slice_objects",
    "stage_objects",
]

FAKE_LABEL: Final = "nvml-mock.nvidia.com/fake"
PROFILE_ANNOTATION: Final = "nvml-mock.nvidia.com/profile"
KWOK_ANNOTATION: Final = "kwok.x-k8s.io/node"
DOMAIN_LABEL: Final = "nvml-mock.nvidia.com/compute-domain"


@dataclass(frozen=True)
class NodeOptions:
    """What a fake node has besides its GPUs."""

    strategy: str = "none"
    cpu: str = "64"
    memory: str = "512Gi"
    pods: str = "110"
    arch: str = "amd64"
    labels: Mapping[str, str] = field(default_factory=dict)
    taint: bool = False
    """Taint the node ``kwok.x-k8s.io/node=fake:NoSchedule`` (KWOK's convention), so only
    pods that tolerate it land there."""


def identity_for(truth: Truth, node: FakeNode) -> Identity:
    """The engine's identity for ``node``, as its staging would derive it."""
    fabric = node.fabric if truth.identity.fabric is not None else None
    return node_identity(truth.profile, node.name, truth.gpu_count, fabric)


def node_object(truth: Truth, node: FakeNode, options: NodeOptions) -> dict[str, Any]:
    """The Node: GFD's labels, the device plugin's resources, KWOK's annotation."""
    identity = identity_for(truth, node)
    resources, labels = truth.strategy(options.strategy)
    labels = rewrite(dict(labels), truth.identity, identity)
    capacity = {"cpu": options.cpu, "memory": options.memory, "pods": options.pods}
    allocatable = dict(capacity)
    for resource, counts in sorted(resources.items()):
        capacity[resource] = str(counts["capacity"])
        allocatable[resource] = str(counts["allocatable"])
    meta_labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": options.arch,
        # a kubelet registers with the beta spellings too; without them the node
        # life-cycle controller adds them, one more read and write per node
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": options.arch,
        "type": "kwok",
        FAKE_LABEL: "true",
        **({DOMAIN_LABEL: node.domain} if node.domain and node.fabric else {}),
        **options.labels,
        **labels,
    }
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": dict(sorted(meta_labels.items())),
            "annotations": {
                KWOK_ANNOTATION: "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                PROFILE_ANNOTATION: truth.variant,
            },
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "nodeInfo": {
                "architecture": options.arch,
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
                "containerRuntimeVersion": "fake",
                "kernelVersion": "fake",
                "kubeProxyVersion": "fake",
                "osImage": "nvml-mock fake GPU node",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }
    if options.taint:
        obj["spec"]["taints"] = [{"key": KWOK_ANNOTATION, "value": "fake", "effect": "NoSchedule"}]
    return obj


def slice_name(node: str, driver: str, index: int) -> str:
    """A slice's name, fixed per node, driver and position, so a re-run applies in place."""
    return f"{node}-{driver.split('.', maxsplit=1)[0]}-{index}"


def slice_specs(truth: Truth, node: FakeNode) -> dict[str, list[dict[str, Any]]]:
    """Per DRA driver, the slice specs the driver would publish for ``node``."""
    identity = identity_for(truth, node)
    return {
        driver: [rewrite(copy.deepcopy(spec), truth.identity, identity) for spec in specs]
        for driver, specs in sorted(truth.resource_slices.items())
    }


def slice_objects(
    truth: Truth, node: FakeNode, *, owner_uid: str | None = None
) -> list[dict[str, Any]]:
    """The ResourceSlices (``resource.k8s.io/v1``), owned by the Node when its UID is known."""
    objects: list[dict[str, Any]] = []
    for driver, specs in slice_specs(truth, node).items():
        for index, spec in enumerate(specs):
            meta: dict[str, Any] = {
                "name": slice_name(node.name, driver, index),
                "labels": {FAKE_LABEL: "true"},
            }
            if owner_uid:
                meta["ownerReferences"] = [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": node.name,
                        "uid": owner_uid,
                        "controller": True,
                    }
                ]
            objects.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": meta,
                    "spec": spec,
                }
            )
    return objects


HEARTBEAT_MS: Final = 300_000
"""How often KWOK refreshes a fake node's conditions: a kubelet's node status report period
(``nodeStatusReportFrequency``, 5 minutes); the node lease says it is alive in between."""

_NODE_SELECTOR: Final = {
    "matchExpressions": [
        {"key": f'.metadata.labels["{FAKE_LABEL}"]', "operator": "In", "values": ["true"]}
    ]
}

_INITIALIZE: Final = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
addresses:
{{ with NodeIP }}
- address: {{ . | Quote }}
  type: InternalIP
{{ end }}
- address: {{ NodeName | Quote }}
  type: Hostname
phase: Running
"""

_HEARTBEAT: Final = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""

_POD_READY: Final = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: PodScheduled
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""


def _stage(
    name: str,
    resource: str,
    selector: Mapping[str, Any],
    nxt: Mapping[str, Any],
    *,
    delay: Mapping[str, int] | None = None,
    weight: int = 0,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": resource},
        "selector": selector,
        "next": nxt,
    }
    if delay:
        spec["delay"] = delay
    if weight:
        spec["weight"] = weight
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name, "labels": {FAKE_LABEL: "true"}},
        "spec": spec,
    }


def stage_objects(heartbeat_ms: int = HEARTBEAT_MS) -> list[dict[str, Any]]:
    """The Stages KWOK plays for fake GPU nodes and the pods bound to them.

    A node becomes Ready at once, keeping the capacity and allocatable it was made with
    (they are the device plugin's): one status patch of its conditions, addresses and
    phase. Liveness is KWOK's node lease (as a kubelet's), so the heartbeat Stage only
    refreshes the standard conditions' ``lastHeartbeatTime`` every ``heartbeat_ms`` (a
    kubelet's status report period, between it and 1.2 times it), never the status's
    capacity, allocatable or a GPU condition the fault controller set. Pods run when bound
    and go away when deleted.
    """
    not_ready = {
        "matchExpressions": [
            *_NODE_SELECTOR["matchExpressions"],
            {
                "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                "operator": "NotIn",
                "values": ["True"],
            },
        ]
    }
    ready = {
        "matchExpressions": [
            *_NODE_SELECTOR["matchExpressions"],
            {"key": ".status.phase", "operator": "In", "values": ["Running"]},
            {
                "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                "operator": "In",
                "values": ["True"],
            },
        ]
    }
    bound = {
        "matchExpressions": [
            {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
            {"key": ".status.podIP", "operator": "DoesNotExist"},
        ]
    }
    deleting = {"matchExpressions": [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}]}
    return [
        _stage("nvml-mock-node-initialize", "Node", not_ready, {"statusTemplate": _INITIALIZE}),
        _stage(
            "nvml-mock-node-heartbeat",
            "Node",
            ready,
            {"statusTemplate": _HEARTBEAT},
            delay={
                "durationMilliseconds": heartbeat_ms,
                "jitterDurationMilliseconds": heartbeat_ms * 6 // 5,
            },
        ),
        _stage("nvml-mock-pod-ready", "Pod", bound, {"statusTemplate": _POD_READY}),
        _stage(
            "nvml-mock-pod-delete",
            "Pod",
            deleting,
            {"finalizers": {"empty": True}, "delete": True},
        ),
    ]
