"""Exceptions of the NRI wire layer (a branch of the package's tree: ``nvml_mock_protocol.errors``).

One base class so callers can catch everything this layer raises::

    NriError
    ├── ProtocolError            the peer broke framing; the connection is closed
    │   └── MessageTooLargeError      a length past the limit, refused before allocation
    ├── TtrpcError               a call came back with a non-OK status (has .code)
    │   └── DeadlineExceededError     no answer within the call's timeout
    ├── ConnectionClosedError         the connection ended while a call was in flight
    ├── RegistrationError        the runtime refused RegisterPlugin
    ├── PluginError              (runtime double) a plugin failed an event
    └── AdjustmentConflictError       (runtime double) two plugins set the same entry

Retryable vs fatal follows containerd: a non-OK status fails one operation and
keeps the connection; a deadline, a protocol error or a closed connection ends
the plugin's connection.
"""

from __future__ import annotations

from nvml_mock_protocol.errors import ProtocolPackageError


class NriError(ProtocolPackageError):
    """Base class of every error raised by ``nvml_mock_protocol.nri``."""


class ProtocolError(NriError):
    """The peer sent bytes that do not follow mux or ttrpc framing."""


class MessageTooLargeError(ProtocolError):
    """A declared length exceeds the limit; no buffer was allocated for it."""

    def __init__(self, what: str, length: int, limit: int) -> None:
        super().__init__(f"{what} length {length} exceeds the limit of {limit} bytes")
        self.length = length
        self.limit = limit


class TtrpcError(NriError):
    """A ttrpc call answered with a non-OK status, or a handler refusing a call.

    Raise it from a handler to answer with a specific status code; any other
    exception from a handler answers ``UNKNOWN`` (2), as a Go handler's plain
    error does.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"ttrpc status {code}: {message}")
        self.code = code
        self.message = message


class DeadlineExceededError(TtrpcError):
    """The peer did not answer within the call's timeout."""

    def __init__(self, what: str, timeout: float) -> None:
        super().__init__(4, f"{what}: context deadline exceeded after {timeout:g}s")
        self.timeout = timeout


class ConnectionClosedError(NriError):
    """The connection closed before a call completed (or a call was made after close)."""


class RegistrationError(NriError):
    """The runtime refused the plugin's RegisterPlugin call."""


class PluginError(NriError):
    """A plugin answered an event with an error, failing the runtime operation.

    Raised by the runtime test double, mirroring containerd's
    "failed to get NRI adjustment for container" failure.
    """

    def __init__(self, plugin: str, method: str, code: int, message: str) -> None:
        super().__init__(f"plugin {plugin} failed {method}: status {code}: {message}")
        self.plugin = plugin
        self.method = method
        self.code = code
        self.message = message


class AdjustmentConflictError(NriError):
    """(runtime double) Two plugins adjusted the same entry of one container.

    containerd fails the container creation with the same message.
    """

    def __init__(self, field: str, key: str, plugin: str, owner: str) -> None:
        super().__init__(f'plugins "{plugin}" and "{owner}" both tried to set {field} {key}')
        self.field = field
        self.key = key
        self.plugin = plugin
        self.owner = owner
