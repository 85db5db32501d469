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
    KWOK_ANNOTATION,
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


def holds(existing: Any, wanted: Any) -> bool:
    """Whether ``existing`` already says everything ``wanted`` says: every key of a mapping
    (recursively), lists item by item, scalars equal. What the API server or another
    controller added beside it (defaults, KWOK's conditions) does not count."""
    if isinstance(wanted, dict):
        return isinstance(existing, dict) and all(
            key in existing and holds(existing[key], value) for key, value in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(existing, list)
            and len(existing) == len(wanted)
            and all(holds(e, w) for e, w in zip(existing, wanted, strict=True))
        )
    return bool(existing == wanted)


def _label_domains(labels: dict[str, str]) -> set[str]:
    return {key.split("/", 1)[0] + "/" for key in labels if "/" in key}


def node_holds(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether an existing Node is the one ``wanted`` describes, so that applying it again
    would change nothing: its labels, annotations, spec and status hold ``wanted``'s, and
    under every label prefix ``wanted`` uses (``nvidia.com/``: GFD's) it has no label more,
    so that a label a re-run no longer makes is still removed by the apply."""
    meta, want_meta = existing.get("metadata") or {}, wanted["metadata"]
    labels, want_labels = meta.get("labels") or {}, want_meta.get("labels") or {}
    domains = _label_domains(want_labels)
    extra = [k for k in labels if k not in want_labels and k.split("/", 1)[0] + "/" in domains]
    spec = existing.get("spec") or {}
    # ``--taint`` dropped: the fake taint must go, which only the apply does
    taint_left = not wanted["spec"].get("taints") and any(
        taint.get("key") == KWOK_ANNOTATION for taint in spec.get("taints") or ()
    )
    return (
        not extra
        and holds(labels, want_labels)
        and holds(meta.get("annotations") or {}, want_meta.get("annotations") or {})
        and holds(spec, wanted["spec"])
        and not taint_left
        and holds(existing.get("status") or {}, wanted["status"])
    )


def _apply_node(
    kube: Kube,
    truth: Truth,
    node: FakeNode,
    options: NodeOptions,
    existing: dict[str, Any] | None,
) -> tuple[str, bool]:
    """The Node in one request when it is new (an apply that makes a Node keeps its status);
    an existing one gets its status through the ``status`` subresource as well, and one
    that already is what this run would make is left alone: a re-run writes nothing."""
    obj = node_object(truth, node, options)
    if existing is not None and node_holds(existing, obj):
        return str(existing["metadata"]["uid"]), False
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


def _apply_slice(kube: Kube, item: dict[str, Any], existing: dict[str, Any] | None) -> bool:
    """A slice by a plain create, half the API server's work of an apply; one that exists
    and already holds the recorded devices is left alone (a re-run writes nothing), one that
    differs is applied (the same field manager, so a re-run converges on them)."""
    path = object_path(item)
    if existing is None and kube.create(path.rsplit("/", 1)[0], item) is not None:
        return True
    if existing is not None and _slice_holds(existing, item):
        return False
    kube.apply(path, item)
    return False


def _slice_holds(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    meta, want_meta = existing.get("metadata") or {}, wanted["metadata"]
    return (
        holds(meta.get("labels") or {}, want_meta.get("labels") or {})
        and holds(meta.get("ownerReferences") or [], want_meta.get("ownerReferences") or [])
        and holds(existing.get("spec") or {}, wanted["spec"])
    )


def _existing(kube: Kube, path: str) -> dict[str, dict[str, Any]]:
    """The fake objects of a collection already there, by name (one paginated list)."""
    return {
        item["metadata"]["name"]: item for item in kube.list(path, selector=f"{FAKE_LABEL}=true")
    }


_TABLE: Final = "application/json;as=Table;v=v1;g=meta.k8s.io"
_NODES: Final = "/api/v1/nodes"
_SLICES: Final = "/apis/resource.k8s.io/v1/resourceslices"


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
    # What is there already, read once: a re-run of the same fleet then sends no write at
    # all (each object is compared, not applied again), so no resourceVersion moves and no
    # watcher (KWOK, the scheduler, the DRA driver) is woken for nothing.
    nodes_there = _existing(kube, _NODES)
    slices_there = _existing(kube, _SLICES) if nodes_there else {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        made = list(
            pool.map(
                lambda pair: _apply_node(
                    kube, pair[1], pair[0], options, nodes_there.get(pair[0].name)
                ),
                nodes,
            )
        )
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
        slices_made = list(
            pool.map(
                lambda item: _apply_slice(kube, item, slices_there.get(item["metadata"]["name"])),
                items,
            )
        )
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
