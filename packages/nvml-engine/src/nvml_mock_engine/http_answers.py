"""Reading the topology service's answers: bounded, and failures said in words.

The agent and ``nvml-mock-ctl scenario`` read what a service sends. A service is trusted
for its content but not for its size: a broken or hostile one sending 200 MB made the
agent hold a gigabyte. Answers are read up to a limit and refused past it. A failure is
said in words: ``urllib`` hands over a timeout as a ``URLError`` whose reason prints
as ``None`` or nothing, which an operator cannot act on.
"""

from __future__ import annotations

import socket
import urllib.error
from typing import Final, Protocol

from nvml_mock_engine.errors import AnswerTooLargeError

__all__ = [
    "ANSWER_MAX_BYTES",
    "ERROR_MAX_BYTES",
    "AnswerTooLargeError",
    "failure_reason",
    "read_bounded",
]

ANSWER_MAX_BYTES: Final = 16 * 1024 * 1024
"""Largest answer read: twice the largest scenario document the service accepts (8 MiB),
and each node's answer is a part of one."""
ERROR_MAX_BYTES: Final = 64 * 1024
"""Largest error answer read for its ``detail``."""


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def read_bounded(response: _Readable, limit: int = ANSWER_MAX_BYTES) -> bytes:
    """The whole answer, or :class:`AnswerTooLargeError` once more than ``limit`` bytes came."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = response.read(min(1 << 20, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise AnswerTooLargeError(f"the answer is larger than {limit} bytes; not read further")


def failure_reason(exc: BaseException, timeout: float | None = None) -> str:
    """What went wrong with a request, in words (never ``None`` or empty)."""
    reason: object = exc
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        reason = exc.reason
    if isinstance(reason, TimeoutError | socket.timeout):
        within = f" within {timeout:g} s" if timeout is not None else ""
        return f"no answer{within} (timed out)"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    text = str(reason) if reason is not None else ""
    if not text or text == "None":
        name = type(reason).__name__ if reason is not None else type(exc).__name__
        return f"{name} (no detail given)"
    return text
