"""The asyncio transport: one NRI socket, two ttrpc connections over it.

:class:`NriConnection` is an :class:`asyncio.Protocol` that runs the mux and
ttrpc decoders of :mod:`~nvml_mock_protocol.nri.mux` and
:mod:`~nvml_mock_protocol.nri.ttrpc` over a unix socket. One mux ConnID is
served (requests from the peer are dispatched to handlers) and the other is
used to call the peer; the plugin stub serves ConnID 1 and calls on ConnID 2,
the runtime test double the other way round. Both sides share this class so
they share every framing rule.

Failure policy: a peer that breaks framing loses its connection, with a
warning naming the reason; nothing propagates into the event loop, so a
process serving many peers lives on. Handler exceptions become ttrpc error
statuses (``UNKNOWN`` unless the handler raised :class:`TtrpcError`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from os import PathLike
from typing import TYPE_CHECKING, Final, NamedTuple

from google.protobuf.message import DecodeError

from nvml_mock_protocol.nri import ttrpc_pb2
from nvml_mock_protocol.nri.errors import (
    ConnectionClosedError,
    DeadlineExceededError,
    MessageTooLargeError,
    ProtocolError,
    TtrpcError,
)
from nvml_mock_protocol.nri.mux import (
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    MuxDecoder,
    encode_frames,
)
from nvml_mock_protocol.nri.ttrpc import (
    Code,
    Message,
    MessageType,
    OversizedMessage,
    TtrpcDecoder,
    encode_message,
)

if TYPE_CHECKING:
    from nvml_mock_protocol.nri.threaded import ThreadedConnection

logger = logging.getLogger(__name__)

READ_SIZE: Final = 64 * 1024
"""Bytes asked of one read of the socket (both transports). Not asyncio's 256 KiB: a buffer
that large is an ``mmap`` and ``munmap`` of the allocator on every read, some 12 µs, more
than the rest of a small request's parsing (measured on a unix socket pair, Python 3.11,
glibc)."""


class CallContext(NamedTuple):
    """What a handler knows about the call it serves (immutable; a tuple, because one is
    made per request and a frozen dataclass cost several times the request's parse)."""

    service: str
    method: str
    stream_id: int
    timeout: float | None
    """The caller's deadline in seconds (from ``timeout_nano``), ``None`` if unbounded."""
    metadata: tuple[tuple[str, str], ...]
    connection: NriConnection | ThreadedConnection


Handler = Callable[[bytes, CallContext], Awaitable[bytes]]
"""Serves one method: serialized request in, serialized response out."""
ServiceTable = Mapping[str, Mapping[str, Handler]]
"""``{service name: {method name: handler}}``; anything absent answers UNIMPLEMENTED."""


class _Channel:
    """One ttrpc connection (client and server roles) over one mux ConnID."""

    def __init__(self, owner: NriConnection, conn_id: int, services: ServiceTable) -> None:
        self._owner = owner
        self._conn_id = conn_id
        self._services = services
        self._decoder = TtrpcDecoder()
        self._next_stream_id = 1
        self._last_served = 0
        self._pending: dict[int, asyncio.Future[ttrpc_pb2.Response]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def receive(self, data: bytes) -> None:
        for message in self._decoder.feed(data):
            if isinstance(message, OversizedMessage):
                self._on_oversized(message)
            elif message.type is MessageType.REQUEST:
                self._on_request(message)
            elif message.type is MessageType.RESPONSE:
                self._on_response(message)
            else:
                logger.debug(
                    "%s: ignoring ttrpc data message on conn %d stream %d",
                    self._owner.label,
                    self._conn_id,
                    message.stream_id,
                )

    def _on_oversized(self, message: OversizedMessage) -> None:
        text = f"message length {message.length} exceeds maximum message size"
        if message.type is MessageType.REQUEST:
            self._send_status(message.stream_id, Code.RESOURCE_EXHAUSTED, text)
        elif message.type is MessageType.RESPONSE:
            future = self._pending.pop(message.stream_id, None)
            if future is not None and not future.done():
                future.set_exception(TtrpcError(Code.RESOURCE_EXHAUSTED, text))

    def _on_response(self, message: Message) -> None:
        future = self._pending.pop(message.stream_id, None)
        if future is None or future.done():
            logger.debug(
                "%s: response for unknown stream %d on conn %d dropped",
                self._owner.label,
                message.stream_id,
                self._conn_id,
            )
            return
        response = ttrpc_pb2.Response()
        try:
            response.ParseFromString(message.payload)
        except DecodeError as exc:
            future.set_exception(ProtocolError(f"malformed ttrpc response: {exc}"))
            return
        future.set_result(response)

    def _on_request(self, message: Message) -> None:
        stream_id = message.stream_id
        if stream_id % 2 == 0:
            self._send_status(stream_id, Code.INVALID_ARGUMENT, "StreamID must be odd")
            return
        if stream_id <= self._last_served:
            self._send_status(
                stream_id, Code.INVALID_ARGUMENT, "StreamID cannot be re-used and must increment"
            )
            return
        self._last_served = stream_id
        request = ttrpc_pb2.Request()
        try:
            request.ParseFromString(message.payload)
        except DecodeError as exc:
            self._send_status(stream_id, Code.INVALID_ARGUMENT, f"malformed request: {exc}")
            return
        methods = self._services.get(request.service)
        if methods is None:
            self._send_status(stream_id, Code.UNIMPLEMENTED, f"service {request.service}")
            return
        handler = methods.get(request.method)
        if handler is None:
            self._send_status(stream_id, Code.UNIMPLEMENTED, f"method {request.method}")
            return
        context = CallContext(
            service=request.service,
            method=request.method,
            stream_id=stream_id,
            timeout=request.timeout_nano / 1e9 if request.timeout_nano > 0 else None,
            metadata=tuple((kv.key, kv.value) for kv in request.metadata),
            connection=self._owner,
        )
        task = asyncio.get_running_loop().create_task(
            self._serve(handler, request.payload, context),
            name=f"ttrpc {request.method} #{stream_id}",
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, handler: Handler, payload: bytes, context: CallContext) -> None:
        try:
            result = await handler(payload, context)
        except TtrpcError as exc:
            self._send_status(context.stream_id, exc.code, exc.message)
        except Exception as exc:
            logger.exception("%s: handler for %s failed", self._owner.label, context.method)
            self._send_status(context.stream_id, Code.UNKNOWN, str(exc) or type(exc).__name__)
        else:
            response = ttrpc_pb2.Response(payload=result).SerializeToString()
            try:
                self._send(context.stream_id, MessageType.RESPONSE, response)
            except MessageTooLargeError as exc:
                self._send_status(context.stream_id, Code.RESOURCE_EXHAUSTED, str(exc))

    def _send(self, stream_id: int, message_type: MessageType, body: bytes) -> None:
        self._owner.write_frames(self._conn_id, encode_message(stream_id, message_type, body))

    def _send_status(self, stream_id: int, code: int, text: str) -> None:
        response = ttrpc_pb2.Response(status=ttrpc_pb2.Status(code=code, message=text))
        self._send(stream_id, MessageType.RESPONSE, response.SerializeToString())

    async def call(self, service: str, method: str, payload: bytes, timeout: float | None) -> bytes:
        if self._owner.closed:
            raise ConnectionClosedError(f"{self._owner.label}: connection is closed")
        stream_id = self._next_stream_id
        request = ttrpc_pb2.Request(
            service=service,
            method=method,
            payload=payload,
            timeout_nano=int(timeout * 1e9) if timeout else 0,
        )
        body = encode_message(stream_id, MessageType.REQUEST, request.SerializeToString())
        self._next_stream_id += 2
        future: asyncio.Future[ttrpc_pb2.Response] = asyncio.get_running_loop().create_future()
        self._pending[stream_id] = future
        try:
            self._owner.write_frames(self._conn_id, body)
            if timeout:
                try:
                    async with asyncio.timeout(timeout):
                        response = await future
                except TimeoutError:
                    raise DeadlineExceededError(f"{service}/{method}", timeout) from None
            else:
                response = await future
        finally:
            self._pending.pop(stream_id, None)
        if response.HasField("status") and response.status.code != Code.OK:
            raise TtrpcError(response.status.code, response.status.message)
        return response.payload

    def shutdown(self, reason: str) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionClosedError(f"{self._owner.label}: {reason}"))
        self._pending.clear()
        for task in list(self._tasks):
            task.cancel()


class CloseSignal:
    """When a connection closed and why, for its waiters and close callbacks: one for each
    transport (:class:`NriConnection`, the threaded one), settled once, on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._future: asyncio.Future[str] = loop.create_future()
        self._callbacks: list[Callable[[str], None]] = []

    @property
    def settled(self) -> bool:
        return self._future.done()

    async def wait(self) -> str:
        return await asyncio.shield(self._future)

    def add(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` once settled (at once when it already is)."""
        if self._future.done():
            callback(self._future.result())
        else:
            self._callbacks.append(callback)

    def settle(self, reason: str, label: str) -> None:
        """Wake the waiters and run the callbacks; a failing callback is logged (as the
        connection *label*, which may have been renamed since), the rest run."""
        self._future.set_result(reason)
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback(reason)
            except Exception:
                logger.exception("%s: close callback failed", label)


class NriConnection(asyncio.Protocol):
    """One NRI socket: mux framing plus a served and a calling ttrpc connection.

    Build it with :meth:`plugin_side` or :meth:`runtime_side`, and attach it
    to a socket with :func:`open_connection` (or as a protocol factory of
    ``loop.create_unix_server``).
    """

    def __init__(
        self,
        *,
        served_conn: int,
        services: ServiceTable,
        label: str,
    ) -> None:
        if served_conn not in (PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN):
            raise ValueError(f"served_conn must be 1 or 2, got {served_conn}")
        calling_conn = (
            RUNTIME_SERVICE_CONN if served_conn == PLUGIN_SERVICE_CONN else PLUGIN_SERVICE_CONN
        )
        self.label = label
        self._mux = MuxDecoder()
        self._served = _Channel(self, served_conn, services)
        self._calling = _Channel(self, calling_conn, {})
        self._channels = {served_conn: self._served, calling_conn: self._calling}
        self._transport: asyncio.Transport | None = None
        self._closed = False
        self._close_reason: str | None = None
        self._close_signal = CloseSignal(asyncio.get_running_loop())

    @classmethod
    def plugin_side(cls, services: ServiceTable, label: str = "plugin") -> NriConnection:
        """The plugin's end: serves ConnID 1, calls the runtime on ConnID 2."""
        return cls(served_conn=PLUGIN_SERVICE_CONN, services=services, label=label)

    @classmethod
    def runtime_side(cls, services: ServiceTable, label: str = "runtime") -> NriConnection:
        """The runtime's end: serves ConnID 2, calls the plugin on ConnID 1."""
        return cls(served_conn=RUNTIME_SERVICE_CONN, services=services, label=label)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        # The selector transport's read size (256 KiB by default) makes every read an mmap
        # and munmap of the allocator, some 12 us; NRI messages are small.
        if isinstance(getattr(transport, "max_size", None), int):
            transport.max_size = READ_SIZE  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        try:
            for conn_id, payload in self._mux.feed(data):
                channel = self._channels.get(conn_id)
                if channel is None:
                    logger.debug(
                        "%s: dropped %d bytes for conn %d", self.label, len(payload), conn_id
                    )
                    continue
                channel.receive(payload)
        except ProtocolError as exc:
            self.abort(f"protocol error: {exc}")

    def eof_received(self) -> bool:
        self._close_reason = self._close_reason or "peer closed the connection"
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        reason = self._close_reason or (
            f"connection lost: {exc}" if exc else "peer closed the connection"
        )
        self._finish(reason)

    @property
    def closed(self) -> bool:
        """True once the connection is closing or closed."""
        return self._closed

    @property
    def close_reason(self) -> str | None:
        """Why the connection closed; ``None`` while it is open."""
        return self._close_reason if self._closed else None

    async def call(
        self, service: str, method: str, payload: bytes, *, timeout: float | None = None
    ) -> bytes:
        """Call ``service/method`` on the peer; return the response payload.

        Raises :class:`TtrpcError` for a non-OK status, :class:`DeadlineExceededError`
        after ``timeout`` seconds, :class:`ConnectionClosedError` when the
        connection ends first, and :class:`MessageTooLargeError` (before sending)
        for a request past 4 MiB.
        """
        return await self._calling.call(service, method, payload, timeout)

    def write_frames(self, conn_id: int, data: bytes) -> None:
        """Send ``data`` on ``conn_id`` as mux frames of at most 4096 bytes."""
        transport = self._transport
        if self._closed or transport is None or transport.is_closing():
            return
        transport.write(encode_frames(conn_id, data))

    def close(self, reason: str = "closed locally") -> None:
        """Close after flushing what was written."""
        if self._closed:
            return
        self._close_reason = reason
        self._closed = True
        if self._transport is not None:
            self._transport.close()
        else:
            self._finish(reason)

    def abort(self, reason: str) -> None:
        """Drop the connection at once, logging ``reason`` as a warning."""
        if self._closed:
            return
        logger.warning("closing connection %s: %s", self.label, reason)
        self._close_reason = reason
        self._closed = True
        if self._transport is not None:
            self._transport.abort()
        else:
            self._finish(reason)

    async def wait_closed(self) -> str:
        """Wait until the connection is closed; return the reason."""
        return await self._close_signal.wait()

    def add_close_callback(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` once the connection has closed."""
        self._close_signal.add(callback)

    def _finish(self, reason: str) -> None:
        self._closed = True
        if self._close_signal.settled:
            return
        self._close_reason = self._close_reason or reason
        self._served.shutdown(self._close_reason)
        self._calling.shutdown(self._close_reason)
        self._close_signal.settle(self._close_reason, self.label)


async def open_connection(
    factory: Callable[[], NriConnection],
    *,
    path: str | PathLike[str] | None = None,
    sock: socket.socket | None = None,
) -> NriConnection:
    """Connect ``factory()`` to a unix socket ``path`` or an already connected ``sock``."""
    if (path is None) == (sock is None):
        raise ValueError("pass exactly one of path or sock")
    loop = asyncio.get_running_loop()
    if sock is not None:
        _, protocol = await loop.connect_accepted_socket(factory, sock)
    else:
        _, protocol = await loop.create_unix_connection(factory, str(path))
    return protocol
