"""Reading the IMEX config file and node list without ever blocking or running out of
memory: NVIDIA's daemon reads both at start and the node list again on ``SIGUSR1``, and
either may be whatever a user or a broken mount put there.

The file is opened non-blocking, so a FIFO (or a device) is refused at once instead of
stopping the daemon until a writer comes; only a regular file is read, at most
:data:`MAX_BYTES` of it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

__all__ = ["MAX_BYTES", "read_small"]

MAX_BYTES: Final = 1024 * 1024
"""More than any config or node list needs (1,024 nodes of 253-character names)."""

_KINDS: Final = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def read_small(path: str | Path, limit: int = MAX_BYTES) -> str:
    """The UTF-8 text of the regular file *path*. Raises ``OSError`` or ``ValueError``
    (``UnicodeDecodeError`` included) with a message that says what is wrong."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise ValueError(f"it is {kind}, not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(65536, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise ValueError(f"it is larger than {limit} bytes")
        return b"".join(chunks).decode("utf-8")
    finally:
        os.close(fd)
