"""Following a re-stage: the node's GPU state file, watched for a new version.

A node can be staged again while the exporter runs (another profile, another GPU count: the
chart's stager after a values change, the kind demo on a reused cluster). The mock library
reads the state at ``nvmlInit``, so an exporter that read it once keeps serving GPUs the
node no longer has. The collector therefore looks at what ``MOCK_NVML_CONFIG`` resolves to
before each collection (through the overlay's ``config`` symlink, a re-stage is a new file),
and when it changed, re-initialises NVML and finds the GPUs again.

A new version is taken only once it holds still: the same file, size and modification time
on two looks ``SETTLE_SECONDS`` apart. Staging switches a whole generation with one rename,
so a staged node never shows a half-written state; the wait covers a state file written in
place by hand, which would otherwise be read in the middle of its writing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

__all__ = ["SETTLE_SECONDS", "StateFile"]

SETTLE_SECONDS: Final = 0.25

Signature = tuple[int, int, int, int]


class StateFile:
    """The staged state's path and the version of it last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen = self.signature()

    def signature(self) -> Signature | None:
        """What the path resolves to now (device, inode, size, mtime); None if absent."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def changed(self) -> bool:
        """Whether the path shows another version than the one last read."""
        return self.signature() != self.seen

    def settled(self, wait: Callable[[float], object]) -> Signature | None:
        """The new version once it held still for ``SETTLE_SECONDS``; None while it moves
        (or is absent): look again at the next collection."""
        first = self.signature()
        if first is None:
            return None
        wait(SETTLE_SECONDS)
        return first if self.signature() == first else None

    def accept(self, signature: Signature) -> None:
        """Record *signature* as the version now read."""
        self.seen = signature
