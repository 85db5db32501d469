"""The fleet: which fake nodes exist, of which profile, in which clique.

A fleet comes from a topology document (every node it places, or its first ``nodes``) or is
planned as one: ``nodes`` nodes in cliques of ``clique_size`` (18 by default, an NVL72 rack
of 4-GPU trays), ``cliques_per_domain`` cliques per ComputeDomain, clique ids numbered across
the whole document so that a scenario's ``cliques: [3]`` names one clique. Every check runs
before anything is made: a count the document cannot hold, a clique with more GPUs than one
NVLink domain carries, a profile without recorded truth.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nvml_mock_protocol.topology import TopologyDocument, validate_topology_data

from nvml_mock_kwok.errors import PlanError
from nvml_mock_kwok.identity import Fabric

__all__ = [
    "DEFAULT_CLIQUE_SIZE",
    "MAX_CLIQUE_GPUS",
    "FakeNode",
    "Fleet",
    "fleet_from_document",
    "plan_document",
]

DEFAULT_CLIQUE_SIZE: Final = 18
"""Nodes per clique by default: the compute trays of one NVL72 rack."""
MAX_CLIQUE_GPUS: Final = 72
"""GPUs one NVLink domain holds by default (NVL72); ``--max-clique-gpus`` moves it."""
_NAMESPACE: Final = uuid.UUID("8c2f0e0a-77a8-4f4e-9a57-6e766d6c6d6b")


@dataclass(frozen=True)
class FakeNode:
    """One fake node: its name, variant of recorded truth, and fabric placement."""

    name: str
    variant: str
    domain: str | None
    fabric: Fabric | None


@dataclass(frozen=True)
class Fleet:
    """The fake nodes to make, and the topology document that places them."""

    nodes: tuple[FakeNode, ...]
    document: TopologyDocument


def plan_document(
    nodes: int,
    *,
    clique_size: int = DEFAULT_CLIQUE_SIZE,
    cliques_per_domain: int = 1,
    prefix: str = "kwok-gpu-",
    domain_prefix: str = "nvl72-",
) -> TopologyDocument:
    """A topology document for ``nodes`` nodes; every domain's UUID derived from its name."""
    if nodes < 1:
        raise PlanError(f"nodes must be at least 1, got {nodes}")
    if clique_size < 1:
        raise PlanError(f"clique size must be at least 1, got {clique_size}")
    if cliques_per_domain < 1:
        raise PlanError(f"cliques per domain must be at least 1, got {cliques_per_domain}")
    width = max(5, len(str(nodes - 1)))
    names = [f"{prefix}{i:0{width}d}" for i in range(nodes)]
    cliques = [names[i : i + clique_size] for i in range(0, nodes, clique_size)]
    domains: list[dict[str, Any]] = []
    for start in range(0, len(cliques), cliques_per_domain):
        name = f"{domain_prefix}{start // cliques_per_domain:04d}"
        domains.append(
            {
                "name": name,
                "uuid": str(uuid.uuid5(_NAMESPACE, name)),
                "cliques": [
                    {"id": start + k, "nodes": members}
                    for k, members in enumerate(cliques[start : start + cliques_per_domain])
                ],
            }
        )
    return validate_topology_data({"version": 1, "domains": domains}, source="planned")


def fleet_from_document(
    document: TopologyDocument,
    *,
    profile: str,
    gpus_per_node: Mapping[str, int],
    fabric_profiles: frozenset[str],
    nodes: int | None = None,
    domain_profiles: Mapping[str, str] | None = None,
    max_clique_gpus: int = MAX_CLIQUE_GPUS,
    only: Sequence[str] | None = None,
) -> Fleet:
    """The fake nodes of ``document`` (its first ``nodes``), checked whole before use.

    ``gpus_per_node`` maps each variant with recorded truth to its GPU count; a variant
    missing from it has no truth. ``only`` keeps just the named nodes (the rest of the
    document being real mock nodes, for a mixed cluster).
    """
    chosen = dict(domain_profiles or {})
    known_domains = {domain.name for domain in document.domains}
    unknown = sorted(set(chosen) - known_domains)
    if unknown:
        raise PlanError(f"domain(s) {', '.join(unknown)} are not in the topology document")
    problems: list[str] = []
    for variant in sorted({profile, *chosen.values()}):
        if variant not in gpus_per_node:
            recorded = ", ".join(sorted(gpus_per_node)) or "none"
            problems.append(f"profile {variant!r} has no recorded truth (recorded: {recorded})")
    if problems:
        raise PlanError("; ".join(problems))
    wanted = set(only) if only is not None else None
    made: list[FakeNode] = []
    for domain in document.domains:
        variant = chosen.get(domain.name, profile)
        attached = variant in fabric_profiles
        for clique in domain.cliques:
            members = [n for n in clique.nodes if wanted is None or n in wanted]
            gpus = len(clique.nodes) * gpus_per_node[variant]
            if attached and gpus > max_clique_gpus:
                problems.append(
                    f"domain {domain.name!r} clique {clique.id} has {len(clique.nodes)} nodes of "
                    f"{gpus_per_node[variant]} {variant} GPUs ({gpus} GPUs); one NVLink domain "
                    f"holds {max_clique_gpus}"
                )
            fabric = Fabric(str(domain.uuid), int(clique.id)) if attached else None
            made.extend(FakeNode(n, variant, domain.name, fabric) for n in members)
    if wanted is not None:
        missing = sorted(wanted - {node.name for node in made})
        if missing:
            problems.append(f"node(s) {', '.join(missing[:5])} are not in the topology document")
    if problems:
        raise PlanError("; ".join(problems))
    if nodes is not None:
        if nodes < 1:
            raise PlanError(f"nodes must be at least 1, got {nodes}")
        if nodes > len(made):
            raise PlanError(
                f"the topology document places {len(made)} node(s); it cannot hold {nodes}"
            )
        made = made[:nodes]
    if not made:
        raise PlanError("the topology document places no node")
    return Fleet(tuple(made), document)
