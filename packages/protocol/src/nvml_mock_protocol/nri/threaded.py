"""The plugin's transport: one NRI socket served by a thread of its own.

:class:`ThreadedConnection` has the same framing rules and the same public face as
:class:`~nvml_mock_protocol.nri.connection.NriConnection` (``call``, ``close``,
``abort``, ``wait_closed``, close callbacks), but the served ConnID is read by a
dedicated thread doing blocking reads on the socket: the runtime's requests are parsed
there and a handler that is a plain function is called right there, its reply written
with one ``sendall`` (the replies to everything one read brought, coalesced). Why: a
request through the asyncio loop pays an ``epoll`` wake-up, a task and two more loop
turns before the handler runs, several times what a small handler costs; the runtime
calls the plugin one request at a time, so that overhead was most of each call.

What still needs the event loop keeps it: a handler that is a coroutine function runs
on the loop (submitted with :func:`asyncio.run_coroutine_threadsafe`; the thread keeps
reading), its reply written when it finishes. The plugin's own calls to the runtime
(RegisterPlugin, UpdateContainers) are made from the loop and resolved there. Writes
from both threads go through one lock, a frame group at a time, so the frames of two
messages never interleave; a runtime that stops reading for :data:`SEND_TIMEOUT`
seconds loses the connection instead of stalling a writer forever.

A plain handler may leave work for after its reply (:func:`after_reply`): the thread
writes the reply, then runs that work, then reads the next request. The runtime then
waits only for the answer, while the plugin's bookkeeping overlaps what the runtime does
next; the requests of one connection still see that work done in order.

Failure policy, as the asyncio transport's: a peer that breaks framing loses its
connection, with a warning naming the reason; handler exceptions become ttrpc error
statuses (``UNKNOWN`` unless the handler raised :class:`TtrpcError`). A plain-function
handler runs on the connection's thread, so it must not touch asyncio objects; one
that blocks holds up the requests behind it (as a blocked loop would), which the
plugin's probes report.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from typing import Final

from google.protobuf.message import DecodeError

from nvml_mock_protocol.nri import ttrpc_pb2
from nvml_mock_protocol.nri.connection import READ_SIZE, CallContext, CloseSignal, Handler
from nvml_mock_protocol.nri.errors import (
    ConnectionClosedError,
    DeadlineExceededError,
    MessageTooLargeError,
    ProtocolError,
    TtrpcError,
)
from nvml_mock_protocol.nri.mux import (
    MAX_RECEIVE_PAYLOAD,
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    MuxDecoder,
    encode_frames,
)
from nvml_mock_protocol.nri.ttrpc import (
    MESSAGE_LENGTH_MAX,
    Code,
    Message,
    MessageType,
    OversizedMessage,
    TtrpcDecoder,
    encode_message,
)

logger = logging.getLogger(__name__)

InlineHandler = Callable[[bytes, CallContext], bytes]
"""A handler called on the connection's thread: serialized request in, response out."""
AnyHandler = Handler | InlineHandler
ThreadedServiceTable = Mapping[str, Mapping[str, AnyHandler]]
"""``{service: {method: handler}}``; coroutine functions run on the loop, others inline."""

SPIN_SECONDS: Final = 50e-6
"""How long a read that brought half a frame polls for the rest before blocking again."""
SEND_TIMEOUT: Final = 30.0
"""Seconds one write may wait for the runtime to read before the connection is dropped."""

_MUX: Final = struct.Struct(">II")
_TTRPC: Final = struct.Struct(">IIBB")

_serving = threading.local()
"""On a connection's reading thread, ``pending``: the work :func:`after_reply` left."""


def after_reply(work: Callable[[], object]) -> None:
    """Run *work* once the reply to the request this thread is answering is written.

    For a plain handler on a connection's thread (see the module docstring): the work runs
    on the same thread, in the order it was left, before the next request of the connection
    is read; an exception it raises is logged, never sent (the reply has gone). Anywhere
    else (a coroutine handler, a plugin method called directly) *work* runs now.
    """
    pending: list[Callable[[], object]] | None = getattr(_serving, "pending", None)
    if pending is None:
        work()
    else:
        pending.append(work)


