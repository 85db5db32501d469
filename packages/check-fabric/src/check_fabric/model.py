"""What check-fabric reads and decides, as plain immutable values.

The NVML reader fills these, the checks compare them and the renderers print
them. Keeping them free of ctypes and I/O lets the comparison logic and the
output formats be tested on their own, and lets the JSON document be built
from the same values the text output shows.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

ZERO_CLUSTER_UUID = "00000000-0000-0000-0000-000000000000"
"""What a GPU reports as clusterUuid when it belongs to no fabric partition."""

UINT32_MAX = 0xFFFFFFFF

_STATE_NAMES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
_HEALTH_SUMMARY_NAMES = {0: "not_supported", 1: "healthy", 2: "unhealthy", 3: "limited_capacity"}
STATE_COMPLETED = 3


class ExitCode(enum.IntEnum):
    """The process exit status; scripts written for the reference tool rely on 0, 1 and 2."""

    OK = 0
    """Every GPU reports a fabric identity, and every check passed."""
    ERROR = 1
    """Something failed (bad flag or env value, NVML error, topology service unusable)."""
    NOT_SUPPORTED = 2
    """No mismatch, but at least one GPU (or the node, with no GPU at all) has no fabric info."""
    MISMATCH = 3
    """GPUs disagree with each other, with an expectation, or with the topology service."""


def state_name(code: int) -> str:
    """``NVML_GPU_FABRIC_STATE_*`` as the reference prints it; ``unknown`` for anything else."""
    return _STATE_NAMES.get(code, "unknown")


def health_summary_name(code: int) -> str:
    """``NVML_GPU_FABRIC_HEALTH_SUMMARY_*`` in snake case; ``unknown`` for anything else."""
    return _HEALTH_SUMMARY_NAMES.get(code, "unknown")


def format_cluster_uuid(raw: bytes) -> str:
    """Render the 16 raw bytes NVML returns as a lowercase ``8-4-4-4-12`` UUID."""
    if len(raw) != 16:
        raise ValueError(f"a cluster UUID is 16 bytes, got {len(raw)}")
    return str(uuid.UUID(bytes=bytes(raw)))


def normalize_cluster_uuid(text: str) -> str:
    """Parse a UUID given by a person or a service into the form NVML's bytes render to.

    Raises ``ValueError`` with a message naming the value when it is not a UUID.
    """
    stripped = text.strip()
    try:
        parsed = uuid.UUID(stripped)
    except ValueError:
        raise ValueError(f"{text!r} is not a UUID (want 8-4-4-4-12 hex digits)") from None
    return str(parsed)


@dataclass(frozen=True, slots=True)
class Identity:
    """A ComputeDomain identity: the cluster UUID and the clique within it."""

    cluster_uuid: str
    clique_id: int

    def describe(self) -> str:
        return f"clusterUuid {self.cluster_uuid} cliqueId {self.clique_id}"


@dataclass(frozen=True, slots=True)
class FabricInfo:
    """One GPU's answer to ``nvmlDeviceGetGpuFabricInfo[V]``."""

    cluster_uuid: str
    clique_id: int
    state: int
    status: int
    """The in-struct ``nvmlReturn_t`` of the fabric probe (0 = success)."""
    health_mask: int | None
    """Raw ``healthMask`` (v2 and later); ``None`` when read through v1."""
    health_summary: int | None
    """``healthSummary`` (v3); ``None`` when read through v1 or v2."""
    api: str
    """Which entry point answered: ``v3``/``v2`` (``…InfoV``) or ``v1``."""

    @property
    def identity(self) -> Identity:
        return Identity(self.cluster_uuid, self.clique_id)

    @property
    def registered(self) -> bool:
        """True when fabric registration completed successfully."""
        return self.state == STATE_COMPLETED and self.status == 0


@dataclass(frozen=True, slots=True)
class GpuFabric:
    """One GPU as check-fabric saw it."""

    index: int
    uuid: str
    fabric: FabricInfo | None
    """``None`` when NVML answered ``NVML_ERROR_NOT_SUPPORTED``."""


@dataclass(frozen=True, slots=True)
class TopologyAnswer:
    """What the topology service says about one node."""

    url: str
    node: str
    identity: Identity | None
    """``None`` when the service answered 404: the node is in no clique."""
    domain: str | None = None
    revision: int | None = None
    detail: str | None = None
    """The service's ``detail`` text on a 404."""
