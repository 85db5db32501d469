"""HTTP connections with a deadline and a size cap for each request's head.

uvicorn closes a keep-alive connection that stays idle between requests
(``timeout_keep_alive``) and answers 503 beyond ``limit_concurrency``, but it
sets no deadline for *receiving* a request: a client that sends one byte a
second (slowloris) keeps its connection, a file descriptor and a parser forever,
and a few thousand of them exhaust the service. httptools, the fast parser
uvicorn picks, has no cap on the head's size either.

:func:`protocol_class` returns uvicorn's own HTTP protocol (httptools, or h11
where httptools is missing) with two additions. A timer is armed when a
connection opens and whenever the first bytes of a new request arrive after the
previous answer, and disarmed once the request's headers are complete (uvicorn
then starts a new request cycle, which is what is watched for, so the check does
not depend on the parser). If the timer fires first, the client gets a
``408 Request Timeout`` and the connection is closed. A head larger than
:data:`MAX_HEAD_BYTES` is answered ``431`` and closed the same way. A watch that
is waiting for a change is a request being answered, not one being received, so
neither limit ever cuts it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from functools import cache
from typing import Any, Final

__all__ = ["MAX_HEAD_BYTES", "protocol_class"]

MAX_HEAD_BYTES: Final = 64 * 1024
"""Largest request head (request line and headers) accepted, in bytes. An identity request
with an ``If-None-Match`` is a few hundred bytes; h11 caps it at 16 KiB by default."""

logger = logging.getLogger(__name__)

_REASONS: Final = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class _HeadLimits(asyncio.Protocol):
    """What is added to uvicorn's HTTP protocol; see the module docstring.

    Relies on two attributes both of uvicorn's HTTP protocols keep: ``transport`` and
    ``cycle`` (the request being answered, None before the first).
    """

    head_timeout: float = 10.0
    max_head_bytes: int = MAX_HEAD_BYTES
    transport: asyncio.Transport
    cycle: Any
    _head_timer: asyncio.TimerHandle | None = None
    _head_bytes: int = 0
    _head_tail: bytes = b""
    """The last bytes of the head so far: its end (CRLF CRLF) may straddle two writes."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        if self._head_timer is None and (before is None or before.response_complete):
            self._arm()  # the first bytes of the next request on a kept-alive connection
        if self._head_timer is not None and self._head_too_large(data):
            if not self.transport.is_closing():
                self._refuse(431, f"the request head is larger than {self.max_head_bytes} bytes")
            return  # never handed to the parser
        super().data_received(data)
        if self._head_timer is None:
            return
        if self.cycle is not before:  # the head is complete: uvicorn started its cycle
            self._disarm()
            return
        self._head_bytes += len(data)
        if self._head_bytes > self.max_head_bytes and not self.transport.is_closing():
            self._refuse(431, f"the request head is larger than {self.max_head_bytes} bytes")

    def _head_too_large(self, data: bytes) -> bool:
        """Whether the head being received passes the cap with ``data``, measured before
        the parser sees it: a whole head in one write is parsed, and its request started,
        in a single call, so counting after the parser let any size through."""
        joined = self._head_tail + data
        end = joined.find(b"\r\n\r\n")
        within = len(data) if end < 0 else end + 4 - len(self._head_tail)
        self._head_tail = joined[-3:]
        return self._head_bytes + within > self.max_head_bytes

    def _arm(self) -> None:
        self._disarm()
        self._head_bytes = 0
        self._head_tail = b""
        loop = asyncio.get_running_loop()
        self._head_timer = loop.call_later(self.head_timeout, self._expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _expired(self) -> None:
        self._head_timer = None
        cycle = self.cycle
        if self.transport.is_closing() or (cycle is not None and not cycle.response_complete):
            return
        self._refuse(
            408, f"the request's headers did not arrive within {self.head_timeout:g} seconds"
        )

    def _refuse(self, status: int, detail: str) -> None:
        self._disarm()
        logger.debug("closing a connection: %s", detail)
        body = json.dumps({"detail": detail}).encode()
        head = (
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % (status, _REASONS[status], len(body))
        )
        self.transport.write(head + body)
        self.transport.close()


@cache
def _uvicorn_protocol() -> type[asyncio.Protocol]:
    """uvicorn's fastest available HTTP protocol, as ``http="auto"`` would choose it."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools comes with uvicorn[standard]
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol
    return HttpToolsProtocol


def protocol_class(
    head_timeout: float, max_head_bytes: int = MAX_HEAD_BYTES, *, base: str = "auto"
) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class with a ``head_timeout`` and a ``max_head_bytes`` cap.

    ``base`` is ``auto`` (httptools when installed, else h11), ``httptools`` or ``h11``;
    pass the result as ``uvicorn.Config(http=...)``.
    """
    parent: type[asyncio.Protocol]
    if base == "auto":
        parent = _uvicorn_protocol()
    elif base == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol

        parent = H11Protocol
    elif base == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        parent = HttpToolsProtocol
    else:
        raise ValueError(f"unknown HTTP implementation {base!r}; use auto, httptools or h11")
    return type(
        f"HeadLimited{parent.__name__}",
        (_HeadLimits, parent),
        {"head_timeout": head_timeout, "max_head_bytes": max_head_bytes},
    )
