"""The HTTP side: ``/metrics`` (the last collection's text), ``/health``, and nothing else.

One asyncio loop on the main thread serves every connection, so a connection costs a few
kilobytes instead of a thread: a flood of idle or slow clients must not take the exporter
past its memory limit (the chart gives it 128Mi) nor keep Prometheus out. The bounds:

- at most ``max_connections`` open at once; a new one past the cap closes the connection
  that has waited longest for a request (a slow client, never a response being written), so
  a scraper that sends its request at once always gets in;
- a request's line and headers must arrive within ``header_timeout`` seconds of the
  connection opening (or of the last answer, on a kept-alive connection), and fit in
  ``_MAX_HEAD`` bytes; a slowloris client dribbling headers is closed at the deadline;
- an answer is written in ``_CHUNK`` pieces, the next only when the socket took the last, so
  a client that never reads holds one piece of memory, not a copy of the text; an answer that
  makes no progress for ``header_timeout`` seconds is given up.

A client that resets its connection is an ordinary event here: the connection is dropped,
logged at debug level through the configured logging, never with a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections import OrderedDict
from typing import Final

from nvml_mock_exporter.collector import Collector

__all__ = ["CONTENT_TYPE", "DEFAULT_HEADER_TIMEOUT", "DEFAULT_MAX_CONNECTIONS", "MetricsServer"]

logger = logging.getLogger(__name__)
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_MAX_CONNECTIONS: Final = 256
DEFAULT_HEADER_TIMEOUT: Final = 10.0
_MAX_HEAD: Final = 8192
_CHUNK: Final = 16384
_SNDBUF: Final = 65536
_SWEEP: Final = 0.5
_REASONS: Final = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_REASONS_503: Final = "Service Unavailable"


class _Connection(asyncio.Protocol):
    """One client: reads one request head at a time, writes its answer in chunks."""

    def __init__(self, server: MetricsServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.head = bytearray()
        self.deadline = time.monotonic() + server.header_timeout
        self.writing = False
        self.ended = False
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.peer = "?"

    # --- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=_CHUNK)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SNDBUF)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"{peer[0]}:{peer[1]}"
        self.server.admit(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            logger.debug("%s: connection lost: %s", self.peer, exc)
        self.server.forget(self)
        self.can_write.set()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def data_received(self, data: bytes) -> None:
        if self.writing:
            self.head += data
            if len(self.head) > _MAX_HEAD:
                self.close()
            return
        self.head += data
        self._next_request()

    def eof_received(self) -> bool | None:
        # a client that half-closes after its request (``nc``) still gets the whole answer
        self.ended = True
        if not self.writing:
            self.finish()
        return True

    # --- requests ------------------------------------------------------------------------

    def _next_request(self) -> None:
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            if len(self.head) > _MAX_HEAD:
                self._reply_and_close(400, b"request head too large\n")
            return
        head = bytes(self.head[:end])
        del self.head[: end + 4]
        self.writing = True
        self.server.loop.create_task(self._answer(head))

    def _reply_and_close(self, status: int, payload: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(_response_head(status, "text/plain", len(payload), close=True))
        self.transport.write(payload)
        self.transport.close()

    async def _answer(self, head: bytes) -> None:
        try:
            line, *headers = head.decode("latin-1").split("\r\n")
            parts = line.split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                self._reply_and_close(400, b"bad request line\n")
                return
            method, target, version = parts
            close = version == "HTTP/1.0" or any(
                h.lower().replace(" ", "") == "connection:close" for h in headers
            )
            if method not in ("GET", "HEAD"):
                self._reply_and_close(405, b"only GET and HEAD\n")
                return
            status, kind, payload = self.server.route(target.split("?", 1)[0])
            await self._write(_response_head(status, kind, len(payload), close=close))
            if method == "GET":
                view = memoryview(payload)
                for start in range(0, len(view), _CHUNK):
                    await self._write(view[start : start + _CHUNK])
            logger.debug("%s %s %s %d", self.peer, method, target, status)
            if close or self.ended:
                self.finish()
                return
        except ConnectionError as exc:
            logger.debug("%s: dropped while answering: %s", self.peer, exc)
            self.close()
            return
        self.writing = False
        self.deadline = time.monotonic() + self.server.header_timeout
        if self.head:
            self._next_request()

    async def _write(self, data: bytes | memoryview) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("closed")
        self.deadline = time.monotonic() + self.server.header_timeout
        await self.can_write.wait()
        if transport.is_closing():
            raise ConnectionResetError("closed")
        transport.write(data)

    def finish(self) -> None:
        """Close once what was written has gone out (the end of an answer)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def close(self) -> None:
        """Close at once, dropping anything unsent (a timeout, the cap, a dead client)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()


def _response_head(status: int, kind: str, length: int, *, close: bool) -> bytes:
    reason = _REASONS.get(status, _REASONS_503)
    lines = [
        f"HTTP/1.1 {status} {reason}",
        f"Content-Type: {kind}",
        f"Content-Length: {length}",
    ]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """What asyncio reports, through the configured logging: a client's reset in one line."""
    exc = context.get("exception")
    if isinstance(exc, ConnectionError | TimeoutError):
        logger.debug("connection: %s", exc)
        return
    logger.error(
        "the HTTP loop: %s",
        context.get("message"),
        exc_info=exc if isinstance(exc, BaseException) else None,
    )


