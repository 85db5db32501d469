"""Make a fleet's objects in a cluster, converging on a re-run (server-side apply)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from nvml_mock_kwok.errors import KwokError
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

__all__ = ["ApplyResult", "apply_fleet", "delete_fleet", "ready_nodes", "wait_ready"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApplyResult:
    """What an apply did and how long it took."""

    nodes: int
    slices: int
    stages: int
    seconds: float
    nodes_seconds: float = 0.0
    """When the last Node was written: KWOK can make every node Ready from then on, while
    the slices are still being written."""
    ready_seconds: float | None = None
    """When every node was Ready, where the apply waited for that (``slices_after_ready``)."""
    created: int = 0
    """Objects (Nodes and slices) this run made; the rest existed and were converged."""


def _apply_node(kube: Kube, truth: Truth, node: FakeNode, options: NodeOptions) -> tuple[str, bool]:
    """The Node in one request when it is new (an apply that makes a Node keeps its status);
    an existing one gets its status through the ``status`` subresource as well."""
    obj = node_object(truth, node, options)
    path = object_path(obj)
    created, made = kube.apply_new(path, obj)
    if not created:
        kube.apply(
            path,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node.name},
                "status": obj["status"],
            },
            subresource="status",
        )
    return str(made["metadata"]["uid"]), created


def _apply_slice(kube: Kube, item: dict[str, Any]) -> bool:
    """A slice by a plain create, half the API server's work of an apply; one that exists
    is applied (the same field manager, so a re-run converges on the recorded devices)."""
    path = object_path(item)
    if kube.create(path.rsplit("/", 1)[0], item) is not None:
        return True
    kube.apply(path, item)
    return False


_TABLE: Final = "application/json;as=Table;v=v1;g=meta.k8s.io"


def ready_nodes(kube: Kube) -> set[str]:
    """The fake nodes whose Ready condition is True, in one read from the API server's
    cache (a Table of names and statuses, not 5,000 whole Nodes)."""
    table = kube.request(
        "GET",
        "/api/v1/nodes",
        query={
            "labelSelector": f"{FAKE_LABEL}=true",
            "resourceVersion": "0",
            "includeObject": "None",
        },
        accept=_TABLE,
    )
    columns = [c["name"] for c in table.get("columnDefinitions") or ()]
    try:
        name_at, status_at = columns.index("Name"), columns.index("Status")
    except ValueError as exc:
        raise KwokError(f"the API server's node table lacks Name or Status: {columns}") from exc
    return {
        str(row["cells"][name_at])
        for row in table.get("rows") or ()
        if str(row["cells"][status_at]).split(",")[0] == "Ready"
    }


def wait_ready(
    kube: Kube, names: Sequence[str], timeout: float, *, interval: float | None = None
) -> tuple[int, float]:
    """Wait until every one of ``names`` is Ready or ``timeout`` seconds pass; how many were
    Ready at the end, and after how many seconds. One read every ``interval`` seconds (by
    default a second per thousand nodes, at least 2: each read lists the whole fleet)."""
    start = time.monotonic()
    wanted = set(names)
    if interval is None:
        interval = max(2.0, len(wanted) / 1000)
    while True:
        ready = len(wanted & ready_nodes(kube))
        elapsed = time.monotonic() - start
        if ready == len(wanted) or elapsed >= timeout:
            return ready, elapsed
        logger.info("%d of %d node(s) Ready after %.0fs", ready, len(wanted), elapsed)
        time.sleep(min(interval, max(0.0, timeout - elapsed)))


def apply_fleet(
    kube: Kube,
    nodes: Sequence[tuple[FakeNode, Truth]],
    options: NodeOptions,
    *,
    workers: int = 32,
    with_stages: bool = True,
    slices_after_ready: float = 0.0,
) -> ApplyResult:
    """Stages first (KWOK must know how to play a node before it sees one), then every Node,
    then every slice, ``workers`` requests at a time.

    Nodes go before slices so that KWOK (leases, the initialize stage) and the node
    life-cycle controller start on every node first; a slice is owned by its Node, so it
    needs the Node's UID anyway. With ``slices_after_ready`` the slices wait (up to that
    many seconds) until KWOK has made every node Ready: on a small control plane the
    nodes then have the API server to themselves, and the fleet is Ready sooner.
    """
    start = time.monotonic()
    stages = stage_objects() if with_stages else []
    for stage in stages:
        kube.apply(object_path(stage), stage)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        made = list(pool.map(lambda pair: _apply_node(kube, pair[1], pair[0], options), nodes))
        nodes_seconds = time.monotonic() - start
        ready_seconds = None
        if slices_after_ready > 0:
            ready, waited = wait_ready(kube, [n.name for n, _ in nodes], slices_after_ready)
            if ready < len(nodes):
                logger.warning(
                    "%d of %d node(s) Ready after %.0fs (is KWOK running?); writing the "
                    "slices anyway",
                    ready,
                    len(nodes),
                    waited,
                )
            else:
                ready_seconds = time.monotonic() - start
        items = [
            item
            for (node, truth), (uid, _) in zip(nodes, made, strict=True)
            for item in slice_objects(truth, node, owner_uid=uid)
        ]
        slices_made = list(pool.map(lambda item: _apply_slice(kube, item), items))
    return ApplyResult(
        nodes=len(nodes),
        slices=len(items),
        stages=len(stages),
        seconds=time.monotonic() - start,
        nodes_seconds=nodes_seconds,
        ready_seconds=ready_seconds,
        created=sum(created for _, created in made) + sum(slices_made),
    )


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
