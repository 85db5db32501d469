"""Answers as raw bytes: what the FastAPI routes and the ASGI fast paths share.

A watched endpoint (the identity, a node's scenarios) answers with one function that
takes the request's raw parts and returns status, headers and body. The FastAPI route
and the fast path in front of it both hand it those parts, taken here the same way, so
the two paths cannot disagree on how a request is read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol
from urllib.parse import parse_qsl

from fastapi import Request
from fastapi.responses import Response
from nvml_mock_protocol.identity import REVISION_QUERY, WAIT_QUERY

__all__ = [
    "Headers",
    "Receive",
    "WatchAnswer",
    "disconnected",
    "header_value",
    "raw_response",
    "send_answer",
    "watch_query",
    "watch_route",
]

Headers = tuple[tuple[bytes, bytes], ...]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class WatchAnswer(Protocol):
    """``answer(node, revision, wait, if_none_match, receive)`` of a watched endpoint."""

    def __call__(
        self,
        node: str,
        revision: str | None,
        wait: str | None,
        if_none_match: bytes | None,
        receive: Receive,
    ) -> Awaitable[tuple[int, Headers, bytes]]: ...


def raw_response(status: int, headers: Headers, body: bytes) -> Response:
    """A response sending exactly ``headers`` (the answer's own, content-length included)."""
    response = Response(content=body, status_code=status)
    response.raw_headers = list(headers)
    return response


async def send_answer(send: Send, status: int, headers: Headers, body: bytes) -> None:
    """Send one whole answer on an ASGI channel."""
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def header_value(scope: MutableMapping[str, Any], name: bytes) -> bytes | None:
    """The first value of header ``name`` (lowercase) in an ASGI scope, or None."""
    for key, value in scope["headers"]:
        if key == name:
            return value  # type: ignore[no-any-return]
    return None


def watch_query(query: bytes) -> tuple[str | None, str | None]:
    """The raw ``revision`` and ``wait`` parameters, read as Starlette reads them (last wins)."""
    revision = wait = None
    if query:
        for key, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            if key == REVISION_QUERY:
                revision = value
            elif key == WAIT_QUERY:
                wait = value
    return revision, wait


async def watch_route(
    answer: WatchAnswer,
    request: Request,
    node: str,
    revision: int | None,
    wait: float | None,
) -> Response:
    """A FastAPI route's answer from a watched endpoint: the parameters FastAPI already
    checked go back to text, so the endpoint reads them as the fast path hands them."""
    header = request.headers.get("if-none-match")
    status, headers, body = await answer(
        node,
        None if revision is None else str(revision),
        None if wait is None else repr(wait),
        header.encode("latin-1") if header is not None else None,
        request.receive,
    )
    return raw_response(status, headers, body)


async def disconnected(receive: Receive) -> None:
    """Return once the client has disconnected (a GET's first message is its empty body)."""
    while (await receive())["type"] != "http.disconnect":
        pass
