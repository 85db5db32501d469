"""A container whose own ``NVIDIA_VISIBLE_DEVICES`` names a GPU the node lacks fails, as with
the NVIDIA container toolkit.

On a real node the toolkit's hook resolves every entry of the variable before the container
runs; an entry that names no device (``7`` on a four-GPU node, a UUID of another node) fails
the container's creation with ``nvidia-container-cli: device error: 7: unknown device``, and
the workload never starts. Without this rule the mock container would start and only its
``nvmlInit`` would fail (the library refuses the same value), which no real node shows. So the
plugin answers CreateContainer with that error (``--unknown-visible-devices fail``, the
default), or leaves the refusal to ``nvmlInit`` (``allow``).

The DRA driver's own CDI names (``k8s.gpu.nvidia.com/claim=…``) are checked too: the runtime
resolved them against specs the driver wrote from what it saw, and a name that names nothing of
the staged node fails the same way. Otherwise only the container's own variable is checked: CDI
names (``nvidia.com/gpu=…``) are resolved by the runtime against the CDI specs before the plugin
sees the container, and an unresolvable one already fails there (``unresolvable CDI devices``).
MIG entries (``MIG-<uuid>`` and ``<gpu>:<mig>``) are left to the library, which resolves them
against the node's live MIG layout at ``nvmlInit`` and refuses one that names no MIG device with
the same words. The node's GPUs come from the staged state file, re-read only when it changes;
without a readable state nothing is refused (the library still is).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from nvml_mock_live import BoardGpu, LiveLayerError, read_board, resolve_gpus
from nvml_mock_protocol.logs import printable

from nvml_mock_nri.errors import UnknownDeviceError
from nvml_mock_nri.selection import (
    DraKind,
    Selection,
    Visibility,
    VisibleSource,
    is_mig_entry,
    unresolvable_message,
)

__all__ = ["FAIL", "MODES", "NodeGpus", "refuse", "toolkit_message"]

logger = logging.getLogger(__name__)

FAIL: Final = "fail"
ALLOW: Final = "allow"
MODES: Final = (FAIL, ALLOW)
RECHECK_SECONDS: Final = 1.0
"""With the live file unchanged, the staged state is still stat'ed this often: a state
replaced without a re-stage (the overlay removed and staged afresh) is seen within it."""


ENTRY_MAX_CHARS = 128
"""Longest entry quoted in the creation error: the entry is the pod's, and a 10 KB one made
a 10 KB error in the runtime's answer and the kubelet's events."""


def toolkit_message(entry: str) -> str:
    """The toolkit's words for *entry* naming no device (its ``nvidia-container-cli``),
    the entry escaped and bounded (it is pod-supplied text)."""
    return (
        f"nvidia-container-cli: device error: {printable(entry, ENTRY_MAX_CHARS)}: unknown device"
    )


class NodeGpus:
    """The node's GPUs, from the staged state file; re-read when the file changes (one stat
    per call otherwise, but see :meth:`revision`)."""

    def __init__(self, state_path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.state_path = state_path
        self._clock = clock
        self._key: tuple[int, int, int] | None = None
        self._board: list[BoardGpu] | None = None
        self._pinned: object | None = None
        self._recheck_at = 0.0

    def get(self) -> list[BoardGpu] | None:
        """The GPUs, or None when there is no readable state (nothing can be judged)."""
        try:
            info = os.stat(self.state_path)
        except OSError:
            self._key, self._board = None, None
            return None
        key = (info.st_ino, info.st_mtime_ns, info.st_size)
        if key != self._key:
            try:
                self._board = read_board(self.state_path)
            except LiveLayerError as exc:
                logger.debug("visible-device check skipped: %s", exc)
                self._board = None
            self._key = key
        return self._board

    def revision(self, pinned: object | None = None) -> tuple[int, int, int] | None:
        """Which staged state :meth:`get` reads now (inode, mtime, size); None without one.

        Costs the same one stat, unless *pinned* is given: an object that stays the same
        while the staged GPUs do (the live file this process has open, which a re-stage
        of other GPUs retires, and then is not passed). While the same *pinned* comes, the
        stat is skipped for up to :data:`RECHECK_SECONDS`: on a busy node that stat (a walk
        of the overlay's links) was a third of a cached CreateContainer's cost."""
        now = self._clock()
        if pinned is not None and pinned is self._pinned and now < self._recheck_at:
            return self._key
        self.get()
        self._pinned = pinned
        self._recheck_at = now + RECHECK_SECONDS
        return self._key


def refuse(selection: Selection, gpus: NodeGpus) -> None:
    """Raise :class:`UnknownDeviceError` when *selection* names something the node lacks:
    an entry of the container's own ``NVIDIA_VISIBLE_DEVICES`` (the toolkit's message, the
    first unknown entry), or a DRA driver CDI name that names nothing of this node (the
    runtime's words for an unresolvable CDI name): a GPU minor past its GPUs, a MIG claim
    without a live MIG device it was given the capabilities of, a malformed name. Judged
    only with a readable staged state (one stat, the state re-read when it changed)."""
    visible = selection.visible
    if visible.source is VisibleSource.ENV and visible.kind is Visibility.LIST:
        tokens = [t for t in visible.tokens if not is_mig_entry(t)]
        if tokens:
            board = gpus.get()
            if board is not None:
                _, unknown = resolve_gpus(tokens, board)
                if unknown:
                    raise UnknownDeviceError(unknown[0], toolkit_message(unknown[0]))
    if not selection.claims and not selection.unresolved:
        return
    board = gpus.get()
    if board is None:
        return
    count = len(board)
    for claim in selection.claims:
        if claim.kind is DraKind.GPU and claim.number >= count:
            raise UnknownDeviceError(claim.qualified, unresolvable_message(claim.qualified))
    if selection.unresolved:
        name = selection.unresolved[0]
        raise UnknownDeviceError(name, unresolvable_message(name))
