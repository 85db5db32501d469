"""nvml-mock-node: a node's mock driver installation and its agent.

The staging DaemonSet's program: it lays out the overlay a container mounts (``stage``: the
driver root, the ``/proc`` and PCI sysfs trees, the device nodes, the launchers and the
overlay's own Python runtime), delivers those surfaces into containers (``surfaces_hook``,
an OCI hook) and applies the topology service's scenarios to the node's live layer
(``agent``). It builds on nvml-mock-engine, which renders the board and builds the library;
its commands keep the engine's name (``nvml-mock-engine stage``, ``nvml-mock-engine agent``).
"""

from nvml_mock_node._version import __version__

__all__ = ["__version__"]
