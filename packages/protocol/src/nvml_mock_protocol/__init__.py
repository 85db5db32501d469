"""Shared wire contracts of nvml-mock.

Every service imports this package and none imports another service; what two
parts must agree on (NRI messages and framing, topology documents, HTTP
schemas, env var names and paths) is defined here once.

The topology and identity names below are resolved on first use: tools that run
inside workload containers (check-fabric, nvidia-smi) import
``nvml_mock_protocol.names`` and must not pay for pydantic at start-up.
"""

from __future__ import annotations

from nvml_mock_protocol._version import __version__

# The TYPE_CHECKING = False idiom, not typing's: see nvml_mock_protocol.names.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from nvml_mock_protocol.identity import (
        REVISION_HEADER,
        ErrorBody,
        NodeIdentity,
        TopologyResponse,
    )
    from nvml_mock_protocol.topology import (
        TOPOLOGY_VERSION,
        Clique,
        Domain,
        NodePlacement,
        TopologyDocument,
        TopologyError,
        check_node_name,
        node_name_problem,
        parse_topology,
        read_topology_file,
        validate_topology_data,
    )

_LAZY = {
    "TopologyDocument": "topology",
    "Domain": "topology",
    "Clique": "topology",
    "NodePlacement": "topology",
    "TopologyError": "topology",
    "parse_topology": "topology",
    "read_topology_file": "topology",
    "validate_topology_data": "topology",
    "node_name_problem": "topology",
    "check_node_name": "topology",
    "TOPOLOGY_VERSION": "topology",
    "NodeIdentity": "identity",
    "TopologyResponse": "identity",
    "ErrorBody": "identity",
    "REVISION_HEADER": "identity",
}

__all__ = [
    "REVISION_HEADER",
    "TOPOLOGY_VERSION",
    "Clique",
    "Domain",
    "ErrorBody",
    "NodeIdentity",
    "NodePlacement",
    "TopologyDocument",
    "TopologyError",
    "TopologyResponse",
    "__version__",
    "check_node_name",
    "node_name_problem",
    "parse_topology",
    "read_topology_file",
    "validate_topology_data",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
