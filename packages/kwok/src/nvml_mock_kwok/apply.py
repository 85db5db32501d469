"""Make a fleet's objects in a cluster, converging on a re-run (server-side apply)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from nvml_mock_kwok.fleet import FakeNode
from nvml_mock_kwok.kube import Kube, object_path
from nvml_mock_kwok.objects import (
    FAKE_LABEL,
    NodeOptions,
    node_object,
    slice_objects,
    stage_objects,
)
from nvml_mock_kwok.truth import Truth

__all__ = ["ApplyResult", "apply_fleet", "delete_fleet"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApplyResult:
    """What an apply did and how long it took."""

    nodes: int
    slices: int
    stages: int
    seconds: float


def _apply_node(kube: Kube, truth: Truth, node: FakeNode, options: NodeOptions) -> int:
    obj = node_object(truth, node, options)
    path = object_path(obj)
    status = obj.pop("status")
    made = kube.apply(path, obj)
    kube.apply(
        path,
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name}, "status": status},
        subresource="status",
    )
    slices = slice_objects(truth, node, owner_uid=made["metadata"]["uid"])
    for item in slices:
        kube.apply(object_path(item), item)
    return len(slices)


def apply_fleet(
    kube: Kube,
    nodes: Sequence[tuple[FakeNode, Truth]],
    options: NodeOptions,
    *,
    workers: int = 32,
    with_stages: bool = True,
) -> ApplyResult:
    """Stages first (KWOK must know how to play a node before it sees one), then every node
    with its status and its slices, ``workers`` at a time."""
    start = time.monotonic()
    stages = stage_objects() if with_stages else []
    for stage in stages:
        kube.apply(object_path(stage), stage)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        counts = list(pool.map(lambda pair: _apply_node(kube, pair[1], pair[0], options), nodes))
    return ApplyResult(len(nodes), sum(counts), len(stages), time.monotonic() - start)


def delete_fleet(kube: Kube, *, workers: int = 32) -> int:
    """Delete every fake node and slice this package made (by its label)."""
    selector = f"{FAKE_LABEL}=true"
    items: list[tuple[str, Any]] = []
    for item in kube.list("/apis/resource.k8s.io/v1/resourceslices", selector=selector):
        items.append(("/apis/resource.k8s.io/v1/resourceslices/", item["metadata"]["name"]))
    for item in kube.list("/api/v1/nodes", selector=selector):
        items.append(("/api/v1/nodes/", item["metadata"]["name"]))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda p: kube.request("DELETE", p[0] + p[1], ok_missing=True), items))
    return len(items)
