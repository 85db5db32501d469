"""nvml-mock-exporter: GPU metrics under dcgm-exporter's names, read through NVML.

A daemon that reads every GPU of the node through NVML (nvidia-ml-py over whichever
``libnvidia-ml.so.1`` the loader finds: the mock library on an nvml-mock node) and serves
Prometheus text with dcgm-exporter 4.x's family names, types, HELP texts and label keys, so
that dashboards, alert rules and fault observers written for dcgm-exporter work unmodified.
"""

from nvml_mock_exporter._version import __version__

__all__ = ["__version__"]
