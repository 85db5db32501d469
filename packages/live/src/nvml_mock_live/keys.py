"""The device model's keys as ``keys.toml`` declares them: kind, bounds, default, live slot.

The tables are generated (:mod:`._keys`) from the one declaration, so the live writer, the
engine's render schema and the C library cannot disagree on a key or a bound. The writer
checks every live value with :func:`check_integer` before anything is written; the render
schema (``nvml_mock_engine.schema``) adds the board's text kinds on top.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

from nvml_mock_live import _keys

__all__ = [
    "GPU_KEYS",
    "INTEGER_LIMITS",
    "LIVE_GPU_KEYS",
    "LIVE_ONLY_GPU_KEYS",
    "MAX_VALUE_BYTES",
    "SYSTEM_KEYS",
    "KeySpec",
    "Kind",
    "check_integer",
]

MAX_VALUE_BYTES: Final = 255


class Kind(Enum):
    """The value types the state format knows."""

    STRING = "string"
    UINT32 = "uint32"
    UINT64 = "uint64"
    INT32 = "int32"
    FLAG = "flag"
    HEX32 = "hex32"
    GPU_UUID = "gpu-uuid"
    FABRIC_UUID = "fabric-uuid"
    BUS_ID = "bus-id"
    BUS_ID_LIST = "bus-id-list"
    CPU_LIST = "cpu-list"
    MIG_GI_PROFILE = "mig-gi-profile"
    """A repeated key: one state line per MIG GPU-instance profile (``nvml_mock_engine.mig``)."""


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One key as ``keys.toml`` declares it: type and bounds (inclusive) as the C parser
    enforces them, the parser's default, and where it comes from."""

    kind: Kind
    max_len: int = MAX_VALUE_BYTES
    minimum: int | None = None
    maximum: int | None = None
    default: str | None = None
    """The state-file text the parser applies when the key is absent (None: zero/empty)."""
    required: bool = False
    """A state without the key is refused."""
    derived: str | None = None
    """``render``: the renderer computes it; ``library``: absent means the library derives it."""
    live_slot: int | None = None
    """The key's slot in the live layer's GPU record; None when it is board-only."""
    board: bool = True
    """False for a live-only key (faults, patterns, triggers): never in the state file."""


def _spec(row: _keys.KeyRow, *, board: bool = True) -> KeySpec:
    _name, kind, max_len, minimum, maximum, default, required, derived, live = row
    return KeySpec(
        Kind[kind],
        max_len=max_len,
        minimum=minimum,
        maximum=maximum,
        default=default,
        required=required,
        derived=derived,
        live_slot=live,
        board=board,
    )


SYSTEM_KEYS: Final[Mapping[str, KeySpec]] = {row[0]: _spec(row) for row in _keys.SYSTEM_ROWS}
"""``[system]`` keys, in output order (generated from ``keys.toml``)."""

GPU_KEYS: Final[Mapping[str, KeySpec]] = {row[0]: _spec(row) for row in _keys.GPU_ROWS}
"""``[gpu N]`` keys, in output order (generated from ``keys.toml``)."""

LIVE_ONLY_GPU_KEYS: Final[Mapping[str, KeySpec]] = {
    row[0]: _spec(row, board=False) for row in _keys.LIVE_ONLY_ROWS
}
"""Keys only the live layer holds (faults, telemetry patterns, triggers); their ``default``
answers while unset."""

LIVE_GPU_KEYS: Final[Mapping[str, KeySpec]] = {
    row[0]: GPU_KEYS.get(row[0]) or LIVE_ONLY_GPU_KEYS[row[0]] for row in _keys.LIVE_GPU_ROWS
}
"""The GPU keys the live layer can change at run time, each with its slot."""

INTEGER_LIMITS: Final[Mapping[Kind, tuple[int, int]]] = {
    Kind.UINT32: (0, 2**32 - 1),
    Kind.UINT64: (0, 2**64 - 1),
    Kind.INT32: (-(2**31), 2**31 - 1),
    Kind.HEX32: (0, 2**32 - 1),
    Kind.FLAG: (0, 1),
}
"""The C type's range of each integer kind (a key's declared bounds narrow it)."""


def _as_int(value: object, *, allow_hex: bool) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and allow_hex and re.fullmatch(r"0[xX][0-9a-fA-F]{1,16}", value):
        return int(value, 16)
    return None


def check_integer(spec: KeySpec, value: object) -> int:
    """*value* checked against the integer key *spec* (its C type and declared bounds);
    ValueError says what is wrong, written to follow ``<key>: ``.

    Integers may come from YAML as ints or (for ids) as ``0x`` strings; booleans are accepted
    for flags."""
    kind = spec.kind
    if kind not in INTEGER_LIMITS:
        raise ValueError(f"is a {kind.value} key, not an integer one")
    number = _as_int(value, allow_hex=kind is Kind.HEX32 or kind is Kind.UINT32)
    if number is None:
        if kind is Kind.FLAG:
            raise ValueError(f"must be 0/1 or true/false, got {value!r}")
        raise ValueError(f"must be an integer, got {value!r}")
    low, high = INTEGER_LIMITS[kind]
    if spec.minimum is not None:
        low = max(low, spec.minimum)
    if spec.maximum is not None:
        high = min(high, spec.maximum)
    if not low <= number <= high:
        if kind is Kind.FLAG:
            raise ValueError(f"must be 0/1 or true/false, got {value!r}")
        if low == 1 and high >= 2**32 - 1:
            raise ValueError(f"must be a positive integer, got {value!r}")
        raise ValueError(f"must be an integer in {low}..{high}, got {value!r}")
    return number
