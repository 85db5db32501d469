"""nvml-mock topology service: each node's ComputeDomain identity over HTTP.

Run it as ``nvml-mock-topology-service`` or ``python -m nvml_mock_topology``;
embed it with :func:`create_app` over a :class:`TopologyStore`.
"""

from nvml_mock_topology._version import __version__
from nvml_mock_topology.api import create_app
from nvml_mock_topology.cli import main
from nvml_mock_topology.store import TopologyStore

__all__ = ["TopologyStore", "__version__", "create_app", "main"]
