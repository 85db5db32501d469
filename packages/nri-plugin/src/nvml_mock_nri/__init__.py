"""containerd NRI plugin that injects the nvml-mock overlay into every container.

One plugin runs per node. On every CreateContainer it bind-mounts the staged
overlay read-only, points ``PATH``/``LD_LIBRARY_PATH`` at it, tells the mock
library where its state is and, when the node belongs to a ComputeDomain, what
its fabric identity is; device nodes are added only on opt-in.
"""

from nvml_mock_nri._version import __version__

__all__ = ["__version__"]
