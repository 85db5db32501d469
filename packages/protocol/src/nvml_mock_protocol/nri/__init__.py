"""containerd NRI over ttrpc, in Python: messages, framing, plugin stub, runtime double.

- :mod:`.api_pb2`: generated NRI messages (``nri.pkg.api.v1alpha1``).
- :mod:`.mux`, :mod:`.ttrpc`: sans-IO framing; :mod:`.connection`: asyncio transport (the
  runtime double's); :mod:`.threaded`: the plugin stub's, a reading thread per socket.
- :class:`Stub` + :class:`Plugin`: write an NRI plugin.
- :class:`RuntimeDouble`: a containerd stand-in for tests and the local demo.
"""

from nvml_mock_protocol.nri import api_pb2
from nvml_mock_protocol.nri.adjustment import AdjustmentMerger
from nvml_mock_protocol.nri.connection import CallContext, NriConnection, open_connection
from nvml_mock_protocol.nri.errors import (
    AdjustmentConflictError,
    ConnectionClosedError,
    DeadlineExceededError,
    MessageTooLargeError,
    NriError,
    PluginError,
    ProtocolError,
    RegistrationError,
    TtrpcError,
)
from nvml_mock_protocol.nri.events import (
    STATE_CHANGE_EVENTS,
    VALID_EVENTS,
    VALID_EVENTS_V0_8,
    Event,
    event_mask,
    events_in_mask,
)
from nvml_mock_protocol.nri.runtime import CreateContainerResult, PluginHandle, RuntimeDouble
from nvml_mock_protocol.nri.stub import (
    NRI_API_VERSION,
    PLUGIN_SERVICE,
    RUNTIME_SERVICE,
    Disconnect,
    Plugin,
    RuntimeInfo,
    Stub,
    check_plugin_identity,
)
from nvml_mock_protocol.nri.threaded import ThreadedConnection, after_reply
from nvml_mock_protocol.nri.ttrpc import Code

__all__ = [
    "NRI_API_VERSION",
    "PLUGIN_SERVICE",
    "RUNTIME_SERVICE",
    "STATE_CHANGE_EVENTS",
    "VALID_EVENTS",
    "VALID_EVENTS_V0_8",
    "AdjustmentConflictError",
    "AdjustmentMerger",
    "CallContext",
    "Code",
    "ConnectionClosedError",
    "CreateContainerResult",
    "DeadlineExceededError",
    "Disconnect",
    "Event",
    "MessageTooLargeError",
    "NriConnection",
    "NriError",
    "Plugin",
    "PluginError",
    "PluginHandle",
    "ProtocolError",
    "RegistrationError",
    "RuntimeDouble",
    "RuntimeInfo",
    "Stub",
    "ThreadedConnection",
    "TtrpcError",
    "after_reply",
    "api_pb2",
    "check_plugin_identity",
    "event_mask",
    "events_in_mask",
    "open_connection",
]
