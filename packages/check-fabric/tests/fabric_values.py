"""Builders for the plain values the checks and renderers take, and shared test constants."""

from __future__ import annotations

from pathlib import Path

from check_fabric.model import FabricInfo, GpuFabric

UUID_A = "00000000-0000-0000-0000-0000000000cd"
UUID_B = "11111111-2222-3333-4444-555555555555"
CD_UUID = UUID_A
"""The demo's ComputeDomain cluster UUID."""
PROFILE_DEFAULT_UUID = "00000000-0000-0000-0000-000000000001"
"""The gb200 profile's fabric identity when nothing overrides it."""


def gpu(
    index: int,
    cluster_uuid: str | None = UUID_A,
    clique: int = 0,
    state: int = 3,
    status: int = 0,
) -> GpuFabric:
    """A GPU; ``cluster_uuid=None`` makes one whose fabric is NOT SUPPORTED."""
    uuid = f"GPU-{index:08x}-0000-0000-0000-000000000000"
    if cluster_uuid is None:
        return GpuFabric(index, uuid, None)
    return GpuFabric(index, uuid, FabricInfo(cluster_uuid, clique, state, status, 0x1AA, 1, "v3"))


def state_uuids(state: Path) -> list[str]:
    """The GPU UUIDs a rendered state holds, in index order (what NVML must report)."""
    return [
        line.partition("=")[2]
        for line in state.read_text().splitlines()
        if line.startswith("uuid=")
    ]


def state_health_mask(state: Path, index: int = 0) -> int:
    """The fabric health mask GPU ``index`` of a rendered state carries (0x1aa when unset)."""
    masks = [
        int(line.partition("=")[2], 0)
        for line in state.read_text().splitlines()
        if line.startswith("fabric_health_mask=")
    ]
    return masks[index] if masks else 0x1AA


def fabric_env(cluster_uuid: str = CD_UUID, clique: int = 1) -> dict[str, str]:
    """The identity env the NRI plugin injects into a container on a ComputeDomain node."""
    return {"MOCK_FABRIC_CLUSTER_UUID": cluster_uuid, "MOCK_FABRIC_CLIQUE_ID": str(clique)}
