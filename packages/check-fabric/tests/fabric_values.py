"""Builders for the plain values the checks and renderers take."""

from __future__ import annotations

from check_fabric.model import FabricInfo, GpuFabric

UUID_A = "00000000-0000-0000-0000-0000000000cd"
UUID_B = "11111111-2222-3333-4444-555555555555"


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
