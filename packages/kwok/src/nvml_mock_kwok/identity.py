"""A node's GPU identity as the mock engine derives it, and the rewrite from one node to another.

Recorded truth is what NVIDIA's components published for one recorded mock node. Another node
of the same profile differs from it only in what the engine derives from the node's name and
placement: the node name, the GPU UUIDs (the engine's own derivation, so a fake node and a
real mock node of the same name agree), the PCI bus ids, and the fabric identity its clique
gives it. :class:`Identity` holds those facts; :func:`rewrite` turns a recorded object into the
same object for another node by replacing each fact where it occurs as a whole value.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nvml_mock_engine.config import EngineConfig, resolve_config
from nvml_mock_engine.profiles import FabricDefaults
from nvml_mock_engine.render import derive_gpu

__all__ = ["Fabric", "Identity", "node_identity", "rewrite"]


@dataclass(frozen=True)
class Fabric:
    """A node's place in an NVLink fabric: its domain's cluster UUID and its clique id."""

    cluster_uuid: str
    clique_id: int

    @property
    def clique(self) -> str:
        """The ``<clusterUuid>.<cliqueId>`` form GFD's label and the DRA driver use."""
        return f"{self.cluster_uuid}.{self.clique_id}"


@dataclass(frozen=True)
class Identity:
    """What differs between two mock nodes of one profile."""

    node: str
    profile: str
    gpu_uuids: tuple[str, ...]
    bus_ids: tuple[str, ...]
    fabric: Fabric | None

    def to_data(self) -> dict[str, Any]:
        """The identity as a fixture keeps it."""
        return {
            "node": self.node,
            "profile": self.profile,
            "gpuUuids": list(self.gpu_uuids),
            "busIds": list(self.bus_ids),
            "fabric": None
            if self.fabric is None
            else {"clusterUuid": self.fabric.cluster_uuid, "cliqueId": self.fabric.clique_id},
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Identity:
        """Read an identity back from a fixture."""
        fabric = data.get("fabric")
        return cls(
            node=str(data["node"]),
            profile=str(data["profile"]),
            gpu_uuids=tuple(str(u) for u in data["gpuUuids"]),
            bus_ids=tuple(str(b) for b in data["busIds"]),
            fabric=None
            if fabric is None
            else Fabric(str(fabric["clusterUuid"]), int(fabric["cliqueId"])),
        )


@functools.lru_cache(maxsize=64)
def _base_config(profile: str, count: int) -> EngineConfig:
    """The engine's config of a profile, resolved once (a fleet has thousands of nodes)."""
    return resolve_config(profile=profile, count=count, node="identity-base")


@functools.lru_cache(maxsize=16384)
def node_identity(profile: str, node: str, count: int, fabric: Fabric | None) -> Identity:
    """The identity the engine gives ``node``: the derivation a real mock node's staging runs.

    A fabric-attached board outside any clique keeps its profile's fabric identity, as a
    real mock node without a topology entry does; a board without fabric has none.
    """
    base = _base_config(profile, count)
    engine_fabric: FabricDefaults | None = None
    if base.fabric is None:
        fabric = None
    elif fabric is None:
        engine_fabric = base.fabric
        fabric = Fabric(base.fabric.cluster_uuid, base.fabric.clique_id)
    else:
        fabric = Fabric(fabric.cluster_uuid.lower(), fabric.clique_id)
        engine_fabric = FabricDefaults(fabric.cluster_uuid, fabric.clique_id)
    config = dataclasses.replace(base, node=node, fabric=engine_fabric)
    gpus = [derive_gpu(config, index) for index in range(count)]
    return Identity(
        node=node,
        profile=config.profile.key,
        gpu_uuids=tuple(str(g["uuid"]) for g in gpus),
        bus_ids=tuple(str(g["pci_bus_id"]) for g in gpus),
        fabric=fabric,
    )


def _spellings(bus_id: str) -> tuple[str, str, str]:
    """The spellings of a bus id components publish: NVML's 8-digit domain and sysfs's 4."""
    return (bus_id, bus_id.lower(), bus_id[4:].lower())


def _table(recorded: Identity, target: Identity) -> dict[str, str]:
    if len(recorded.gpu_uuids) != len(target.gpu_uuids):
        raise ValueError(
            f"cannot map {len(recorded.gpu_uuids)} recorded GPUs onto {len(target.gpu_uuids)}"
        )
    table: dict[str, str] = {recorded.node: target.node}
    for old, new in zip(recorded.gpu_uuids, target.gpu_uuids, strict=True):
        table[old] = new
        table[old.lower()] = new.lower()
    for old, new in zip(recorded.bus_ids, target.bus_ids, strict=True):
        for spelling, replacement in zip(_spellings(old), _spellings(new), strict=True):
            table[spelling] = replacement
    if recorded.fabric is not None and target.fabric is not None:
        table[recorded.fabric.clique] = target.fabric.clique
        table[recorded.fabric.cluster_uuid] = target.fabric.cluster_uuid
    return {old: new for old, new in table.items() if old != new}


def rewrite(value: Any, recorded: Identity, target: Identity) -> Any:
    """``value`` (JSON-shaped) with every identity fact of ``recorded`` replaced by ``target``'s.

    Only whole string values are replaced, and a name with the node as its prefix (a slice's
    pool, a label value) keeps its tail: nothing is matched inside an unrelated string.
    """
    table = _table(recorded, target)
    prefix = recorded.node + "-"

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            if item in table:
                return table[item]
            if item.startswith(prefix) and recorded.node != target.node:
                return target.node + item[len(recorded.node) :]
            return item
        if isinstance(item, list):
            return [walk(x) for x in item]
        if isinstance(item, dict):
            return {
                walk(k) if isinstance(k, str) and k in table else k: walk(v)
                for k, v in item.items()
            }
        return item

    return walk(value)
