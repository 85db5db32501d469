"""Shared wire contracts of nvml-mock.

Every service imports this package and none imports another service; what two
parts must agree on (NRI messages and framing, topology documents, HTTP
schemas, env var names and paths) is defined here once.
"""

from nvml_mock_protocol._version import __version__

__all__ = ["__version__"]
