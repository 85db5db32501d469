"""A GPU record's live values by key: what its slots and masks mean, for every reader.

The writer (:class:`~nvml_mock_live.LiveLayer`) and the light reader of ``nvml-mock-ctl
status`` decode the same snapshot the same way: the keys in their declared order (the
generated :data:`~nvml_mock_live._keys.LIVE_GPU_ROWS`), a key set when its mask bit is,
``int32`` keys read back signed. No ``enum`` or ``dataclasses`` here: this module is on
the path of commands that start in a few milliseconds.
"""

from __future__ import annotations

from nvml_mock_live import _keys
from nvml_mock_live.header import MASK_WORDS

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ctypes
    from collections.abc import Mapping, Sequence
    from typing import Final, TypeAlias

    Words: TypeAlias = Sequence[int] | ctypes.Array[ctypes.c_uint64]
    """Mask words or slots: a tuple ``struct`` unpacked, or the library's array."""

__all__ = ["LIVE_KEY_KINDS", "LIVE_KEY_SLOTS", "MASK_WORDS", "keys_in_mask", "values_of"]


LIVE_KEY_SLOTS: Final[Mapping[str, int]] = {row[0]: row[8] or 0 for row in _keys.LIVE_GPU_ROWS}
"""Each live key's slot in a GPU record, in the declared order."""
LIVE_KEY_KINDS: Final[Mapping[str, str]] = {row[0]: row[1] for row in _keys.LIVE_GPU_ROWS}
"""Each live key's declared kind (``UINT32``, ``INT32``, ``HEX32`` ...)."""


def keys_in_mask(words: Words) -> list[str]:
    """The live keys whose bit is set in the mask *words* (64 slots a word), in order."""
    if not any(words):
        return []
    return [key for key, slot in LIVE_KEY_SLOTS.items() if words[slot // 64] >> (slot % 64) & 1]


def values_of(mask: Words, slots: Words) -> dict[str, int]:
    """The values a snapshot (*mask* words, raw 64-bit *slots*) holds, by key; unset keys are
    left out."""
    result: dict[str, int] = {}
    for key in keys_in_mask(mask):
        raw = int(slots[LIVE_KEY_SLOTS[key]])
        result[key] = raw - (1 << 64) if LIVE_KEY_KINDS[key] == "INT32" and raw >= 1 << 63 else raw
    return result
