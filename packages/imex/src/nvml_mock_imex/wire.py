"""The wire between IMEX work-alike daemons, and between ``nvidia-imex-ctl`` and its daemon.

NVIDIA's peer protocol is its own; the work-alike's is newline-delimited JSON objects over
TCP (one object per line, at most :data:`MAX_LINE` bytes), so a wrong or oversized frame
closes that one connection and nothing else. A connecting daemon sends ``hello`` (its index
and host as its node list has them, that list, its clique and driver version); the answering
daemon refuses a node its own list does not name and otherwise answers with its own
``hello``. Then the connecting side sends ``ping`` every :data:`PING_INTERVAL` seconds and
the other answers ``pong`` with its row of the connectivity matrix and its clique; a link
without a ``pong`` for :data:`PEER_TIMEOUT` seconds is lost. ``nvidia-imex-ctl`` sends one
``status`` and reads one :class:`~nvml_mock_imex.status.DomainStatus`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Final

from nvml_mock_imex.errors import FrameError

__all__ = ["MAX_LINE", "PEER_TIMEOUT", "PING_INTERVAL", "read", "send"]

MAX_LINE: Final = 64 * 1024
PING_INTERVAL: Final = 0.25
PEER_TIMEOUT: Final = 1.0
"""A peer that answers no ping for this long is lost: a killed or partitioned peer turns
the domain degraded about a second later (a killed one at once: its socket closes)."""


async def read(reader: asyncio.StreamReader, timeout: float) -> dict[str, object]:
    """The next frame. Raises :class:`FrameError`, ``TimeoutError`` or ``ConnectionError``."""
    try:
        line = await asyncio.wait_for(reader.readuntil(b"\n"), timeout)
    except asyncio.IncompleteReadError:
        raise ConnectionError("the peer closed the connection") from None
    except asyncio.LimitOverrunError:
        raise FrameError(f"a frame longer than {MAX_LINE} bytes") from None
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        # a frame nested deeper than the parser recurses ("[[[[..." well under MAX_LINE)
        # is as bad as one that is not JSON: the same one connection is closed
        raise FrameError("a frame that is not JSON") from None
    if not isinstance(data, dict):
        raise FrameError("a frame that is not a JSON object")
    return data


def send(writer: asyncio.StreamWriter, frame: dict[str, object]) -> None:
    writer.write(json.dumps(frame, separators=(",", ":")).encode() + b"\n")