class MetricsServer:
    """Serves one collector's text on one listening socket, bound at construction."""

    def __init__(
        self,
        address: tuple[str, int],
        collector: Collector,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    ) -> None:
        self.collector = collector
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(1024)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(_loop_error)
        self._open: OrderedDict[_Connection, None] = OrderedDict()
        self._stopped = asyncio.Event()
        self._done = threading.Event()
        self._thread: int | None = None
        self.evicted = 0

    # --- connections ---------------------------------------------------------------------

    def admit(self, conn: _Connection) -> None:
        """Count a new connection in; past the cap, close the longest-waiting idle one."""
        self._open[conn] = None
        while len(self._open) > self.max_connections:
            victim = next((c for c in self._open if not c.writing and c is not conn), None)
            if victim is None:
                victim = conn
            self._open.pop(victim, None)
            self.evicted += 1
            if self.evicted == 1 or self.evicted % 1000 == 0:
                logger.warning(
                    "more than %d connections open: closing the longest idle (%d so far)",
                    self.max_connections,
                    self.evicted,
                )
            victim.close()

    def forget(self, conn: _Connection) -> None:
        self._open.pop(conn, None)

    @property
    def connections(self) -> int:
        return len(self._open)

    async def _sweep(self) -> None:
        """Close connections past their deadline (a head or an answer that does not move)."""
        while True:
            await asyncio.sleep(_SWEEP)
            now = time.monotonic()
            for conn in [c for c in self._open if c.deadline < now]:
                logger.debug("%s: timed out", conn.peer)
                self._open.pop(conn, None)
                conn.close()

    # --- answers -------------------------------------------------------------------------

    def route(self, path: str) -> tuple[int, str, bytes]:
        collector = self.collector
        if path == "/metrics":
            return 200, CONTENT_TYPE, collector.text
        if path == "/health":
            ok, why = collector.healthy()
            return (200 if ok else 503), "text/plain", (why + "\n").encode()
        return 404, "text/plain", b"not found: try /metrics or /health\n"

    # --- running -------------------------------------------------------------------------

    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown`; runs the loop on the calling thread."""
        self._thread = threading.get_ident()
        try:
            self.loop.run_until_complete(self._serve())
        finally:
            self._done.set()

    async def _serve(self) -> None:
        server = await self.loop.create_server(lambda: _Connection(self), sock=self.socket)
        sweeper = self.loop.create_task(self._sweep())
        try:
            await self._stopped.wait()
        finally:
            sweeper.cancel()
            server.close()
            for conn in list(self._open):
                conn.close()
            self._open.clear()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper

    def shutdown(self) -> None:
        """Stop serving; safe from any thread or a signal handler. From another thread than
        the serving one it returns once serving has ended, as the standard library's does."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None and self._thread != threading.get_ident():
            self._done.wait()

    def server_close(self) -> None:
        self.socket.close()
        if not self.loop.is_running():
            self.loop.close()
