"""``topo -C`` (the NUMA node of the CPUs closest to a GPU) and ``topo -n`` (the GPUs nearest
to one at a traversal level), both for the one GPU ``-i`` names.

``topo -C -i 0`` prints ``NUMA IDs of closest CPU: 0``, as real drivers do (scripts that bind
a process with ``numactl`` parse that line). No real ``topo -n`` output could be found, so its
format follows the tool's own description: the level is one of the six traversal paths
(``0`` a single PCIe switch on a dual-GPU board, ``1`` a single PCIe switch, ``2`` several
switches, ``3`` a PCIe host bridge, ``4`` an on-CPU link between host bridges, ``5`` an SMP
link between NUMA nodes), and the answer names each GPU NVML finds at that level or nearer,
one ``GPU<index>`` per line, in index order.
"""

from __future__ import annotations

from ._nvml import NvmlError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._nvml import Device

LEVELS = {"0": 0, "1": 10, "2": 20, "3": 30, "4": 40, "5": 50}
"""``topo -n`` traversal paths -> ``nvmlGpuTopologyLevel_t``."""


def closest_cpu(device: Device) -> str:
    """``NUMA IDs of closest CPU: N`` (``N/A`` when NVML cannot say)."""
    try:
        node = str(device.numa_node())
    except NvmlError:
        node = "N/A"
    return f"NUMA IDs of closest CPU: {node}\n"


def nearest(device: Device, level: int, everything: list[Device]) -> str:
    """One ``GPU<index>`` line per GPU at ``level`` or nearer (indices of this view)."""
    found = {handle.value for handle in device.nearest_gpus(level)}
    lines = [f"GPU{d.index}" for d in everything if d.handle.value in found]
    return "".join(line + "\n" for line in lines)
