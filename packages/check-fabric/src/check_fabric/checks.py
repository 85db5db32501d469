"""The checks and the verdict: pure comparisons over what NVML reported.

Every check looks only at GPUs that returned fabric info; a GPU that answered
NOT_SUPPORTED is reported as such and cannot "agree" or "disagree" with
anything. The verdict's precedence is mismatch (3) over not supported (2) over
ok (0): a contradiction is the more useful thing to report, and a node whose
GPUs have no fabric at all still exits non-zero. Errors (1) never reach here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from check_fabric.model import (
    ZERO_CLUSTER_UUID,
    ExitCode,
    FabricInfo,
    GpuFabric,
    Identity,
    TopologyAnswer,
    state_name,
)


@dataclass(frozen=True, slots=True)
class Expectations:
    """What the caller asked to be true, besides the GPUs agreeing with each other."""

    clique_id: int | None = None
    cluster_uuid: str | None = None
    """Normalized (lowercase ``8-4-4-4-12``)."""
    require_completed: bool = False
    topology: TopologyAnswer | None = None


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's outcome. ``passed`` is ``None`` when it could not run (nothing to compare)."""

    name: str
    passed: bool | None
    detail: str
    requested: bool = True
    """False for the check that always runs (GPU consistency)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of all checks over one reading."""

    exit_code: ExitCode
    identity: Identity | None
    """The identity every fabric GPU shares, or ``None`` (none reports one, or they disagree)."""
    checks: tuple[CheckResult, ...]
    unsupported: tuple[int, ...]
    """Indices of GPUs that answered NOT_SUPPORTED."""

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if c.passed is False)


def _fabric(gpus: Sequence[GpuFabric]) -> list[tuple[int, FabricInfo]]:
    """``(index, fabric info)`` of every GPU that reports fabric info, in order."""
    return [(g.index, g.fabric) for g in gpus if g.fabric is not None]


def check_consistency(gpus: Sequence[GpuFabric]) -> tuple[CheckResult, Identity | None]:
    """All GPUs that report fabric info must share one clusterUuid and cliqueId."""
    groups: dict[Identity, list[int]] = {}
    for index, info in _fabric(gpus):
        groups.setdefault(info.identity, []).append(index)
    if not gpus:
        return CheckResult("consistency", None, "no GPU on this node", False), None
    if not groups:
        return CheckResult("consistency", None, "no GPU reports fabric info", False), None
    if len(groups) == 1:
        (identity, members), *_ = groups.items()
        detail = f"{len(members)} GPU(s) share {identity.describe()}"
        return CheckResult("consistency", True, detail, False), identity
    parts = [
        f"GPU {','.join(map(str, members))}: {ident.describe()}"
        for ident, members in groups.items()
    ]
    return CheckResult("consistency", False, "GPUs disagree: " + "; ".join(parts), False), None


def _expect(name: str, want: str, field: str, got: dict[int, str]) -> CheckResult:
    if not got:
        return CheckResult(name, None, f"not checked: no GPU reports fabric info (want {want})")
    wrong = {i: v for i, v in got.items() if v != want}
    if not wrong:
        return CheckResult(name, True, f"every fabric GPU reports {field} {want}")
    parts = [f"GPU {i} reports {field} {v}" for i, v in wrong.items()]
    return CheckResult(name, False, f"expected {field} {want}, but " + ", ".join(parts))


def check_expected_clique(gpus: Sequence[GpuFabric], clique_id: int) -> CheckResult:
    got = {index: str(info.clique_id) for index, info in _fabric(gpus)}
    return _expect("expect-clique", str(clique_id), "cliqueId", got)


def check_expected_cluster_uuid(gpus: Sequence[GpuFabric], cluster_uuid: str) -> CheckResult:
    got = {index: info.cluster_uuid for index, info in _fabric(gpus)}
    return _expect("expect-cluster-uuid", cluster_uuid, "clusterUuid", got)


def check_completed(gpus: Sequence[GpuFabric]) -> CheckResult:
    """Fabric registration must have completed, with a successful probe status."""
    fabric = _fabric(gpus)
    if not fabric:
        return CheckResult("require-completed", None, "not checked: no GPU reports fabric info")
    bad = [
        f"GPU {index} state {state_name(info.state)} ({info.state})"
        + (f" status {info.status}" if info.status else "")
        for index, info in fabric
        if not info.registered
    ]
    if bad:
        return CheckResult(
            "require-completed", False, "registration not completed: " + ", ".join(bad)
        )
    return CheckResult("require-completed", True, f"{len(fabric)} GPU(s) completed (3)")


def check_topology(gpus: Sequence[GpuFabric], answer: TopologyAnswer) -> CheckResult:
    """NVML must report what the topology service says for this node.

    A node the service places in a clique must show that identity on every fabric
    GPU. A node in no clique (404) must show no registered identity: a GPU whose
    registration completed with a non-zero clusterUuid contradicts the service.
    """
    source = f"topology service ({answer.url}, node {answer.node}"
    if answer.revision is not None:
        source += f", revision {answer.revision}"
    source += ")"
    fabric = _fabric(gpus)
    if answer.identity is None:
        parts = [
            f"GPU {index} reports {info.identity.describe()}"
            for index, info in fabric
            if info.registered and info.cluster_uuid != ZERO_CLUSTER_UUID
        ]
        if parts:
            return CheckResult(
                "topology", False, f"{source} places the node in no clique, but " + ", ".join(parts)
            )
        return CheckResult(
            "topology", True, f"{source} places the node in no clique; no GPU claims one"
        )
    want = answer.identity
    if not fabric:
        return CheckResult(
            "topology",
            None,
            f"not checked: no GPU reports fabric info ({source}: {want.describe()})",
        )
    parts = [
        f"GPU {index} reports {info.identity.describe()}"
        for index, info in fabric
        if info.identity != want
    ]
    if parts:
        return CheckResult(
            "topology", False, f"{source} says {want.describe()}, but " + ", ".join(parts)
        )
    return CheckResult("topology", True, f"{source} agrees: {want.describe()}")


def evaluate(gpus: Sequence[GpuFabric], expect: Expectations) -> Verdict:
    """Run every applicable check and decide the exit code."""
    consistency, identity = check_consistency(gpus)
    checks = [consistency]
    if expect.clique_id is not None:
        checks.append(check_expected_clique(gpus, expect.clique_id))
    if expect.cluster_uuid is not None:
        checks.append(check_expected_cluster_uuid(gpus, expect.cluster_uuid))
    if expect.require_completed:
        checks.append(check_completed(gpus))
    if expect.topology is not None:
        checks.append(check_topology(gpus, expect.topology))
    unsupported = tuple(g.index for g in gpus if g.fabric is None)
    if any(c.passed is False for c in checks):
        code = ExitCode.MISMATCH
    elif unsupported or not gpus:
        code = ExitCode.NOT_SUPPORTED
    else:
        code = ExitCode.OK
    return Verdict(code, identity, tuple(checks), unsupported)
