"""nvml-mock-cuda: a mock ``libcuda.so.1`` whose devices are the mock NVML library's GPUs.

The Python side is small: where the built library lives (:mod:`.library`) and the per-profile
device attributes NVML does not carry (:mod:`.attributes`, generated into the C library).
"""

from nvml_mock_cuda._version import __version__

__all__ = ["__version__"]
