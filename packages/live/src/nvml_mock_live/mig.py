"""MIG devices for allocation writers: what a container's ``MIG-<uuid>`` or ``<gpu>:<mig>``
entry holds, read from the node's live MIG layout at the time of the call.

The NVIDIA container toolkit gives a container a MIG device by its UUID or by
``<gpu>:<mig>`` (MIG device ``<mig>`` of GPU ``<gpu>``, counted as the host counts them). On
a real node the process then shows on the parent GPU with that device's GPU and compute
instance ids. This module turns such entries into the ``mig`` holdings of an
:class:`~nvml_mock_live.allocations.Allocation`; the layout and the UUIDs come from the mock
library itself (``nvml_mock_live_mig_devices``, one of the primitives of the live ABI), so the
writer names MIG devices exactly as NVML does, without importing the engine. Typical use::

    devices = mig_devices(live, board)
    gpus, mig, unknown = resolve_holdings(["MIG-…", "1"], board, devices)
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from nvml_mock_live import _layout as layout
from nvml_mock_live.board import BoardGpu, resolve_gpus
from nvml_mock_live.errors import LiveLayerError
from nvml_mock_live.layer import LiveLayer

__all__ = ["MIG_MEMORY_SLICES", "MigDevice", "is_mig_token", "mig_devices", "resolve_holdings"]

MIG_MEMORY_SLICES: Final = 8
"""Memory slices of a MIG-capable GPU: a GPU instance of placement size *n* has *n* / 8 of
its memory (1g.10gb of an 80 GB board is one slice)."""

_UUID_BYTES: Final = 48
_MAX: Final = layout.LIVE_MIG_MAX_GI * layout.LIVE_MIG_MAX_CI
_INDEX_FORM: Final = re.compile(r"([0-9]+):([0-9]+)")


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG device of the node: its parent board GPU, its index there (as
    ``GetMigDeviceHandleByIndex`` counts on the host), its instance ids and UUID, and its GPU
    instance's placement size in memory slices (of :data:`MIG_MEMORY_SLICES`)."""

    gpu: int
    index: int
    gpu_instance: int
    compute_instance: int
    uuid: str
    slices: int


def is_mig_token(token: str) -> bool:
    """Whether *token* names a MIG device (``MIG-…`` or ``<gpu>:<mig>``) rather than a GPU."""
    text = token.strip()
    return text.upper().startswith("MIG-") or _INDEX_FORM.fullmatch(text) is not None


def mig_devices(live: LiveLayer, board: Sequence[BoardGpu]) -> list[MigDevice]:
    """Every MIG device of *board* in *live*'s MIG layout now, GPU by GPU in host order.
    Raises :class:`LiveLayerError` when a GPU's MIG record cannot be read consistently."""
    fn = live.lib.nvml_mock_live_mig_devices
    c_uint = ctypes.c_uint
    gis, cis, slices = (c_uint * _MAX)(), (c_uint * _MAX)(), (c_uint * _MAX)()
    uuids = ctypes.create_string_buffer(_UUID_BYTES * _MAX)
    found: list[MigDevice] = []
    for gpu in board:
        if gpu.index >= live.gpu_count:
            continue
        n = fn(
            live.address(),
            layout.LIVE_TOTAL_BYTES,
            gpu.index,
            gpu.uuid.encode("utf-8"),
            gis,
            cis,
            slices,
            uuids,
            _MAX,
        )
        if n < 0:
            raise LiveLayerError(
                f"the live layer {live.path}: GPU {gpu.index}'s MIG layout is unreadable"
            )
        for i in range(min(n, _MAX)):
            raw = uuids.raw[i * _UUID_BYTES : (i + 1) * _UUID_BYTES]
            found.append(
                MigDevice(
                    gpu.index,
                    i,
                    gis[i],
                    cis[i],
                    raw.split(b"\0", 1)[0].decode("ascii", "replace"),
                    slices[i],
                )
            )
    return found


def _mig_match(text: str, devices: Sequence[MigDevice]) -> MigDevice | None:
    form = _INDEX_FORM.fullmatch(text)
    for device in devices:
        if form is not None:
            if (device.gpu, device.index) == (int(form.group(1)), int(form.group(2))):
                return device
        elif device.uuid.lower() == text.lower():
            return device
    return None


def resolve_holdings(
    tokens: Iterable[str], board: Sequence[BoardGpu], devices: Sequence[MigDevice]
) -> tuple[tuple[int, ...], tuple[MigDevice, ...], list[str]]:
    """What *tokens* hold: the board GPUs (the parents of MIG devices, then whole GPUs,
    without repeats), the MIG devices among them, and the tokens that name nothing of this
    node (the caller reports them). A GPU named both whole and through a MIG device is held
    whole."""
    gpus: list[int] = []
    held: list[MigDevice] = []
    unknown: list[str] = []
    plain: list[str] = []
    for token in tokens:
        text = token.strip()
        if not is_mig_token(text):
            plain.append(text)
            continue
        device = _mig_match(text, devices)
        if device is None:
            unknown.append(text)
            continue
        if device not in held:
            held.append(device)
        if device.gpu not in gpus:
            gpus.append(device.gpu)
    whole, bad = resolve_gpus(plain, board)
    unknown.extend(bad)
    for gpu in whole:
        if gpu not in gpus:
            gpus.append(gpu)
    mig = tuple(d for d in held if d.gpu not in whole)
    return tuple(gpus), mig, unknown
