"""What a scenario does to a fake node: the changes NVIDIA's components make on a faulty GPU.

Recorded truth holds, per variant, what the device plugin and the DRA driver published with
an Xid 79 on GPU 0 of the recorded node: the plugin dropped that GPU from allocatable, the
DRA driver tainted its device. A scenario's Xid on any GPU of a fake node has the same
effects, for each GPU it names; GFD's labels do not change (GFD does not watch health). The
node also gets a ``GPUHealthy`` condition, False while any GPU is faulty, so node-level
remediation has something to watch. Live keys, utilization and fault recipes without an Xid
change nothing the components publish, so a fake node shows nothing for them (and the run is
still reported).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from nvml_mock_live.scenario_api import NodeScenario
from nvml_mock_live.scenarios import Scenario, gpu_rank

from nvml_mock_kwok.truth import GPU_DRIVER, Truth

__all__ = [
    "CONDITION",
    "IGNORED_XIDS",
    "GpuFault",
    "allocatable_with",
    "condition_with",
    "pick_gpus",
    "run_window",
    "slices_with",
]

CONDITION: Final = "GPUHealthy"
IGNORED_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})
"""Xids both recorded components leave healthy (the device plugin logs this list at start;
the DRA driver's health monitor skips the same ones)."""


@dataclass(frozen=True, order=True)
class GpuFault:
    """One GPU made unhealthy by one scenario's Xid."""

    index: int
    xid: int
    scenario: str


def run_window(
    entry: NodeScenario, scenario: Scenario, now_ms: int
) -> tuple[int, int, int | None] | None:
    """The run active at ``now_ms``: (run number, start, end or None), or None between runs."""
    start = entry.start_ms
    if now_ms < start:
        return None
    run = 0
    if scenario.repeat is not None:
        run = (now_ms - start) // scenario.repeat.every_ms
        if scenario.repeat.times is not None and run >= scenario.repeat.times:
            return None
        start += run * scenario.repeat.every_ms
    duration = scenario.duration_ms
    end = None if duration is None else start + duration
    if end is not None and now_ms >= end:
        return None
    return run, start, end


def pick_gpus(scenario: Scenario, node: str, uuids: tuple[str, ...]) -> list[int]:
    """The GPU indices a scenario names on ``node``, as the node agent picks them."""
    selection = scenario.gpus
    indices = range(len(uuids))
    if selection.all:
        return list(indices)
    if selection.count is not None:
        seed = scenario.selector.seed
        ranked = sorted(indices, key=lambda i: gpu_rank(seed, scenario.name, node, i))
        return sorted(ranked[: selection.count])
    lowered = [u.lower() for u in uuids]
    chosen = [i for i in selection.indices if i < len(uuids)]
    chosen += [lowered.index(u.lower()) for u in selection.uuids if u.lower() in lowered]
    return sorted(set(chosen))


def faults_of(scenario: Scenario, gpus: Iterable[int]) -> list[GpuFault]:
    """The GPU faults a scenario's run makes: one per GPU for an Xid the components act on."""
    xid = scenario.apply.xid
    if xid is None or xid in IGNORED_XIDS:
        return []
    return [GpuFault(i, xid, scenario.name) for i in gpus]


def allocatable_with(truth: Truth, strategy: str, faults: Iterable[GpuFault]) -> dict[str, str]:
    """The device plugin's allocatable with ``faults``: the recorded drop per faulty GPU."""
    resources, _ = truth.strategy(strategy)
    recorded = truth.faults.get("xid79", {}).get("devicePlugin") or {}
    faulty = {f.index for f in faults}
    out: dict[str, str] = {}
    for name, counts in resources.items():
        drop = counts["allocatable"] - int(recorded.get(name, counts)["allocatable"])
        out[name] = str(max(0, counts["allocatable"] - drop * len(faulty)))
    return out


def _recorded_taint(truth: Truth) -> dict[str, Any] | None:
    slices = (truth.faults.get("xid79", {}).get("resourceSlices") or {}).get(GPU_DRIVER) or []
    for spec in slices:
        for device in spec.get("devices") or ():
            for taint in device.get("taints") or ():
                return dict(taint)
    return None


def slices_with(
    truth: Truth,
    specs: Mapping[str, list[dict[str, Any]]],
    uuids: tuple[str, ...],
    faults: Iterable[GpuFault],
    now: str,
) -> dict[str, list[dict[str, Any]]]:
    """The slice specs with each faulty GPU's device tainted as the DRA driver taints it."""
    taint = _recorded_taint(truth)
    by_uuid: dict[str, list[GpuFault]] = {}
    for fault in faults:
        by_uuid.setdefault(uuids[fault.index], []).append(fault)
    out = copy.deepcopy(dict(specs))
    if taint is None:
        return out
    for spec in out.get(GPU_DRIVER, []):
        for device in spec.get("devices") or ():
            uuid = ((device.get("attributes") or {}).get("uuid") or {}).get("string")
            hits = by_uuid.get(str(uuid), [])
            if hits:
                xids = sorted({f.xid for f in hits})
                device["taints"] = [
                    {**taint, "value": str(xid), "timeAdded": now} for xid in xids[:1]
                ]
    return out


def condition_with(faults: Iterable[GpuFault], uuids: tuple[str, ...], now: str) -> dict[str, Any]:
    """The node's ``GPUHealthy`` condition."""
    listed = sorted(set(faults))
    if not listed:
        return {
            "type": CONDITION,
            "status": "True",
            "reason": "GPUsHealthy",
            "message": "no GPU has a fault",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
    message = "; ".join(
        f"GPU {f.index} ({uuids[f.index]}): Xid {f.xid} ({f.scenario})" for f in listed
    )
    return {
        "type": CONDITION,
        "status": "False",
        "reason": "XidCriticalError",
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
