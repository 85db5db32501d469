"""check-fabric: reads every GPU's NVLink fabric identity through NVML and checks it.

A consumer of the mock (or of real NVML): it loads ``libnvidia-ml.so.1`` through
NVIDIA's own Python binding, prints the identity each GPU reports in the
reference tool's format, and verifies that the GPUs agree with each other,
with expected values, and with the topology service's answer for the node.
"""

from check_fabric._version import __version__
from check_fabric.cli import main
from check_fabric.model import ExitCode

__all__ = ["ExitCode", "__version__", "main"]
