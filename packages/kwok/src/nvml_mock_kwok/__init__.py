"""Fake GPU nodes on KWOK, field for field what NVIDIA's components publish on the mock."""

from nvml_mock_kwok._version import __version__

__all__ = ["__version__"]