def _run_pending(pending: list[Callable[[], object]], label: str) -> None:
    while pending:
        work = pending.pop(0)
        try:
            work()
        except Exception:
            logger.exception("%s: work after a reply failed", label)


def _response_bytes(payload: bytes) -> bytes:
    """``ttrpc.Response{payload}`` serialized (field 2, length-delimited), without building
    a message: byte for byte what protobuf writes (an empty payload is the empty message)."""
    if not payload:
        return b""
    size = len(payload)
    head = bytearray(b"\x12")
    while size > 0x7F:
        head.append((size & 0x7F) | 0x80)
        size >>= 7
    head.append(size)
    return bytes(head) + payload


class ThreadedConnection:
    """One NRI socket whose served ConnID is read by a thread; see the module docstring.

    Build it with :meth:`plugin_side` and start it with :meth:`start` from the event
    loop that will own its calls and close callbacks.
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        served_conn: int,
        services: ThreadedServiceTable,
        label: str,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        if served_conn not in (PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN):
            raise ValueError(f"served_conn must be 1 or 2, got {served_conn}")
        self.label = label
        self._sock = sock
        self._loop = loop
        self._served_conn = served_conn
        self._calling_conn = (
            RUNTIME_SERVICE_CONN if served_conn == PLUGIN_SERVICE_CONN else PLUGIN_SERVICE_CONN
        )
        self._inline: dict[str, dict[str, InlineHandler]] = {}
        self._async: dict[str, dict[str, Handler]] = {}
        for service, methods in services.items():
            inline = self._inline.setdefault(service, {})
            deferred = self._async.setdefault(service, {})
            for method, handler in methods.items():
                if inspect.iscoroutinefunction(handler):
                    deferred[method] = handler
                else:
                    inline[method] = handler  # type: ignore[assignment]
        self._mux = MuxDecoder()
        self._served = TtrpcDecoder()
        self._calling = TtrpcDecoder()
        self._last_served = 0
        self._next_stream_id = 1
        self._pending: dict[int, asyncio.Future[ttrpc_pb2.Response]] = {}
        self._tasks: set[concurrent.futures.Future[bytes]] = set()
        self._tasks_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = False
        self._close_reason: str | None = None
        self._close_signal = CloseSignal(loop)
        self._thread: threading.Thread | None = None

    @classmethod
    def plugin_side(
        cls, sock: socket.socket, services: ThreadedServiceTable, label: str = "plugin"
    ) -> ThreadedConnection:
        """The plugin's end: serves ConnID 1, calls the runtime on ConnID 2."""
        return cls(
            sock,
            served_conn=PLUGIN_SERVICE_CONN,
            services=services,
            label=label,
            loop=asyncio.get_running_loop(),
        )

    def start(self) -> None:
        """Start the reading thread (once)."""
        if self._thread is not None:
            raise RuntimeError("connection already started")
        self._sock.setblocking(True)
        # A blocking send gives up after SEND_TIMEOUT (SO_SNDTIMEO), so a runtime that
        # stops reading cannot hold a writer, and with it the event loop, forever.
        seconds = int(SEND_TIMEOUT)
        micros = int((SEND_TIMEOUT - seconds) * 1e6)
        self._sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", seconds, micros)
        )
        self._thread = threading.Thread(
            target=self._read_loop, name=f"nri {self.label}", daemon=True
        )
        self._thread.start()

    # -- state ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the connection is closing or closed."""
        return self._closed

    @property
    def close_reason(self) -> str | None:
        """Why the connection closed; ``None`` while it is open."""
        return self._close_reason if self._closed else None

    def close(self, reason: str = "closed locally") -> None:
        """Close after what was written (writes are synchronous, so all of it)."""
        if self._closed:
            return
        self._close_reason = reason
        self._closed = True
        self._hang_up()

    def abort(self, reason: str) -> None:
        """Drop the connection at once, logging ``reason`` as a warning."""
        if self._closed:
            return
        logger.warning("closing connection %s: %s", self.label, reason)
        self._close_reason = reason
        self._closed = True
        self._hang_up()

    def _hang_up(self) -> None:
        # shutdown, not close: the reading thread owns the descriptor and closes it when
        # its blocked recv returns (closing it under a blocked reader is a use-after-close)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        if self._thread is None:
            self._finish(self._close_reason or "closed")

    async def wait_closed(self) -> str:
        """Wait until the connection is closed; return the reason."""
        return await self._close_signal.wait()

    def add_close_callback(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` (on the loop) once the connection has closed."""
        self._close_signal.add(callback)

    def _finish(self, reason: str) -> None:
        """On the loop: settle the waiters, cancel loop handlers, run the callbacks."""
        self._closed = True
        if self._close_signal.settled:
            return
        self._close_reason = self._close_reason or reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionClosedError(f"{self.label}: {self._close_reason}"))
        self._pending.clear()
        with self._tasks_lock:
            tasks, self._tasks = list(self._tasks), set()
        for task in tasks:
            task.cancel()
        self._close_signal.settle(self._close_reason, self.label)

    def _to_loop(self, callback: Callable[..., object], *args: object) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is left to tell
            self._loop.call_soon_threadsafe(callback, *args)

    # -- writing -------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        """Send ``data`` (whole mux frames) in one go; a failed send ends the connection."""
        if self._closed or not data:
            return
        try:
            with self._write_lock:
                self._sock.sendall(data)
        except OSError as exc:
            if not self._closed:
                self._close_reason = f"connection lost: {exc}"
                self._closed = True
                self._hang_up()

    def _frames(
        self, conn_id: int, stream_id: int, message_type: MessageType, body: bytes
    ) -> bytes:
        if len(body) <= 4096 - 10:  # the common case: one frame, one header pack each
            return (
                _MUX.pack(conn_id, len(body) + 10)
                + _TTRPC.pack(len(body), stream_id, message_type, 0)
                + body
            )
        return encode_frames(conn_id, encode_message(stream_id, message_type, body))

    def _status(self, stream_id: int, code: int, text: str) -> bytes:
        response = ttrpc_pb2.Response(status=ttrpc_pb2.Status(code=code, message=text))
        return self._frames(
            self._served_conn, stream_id, MessageType.RESPONSE, response.SerializeToString()
        )

    def _reply(self, stream_id: int, result: bytes) -> bytes:
        body = _response_bytes(result)
        if len(body) > MESSAGE_LENGTH_MAX:
            error = MessageTooLargeError("ttrpc message", len(body), MESSAGE_LENGTH_MAX)
            return self._status(stream_id, Code.RESOURCE_EXHAUSTED, str(error))
        return self._frames(self._served_conn, stream_id, MessageType.RESPONSE, body)

    # -- the reading thread ----------------------------------------------------

    def _read_loop(self) -> None:
        sock = self._sock
        reason = "peer closed the connection"
        pending: list[Callable[[], object]] = []
        _serving.pending = pending
        try:
            while True:
                try:
                    data = sock.recv(READ_SIZE)
                except OSError as exc:
                    reason = f"connection lost: {exc}"
                    break
                if not data:
                    break
                if self._started_frame(data):
                    data += self._rest_soon(sock)
                try:
                    out = self._received(data)
                except ProtocolError as exc:
                    if not self._closed:
                        logger.warning("closing connection %s: protocol error: %s", self.label, exc)
                        self._close_reason = f"protocol error: {exc}"
                        self._closed = True
                    break
                if out:
                    self._write(out)
                if pending:
                    _run_pending(pending, self.label)
        finally:
            _run_pending(pending, self.label)  # what a read that broke the framing left
            _serving.pending = None
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            self._to_loop(self._finish, self._close_reason or reason)

    def _started_frame(self, data: bytes) -> bool:
        """Whether *data* begins a frame it does not finish (with nothing held before it).

        containerd's mux writes a frame's 8-byte header and its payload in two writes, so
        a reader that is quick enough wakes for the header alone; the payload follows
        within microseconds."""
        if self._mux.buffered or not self._served.idle:
            return False
        if len(data) < 8:
            return True
        length: int = _MUX.unpack_from(data)[1]
        return len(data) < length + 8 <= READ_SIZE

    def _rest_soon(self, sock: socket.socket) -> bytes:
        """What arrives within :data:`SPIN_SECONDS`, read without blocking: the second half
        of a frame, taken without one more sleep and wake-up of this thread. Empty when
        nothing came (the blocking read then waits as usual)."""
        deadline = time.perf_counter() + SPIN_SECONDS
        while True:
            try:
                return sock.recv(READ_SIZE, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if time.perf_counter() > deadline:
                    return b""
            except OSError:
                return b""  # the blocking read reports it

    def _received(self, data: bytes) -> bytes:
        """Everything one read brought; returns the replies to write, coalesced."""
        if self._closed:
            return b""
        size = len(data)
        if size >= 18 and not self._mux.buffered and self._served.idle:
            # The usual read: one whole request in one mux frame, parsed in place. Anything
            # else (a split, several messages, the calling ConnID) takes the decoders.
            conn_id, length = _MUX.unpack_from(data)
            if conn_id == self._served_conn and length + 8 == size <= MAX_RECEIVE_PAYLOAD + 8:
                body, stream_id, raw_type, _ = _TTRPC.unpack_from(data, 8)
                if raw_type == MessageType.REQUEST and body + 10 == length:
                    return self._on_request(stream_id, data[18:])
        out: list[bytes] = []
        for conn_id, payload in self._mux.feed(data):
            if conn_id == self._served_conn:
                for message in self._served.feed(payload):
                    reply = self._on_served(message)
                    if reply:
                        out.append(reply)
            elif conn_id == self._calling_conn:
                for message in self._calling.feed(payload):
                    self._on_calling(message)
            else:
                logger.debug("%s: dropped %d bytes for conn %d", self.label, len(payload), conn_id)
        return b"".join(out)

    def _on_calling(self, message: Message | OversizedMessage) -> None:
        if isinstance(message, OversizedMessage):
            if message.type is MessageType.RESPONSE:
                text = f"message length {message.length} exceeds maximum message size"
                self._to_loop(
                    self._settle, message.stream_id, TtrpcError(Code.RESOURCE_EXHAUSTED, text)
                )
            return
        if message.type is MessageType.RESPONSE:
            self._to_loop(self._settle, message.stream_id, message.payload)
        elif message.type is MessageType.REQUEST:
            # nothing is served on the calling ConnID (as in the asyncio transport)
            request = ttrpc_pb2.Request()
            with contextlib.suppress(DecodeError):
                request.ParseFromString(message.payload)
            status = ttrpc_pb2.Response(
                status=ttrpc_pb2.Status(
                    code=Code.UNIMPLEMENTED, message=f"service {request.service}"
                )
            ).SerializeToString()
            self._write(
                self._frames(self._calling_conn, message.stream_id, MessageType.RESPONSE, status)
            )

    def _on_served(self, message: Message | OversizedMessage) -> bytes:
        stream_id = message.stream_id
        if isinstance(message, OversizedMessage):
            if message.type is MessageType.REQUEST:
                text = f"message length {message.length} exceeds maximum message size"
                return self._status(stream_id, Code.RESOURCE_EXHAUSTED, text)
            return b""
        if message.type is not MessageType.REQUEST:
            logger.debug(
                "%s: ignoring ttrpc %s message on conn %d stream %d",
                self.label,
                message.type.name.lower(),
                self._served_conn,
                stream_id,
            )
            return b""
        return self._on_request(stream_id, message.payload)

    def _on_request(self, stream_id: int, payload: bytes) -> bytes:
        """One request of the runtime: the reply to write now (empty when a loop handler
        will write it later)."""
        if stream_id % 2 == 0:
            return self._status(stream_id, Code.INVALID_ARGUMENT, "StreamID must be odd")
        if stream_id <= self._last_served:
            return self._status(
                stream_id, Code.INVALID_ARGUMENT, "StreamID cannot be re-used and must increment"
            )
        self._last_served = stream_id
        request = ttrpc_pb2.Request()
        try:
            request.ParseFromString(payload)
        except DecodeError as exc:
            return self._status(stream_id, Code.INVALID_ARGUMENT, f"malformed request: {exc}")
        service, method = request.service, request.method
        inline = self._inline.get(service)
        if inline is None:
            return self._status(stream_id, Code.UNIMPLEMENTED, f"service {service}")
        context = CallContext(
            service=service,
            method=method,
            stream_id=stream_id,
            timeout=request.timeout_nano / 1e9 if request.timeout_nano > 0 else None,
            metadata=tuple((kv.key, kv.value) for kv in request.metadata)
            if request.metadata
            else (),
            connection=self,
        )
        handler = inline.get(method)
        if handler is None:
            deferred = self._async[service].get(method)
            if deferred is None:
                return self._status(stream_id, Code.UNIMPLEMENTED, f"method {method}")
            self._defer(deferred, request.payload, context)
            return b""
        try:
            result = handler(request.payload, context)
        except TtrpcError as exc:
            return self._status(stream_id, exc.code, exc.message)
        except Exception as exc:
            logger.exception("%s: handler for %s failed", self.label, method)
            return self._status(stream_id, Code.UNKNOWN, str(exc) or type(exc).__name__)
        return self._reply(stream_id, result)

    def _defer(self, handler: Handler, payload: bytes, context: CallContext) -> None:
        """Run a coroutine handler on the loop; its reply goes out when it finishes."""
        try:
            task = asyncio.run_coroutine_threadsafe(_run(handler, payload, context), self._loop)
        except RuntimeError:  # the loop is closed: the process is going away
            return
        with self._tasks_lock:
            self._tasks.add(task)

        def done(finished: concurrent.futures.Future[bytes]) -> None:
            with self._tasks_lock:
                self._tasks.discard(finished)
            if finished.cancelled():
                return
            error = finished.exception()
            stream_id = context.stream_id
            if isinstance(error, TtrpcError):
                self._write(self._status(stream_id, error.code, error.message))
            elif error is not None:
                logger.error(
                    "%s: handler for %s failed",
                    self.label,
                    context.method,
                    exc_info=(type(error), error, error.__traceback__),
                )
                text = str(error) or type(error).__name__
                self._write(self._status(stream_id, Code.UNKNOWN, text))
            else:
                self._write(self._reply(stream_id, finished.result()))

        task.add_done_callback(done)

    def _settle(self, stream_id: int, answer: bytes | TtrpcError) -> None:
        """On the loop: the runtime's answer to one of our calls."""
        future = self._pending.pop(stream_id, None)
        if future is None or future.done():
            logger.debug(
                "%s: response for unknown stream %d on conn %d dropped",
                self.label,
                stream_id,
                self._calling_conn,
            )
            return
        if isinstance(answer, TtrpcError):
            future.set_exception(answer)
            return
        response = ttrpc_pb2.Response()
        try:
            response.ParseFromString(answer)
        except DecodeError as exc:
            future.set_exception(ProtocolError(f"malformed ttrpc response: {exc}"))
            return
        future.set_result(response)

    # -- calling the runtime -----------------------------------------------------

    async def call(
        self, service: str, method: str, payload: bytes, *, timeout: float | None = None
    ) -> bytes:
        """Call ``service/method`` on the peer from the loop; return the response payload.

        The same contract as :meth:`NriConnection.call`.
        """
        if self._closed:
            raise ConnectionClosedError(f"{self.label}: connection is closed")
        stream_id = self._next_stream_id
        request = ttrpc_pb2.Request(
            service=service,
            method=method,
            payload=payload,
            timeout_nano=int(timeout * 1e9) if timeout else 0,
        )
        body = encode_message(stream_id, MessageType.REQUEST, request.SerializeToString())
        self._next_stream_id += 2
        future: asyncio.Future[ttrpc_pb2.Response] = self._loop.create_future()
        self._pending[stream_id] = future
        try:
            self._write(encode_frames(self._calling_conn, body))
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


async def _run(handler: Handler, payload: bytes, context: CallContext) -> bytes:
    return await handler(payload, context)


async def connect_unix(path: str) -> socket.socket:
    """A unix stream socket connected to ``path`` without blocking the loop."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, path)
    except BaseException:
        sock.close()
        raise
    return sock


__all__ = [
    "READ_SIZE",
    "SEND_TIMEOUT",
    "AnyHandler",
    "InlineHandler",
    "ThreadedConnection",
    "ThreadedServiceTable",
    "connect_unix",
]
