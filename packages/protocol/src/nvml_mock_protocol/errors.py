"""The exceptions of nvml-mock-protocol: one tree, so a caller can catch all of them.

Each class lives beside the code that raises it (and is importable from there); this module
holds their root and draws the whole tree::

    ProtocolPackageError
    ├── NriError                      (nri.errors) the NRI wire layer
    │   ├── ProtocolError             the peer broke framing; the connection is closed
    │   │   └── MessageTooLargeError  a length past the limit, refused before allocation
    │   ├── TtrpcError                a call came back with a non-OK status (has .code)
    │   │   └── DeadlineExceededError no answer within the call's timeout
    │   ├── ConnectionClosedError     the connection ended while a call was in flight
    │   ├── RegistrationError         the runtime refused RegisterPlugin
    │   ├── PluginError               (runtime double) a plugin failed an event
    │   └── AdjustmentConflictError   (runtime double) two plugins set the same entry
    ├── TopologyError                 (topology) an invalid topology document, every problem
    │                                 listed (also a ValueError)
    └── SettingsError                 (settings) a flag or env value a parser refused, naming
                                      the flag or variable

The services draw their own trees (``nvml_mock_topology.errors``, ``nvml_mock_nri.errors``,
``check_fabric.errors``, ``nvml_mock_engine.errors``, and the live-file contract's
``nvml_mock_live.errors``) and wrap these where they surface them;
no class of one package shares a name with another's of a different meaning.

Kept free of imports: the tools that run in workload containers import ``settings`` and must
stay light.
"""

from __future__ import annotations

__all__ = ["ProtocolPackageError"]


class ProtocolPackageError(Exception):
    """Base class of every error nvml-mock-protocol raises on purpose."""
